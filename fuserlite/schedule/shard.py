"""Give a tensor a device sharding (one axis, or a whole placement); move a fusion to another mesh."""

from __future__ import annotations

from fuserlite.ir.domain import IterDomain, TensorDomain, is_sharding_split
from fuserlite.ir.errors import FusionError, ScheduleError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import shardings
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType


def shard_axis(
    tv: TensorView,
    logical_index: int,
    mesh: DeviceMesh,
    parallel_type: ParallelType = ParallelType.DIDx,
    *,
    whole: bool = True,
) -> None:
    """Shard logical axis `logical_index` of `tv` over the mesh axis of `parallel_type`.

    An unsharded axis whose extent equals that mesh axis's size is parallelized
    directly (unless `whole` is False: more mesh axes will split it); any other is outer-split by the size and the outer part
    parallelized. An axis already sharded is split again inside its innermost
    sharding (nested: the new mesh axis splits each chunk of the old ones).
    """
    tv.set_device_mesh(mesh)
    d = mesh.axis_size(parallel_type)
    ax = tv.domain.logical[logical_index]
    if ax in tv.domain.loop:
        if ax.extent == d and whole:
            ax.parallelize(parallel_type)
            return
    else:
        ax = _innermost_shard(tv, ax)
    pos = tv.domain.loop.index(ax)
    tv.outer_split(pos, d).axis(pos).parallelize(parallel_type)


def _innermost_shard(tv: TensorView, ax: IterDomain) -> IterDomain:
    """The loop axis holding one device's part of logical axis `ax` after its shardings."""
    while ax not in tv.domain.loop:
        d = next((t for t in tv.domain.transforms if ax in t.inputs), None)
        if not is_sharding_split(d):
            raise ScheduleError(
                f"{tv.name}: logical axis {tv.domain.logical.index(ax)} has schedule transforms "
                "besides its sharding; shard it before scheduling"
            )
        ax = d.inner
    return ax


def shard_as(tv: TensorView, mesh: DeviceMesh | None, wanted: Placement) -> None:
    """Give `tv` (unsharded) the mesh and the placement `wanted` on its logical axes, each
    axis split over its mesh axes outer to inner."""
    if mesh is None:
        return
    tv.set_device_mesh(mesh)
    for li, axes in enumerate(wanted.shards):
        for a in axes:
            shard_axis(tv, li, mesh, mesh.parallel_types[a], whole=len(axes) == 1)


def has_schedule(tv: TensorView) -> bool:
    """True if tv has transforms other than its sharding splits."""
    return not all(is_sharding_split(t) for t in tv.domain.transforms)


def resize_meshes(fusion: Fusion, new_mesh: DeviceMesh | int) -> None:
    """Move every tensor from a mesh of devices 0..k-1 (row-major, any shape) to
    `new_mesh` (an int n: devices 0..n-1), keeping which logical axes each parallel
    type shards, nested in the same order.

    Only tensors whose transforms are their sharding splits can be moved, a
    device-parallel logical axis cannot change its number of devices (its extent
    is that number), and the new mesh must have every parallel type used. Each
    raises FusionError naming the tensor.
    """
    if not isinstance(new_mesh, DeviceMesh):
        if new_mesh < 1:
            raise FusionError(f"the number of devices must be at least 1, got {new_mesh}")
        new_mesh = DeviceMesh.for_num_devices(new_mesh)
    for tv in fusion.tensors_created:
        if tv.mesh is not None and tv.mesh != DeviceMesh.for_shape(tv.mesh.shape):
            raise FusionError(
                f"{tv.name} is on {tv.mesh}; only meshes of devices 0..k-1 (row-major) can be "
                "resized"
            )
        if tv.mesh is None and not tv.device_axes():
            continue
        nests: dict[int, list[ParallelType]] = {}
        for s in sorted(shardings(tv).values() if tv.mesh else (), key=lambda s: s.depth):
            nests.setdefault(s.logical_index, []).append(s.parallel_type)
        if has_schedule(tv):
            raise FusionError(
                f"{tv.name} has schedule transforms besides its sharding; "
                "resize the meshes before scheduling"
            )
        for li, pts in nests.items():
            missing = [pt.name for pt in pts if not new_mesh.has(pt)]
            if missing:
                raise FusionError(
                    f"{tv.name} axis {li} is sharded over {missing[0]}, which {new_mesh} has no "
                    f"axis for (its axes: {', '.join(p.name for p in new_mesh.parallel_types)}); "
                    "resize to a mesh with that many axes"
                )
            ax = tv.domain.logical[li]
            size = new_mesh.axis_size(pts[0])
            if ax in tv.domain.loop and ax.extent != size:
                where = "" if tv.origin is None else f"{tv.origin}: "
                if tv.user_name is None:  # made for the user (a shard_map region's values)
                    raise FusionError(
                        f"{where}{tv.name} (a tensor the compiler made{' there' * bool(where)}) "
                        f"holds one value per device on axis {li} ({ax.extent} devices along "
                        f"{pts[0].name}), as a "
                        "shard_map region does: the program is written for that many "
                        f"devices; write it for {size} (its mesh and sizes) instead of resizing"
                    )
                raise FusionError(
                    f"{where}{tv.name} axis {li} ({ax.extent} devices) is parallelized as a whole, "
                    f"so its extent is the device count; outer_split it by the mesh size to make "
                    f"the fusion resizable to {size} devices along {pts[0].name}"
                )
        if tv.mesh is None:  # DID given, mesh inherited later: only a whole-axis DID is possible
            continue
        contiguity = list(tv.domain.contiguity) if tv.domain.allocation is None else None
        broadcast_dids = {ax: ax.parallel_type for ax in tv.domain.logical if ax.is_broadcast}
        tv.domain = TensorDomain(tv.domain.logical, contiguity)
        for ax in tv.domain.logical:
            ax.parallel_type = broadcast_dids.get(ax, ParallelType.Serial)
        tv.set_device_mesh(new_mesh)
        for li, pts in nests.items():
            for pt in pts:
                shard_axis(tv, li, new_mesh, pt, whole=len(pts) == 1)
