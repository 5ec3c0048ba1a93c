"""The collectives of a shard_map function (torch_xla's and JAX's), in the global view.

Each takes a local value of the shard_map being traced and the mesh axis it runs
over (`axis=`: a ParallelType, its name or the user's name of the axis; on a 1-D mesh
the only axis by default) or, as JAX's do, a tuple of mesh axes: one team of their
devices, flattened in the order given (the first outermost: device (i, j) of
("dp", "tp") is member i * |tp| + j),
and builds ordinary IR on the value's global tensor (fuserlite.spmd.shard_map.Local):
a set that changes a sharding, a reduction over a leading (device) axis, views
that move the leading axis. The passes lower them to Allgather, Allreduce,
ReduceScatter and AllToAll like any other resharding; there is no second code
path. Outside a shard_map function every collective is a FusionError.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence

from fuserlite import ops
from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, ParallelType
from fuserlite.spmd.trace import (
    Local,
    Trace,
    active_trace,
    axis_size,
    declare,
    in_order,
    leading,
    mesh_axes_of,
    team_size,
)

_OPS = {"sum": ops.sum, "max": ops.max, "min": ops.min}
COLLECTIVES: dict[str, Callable[..., TensorView]] = {}  # name -> the public function


def collective(fn: Callable[..., TensorView]) -> Callable[..., TensorView]:
    """Register a collective; each call is recorded in its trace as it was written."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def recorded(*a, **kw) -> TensorView:
        out = fn(*a, **kw)
        given = signature.bind(*a, **kw).arguments
        active_trace(fn.__name__).calls[id(out)] = (fn.__name__, dict(given))
        return out

    COLLECTIVES[fn.__name__] = recorded
    return recorded


def _local(t: TensorView, what: str) -> TensorView:
    """t, which must be a local value of the shard_map being traced."""
    active_trace(what).value(t, what)
    return t


def _enter(t: TensorView, axis: object, what: str) -> tuple[Trace, Local, ParallelType]:
    """The trace, t's Local made to vary over the axis, and the axis (one mesh axis)."""
    trace, v, pts = _enter_team(t, axis, what)
    if len(pts) > 1:
        raise FusionError(
            f"{what} runs over one mesh axis, got axis={axis!r}; call it once per axis"
        )
    return trace, v, pts[0]


def _enter_team(
    t: TensorView, axis: object, what: str
) -> tuple[Trace, Local, tuple[ParallelType, ...]]:
    """The trace, t's Local made to vary over the team's axes, and the axes as given."""
    trace = active_trace(what)
    v = trace.value(t, what)
    pts = mesh_axes_of(trace.mesh, axis, what)
    for pt in pts:
        v = trace.vary(v, pt)
    return trace, v, pts


def _team_text(trace: Trace, pts: tuple[ParallelType, ...]) -> str:
    """'the 4 devices of DIDx', 'the 8 devices of (DIDy, DIDx)'."""
    names = pts[0].name if len(pts) == 1 else "(" + ", ".join(pt.name for pt in pts) + ")"
    return f"the {team_size(trace.mesh, pts)} devices of {names}"


def _dim(t: TensorView, dim: object, what: str, arg: str) -> int:
    """An axis of t's local value (negative counts from the end)."""
    n = len(t.shape)
    return args.integer(dim, f"{what}: {t.name}{list(t.shape)}", arg, minimum=-n, maximum=n - 1) % n


def _reduce_fn(op: str, what: str):
    if not isinstance(op, str) or op not in _OPS:
        raise args.fail(what, "op", f"one of {', '.join(map(repr, _OPS))}", op)
    return _OPS[op]


def _without(v: Local, pts: ParallelType | tuple[ParallelType, ...]) -> tuple[ParallelType, ...]:
    pts = (pts,) if isinstance(pts, ParallelType) else pts
    return tuple(p for p in v.varying if p not in pts)


def _move(trace: Trace, t: TensorView, src: int, dst: int, sharded: dict[int, ParallelType]):
    """t with axis src moved to position dst, declared sharded as given (positions after)."""
    if src == dst:
        return t
    dims = [k for k in range(len(t.shape)) if k != src]
    dims.insert(dst, src)
    return declare(ops.permute(t, dims), trace.mesh, sharded)


