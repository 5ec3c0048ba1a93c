"""Ops that move data between axes: permute, squeeze, select, slice, cat; and the
composites transpose, unsqueeze (a broadcast), flatten (a reshape), split and chunk
(slices).

Sharding: an axis an op keeps maps onto its output axis and passes through; an axis
it squeezes, selects from, slices or concatenates maps nowhere, so a sharding there
makes insert-reshardings gather the input first (a sliced axis that happens to match
one device's shard is not recognised as local).

permute is pointwise: output element (i0, i1, ...) is the input element at the
permuted coordinates, which its axis map says (output axis k reads input axis
dims[k]); so the pointwise scheduler, the kernel runner and the CUDA fuse it with
its neighbours as nvFuser's transpose-capable pointwise scheduler does, and a
sharded axis moves with its logical axis: no communication.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import IterType, result_type
from fuserlite.ops.common import (
    X,
    check_rank,
    check_tensor,
    data_axes,
    fusion_of,
    new_axis,
    shape_text,
)
from fuserlite.ops.cost import MOVES_DATA
from fuserlite.ops.forms import Template
from fuserlite.ops.gradients import zeros
from fuserlite.ops.registry import AxisMap, Category, LocalRule, Op, Param, composite, define
from fuserlite.ops.views import broadcast, reshape

# The builders of its ops and composites.
__all__ = ["permute", "squeeze", "select", "slice", "cat"]
__all__ += ["transpose", "unsqueeze", "flatten", "split", "chunk"]


# -- vector-Jacobian products (OpDef.vjp): (expr, operands, outputs, cotangents) ------
def _permute_vjp(expr, operands, outputs, grads):
    dims = expr.attrs["dims"]
    return [permute(grads[0], [dims.index(k) for k in range(len(dims))])]


def _squeeze_vjp(expr, operands, outputs, grads):
    return [broadcast(grads[0], list(expr.attrs["flags"]))]


def _select_vjp(expr, operands, outputs, grads):
    (x,), (g,) = operands, grads
    axis, index = expr.attrs["axis"], expr.attrs["index"]
    return [_placed(unsqueeze(g, axis), axis, index, x.shape[axis])]


def _slice_vjp(expr, operands, outputs, grads):
    (x,), (g,) = operands, grads
    for k, (start, _, step) in enumerate(expr.attrs["ranges"]):
        if step > 1:  # every step-th element: zeros between them
            spaced = list(g.shape)
            spaced[k : k + 1] = [g.shape[k], step - 1]
            gaps = cat([unsqueeze(g, k + 1), zeros(g, spaced)], k + 1)
            shape = list(g.shape)
            shape[k] *= step
            g = _cut(reshape(gaps, shape), k, 0, min(shape[k], x.shape[k] - start))
        g = _placed(g, k, start, x.shape[k])
    return [g]


def _cat_vjp(expr, operands, outputs, grads):
    axis, g, start = expr.attrs["axis"], grads[0], 0
    pieces = []
    for t in operands:
        pieces.append(_cut(g, axis, start, start + t.shape[axis]))
        start += t.shape[axis]
    return pieces


def _cut(g: TensorView, axis: int, start: int, stop: int) -> TensorView:
    """g[start:stop] on `axis` (g itself when that is all of it)."""
    if (start, stop) == (0, g.shape[axis]):
        return g
    starts = [start if k == axis else 0 for k in range(len(g.shape))]
    stops = [stop if k == axis else e for k, e in enumerate(g.shape)]
    return slice(g, starts, stops)


def _placed(g: TensorView, axis: int, start: int, extent: int) -> TensorView:
    """g at `start` of an axis of `extent`, zeros before and after it."""
    before, after = start, extent - start - g.shape[axis]
    pieces = []
    for size in (before, None, after):
        if size is None:
            pieces.append(g)
        elif size:
            pieces.append(zeros(g, [size if k == axis else e for k, e in enumerate(g.shape)]))
    return cat(pieces, axis) if len(pieces) > 1 else g


def _axis(x: TensorView, axis: object, op: str, arg: str) -> int:
    """An axis of x (negative counts from the end) as 0..rank-1, or a clear error."""
    n = len(x.shape)
    k = args.integer(axis, op, arg)
    if not -n <= k < n:
        raise FusionError(f"{op}: {shape_text(x)} has {n} axes; {arg} {k} is out of range")
    return k % n


def _permute_axes(expr: Expr, position: int) -> dict[int, int]:
    """Input axis dims[k] onto output axis k."""
    p = expr.inputs[position].data_positions()
    return {p[src]: k for k, src in enumerate(expr.attrs["dims"])}


@define(
    # nvFuser prints Set.Permute and keeps the order in the root -> logical domain; the
    # dims are printed too, so that the text alone reads back.
    Template("Set.Permute( {x}, dims = {dims:ints} )"),
    (X, Param("dims", "ints")),
    Category.POINTWISE,
    attrs=("dims",),
    axis_map=_permute_axes,
    vjp=_permute_vjp,
    cost=MOVES_DATA,
    local=LocalRule.dims,
)
def permute(x: TensorView, dims: Sequence[int]) -> TensorView:
    """x with its axes reordered: output axis k is x's axis dims[k] (negative from the end)."""
    x = check_tensor(x, "permute")
    check_rank(dims, "permute", "dims")
    src = data_axes(x)
    n = len(src)
    given = args.integers(dims, "permute", "dims", scalar_ok=False)
    order = [d % n if -n <= d < n else None for d in given] if n else list(given)
    if len(given) != n or None in order or sorted(order) != list(range(n)):
        raise FusionError(
            f"permute: dims {given} is not a permutation of the {n} axes of {shape_text(x)}; "
            f"give each of 0..{n - 1} once"
        )
    out = TensorView(x.fusion, [new_axis(src[d].extent, src[d].iter_type) for d in order], x.dtype)
    Op("permute", [out], [x], dims=tuple(order))
    return out


