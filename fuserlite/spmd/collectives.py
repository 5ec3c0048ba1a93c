"""The collectives of a shard_map function (torch_xla's and JAX's), in the global view.

Each takes a local value of the shard_map being traced and the mesh axis it runs
over (`axis=`: a ParallelType or its name; on a 1-D mesh the only axis by default),
and builds ordinary IR on the value's global tensor (fuserlite.spmd.shard_map.Local):
a set that changes a sharding, a reduction over a leading (device) axis, views
that move the leading axis. The passes lower them to Allgather, Allreduce,
ReduceScatter and AllToAll like any other resharding; there is no second code
path. Outside a shard_map function every collective is a FusionError.
"""

from __future__ import annotations

import functools
import inspect
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
    leading,
    mesh_axis,
)

_OPS = {"sum": ops.sum, "max": ops.max}
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
    """The trace, t's Local made to vary over the axis, and the axis."""
    trace = active_trace(what)
    v = trace.value(t, what)
    pt = mesh_axis(trace.mesh, axis, what)
    return trace, trace.vary(v, pt), pt


def _dim(t: TensorView, dim: object, what: str, arg: str) -> int:
    """An axis of t's local value (negative counts from the end)."""
    n = len(t.shape)
    return args.integer(dim, f"{what}: {t.name}{list(t.shape)}", arg, minimum=-n, maximum=n - 1) % n


def _reduce_fn(op: str, what: str):
    if not isinstance(op, str) or op not in _OPS:
        raise args.fail(what, "op", f"one of {', '.join(map(repr, _OPS))}", op)
    return _OPS[op]


def _without(v: Local, pt: ParallelType) -> tuple[ParallelType, ...]:
    return tuple(p for p in v.varying if p is not pt)


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
    """Every device of the axis gets all their local values, concatenated along `dim`
    (torch_xla's all_gather, JAX's with tiled=True) or stacked in a new axis `dim`
    (tiled=False)."""
    what = "all_gather"
    t = _local(t, what)
    tiled = args.boolean(tiled, what, "tiled")
    n = len(t.shape)
    dim = args.integer(
        dim, f"{what}: {t.name}{list(t.shape)}", "dim", minimum=0, maximum=n if not tiled else n - 1
    )
    trace, v, pt = _enter(t, axis, what)
    rest = _without(v, pt)
    k = len(rest)
    # pt's rows go just before `dim` (merged with it when tiled): the global tensor the
    # local values are blocks of; the set then makes every device hold all of it.
    at = {**leading(rest), k + dim: pt}
    g = _move(trace, v.tensor, v.varying.index(pt), k + dim, at)
    if tiled:
        g = _merged(trace, g, k + dim, at)
    g = declare(ops.set(g), trace.mesh, leading(rest))
    return trace.bind(None, Local(g, rest))


def _reduced(trace: Trace, v: Local, pt: ParallelType, op: str, what: str) -> TensorView:
    """The reduction over the devices of `pt` (leading axis), still to be placed."""
    return _reduce_fn(op, what)(v.tensor, [v.varying.index(pt)])


@collective
def all_reduce(t: TensorView, op: str = "sum", axis: object = None) -> TensorView:
    """Every device of the axis gets the sum (or max) of their local values."""
    return _all_reduce(t, op, axis, "all_reduce")


def _all_reduce(t: TensorView, op: str, axis: object, what: str) -> TensorView:
    _reduce_fn(op, what)
    trace, v, pt = _enter(t, axis, what)
    rest = _without(v, pt)
    out = declare(_reduced(trace, v, pt, op, what), trace.mesh, leading(rest))
    return trace.bind(None, Local(out, rest))


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
    """Reduce the local values over the axis; device i keeps block i of `scatter_dim`
    (torch_xla's reduce_scatter; tiled=False drops the axis, whose extent must then be
    the device count, as JAX's psum_scatter does)."""
    return _reduce_scatter(t, op, scatter_dim, shard_count, axis, tiled, "reduce_scatter")


def _reduce_scatter(t, op, scatter_dim, shard_count, axis, tiled, what: str) -> TensorView:
    _reduce_fn(op, what)
    t = _local(t, what)
    tiled = args.boolean(tiled, what, "tiled")
    s = _dim(t, scatter_dim, what, "scatter_dim")
    trace, v, pt = _enter(t, axis, what)
    size = axis_size(trace.mesh, pt)
    if shard_count is not None and args.integer(shard_count, what, "shard_count") != size:
        raise FusionError(
            f"{what}: shard_count {shard_count} must equal the {size} devices of {pt.name}"
        )
    n = t.shape[s]
    if n % size or (not tiled and n != size):
        need = f"equal to the {size} devices" if not tiled else f"divisible by the {size} devices"
        raise FusionError(
            f"{what}: scatter_dim {s} of {t.name}{list(t.shape)} has extent {n}; it must be "
            f"{need} of {pt.name}"
        )
    rest = _without(v, pt)
    k = len(rest)
    # Sharded on the scatter axis, the reduction of partial sums is one ReduceScatter.
    r = declare(_reduced(trace, v, pt, op, what), trace.mesh, {**leading(rest), k + s: pt})
    shape = list(r.shape)
    shape[k + s : k + s + 1] = [size, n // size]
    r = declare(ops.reshape(r, shape), trace.mesh, {**leading(rest), k + s: pt})
    varying = v.varying  # pt's leading axis comes back where it was
    j = varying.index(pt)
    r = _move(trace, r, k + s, j, leading(varying))
    if not tiled:
        shape = list(r.shape)
        del shape[len(varying) + s]
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
    torch_xla's ordinal within the axis); in the global view an iota over the axis's
    devices, sharded on it, so each device computes its own index."""
    what = "axis_index"
    trace = active_trace(what)
    pt = mesh_axis(trace.mesh, axis, what)
    with trace.fusion:  # the global tensor; inside fn the local program is active
        index = declare(ops.iota(axis_size(trace.mesh, pt), DType.int32), trace.mesh, {0: pt})
    return trace.bind(None, Local(index, (pt,)))


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