def _arranged(trace: Trace, t: TensorView, labels: list, target: list, sharded: dict) -> TensorView:
    """t, whose axes are named by `labels`, permuted into the order `target`; axis label
    -> mesh axis in `sharded` (the result's sharding)."""
    if labels == target:
        return t
    t = ops.permute(t, [labels.index(x) for x in target])
    return declare(t, trace.mesh, {target.index(x): pt for x, pt in sharded.items()})


def _merged(trace: Trace, t: TensorView, at: int, sharded: dict[int, ParallelType]):
    """t with axes at and at + 1 merged into one."""
    shape = list(t.shape)
    shape[at : at + 2] = [shape[at] * shape[at + 1]]
    return declare(ops.reshape(t, shape), trace.mesh, sharded)


@collective
def all_gather(t: TensorView, dim: int = 0, axis: object = None, tiled: bool = True) -> TensorView:
    """Every device of the axis (or of a tuple of axes: one flattened team) gets all
    their local values, concatenated along `dim` in team order (torch_xla's all_gather,
    JAX's with tiled=True) or stacked in a new axis `dim` (tiled=False)."""
    what = "all_gather"
    t = _local(t, what)
    tiled = args.boolean(tiled, what, "tiled")
    n = len(t.shape)
    dim = args.integer(
        dim, f"{what}: {t.name}{list(t.shape)}", "dim", minimum=0, maximum=n if not tiled else n - 1
    )
    trace, v, pts = _enter_team(t, axis, what)
    rest = _without(v, pts)
    k = len(rest)
    # The team's rows go just before `dim`, in the team's order (merged with it when
    # tiled): the global tensor the local values are blocks of; the set then makes every
    # device hold all of it.
    labels = list(range(len(v.tensor.shape)))
    lead = {pt: v.varying.index(pt) for pt in v.varying}
    local = labels[len(v.varying) :]
    target = [lead[pt] for pt in rest] + local[:dim] + [lead[pt] for pt in pts] + local[dim:]
    g = _arranged(trace, v.tensor, labels, target, {lead[pt]: pt for pt in v.varying})
    merged = len(pts) + (1 if tiled else 0)  # the team's rows (and the gathered axis)
    if merged > 1:
        shape = list(g.shape)
        shape[k + dim : k + dim + merged] = [math.prod(shape[k + dim : k + dim + merged])]
        g = declare(ops.reshape(g, shape), trace.mesh, {**leading(rest), k + dim: pts})
    g = declare(ops.set(g), trace.mesh, leading(rest))
    return trace.bind(None, Local(g, rest))


def _reduced(trace: Trace, v: Local, pts: tuple[ParallelType, ...], op: str, what: str):
    """The reduction over the devices of `pts` (their leading axes), still to be placed."""
    return _reduce_fn(op, what)(v.tensor, [v.varying.index(pt) for pt in pts])


@collective
def all_reduce(t: TensorView, op: str = "sum", axis: object = None) -> TensorView:
    """Every device of the axis (or of a tuple of axes) gets the sum (max, min) of their
    local values."""
    return _all_reduce(t, op, axis, "all_reduce")


def _all_reduce(t: TensorView, op: str, axis: object, what: str) -> TensorView:
    _reduce_fn(op, what)
    trace, v, pts = _enter_team(t, axis, what)
    rest = _without(v, pts)
    out = declare(_reduced(trace, v, pts, op, what), trace.mesh, leading(rest))
    return trace.bind(None, Local(out, rest))


@collective
def pmin(t: TensorView, axis: object = None) -> TensorView:
    """JAX's pmin: all_reduce with op="min"."""
    return _all_reduce(t, "min", axis, "pmin")


@collective
def psum(t: TensorView, axis: object = None) -> TensorView:
    """JAX's psum: all_reduce with op="sum"."""
    return _all_reduce(t, "sum", axis, "psum")


@collective
def pmax(t: TensorView, axis: object = None) -> TensorView:
    """JAX's pmax: all_reduce with op="max"."""
    return _all_reduce(t, "max", axis, "pmax")


@collective
def reduce_scatter(
    t: TensorView,
    op: str = "sum",
    scatter_dim: int = 0,
    shard_count: int | None = None,
    axis: object = None,
    tiled: bool = True,
) -> TensorView:
    """Reduce the local values over the axis (or a tuple of axes: one team, flattened in
    order); member i of the team keeps block i of `scatter_dim` (torch_xla's
    reduce_scatter; tiled=False drops the axis, whose extent must then be the team's
    size, as JAX's psum_scatter does)."""
    return _reduce_scatter(t, op, scatter_dim, shard_count, axis, tiled, "reduce_scatter")


