"""Ops that move data without arithmetic: set, broadcast, expand, reshape, take."""

from __future__ import annotations

import math
from collections.abc import Sequence

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import CACHE_OPS, Expr, LoadStoreOp
from fuserlite.ir.sharding import placement
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import IterType
from fuserlite.ops.common import X, check_rank, check_tensor, data_axes, like, new_axis, shape_text
from fuserlite.ops.cost import MOVES_DATA
from fuserlite.ops.forms import Template
from fuserlite.ops.registry import Category, LocalRule, Op, Param, Sharding, define
from fuserlite.plan.permute import chunk_sources

__all__ = ["set", "broadcast", "expand", "reshape", "take"]  # the builders of its ops


# -- vector-Jacobian products (OpDef.vjp): (expr, operands, outputs, cotangents) ------
def _set_vjp(expr, operands, outputs, grads):
    return [grads[0]]  # a copy; its resharding is the backward's (the gradient's placement)


def _broadcast_vjp(expr, operands, outputs, grads):
    from fuserlite.ops.movement import squeeze  # movement builds on these views

    flags = expr.attrs["flags"]
    inserted = [k for k, f in enumerate(flags) if f]
    return [squeeze(grads[0], inserted) if inserted else grads[0]]


def _expand_vjp(expr, operands, outputs, grads):
    from fuserlite.ops.gradients import unbroadcast

    return [unbroadcast(grads[0], operands[0].shape)]


def _reshape_vjp(expr, operands, outputs, grads):
    return [reshape(grads[0], list(operands[0].shape))]


def _take_vjp(expr, operands, outputs, grads):
    """Each row of x gets the sum of the output rows taken from it: a take of the
    cotangent's rows (a zero row appended for rows never taken) per repetition."""
    from fuserlite.ops.gradients import zeros
    from fuserlite.ops.movement import cat
    from fuserlite.ops.pointwise import add

    (x,), (g,) = operands, grads
    n, indices = x.shape[0], expr.attrs["indices"]
    taken: dict[int, list[int]] = {}
    for k, i in enumerate(indices):
        taken.setdefault(i, []).append(k)
    depth = max(len(ks) for ks in taken.values())
    if depth == 1 and len(taken) == n:  # a permutation of the rows
        return [take(g, [taken[i][0] for i in range(n)])]
    zero_row = len(indices)
    padded = cat([g, zeros(g, [1, *g.shape[1:]])], 0)
    total = None
    for r in range(depth):
        rows = [ks[r] if r < len(ks) else zero_row for ks in (taken.get(i, []) for i in range(n))]
        part = take(padded, rows)
        total = part if total is None else add(total, part)
    return [total]


@define(
    Template("Set( {x}[, cache_op={cache_op:ident}] )"),
    (X, Param("cache_op", "ident", required=False, choices=CACHE_OPS, keyword=True)),
    Category.POINTWISE,
    attrs=("cache_op",),
    expr_class=LoadStoreOp,
    vjp=_set_vjp,
    cost=MOVES_DATA,
    local=LocalRule.same,
)
def set(x: TensorView, cache_op: str | None = None) -> TensorView:  # noqa: A001 - nvFuser's name
    """A copy of x; between different shardings, a resharding. `cache_op` is nvFuser's
    load cache hint (Unspecified, AllLevels, Streaming, Global)."""
    x = check_tensor(x, "set")
    if cache_op is not None and cache_op not in CACHE_OPS:
        raise args.fail("set", "cache_op", f"None or one of {', '.join(CACHE_OPS)}", cache_op)
    out = like(x)
    LoadStoreOp(out, x, cache_op)
    return out


def _broadcast_axes(expr: Expr, position: int) -> dict[int, int]:
    """The input's axes onto the output axes whose flag is False."""
    kept = [c for c, f in enumerate(expr.attrs["flags"]) if not f]
    return dict(zip(expr.inputs[position].data_positions(), kept))


@define(
    Template("broadcast( {x}, flags = {flags:bools} )"),
    (X, Param("flags", "bools")),
    Category.POINTWISE,
    attrs=("flags",),
    axis_map=_broadcast_axes,
    vjp=_broadcast_vjp,
    cost=MOVES_DATA,
    local=LocalRule.flags,
)
def broadcast(x: TensorView, flags: Sequence[bool]) -> TensorView:
    """Insert broadcast axes where flags are True; False flags consume x's axes in order."""
    x = check_tensor(x, "broadcast")
    check_rank(flags, "broadcast", "flags")
    flags = args.booleans(flags, "broadcast", "flags")
    src = data_axes(x)
    if flags.count(False) != len(src):
        raise FusionError(
            f"broadcast: {shape_text(x)} has {len(src)} axes but flags {flags} keep "
            f"{flags.count(False)}; give one False per input axis"
        )
    it = iter(src)
    axes = []
    for f in flags:
        if f:
            axes.append(new_axis(1, IterType.BROADCAST))
        else:
            ax = next(it)
            axes.append(new_axis(ax.extent, ax.iter_type))
    out = TensorView(x.fusion, axes, x.dtype)
    Op("broadcast", [out], [x], flags=tuple(flags))
    return out


