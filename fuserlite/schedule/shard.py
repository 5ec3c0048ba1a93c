"""Give a tensor a device sharding (one axis, or a whole placement); move a fusion to another mesh."""

from __future__ import annotations

from fuserlite.ir import args
from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.errors import FusionError, ScheduleError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import shardings
from fuserlite.ir.streams import chunking
from fuserlite.ir.tensor import TensorView, parallelize_problem
from fuserlite.ir.types import ParallelType
from fuserlite.ir.values import fact


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
    directly (unless `whole` is False: more mesh axes will split it); any other is
    outer-split by the size and the outer part parallelized. An axis already sharded
    is split again inside its innermost sharding (nested: the new mesh axis splits each
    chunk of the old ones). The new domain is a fact of the old one (`sharded_axis`);
    where a primitive refuses a step, the primitives themselves say why.
    """
    _check_shard_arguments(tv, logical_index, mesh, parallel_type)
    logical_index %= len(tv.domain.logical)
    tv.set_device_mesh(mesh)
    d = mesh.axis_size(parallel_type)
    try:
        tv.domain = sharded_axis(tv.domain, logical_index, d, parallel_type, whole)
    except _Refused:
        _shard_axis_by_primitives(tv, logical_index, d, parallel_type, whole)
        raise AssertionError("a sharding refused once and not again") from None


class _Refused(Exception):
    """A schedule primitive would refuse a step of a sharding (it says why)."""


@fact
def sharded_axis(dom: TensorDomain, li: int, d: int, pt: ParallelType, whole: bool) -> TensorDomain:
    """The domain with logical axis `li` sharded over `d` devices along `pt`, as
    shard_axis does it; _Refused where a primitive would refuse a step."""
    p = li
    if p in dom.loop_positions:
        if dom.axes[p].extent == d and whole:
            return _parallelized(dom, p, pt)
    else:
        p = _innermost_shard(dom, li)
        if p is None:
            raise _Refused
    ax = dom.axes[p]
    if ax.is_device_parallel and not ax.is_broadcast:
        raise _Refused  # split refuses a device-parallel axis
    i = dom.loop_positions.index(p)
    dom = dom.split(i, d, False)
    return _parallelized(dom, dom.loop_positions[i], pt)


def _parallelized(dom: TensorDomain, p: int, pt: ParallelType) -> TensorDomain:
    if parallelize_problem(dom, p, pt) is not None:
        raise _Refused
    return dom.parallelize(p, pt)


def _shard_axis_by_primitives(
    tv: TensorView, li: int, d: int, pt: ParallelType, whole: bool
) -> None:
    """shard_axis step by step with the checked primitives (for their messages)."""
    dom = tv.domain
    p = li
    if p in dom.loop_positions:
        if dom.axes[p].extent == d and whole:
            tv.axis(dom.loop_positions.index(p)).parallelize(pt)
            return
    else:
        p = _innermost_shard(dom, li)
        if p is None:
            raise ScheduleError(
                f"{tv.name}: logical axis {li} has schedule transforms "
                "besides its sharding; shard it before scheduling"
            )
    pos = dom.loop_positions.index(p)
    tv.outer_split(pos, d).axis(pos).parallelize(pt)


def _innermost_shard(dom: TensorDomain, li: int) -> int | None:
    """The loop axis (position) holding one device's part of logical axis `li` after
    its shardings; None where another transform splits or merges it."""
    p = li
    while p not in dom.loop_positions:
        k = dom.use[p]
        t = None if k is None else dom.transforms[k]
        if t is None or not dom.is_sharding_split(t):
            return None
        p = t.inner
    return p


def _check_shard_arguments(
    tv: object, logical_index: object, mesh: object, parallel_type: object
) -> None:
    """A ScheduleError naming the argument of shard_axis that is wrong, and what it takes."""
    who = "shard_axis"
    args.instance(tv, TensorView, who, "tv", "a TensorView", ScheduleError)
    n = len(tv.domain.logical)
    args.integer(
        logical_index,
        who,
        f"logical_index (an axis of {tv.name}'s {n} logical axes)",
        minimum=-n,
        maximum=n - 1,
        error=ScheduleError,
    )
    args.instance(mesh, DeviceMesh, who, "mesh", "a DeviceMesh", ScheduleError)
    dids = [pt.name for pt in ParallelType if pt.is_device]
    if not isinstance(parallel_type, ParallelType) or not parallel_type.is_device:
        raise args.fail(
            who, "parallel_type", f"one of {', '.join(dids)}", parallel_type, ScheduleError
        )


def shard_as(tv: TensorView, mesh: DeviceMesh | None, wanted: Placement) -> None:
    """Give `tv` (unsharded) the mesh and the placement `wanted` on its logical axes, each
    axis split over its mesh axes outer to inner (a fact of its domain, `sharded_as`)."""
    if mesh is None:
        return
    if tv.mesh is not mesh:  # propagate-shardings gives the mesh first
        tv.set_device_mesh(mesh)
    try:
        tv.domain = sharded_as(tv.domain, mesh, wanted)
    except _Refused:
        for li, axes in enumerate(wanted.shards):
            if set(axes) & set(wanted.cyclic):
                *outer, a = axes
                d, b = mesh.shape[a], wanted.block_of(a)
                tv.split(tv.domain.loop_positions.index(li), d * b)
                periods = len(tv.domain.axes) - 2
                at = tv.domain.loop_positions.index(len(tv.domain.axes) - 1)
                if b > 1:
                    tv.outer_split(at, d)
                    at = tv.domain.loop_positions.index(len(tv.domain.axes) - 2)
                tv.axis(at).parallelize(mesh.parallel_types[a])
                for o in outer:
                    tv.outer_split(tv.domain.loop_positions.index(periods), mesh.shape[o])
                    at = tv.domain.loop_positions.index(len(tv.domain.axes) - 2)
                    tv.axis(at).parallelize(mesh.parallel_types[o])
                    periods = len(tv.domain.axes) - 1
                continue
            for a in axes:
                shard_axis(tv, li, mesh, mesh.parallel_types[a], whole=len(axes) == 1)
        raise AssertionError("a sharding refused once and not again") from None


@fact
def sharded_as(dom: TensorDomain, mesh: DeviceMesh, wanted: Placement) -> TensorDomain:
    """The domain shard_as gives a tensor of domain `dom` (_Refused where a primitive
    would refuse a step)."""
    for li, axes in enumerate(wanted.shards):
        if set(axes) & set(wanted.cyclic):
            dom = _cyclic(dom, li, mesh, axes, wanted.block_of(axes[-1]))
            continue
        for a in axes:
            pt = mesh.parallel_types[a]
            dom = sharded_axis(dom, li, mesh.axis_size(pt), pt, len(axes) == 1)
    return dom


def _cyclic(
    dom: TensorDomain, li: int, mesh: DeviceMesh, axes: tuple[int, ...], b: int
) -> TensorDomain:
    """Logical axis `li` of `dom` sharded cyclically over the innermost mesh axis of
    `axes` (d of them), in blocks of b: split by d b (the inner part of a split by d for
    b = 1; else its inner part outer_split by d), the mesh axis on the d part; the outer
    mesh axes chunk the periods (the outer part), outer to inner."""
    if li not in dom.loop_positions or dom.axes[li].is_device_parallel:
        raise _Refused
    *outer, a = axes
    pt = mesh.parallel_types[a]
    d = mesh.axis_size(pt)
    dom = dom.split(dom.loop_positions.index(li), d * b, True)
    periods = len(dom.axes) - 2
    if b > 1:  # block-cyclic: d blocks of b rows, the outer part of a split
        dom = dom.split(dom.loop_positions.index(len(dom.axes) - 1), d, False)
        dom = _parallelized(dom, len(dom.axes) - 2, pt)
    else:
        dom = _parallelized(dom, len(dom.axes) - 1, pt)
    for o in outer:
        dom = dom.split(dom.loop_positions.index(periods), mesh.shape[o], False)
        dom = _parallelized(dom, len(dom.axes) - 2, mesh.parallel_types[o])
        periods = len(dom.axes) - 1
    return dom


def has_schedule(tv: TensorView) -> bool:
    """True if tv has transforms other than its sharding splits."""
    return scheduled_beyond_sharding(tv.domain)


@fact
def scheduled_beyond_sharding(dom: TensorDomain) -> bool:
    """True if the domain has transforms other than its sharding splits."""
    return not all(dom.is_sharding_split(t) for t in dom.transforms)


def resize_meshes(fusion: Fusion, new_mesh: DeviceMesh | int) -> None:
    """Move every tensor from a mesh of devices 0..k-1 (row-major, any shape) to
    `new_mesh` (an int n: devices 0..n-1), keeping which logical axes each parallel
    type shards, nested in the same order.

    Only tensors whose transforms are their sharding splits can be moved, a
    device-parallel logical axis cannot change its number of devices (its extent
    is that number), and the new mesh must have every parallel type used. Each
    raises FusionError naming the tensor. An unnamed new mesh of the rank of the
    fusion's named one keeps its axis names.
    """
    from fuserlite.schedule.streams import stream_parallelize, without_streams  # it uses shard_as

    if not isinstance(new_mesh, DeviceMesh):
        if new_mesh < 1:
            raise FusionError(f"the number of devices must be at least 1, got {new_mesh}")
        new_mesh = DeviceMesh.for_num_devices(new_mesh)
    names = {t.mesh.axis_names for t in fusion.tensors_created if t.mesh is not None}
    names.discard(None)
    if new_mesh.axis_names is None and len(names) == 1 and len(next(iter(names))) == new_mesh.rank:
        new_mesh = new_mesh.with_axis_names(names.pop())  # the user's axes keep their names
    for tv in fusion.tensors_created:
        if tv.mesh is not None and tv.mesh != DeviceMesh.for_shape(tv.mesh.shape):
            raise FusionError(
                f"{tv.name} is on {tv.mesh}; only meshes of devices 0..k-1 (row-major) can be "
                "resized"
            )
        if tv.mesh is None and not tv.device_axes():
            continue
        # A Stream axis is a host loop's chunking, kept across the resize (its splits
        # are no schedule of the kernels).
        stream = chunking(tv.domain)
        if stream is not None:
            without_streams(tv)
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
            if li in tv.domain.loop_positions and ax.extent != size:
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
            if stream is not None:
                stream_parallelize(tv, stream)
            continue
        dom = tv.domain
        contiguity = dom.contiguity if dom.allocation is None else None
        # b == bDIDx: a broadcast axis keeps its type, every other axis starts serial
        logical = [
            ax if ax.is_broadcast else ax.with_parallel_type(ParallelType.Serial)
            for ax in dom.logical
        ]
        tv.domain = TensorDomain(logical, contiguity)
        tv.set_device_mesh(new_mesh)
        for li, pts in nests.items():
            for pt in pts:
                shard_axis(tv, li, new_mesh, pt, whole=len(pts) == 1)
        if stream is not None:
            stream_parallelize(tv, stream)