def _reduce_scatter(t, op, scatter_dim, shard_count, axis, tiled, what: str) -> TensorView:
    _reduce_fn(op, what)
    t = _local(t, what)
    tiled = args.boolean(tiled, what, "tiled")
    sd = _dim(t, scatter_dim, what, "scatter_dim")
    trace, v, pts = _enter_team(t, axis, what)
    size = team_size(trace.mesh, pts)
    if shard_count is not None and args.integer(shard_count, what, "shard_count") != size:
        raise FusionError(f"{what}: shard_count {shard_count} must equal {_team_text(trace, pts)}")
    n = t.shape[sd]
    if n % size or (not tiled and n != size):
        need = "equal to" if not tiled else "divisible by"
        raise FusionError(
            f"{what}: scatter_dim {sd} of {t.name}{list(t.shape)} has extent {n}; it must be "
            f"{need} {_team_text(trace, pts)}"
        )
    rest = _without(v, pts)
    k = len(rest)
    # Sharded on the scatter axis over the team (nested, in its order), the reduction of
    # partial sums is one ReduceScatter; the axis then splits into one row per mesh axis
    # of the team and the block, and the rows go back in front, in mesh-axis order.
    at = {**leading(rest), k + sd: pts}
    r = declare(_reduced(trace, v, pts, op, what), trace.mesh, at)
    shape = list(r.shape)
    shape[k + sd : k + sd + 1] = [*(axis_size(trace.mesh, pt) for pt in pts), n // size]
    rows = {k + sd + i: pt for i, pt in enumerate(pts)}
    r = declare(ops.reshape(r, shape), trace.mesh, {**leading(rest), **rows})
    labels = [*(("lead", pt) for pt in rest), *(("local", d) for d in range(sd))]
    labels += [*(("lead", pt) for pt in pts), *(("local", d) for d in range(sd, len(t.shape)))]
    target = [*(("lead", pt) for pt in v.varying), *(("local", d) for d in range(len(t.shape)))]
    r = _arranged(trace, r, labels, target, {("lead", pt): pt for pt in v.varying})
    varying = v.varying
    if not tiled:
        shape = list(r.shape)
        del shape[len(varying) + sd]
        r = declare(ops.reshape(r, shape), trace.mesh, leading(varying))
    return trace.bind(None, Local(r, varying))


@collective
def psum_scatter(
    t: TensorView, axis: object = None, scatter_dimension: int = 0, tiled: bool = False
) -> TensorView:
    """JAX's psum_scatter: reduce_scatter of sums (tiled=False by default, as in JAX)."""
    return _reduce_scatter(t, "sum", scatter_dimension, None, axis, tiled, "psum_scatter")


@collective
def all_to_all(t: TensorView, split_dim: int, concat_dim: int, axis: object = None) -> TensorView:
    """Split each local value along `split_dim` into one block per device of the axis,
    send block i to device i, concatenate the received blocks along `concat_dim`."""
    what = "all_to_all"
    t = _local(t, what)
    split_dim = _dim(t, split_dim, what, "split_dim")
    concat_dim = _dim(t, concat_dim, what, "concat_dim")
    trace, v, pt = _enter(t, axis, what)
    size = axis_size(trace.mesh, pt)
    if t.shape[split_dim] % size:
        raise FusionError(
            f"{what}: split_dim {split_dim} of {t.name}{list(t.shape)} must be divisible by "
            f"the {size} devices of {pt.name}"
        )
    k, j = len(v.varying), v.varying.index(pt)
    lead = [("lead", i) for i in range(k)]
    local = [("local", d) for d in range(len(t.shape))]
    # Split the axis into (destination, block): [.., source, .., dst, split, ..].
    split = [*lead, *local[:split_dim], "dst", *local[split_dim:]]
    shape = list(v.tensor.shape)
    shape[k + split_dim : k + split_dim + 1] = [size, t.shape[split_dim] // size]
    others = {("lead", i): p for i, p in enumerate(v.varying) if p is not pt}
    r = declare(ops.reshape(v.tensor, shape), trace.mesh, leading(v.varying))
    # The set moves the sharding from the source rows to the destination blocks: the
    # AllToAll.
    r = declare(
        ops.set(r), trace.mesh, {split.index(x): p for x, p in {**others, "dst": pt}.items()}
    )
    # The destination takes the source's place in front; the source goes just before
    # concat_dim, merged with it.
    front = [("lead", i) if i != j else "dst" for i in range(k)]
    rest = [x for x in split[k:] if x != "dst"]
    c = rest.index(local[concat_dim])
    target = [*front, *rest[:c], ("lead", j), *rest[c:]]
    r = _arranged(trace, r, split, target, {**others, "dst": pt})
    r = _merged(trace, r, k + c, leading(v.varying))
    return trace.bind(None, Local(r, v.varying))


@collective
def axis_index(axis: object = None) -> TensorView:
    """This device's index along the mesh axis, an int32 scalar (JAX's axis_index,
    torch_xla's ordinal within the axis); over a tuple of axes, its index in their
    flattened team (i * |tp| + j for ("dp", "tp")). In the global view an iota over
    the team's devices, sharded on them, so each device computes its own index."""
    what = "axis_index"
    trace = active_trace(what)
    pts = mesh_axes_of(trace.mesh, axis, what)
    mesh = trace.mesh
    with trace.fusion:  # the global tensor; inside fn the local program is active
        index = declare(ops.iota(team_size(mesh, pts), DType.int32), mesh, {0: pts})
        if len(pts) > 1:  # one axis per mesh axis of the team, then in mesh-axis order
            sizes = [axis_size(mesh, pt) for pt in pts]
            index = declare(ops.reshape(index, sizes), mesh, dict(enumerate(pts)))
            order = in_order(mesh, pts)
            labels = list(pts)
            index = _arranged(trace, index, labels, list(order), {pt: pt for pt in pts})
    return trace.bind(None, Local(index, in_order(mesh, pts)))


def _sources(perm: object, size: int, pt: ParallelType, what: str) -> dict[int, int]:
    """{destination: source} of ppermute's `perm` over `size` devices of `pt`: a
    permutation, as JAX requires (each source and each destination at most once), that
    gives every device a value."""
    if not args.is_sequence(perm):
        raise args.fail(what, "perm", "a list of (source, destination) pairs", perm)
    accepted = (
        f"(source, destination) pairs of devices 0..{size - 1} of {pt.name}, each source "
        "once and each destination once (a permutation, as in JAX's ppermute)"
    )
    src_of: dict[int, int] = {}
    for p in perm:
        pair = args.integers(p, what, "perm", scalar_ok=False) if args.is_sequence(p) else None
        if pair is None or len(pair) != 2 or not all(0 <= i < size for i in pair):
            raise args.fail(what, "perm", accepted, perm)
        if pair[1] in src_of or pair[0] in src_of.values():
            role, device = ("destination", pair[1]) if pair[1] in src_of else ("source", pair[0])
            raise FusionError(
                f"{what}: perm must be {accepted}, got {args.given(perm)}: {role} {device} "
                "appears twice"
            )
        src_of[pair[1]] = pair[0]
    missing = [d for d in range(size) if d not in src_of]
    if missing:
        raise FusionError(
            f"{what}: perm {args.given(perm)} gives device(s) {missing} of {pt.name} no "
            "value; give every device a source (fuserlite has no zero fill)"
        )
    return src_of


@collective
def ppermute(t: TensorView, axis: object, perm: Sequence[tuple[int, int]]) -> TensorView:
    """Device dst of the axis gets the local value of device src, for each (src, dst)
    pair of `perm` (JAX's ppermute(x, axis_name, perm); every device must receive one
    value; axis None: the only axis of a 1-D mesh)."""
    what = "ppermute"
    trace, v, pt = _enter(t, axis, what)
    size = axis_size(trace.mesh, pt)
    src_of = _sources(perm, size, pt, what)
    j = v.varying.index(pt)
    labels = list(range(len(v.tensor.shape)))
    front = [j, *(x for x in labels if x != j)]
    others = {i: p for i, p in enumerate(v.varying) if p is not pt}
    # With pt's rows in front, row d of the result is row src_of[d]: a take of whole
    # blocks of the sharded axis, placed like its input, which lowers to one
    # CollectivePermute (each device sends its block to the devices it is the source of).
    placed = {**others, j: pt}
    g = _arranged(trace, v.tensor, labels, front, placed)
    g = declare(
        ops.take(g, [src_of[d] for d in range(size)]),
        trace.mesh,
        {front.index(i): p for i, p in placed.items()},
    )
    g = _arranged(trace, g, front, labels, placed)
    return trace.bind(None, Local(g, v.varying))
