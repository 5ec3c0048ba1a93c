"""DTensor's vocabulary on nvFuser's IR: fl.distribute, fl.redistribute, tv.placements.

A sharding is one placement per mesh axis, mesh axis 0 first (DTensor's order;
DIDx is the last mesh axis): `Shard(d)` splits the tensor's axis d over that
mesh axis (torch.chunk's chunks: ceil(n/k) rows per device, the trailing devices
short or empty), `Replicate()` copies it, `Partial("sum" | "max" | "min")` says the
devices hold addends of a reduction's output (its reduced axis is sharded there).

    fl.distribute(x, mesh, [fl.Shard(0), fl.Replicate()])  # x on a 2-D mesh, rows over DIDy
    y = fl.redistribute(x, [fl.Replicate(), fl.Shard(1)])  # a Set to another placement
    y.placements                                            # (Replicate(), Shard(dim=1))

Placements are sugar: `distribute` writes exactly the splits and parallel types a
hand-written schedule does (schedule.shard.shard_as, the one conversion): a
Shard over k devices of an axis of extent k parallelizes that axis, any other
outer-splits it by k and parallelizes the outer part; `[Shard(0), Shard(0)]`
splits axis 0 by mesh axis 0, then the inner part by mesh axis 1 (nvFuser's
layout). For extents the mesh divides this is DTensor's layout too; for others
it is not: nvFuser's inner split is of the padded chunk, ceil(n/k0) rows, so 5
rows on a 2x2 mesh are (0,0): 0-1, (0,1): 2, (1,0): 3-4, (1,1): none, where
DTensor chunks each chunk again (3-4 become one row each).
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite import ops
from fuserlite.ir import args
from fuserlite.ir.errors import FuserliteError, FusionError, LoweringError
from fuserlite.ir.fusion import Fusion, active_fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import MeshAxisPlacement, Partial, Placement, Replicate, Shard
from fuserlite.ir.sharding import logical_placement, placement
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.registry import definition
from fuserlite.ops.sharding import partial_op
from fuserlite.schedule.shard import shard_as

Placements = Sequence[MeshAxisPlacement] | str  # one per mesh axis, or the text "(S0,R)"


def _axis_label(mesh: DeviceMesh, axis: int) -> str:
    """'mesh axis 1 (DIDx)', 'mesh axis 1 (DIDx, tp)'."""
    name = "" if mesh.axis_names is None else f", {mesh.axis_names[axis]}"
    return f"mesh axis {axis} ({mesh.parallel_types[axis].name}{name})"


def _count(n: int, what: str) -> str:
    """'1 axis', '2 axes', '3 entries'."""
    plural = {"axis": "axes", "entry": "entries"}.get(what, what + "s")
    return f"{n} {what if n == 1 else plural}"


def _example(mesh: DeviceMesh) -> str:
    return "[" + ", ".join(["Shard(0)"] + ["Replicate()"] * (mesh.rank - 1)) + "]"


def _reduce_op(tv: TensorView) -> str | None:
    """The op a partial value of tv combines by ("sum", "max"), or None if tv is made by
    no reduction."""
    d = tv.definition
    op = None if d is None else definition(d)
    if op is None or op.sharding.partial is None:
        return None
    return op.sharding.partial.name


def _data_view(tv: TensorView, mesh: DeviceMesh, wanted: Placements, who: str) -> Placement:
    """The placement `wanted` (a list or its text) as one on tv's data axes, checked
    against tv and the mesh; every mistake names tv, the placement, the mesh axis and
    the fix."""
    shape = f"{tv.dtype.name}{list(tv.shape)}"
    ndim = len(tv.shape)
    if isinstance(wanted, str):
        try:
            p = Placement.parse(wanted, ndim)
        except FuserliteError as exc:
            raise FusionError(f"{who}: {tv.name} {shape}: {exc}") from None
        if p.mesh_rank != mesh.rank:
            raise FusionError(
                f"{who}: {tv.name}: the placement {wanted} has {_count(p.mesh_rank, 'entry')} "
                f"but {mesh} has {_count(mesh.rank, 'axis')}; give one per mesh axis, mesh "
                "axis 0 first"
            )
        # The text's P is the partial values of tv's reduction, whatever its op.
        op = _reduce_op(tv) or "sum"
        items = [
            Partial(op) if isinstance(q, Partial) else q
            for q in map(p.of_mesh_axis, range(mesh.rank))
        ]
    else:
        if not args.is_sequence(wanted) or isinstance(wanted, Placement):
            raise args.fail(
                who, "placements", "a list of Shard(d), Replicate() or Partial(), one per mesh axis",
                wanted,
            )  # fmt: skip
        items, p = list(wanted), None
        if len(items) != mesh.rank:
            names = ", ".join(pt.name for pt in mesh.parallel_types)
            raise FusionError(
                f"{who}: {tv.name}: {_count(len(items), 'placement')} for "
                f"{_count(mesh.rank, 'axis')} of {mesh} ({names}); give one per mesh axis, "
                f"mesh axis 0 first, e.g. {_example(mesh)}"
            )
    partial = [a for a, q in enumerate(items) if isinstance(q, Partial)]
    for a, q in enumerate(items):
        if not isinstance(q, (Shard, Replicate, Partial)):
            raise FusionError(
                f"{who}: {tv.name}: {_axis_label(mesh, a)} has placement {args.given(q)}; "
                "use fl.Shard(d), fl.Replicate() or fl.Partial()"
            )
        if isinstance(q, Shard):
            if not -ndim <= q.dim < ndim:
                fix = f"use Shard(0)..Shard({ndim - 1})" if ndim else "a 0-d tensor has no axis"
                raise FusionError(
                    f"{who}: {tv.name} {shape}: Shard({q.dim}) on {_axis_label(mesh, a)}, "
                    f"but the tensor has {_count(ndim, 'axis')}; {fix}, or Replicate()"
                )
            li = tv.data_positions()[q.dim % ndim]
            if tv.domain.logical[li].is_broadcast:
                raise FusionError(
                    f"{who}: {tv.name} {shape}: Shard({q.dim}) on {_axis_label(mesh, a)}, but "
                    f"axis {q.dim % ndim} is a broadcast axis (extent 1), which holds no data "
                    "to split; Replicate() it"
                )
    if partial:
        _check_partial(tv, mesh, [items[a] for a in partial], partial, who)
    if p is not None:
        return p
    items = [Shard(q.dim % ndim) if isinstance(q, Shard) else q for q in items]
    return Placement.from_dtensor(ndim, items)


def _check_partial(
    tv: TensorView, mesh: DeviceMesh, given: list[Partial], axes: list[int], who: str
) -> None:
    """Partial placements need one reduction axis of tv (a reduction's output), made by
    the op they name."""
    where = _axis_label(mesh, axes[0])
    reductions = [k for k, ax in enumerate(tv.domain.logical) if ax.is_reduction]
    op = _reduce_op(tv)
    if not reductions or op is None:
        raise FusionError(
            f"{who}: {tv.name}: {given[0]!r} on {where}, but {tv.name} has no reduction axis: "
            "its values are complete. Partial marks the output of a reduction (sum, max, "
            "linear, matmul) whose reduced axis is sharded on that mesh axis: distribute "
            "that output, or Shard the reduced axis of its input (Replicate() here)"
        )
    if len(reductions) > 1:
        raise FusionError(
            f"{who}: {tv.name}: {given[0]!r} on {where}, but {tv.name} reduces "
            f"{len(reductions)} axes (logical {', '.join(map(str, reductions))}) and a Partial "
            "does not say which is sharded; parallelize that reduction axis by hand "
            "(outer_split and parallelize), or reduce one axis per op"
        )
    wrong = [q for q in given if q.reduce_op != op]
    if wrong:
        raise FusionError(
            f"{who}: {tv.name}: {wrong[0]!r} on {_axis_label(mesh, axes[given.index(wrong[0])])}, "
            f"but {tv.name} is made by a {op} reduction, whose partial values combine by "
            f"{op}: write Partial({op!r})"
        )


def _logical(tv: TensorView, data_view: Placement) -> Placement:
    """A placement on tv's data axes (partial mesh axes apart) as one on its logical
    axes: the partial mesh axes shard its one reduction axis, in mesh-axis order."""
    shards: list[tuple[int, ...]] = [()] * len(tv.domain.logical)
    for d, li in enumerate(tv.data_positions()):
        shards[li] = data_view.shards[d]
    if data_view.partial:
        (li,) = [k for k, ax in enumerate(tv.domain.logical) if ax.is_reduction]
        shards[li] = data_view.partial
    return Placement(data_view.mesh_rank, tuple(shards))


def _is_unsharded(tv: TensorView) -> bool:
    """No transforms and no device-parallel axis but on broadcast axes (which hold no
    data: b and bDIDx are one sharding)."""
    if tv.domain.transforms:
        return False
    return all(ax.is_broadcast or not ax.is_device_parallel for ax in tv.domain.loop)


def _named_input(name: str, fusion: Fusion | None, who: str) -> TensorView:
    """The input of `fusion` (or of the active one) a user names: its own name or T<n>."""
    if fusion is None:
        try:
            fusion = active_fusion()
        except FusionError:
            raise FusionError(
                f"{who}: {name!r} names a fusion input; say which fusion: "
                f"{who}({name!r}, mesh, placements, fusion=f)"
            ) from None
    args.instance(fusion, Fusion, who, "fusion", "a Fusion")
    for tv in fusion.inputs:
        if name in (tv.user_name, tv.ir_name):
            return tv
    known = ", ".join(tv.user_name or tv.ir_name for tv in fusion.inputs[:12]) or "none"
    raise FusionError(f"{who}: the fusion has no input {name!r}; its inputs are {known}")


def distribute(
    tensor: TensorView | str,
    mesh: DeviceMesh,
    placements: Placements,
    *,
    fusion: Fusion | None = None,
) -> TensorView:
    """Put `tensor` on `mesh` with one placement per mesh axis (mesh axis 0 first, as
    DTensor's distribute_tensor takes them): a tensor being built, or an input of a
    built fusion given by tensor or by name (`fusion=`, else the active fusion).
    Writes the splits and parallel types a hand-written schedule would; returns it."""
    who = "distribute"
    tv = tensor if isinstance(tensor, TensorView) else None
    if isinstance(tensor, str):
        tv = _named_input(tensor, fusion, who)
    elif tv is None:
        raise args.fail(who, "tensor", "a TensorView or the name of a fusion input", tensor)
    args.instance(mesh, DeviceMesh, who, "mesh", "a DeviceMesh")
    wanted = _logical(tv, _data_view(tv, mesh, placements, who))
    if not _is_unsharded(tv):
        if tv.mesh == mesh and logical_placement(tv) == wanted:
            return tv  # distributed so already
        raise FusionError(
            f"{who}: {tv.name} is already sharded or scheduled (placement "
            f"{placement(tv) if tv.mesh is not None else 'without a mesh'}); distribute a "
            "tensor once, before scheduling it, or use fl.redistribute for a copy placed "
            "otherwise"
        )
    shard_as(tv, mesh, wanted)
    return tv


def redistribute(
    tv: TensorView, placements: Placements, mesh: DeviceMesh | None = None
) -> TensorView:
    """A copy of tv (a Set) placed as `placements` on `mesh`, by default tv's (or, for a
    tensor not placed yet, its producers'): the passes lower it to the communications
    that move the data (DTensor's redistribute)."""
    who = "redistribute"
    args.instance(tv, TensorView, who, "tv", "a TensorView")
    if mesh is None:
        mesh = _inherited_mesh(tv, who)
    args.instance(mesh, DeviceMesh, who, "mesh", "a DeviceMesh")
    if not isinstance(placements, str) and args.is_sequence(placements):
        partial = [a for a, q in enumerate(placements) if isinstance(q, Partial)]
        if partial:
            raise FusionError(
                f"{who}: {tv.name}: {placements[partial[0]]!r} on "
                f"{_axis_label(mesh, partial[0])}, but a Set's output is complete (it reduces "
                "nothing), so a redistribution cannot make partial values; Replicate() or "
                "Shard() it"
            )
    _data_view(tv, mesh, placements, who)  # checked before the Set joins the fusion
    return distribute(ops.set(tv), mesh, placements)


def _inherited_mesh(tv: TensorView, who: str) -> DeviceMesh:
    """tv's mesh, or the one propagate-shardings will give it: that of its nearest
    producers with a mesh (all of them on one)."""
    level, seen = [tv], set()
    while level:
        meshes = {t.mesh for t in level if t.mesh is not None}
        if len(meshes) == 1:
            return meshes.pop()
        if meshes:
            break
        seen |= {id(t) for t in level}
        level = [
            i for t in level if t.definition is not None for i in t.definition.inputs
            if id(i) not in seen
        ]  # fmt: skip
    raise FusionError(
        f"{who}: {tv.name} has no mesh yet"
        + (" and its producers are on several" if level else "")
        + f"; give one: {who}(tv, placements, mesh=m)"
    )


def placements_of(tv: TensorView) -> tuple[MeshAxisPlacement, ...] | None:
    """tv's placement per mesh axis, mesh axis 0 first (None without a mesh): what
    `tv.placements` reads, e.g. (Shard(dim=0), Replicate())."""
    mesh = tv.mesh
    if mesh is None:
        return None
    p = placement(tv)
    if p.cyclic:
        raise FusionError(
            f"{tv.name}: axis {p.cyclic_axis()} is sharded cyclically (the inner part of a "
            "split parallelized over a mesh axis: device i holds rows i, i + d, ...), which "
            f"DTensor's placements cannot say (Shard is torch.chunk's blocks); its placement "
            f"is {p} (fuserlite.ir.sharding.placement)"
        )
    for d, axes in enumerate(p.shards):
        if list(axes) != sorted(axes):
            raise FusionError(
                f"{tv.name}: axis {d} is split over mesh axes {' then '.join(map(str, axes))}, "
                f"inner mesh axis first, which DTensor's placements cannot say (they nest in "
                f"mesh-axis order); its placement is {p} (fuserlite.ir.sharding.placement)"
            )
    op = "sum"
    if p.partial:
        try:
            op = partial_op(tv).name
        except LoweringError as exc:
            raise FusionError(str(exc)) from None
    return tuple(Partial(op) if a in p.partial else p.of_mesh_axis(a) for a in range(mesh.rank))


def install() -> None:
    """`tv.placements` on TensorView (the IR imports no schedule: the owner installs it)."""
    TensorView.placements = property(  # type: ignore[attr-defined]
        placements_of, doc="tv's placement per mesh axis (fl.distribute's), or None"
    )


install()

__all__ = ["Partial", "Replicate", "Shard", "distribute", "placements_of", "redistribute"]