@composite((X, Param("dim0", "int"), Param("dim1", "int")))
def transpose(x: TensorView, dim0: int, dim1: int) -> TensorView:
    """x with axes dim0 and dim1 swapped (a permute)."""
    x = check_tensor(x, "transpose")
    a, b = _axis(x, dim0, "transpose", "dim0"), _axis(x, dim1, "transpose", "dim1")
    order = list(range(len(x.shape)))
    order[a], order[b] = order[b], order[a]
    return permute(x, order)


# -- squeeze, select, slice, cat: evaluated, a kernel each (numpy views) -------------
def _kept_map(kept_of: Callable[[Expr], list[int | None]]) -> AxisMap:
    """An axis map sending input data axis i to output axis kept_of(expr)[i]; a None
    maps nowhere (squeezed, selected, sliced or concatenated), so a sharding there
    reshards the input instead of passing through."""

    def axis_map(expr: Expr, position: int) -> dict[int, int]:
        p = expr.inputs[position].data_positions()
        return {p[i]: k for i, k in enumerate(kept_of(expr)) if k is not None}

    return axis_map


def _squeeze_targets(expr: Expr) -> list[int | None]:
    flags = expr.attrs["flags"]
    return [None if f else sum(not g for g in flags[:i]) for i, f in enumerate(flags)]


@define(
    Template("squeeze( {x}, flags = {flags:bools} )"),
    (X, Param("dims", "axes", read=lambda e: [i for i, f in enumerate(e.attrs["flags"]) if f])),
    attrs=("flags",),
    axis_map=_kept_map(_squeeze_targets),
    vjp=_squeeze_vjp,
    cost=MOVES_DATA,
    local=LocalRule.squeezed,
)
def squeeze(x: TensorView, dims: int | Sequence[int]) -> TensorView:
    """x without its extent-1 axes `dims` (negative from the end)."""
    x = check_tensor(x, "squeeze")
    src = data_axes(x)
    check_rank(dims, "squeeze", "dims")
    dims = {
        _axis(x, d, "squeeze", "dims")
        for d in args.integers(dims, "squeeze", "dims", scalar_ok=True)
    }
    for d in sorted(dims):
        if src[d].extent != 1:
            raise FusionError(
                f"squeeze: axis {d} of {shape_text(x)} has extent {src[d].extent}; only an "
                "extent-1 axis can be squeezed"
            )
    flags = tuple(k in dims for k in range(len(src)))
    out = TensorView(
        x.fusion, [new_axis(a.extent, a.iter_type) for a, f in zip(src, flags) if not f], x.dtype
    )
    Op("squeeze", [out], [x], flags=flags)
    return out


def _select_targets(expr: Expr) -> list[int | None]:
    axis, n = expr.attrs["axis"], len(expr.inputs[0].data_positions())
    return [None if i == axis else i - (i > axis) for i in range(n)]


