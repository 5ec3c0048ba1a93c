"""Shards: the box of a TensorView's global data each device of its mesh holds.

A tensor's sharding (fuserlite.ir.sharding) as a Placement on its mesh shape, so
that plan.blocks, torch.chunk's rule, is the one definition of a device's box:
the executor's scatter of inputs and gather of outputs, its local buffers and the
communications' counts all read it here (lower-communications' bytes read
plan.blocks' chunks directly). The buffer a device allocates is `local_shape`
(ceil(n/d) rows, the split's inner extent); a device's own rows are
`device_shape`, fewer on trailing devices.
"""

from __future__ import annotations

from fuserlite.ir.readonly import remembered
from fuserlite.ir.sharding import shardings
from fuserlite.ir.tensor import TensorView
from fuserlite.plan.blocks import Box, blocks
from fuserlite.plan.mesh_axes import MeshShape
from fuserlite.plan.placement import Placement


def mesh_shape(tv: TensorView) -> MeshShape:
    """The shape of tv's mesh (a tensor without a mesh lives on one device)."""
    return tuple(tv.mesh.shape) if tv.mesh is not None else (1,)


def placement_of(tv: TensorView) -> Placement:
    """tv's sharding as a Placement of its data axes on its mesh shape: each device
    parallel type shards on its mesh axis (DIDx the last)."""
    shards: list[list[int]] = [[] for _ in tv.shape]
    partial = []
    for pt, s in shardings(tv).items():
        axis = tv.mesh.axis_of(pt)
        if s.is_partial:
            partial.append(axis)
        else:
            shards[s.data_index].append(axis)
    return Placement(len(mesh_shape(tv)), tuple(map(tuple, shards)), tuple(sorted(partial)))


def device_boxes(tv: TensorView) -> list[Box]:
    """Every device's box of tv's data, in mesh (row-major device) order."""
    return remembered(
        "device boxes", tv, lambda: blocks(tv.shape, mesh_shape(tv), placement_of(tv))
    )


def device_box(tv: TensorView, device: int) -> Box:
    """The box of tv's global data that `device` holds."""
    index = tv.mesh.index(device) if tv.mesh is not None else 0
    return device_boxes(tv)[index]


def device_shape(tv: TensorView, device: int) -> tuple[int, ...]:
    """The shape of the rows `device` holds of tv (0 rows on an empty chunk)."""
    return tuple(stop - start for start, stop in device_box(tv, device))


def device_slices(tv: TensorView, device: int) -> tuple[slice, ...]:
    """numpy slices of tv's global data that `device` holds."""
    return tuple(slice(start, stop) for start, stop in device_box(tv, device))
