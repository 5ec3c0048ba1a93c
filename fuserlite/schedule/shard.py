"""Give a tensor a device sharding on one logical axis."""

from __future__ import annotations

from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.schedule.primitives import parallelize_axis, split


def shard_axis(
    tv: TensorView,
    logical_index: int,
    mesh: DeviceMesh,
    parallel_type: ParallelType = ParallelType.DIDx,
) -> None:
    """Shard logical axis `logical_index` of `tv` over `mesh`.

    An axis whose extent equals the mesh size is parallelized directly; any
    other is outer-split by the mesh size and the outer part parallelized.
    """
    tv.set_device_mesh(mesh)
    ax = tv.domain.logical[logical_index]
    pos = tv.domain.loop.index(ax)
    if ax.extent == mesh.size:
        parallelize_axis(ax, parallel_type)
    else:
        outer, _ = split(tv, pos, mesh.size, inner_split=False)
        parallelize_axis(outer, parallel_type)