@define(
    # nvFuser prints the selected IterDomain (axis = iS1{4}); its position reads back.
    Template("select( {x}, axis = {axis:int}, index = {index:int} )"),
    (X, Param("axis", "int"), Param("index", "int")),
    attrs=("axis", "index"),
    axis_map=_kept_map(_select_targets),
    vjp=_select_vjp,
    cost=MOVES_DATA,
    local=LocalRule.axis,
)
def select(x: TensorView, axis: int, index: int) -> TensorView:
    """x at `index` of axis `axis`, which the output drops (negative counts from the end)."""
    x = check_tensor(x, "select")
    a = _axis(x, axis, "select", "axis")
    n = x.shape[a]
    i = args.integer(index, "select", "index")
    if not -n <= i < n:
        raise FusionError(
            f"select: index {i} is out of range for axis {a} of {shape_text(x)} (extent {n})"
        )
    src = data_axes(x)
    out = TensorView(
        x.fusion, [new_axis(ax.extent, ax.iter_type) for k, ax in enumerate(src) if k != a], x.dtype
    )
    Op("select", [out], [x], axis=a, index=i % n)
    return out


def _slice_targets(expr: Expr) -> list[int | None]:
    """Unsliced axes in place; a sliced axis maps nowhere."""
    shape = expr.inputs[0].shape
    return [k if r == (0, shape[k], 1) else None for k, r in enumerate(expr.attrs["ranges"])]


def _ranges_read(field: int) -> Callable[[Expr], list[int]]:
    return lambda e: [r[field] for r in e.attrs["ranges"]]