@define(
    Template("expand( {x}, {shape:ints} )"),
    (X, Param("shape", "ints")),
    attrs=("shape",),
    vjp=_expand_vjp,
    cost=MOVES_DATA,
    local=LocalRule.shape,
)
def expand(x: TensorView, shape: Sequence[int]) -> TensorView:
    """Materialize broadcast axes to `shape` (-1 keeps an axis); other axes must match."""
    x = check_tensor(x, "expand")
    src = data_axes(x)
    check_rank(shape, "expand", "shape")
    shape = args.integers(shape, "expand", "shape", scalar_ok=True)
    if len(shape) != len(src):
        raise FusionError(
            f"expand: {shape_text(x)} has {len(src)} axes, shape {shape} has {len(shape)}"
        )
    axes = []
    for k, (ax, s) in enumerate(zip(src, shape)):
        if s == -1 or s == ax.extent:
            axes.append(new_axis(ax.extent, ax.iter_type))
        elif ax.is_broadcast and s >= 1:
            axes.append(new_axis(s))
        else:
            raise FusionError(
                f"expand: {shape_text(x)} axis {k} has extent {ax.extent} and is not a broadcast "
                f"axis; it cannot be expanded to {s}"
            )
    out = TensorView(x.fusion, axes, x.dtype)
    Op("expand", [out], [x], shape=tuple(a.extent for a in axes))
    return out


def reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Pair runs of source and destination axes whose extents multiply to the same size."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        gi, gj = [], []
        pi = pj = 1
        while True:
            if (pi <= pj or j >= len(dst)) and i < len(src):
                pi *= src[i]
                gi.append(i)
                i += 1
            elif j < len(dst):
                pj *= dst[j]
                gj.append(j)
                j += 1
            else:
                break
            if pi == pj:
                break
        groups.append((gi, gj))
    return groups


def _reshape_axes(expr: Expr, position: int) -> dict[int, int]:
    """The outermost axis of each group of axes a reshape splits or merges (so an outer
    sharding of a group stays local)."""
    producer = expr.inputs[position]
    p_data = producer.data_positions()
    src, dst = producer.shape, expr.output.shape
    groups = reshape_groups(src, dst)
    return {p_data[_outermost(i, src)]: _outermost(o, dst) for i, o in groups if i and o}


def _outermost(group: list[int], shape: tuple[int, ...]) -> int:
    """The group's first axis of extent above 1: axes of extent 1 before it hold no part of
    the group's rows, so an outer sharding of the group is an outer sharding of it."""
    return next((k for k in group if shape[k] != 1), group[0])


@define(
    Template("view( {x}, {shape:ints} )"),
    (X, Param("shape", "ints")),
    attrs=("shape",),
    axis_map=_reshape_axes,
    vjp=_reshape_vjp,
    cost=MOVES_DATA,
    local=LocalRule.shape,
)
def reshape(x: TensorView, shape: Sequence[int]) -> TensorView:
    """View x's data with another shape (one -1 is inferred)."""
    x = check_tensor(x, "reshape")
    total = math.prod(x.shape)
    check_rank(shape, "reshape", "shape")
    shape = args.integers(shape, "reshape", "shape", scalar_ok=True)
    if shape.count(-1) > 1:
        raise FusionError(f"reshape: at most one -1 in {shape}")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if known == 0 or total % known:
            raise FusionError(f"reshape: cannot view {shape_text(x)} as {shape}")
        shape[shape.index(-1)] = total // known
    if math.prod(shape) != total or any(s < 1 for s in shape):
        raise FusionError(f"reshape: cannot view {shape_text(x)} ({total} elements) as {shape}")
    axes = [new_axis(s, IterType.BROADCAST if s == 1 else IterType.ITERATION) for s in shape]
    out = TensorView(x.fusion, axes, x.dtype)
    Op("reshape", [out], [x], shape=tuple(shape))
    return out


def _take_axes(expr: Expr, position: int) -> dict[int, int]:
    """Every axis but the first in place; the rows it picks come from anywhere."""
    p = expr.inputs[position].data_positions()
    return {p[k]: k for k in range(1, len(p))}


def _whole_chunks(expr: Expr) -> tuple[int, ...] | None:
    """A take of whole chunks of x's sharded axis 0 (x complete): the source chunk of each
    chunk of the result (a block permutation)."""
    x = expr.inputs[0]
    if x.mesh is None:
        return None
    p = placement(x)
    if not p.shards or not p.shards[0] or not p.is_complete:
        return None
    return chunk_sources(x.shape[0], x.mesh.shape, p.shards[0], expr.attrs["indices"])


@define(
    Template("take( {x}, {indices:ints} )"),
    (X, Param("indices", "ints")),
    attrs=("indices",),
    axis_map=_take_axes,
    sharding=Sharding(permutes=_whole_chunks),
    vjp=_take_vjp,
    cost=MOVES_DATA,
    local=LocalRule.rows,
)
def take(x: TensorView, indices: Sequence[int]) -> TensorView:
    """Rows of x along axis 0: output row k is x[indices[k]] (numpy's take)."""
    x = check_tensor(x, "take")
    check_rank(x.shape, "take", "x")
    indices = args.integers(indices, "take", "indices", scalar_ok=True)
    src = data_axes(x)
    if not src:
        raise FusionError("take: x is 0-d; it needs an axis 0 to take rows from")
    n = src[0].extent
    if not indices or any(not 0 <= i < n for i in indices):
        raise FusionError(
            f"take: indices {indices} must be a non-empty list of rows of {shape_text(x)} "
            f"(each in 0..{n - 1})"
        )
    first = new_axis(len(indices), IterType.BROADCAST if len(indices) == 1 else IterType.ITERATION)
    axes = [first] + [new_axis(ax.extent, ax.iter_type) for ax in src[1:]]
    out = TensorView(x.fusion, axes, x.dtype)
    Op("take", [out], [x], indices=tuple(indices))
    return out
