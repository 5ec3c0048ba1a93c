"""Reductions: sum, max and min over some axes, which stay in the output as reduction axes."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType, ReductionOpType
from fuserlite.ops.common import X, check_rank, check_tensor, data_axes, new_axis, shape_text
from fuserlite.ops.forms import Template
from fuserlite.ops.registry import LocalRule, Op, Param, Sharding, define
from fuserlite.ops.views import broadcast, expand

__all__ = ["sum", "max", "min"]  # the builders of its ops


def is_reduction(expr: Expr) -> bool:
    """True for a sum, max or min (the ops of this module)."""
    return expr.op_name in __all__


def reduced_axes(expr: Expr) -> tuple[int, ...]:
    """The axes a reduction reduces: its output's reduction axes, which stand where the
    reduced data axes of its input stood."""
    return tuple(k for k, ax in enumerate(expr.output.domain.logical) if ax.is_reduction)


def _normalize_axes(x: TensorView, axes, op: str) -> list[int]:
    n = len(x.shape)
    check_rank(axes, op, "axes")
    axes = list(range(n)) if axes is None else args.integers(axes, op, "axes", scalar_ok=True)
    out = []
    for a in axes:
        if not -n <= a < n:
            raise FusionError(f"{op}: {shape_text(x)} has {n} axes; axis {a!r} is out of range")
        out.append(a % n)
    if len(out) != len(builtins.set(out)):
        raise FusionError(f"{op}: axis listed twice in {list(axes)}")
    return sorted(out)


def _reduction(name: str, x: TensorView, axes, keepdim: bool) -> TensorView:
    x = check_tensor(x, name)
    red = _normalize_axes(x, axes, name)
    keepdim = args.boolean(keepdim, name, "keepdim")
    src = data_axes(x)
    out_axes = [
        new_axis(ax.extent, IterType.REDUCTION if k in red else ax.iter_type)
        for k, ax in enumerate(src)
    ]
    # As in torch, a sum of bools or integers is an int64 count or total; max keeps the dtype.
    sums_to_int64 = name == "sum" and not x.dtype.is_float
    out = TensorView(x.fusion, out_axes, DType.int64 if sums_to_int64 else x.dtype)
    Op(name, [out], [x], init=ReductionOpType[name].identity(out.dtype))
    if keepdim:
        return broadcast(out, [k in red for k in range(len(src))])
    return out


def _spread(g: TensorView, expr: Expr) -> TensorView:
    """The cotangent of a reduction's output broadcast back over the reduced axes."""
    reduced = builtins.set(reduced_axes(expr))
    rank = len(expr.output.domain.logical)
    flags = [k in reduced for k in range(rank)]
    return broadcast(g, flags) if any(flags) else g


def _sum_vjp(expr, operands, outputs, grads):
    x = operands[0]
    return [expand(_spread(grads[0], expr), list(x.shape))]


def _max_vjp(expr, operands, outputs, grads):
    """g to the elements equal to the maximum (or the minimum), split evenly among ties
    (torch's amax and amin)."""
    from fuserlite.ops.pointwise import div, lt, mul, where

    x = operands[0]
    axes = list(reduced_axes(expr))
    top = _spread(outputs[0], expr)
    # x <= max: not below it is equal to it; x >= min: not above it is equal to it
    winners = where(lt(x, top) if expr.op_name == "max" else lt(top, x), 0.0, 1.0)
    share = div(_spread(grads[0], expr), _spread(sum(winners, axes), expr))
    return [mul(winners, share)]


_PARAMS = (
    X,
    Param("axes", "axes", required=False, read=reduced_axes),
    Param("keepdim", "bool", required=False, read=lambda e: None),  # written as a broadcast
)
_FORM = "reduction( {{x}}, op = {op}, initial value = {{init:typed}}, allreduce = false )"


@define(
    Template(_FORM.format(op="add")),
    _PARAMS,
    attrs=("init",),
    sharding=Sharding(partial=ReductionOpType.sum),
    vjp=_sum_vjp,
    rowwise=True,
    local=LocalRule.reduced,
)
def sum(
    x: TensorView, axes: int | Sequence[int] | None = None, keepdim: bool = False
) -> TensorView:  # noqa: A001
    """Sum over `axes` (all axes by default)."""
    return _reduction("sum", x, axes, keepdim)


def _extreme(name: str, x: TensorView, axes, keepdim: bool) -> TensorView:
    """max or min over axes; a tensor where the axes go is the elementwise op's call."""
    if isinstance(axes, TensorView):
        elementwise = {"max": "maximum", "min": "minimum"}[name]
        raise FusionError(
            f"{name}(x, axes) is a reduction; use fl.{elementwise}(a, b) for an elementwise {name}"
        )
    return _reduction(name, x, axes, keepdim)


@define(
    Template(_FORM.format(op="max")),
    _PARAMS,
    attrs=("init",),
    sharding=Sharding(partial=ReductionOpType.max),
    vjp=_max_vjp,
    rowwise=True,
    local=LocalRule.reduced,
)
def max(
    x: TensorView, axes: int | Sequence[int] | None = None, keepdim: bool = False
) -> TensorView:  # noqa: A001
    """Max over `axes` (all by default); for an elementwise max use `maximum`."""
    return _extreme("max", x, axes, keepdim)


@define(
    Template(_FORM.format(op="min")),
    _PARAMS,
    attrs=("init",),
    sharding=Sharding(partial=ReductionOpType.min),
    local=LocalRule.reduced,
    vjp=_max_vjp,
)
def min(
    x: TensorView, axes: int | Sequence[int] | None = None, keepdim: bool = False
) -> TensorView:  # noqa: A001
    """Min over `axes` (all by default); for an elementwise min use `minimum`."""
    return _extreme("min", x, axes, keepdim)