@define(
    Template("slice( {x}, {ranges:ranges} )"),
    (
        X,
        Param("starts", "ints", read=_ranges_read(0)),
        Param("stops", "ints", read=_ranges_read(1)),
        Param("steps", "ints", required=False, read=_ranges_read(2)),
    ),
    attrs=("ranges",),
    axis_map=_kept_map(_slice_targets),
    vjp=_slice_vjp,
    cost=MOVES_DATA,
    local=LocalRule.ranges,
)
def slice(  # noqa: A001 - nvFuser's name
    x: TensorView, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int] | None = None
) -> TensorView:
    """x[start:stop:step] on every axis (static; negative start/stop count from the end)."""
    x = check_tensor(x, "slice")
    n = len(x.shape)
    lists = {"starts": starts, "stops": stops, "steps": [1] * n if steps is None else steps}
    for name, values in lists.items():
        check_rank(values, "slice", name)
        lists[name] = args.integers(values, "slice", name)
        if len(lists[name]) != n:
            raise FusionError(
                f"slice: {name} has {len(lists[name])} items but {shape_text(x)} has {n} axes; "
                "give one per axis"
            )
    ranges = []
    for k, (a, b, s) in enumerate(zip(lists["starts"], lists["stops"], lists["steps"])):
        extent = x.shape[k]
        start, stop = a + extent if a < 0 else a, b + extent if b < 0 else b
        if s < 1:
            raise FusionError(
                f"slice: step {s} on axis {k} of {shape_text(x)}; a step must be >= 1"
            )
        if not 0 <= start < stop <= extent:
            raise FusionError(
                f"slice: [{a}:{b}] on axis {k} of {shape_text(x)} (extent {extent}) is out of "
                "range or empty; give 0 <= start < stop <= extent (negative counts from the end)"
            )
        ranges.append((start, stop, s))
    axes = [new_axis(-(-(b - a) // s)) for a, b, s in ranges]
    axes = [new_axis(1, IterType.BROADCAST) if ax.extent == 1 else ax for ax in axes]
    out = TensorView(x.fusion, axes, x.dtype)
    Op("slice", [out], [x], ranges=tuple(ranges))
    return out


def _cat_targets(expr: Expr) -> list[int | None]:
    axis, n = expr.attrs["axis"], len(expr.output.shape)
    return [None if k == axis else k for k in range(n)]


@define(
    # nvFuser pads each input to the output's extent first (pad( ... )); one cat here.
    Template("cat( {tensors:tensors}, {axis:int} )"),
    (Param("tensors", "tensors"), Param("axis", "int")),
    attrs=("axis",),
    axis_map=_kept_map(_cat_targets),
    vjp=_cat_vjp,
    cost=MOVES_DATA,
    local=LocalRule.axis,
)
def cat(tensors: Sequence[TensorView], axis: int) -> TensorView:
    """The tensors joined along `axis`; every other axis must agree (dtypes promote)."""
    if not args.is_sequence(tensors) or not tensors:
        raise args.fail("cat", "tensors", "a non-empty list of TensorViews", tensors)
    tensors = [check_tensor(t, "cat", f"tensors[{k}]") for k, t in enumerate(tensors)]
    fusion_of(*tensors)
    first = tensors[0]
    a = _axis(first, axis, "cat", "axis")
    for t in tensors[1:]:
        same = len(t.shape) == len(first.shape) and all(
            e == f for k, (e, f) in enumerate(zip(t.shape, first.shape)) if k != a
        )
        if not same:
            raise FusionError(
                f"cat: {shape_text(t)} does not match {shape_text(first)} outside axis {a}; "
                "every other axis must have the same extent"
            )
    src = data_axes(first)
    total = sum(t.shape[a] for t in tensors)
    axes = [new_axis(ax.extent, ax.iter_type) for ax in src]
    axes[a] = new_axis(total, IterType.BROADCAST if total == 1 else IterType.ITERATION)
    out = TensorView(first.fusion, axes, result_type([t.dtype for t in tensors], []))
    Op("cat", [out], tensors, axis=a)
    return out


# -- composites ------------------------------------------------------------------------
@composite((X, Param("dim", "int")))
def unsqueeze(x: TensorView, dim: int) -> TensorView:
    """x with an extent-1 axis inserted at `dim` (a broadcast)."""
    x = check_tensor(x, "unsqueeze")
    n = len(x.shape)
    d = args.integer(dim, "unsqueeze", "dim")
    if not -(n + 1) <= d <= n:
        raise FusionError(
            f"unsqueeze: {shape_text(x)} has {n} axes; dim {d} is out of range (-{n + 1}..{n})"
        )
    d %= n + 1
    return broadcast(x, [k == d for k in range(n + 1)])


@composite((X, Param("start_dim", "int", required=False), Param("end_dim", "int", required=False)))
def flatten(x: TensorView, start_dim: int = 0, end_dim: int = -1) -> TensorView:
    """x with axes start_dim..end_dim merged into one (a reshape)."""
    x = check_tensor(x, "flatten")
    if not x.shape:
        return reshape(x, [1])
    a, b = _axis(x, start_dim, "flatten", "start_dim"), _axis(x, end_dim, "flatten", "end_dim")
    if a > b:
        raise FusionError(f"flatten: start_dim {a} is after end_dim {b} of {shape_text(x)}")
    shape = list(x.shape)
    return reshape(x, shape[:a] + [math.prod(shape[a : b + 1])] + shape[b + 1 :])


@composite((X, Param("sizes", "ints"), Param("dim", "int", required=False)))
def split(x: TensorView, sizes: Sequence[int], dim: int = 0) -> tuple[TensorView, ...]:
    """x cut along `dim` into consecutive pieces of `sizes` (slices; they sum to the extent)."""
    x = check_tensor(x, "split")
    d = _axis(x, dim, "split", "dim")
    sizes = args.integers(sizes, "split", "sizes", minimum=1)
    if sum(sizes) != x.shape[d]:
        raise FusionError(
            f"split: sizes {sizes} add up to {sum(sizes)}, axis {d} of {shape_text(x)} has "
            f"{x.shape[d]}"
        )
    pieces, start = [], 0
    for size in sizes:
        starts = [start if k == d else 0 for k in range(len(x.shape))]
        stops = [start + size if k == d else e for k, e in enumerate(x.shape)]
        pieces.append(slice(x, starts, stops))
        start += size
    return tuple(pieces)


@composite((X, Param("chunks", "int"), Param("dim", "int", required=False)))
def chunk(x: TensorView, chunks: int, dim: int = 0) -> tuple[TensorView, ...]:
    """x cut along `dim` into `chunks` pieces of ceil(extent / chunks) (the last smaller,
    fewer pieces where they run out, as torch.chunk)."""
    x = check_tensor(x, "chunk")
    d = _axis(x, dim, "chunk", "dim")
    n = args.integer(chunks, "chunk", "chunks", minimum=1)
    extent = x.shape[d]
    size = -(-extent // n)
    return split(x, [min(size, extent - s) for s in range(0, extent, size)], d)
