"""Contractions: matmul and linear (evaluated whole; each its own kernel).

The output keeps the contracted axis as a trailing reduction axis `rk`, so a
sharded contraction axis makes the output partial (rDIDx), completed by a sum.
"""

from __future__ import annotations

from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import takes_place_of
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import IterType, ReductionOpType
from fuserlite.ops.common import X, check_tensor, data_axes, fusion_of, new_axis, shape_text
from fuserlite.ops.forms import Template
from fuserlite.ops.pointwise import add, promote
from fuserlite.ops.registry import Op, Param, Rewrite, Sharding, define

__all__ = ["matmul", "linear"]  # the builders of its ops


def _check_contraction(
    what: str, a: TensorView, a_arg: str, w: TensorView, w_arg: str, k_axis: int
) -> None:
    """a[..., k] against a 2-D w whose axis `k_axis` is k: say which of these fails."""
    layout = "[k, n]" if k_axis == 0 else "[n, k]"
    if len(a.shape) < 1:
        raise FusionError(f"{what}: {a_arg} is 0-d; it needs a last axis k to contract")
    if len(w.shape) != 2:
        raise FusionError(
            f"{what}: {w_arg} must be 2-D {layout}, it has {len(w.shape)} axes; a batched "
            f"(or 1-D) {w_arg} is not supported, reshape it to 2-D"
        )
    if a.shape[-1] != w.shape[k_axis]:
        raise FusionError(
            f"{what}: the contracted extents differ: {a_arg}'s last axis has {a.shape[-1]}, "
            f"axis {k_axis} of {w_arg} ({layout}) has {w.shape[k_axis]}"
        )


def _contracted(a: TensorView, n: int) -> list:
    """The output axes of a[..., k] times a weight with n output features: [..., n, rk]."""
    axes = [new_axis(ax.extent, ax.iter_type) for ax in data_axes(a)[:-1]]
    return axes + [new_axis(n), new_axis(a.shape[-1], IterType.REDUCTION)]


def _operand_index(expr: Expr, producer: TensorView) -> int | None:
    return next((i for i, t in enumerate(expr.inputs) if t is producer), None)


def _matmul_axes(expr: Expr, producer: TensorView) -> dict[int, int]:
    """a[..., m, k] -> [..., m, n, rk]: batch and m in place, k onto rk; b[k, n]: k onto
    rk, n onto n."""
    *batch, n, rk = range(len(expr.output.domain.logical))
    p = producer.data_positions()
    k = _operand_index(expr, producer)
    if k == 0:
        return {**dict(zip(p[:-1], batch)), p[-1]: rk}
    return {} if k is None else {p[0]: rk, p[1]: n}


def _linear_axes(expr: Expr, producer: TensorView) -> dict[int, int]:
    """x[..., k] -> [..., n, rk]: batch in place, k onto rk; weight[n, k]: n onto n, k
    onto rk; bias[n] onto n."""
    *batch, n, rk = range(len(expr.output.domain.logical))
    p = producer.data_positions()
    k = _operand_index(expr, producer)
    if k == 0:
        return {**dict(zip(p[:-1], batch)), p[-1]: rk}
    if k == 1:
        return {p[0]: n, p[1]: rk}
    return {} if k is None else {p[0]: n}


_PARTIAL_SUMS = ReductionOpType.sum


@define(
    Template("matmul({a},\n          {b})"),
    (Param("a", "tensor"), Param("b", "tensor")),
    axis_map=_matmul_axes,
    # Tensor parallelism keeps weights in place and moves activations.
    sharding=Sharding(partial=_PARTIAL_SUMS, prefer=(1,)),
)
def matmul(a: TensorView, b: TensorView) -> TensorView:
    """a[..., m, k] @ b[k, n] -> [..., m, n] (with a trailing reduction axis rk)."""
    a, b = check_tensor(a, "matmul", "a"), check_tensor(b, "matmul", "b")
    fusion_of(a, b)
    what = f"matmul: {shape_text(a)} @ {shape_text(b)}"
    _check_contraction(what, a, "a", b, "b", k_axis=0)
    out = TensorView(a.fusion, _contracted(a, b.shape[1]), promote(a, b, "mul"))
    Op("matmul", [out], [a, b])
    return out


def bias_after_partial_sums(linear: Expr) -> Rewrite | None:
    """linear(x, w, bias) that writes partial sums (its contraction axis is sharded)
    adds the bias once, to the completed value: linear(x, w), then `add(out, bias)`
    takes out's place in its uses (nvFuser's decomposition of a row-parallel linear).
    None for a linear without a bias."""
    if len(linear.inputs) != 3:
        return None
    out, bias = linear.output, linear.inputs[2]
    linear.inputs = linear.inputs[:2]
    bias.uses = [u for u in bias.uses if u is not linear]
    users = list(dict.fromkeys(out.uses))
    made = len(out.fusion.tensors_created)
    result = add(out, bias)  # broadcasts the bias to out's rank first
    Expr.replace_uses(out, result, users)
    takes_place_of(result, out)
    exprs = [t.definition for t in out.fusion.tensors_created[made:]]
    return Rewrite(out, result, exprs)


@define(
    Template("linear({x},\n          {weight}[,\n          {bias}])"),
    (X, Param("weight", "tensor"), Param("bias", "tensor", required=False)),
    axis_map=_linear_axes,
    sharding=Sharding(partial=_PARTIAL_SUMS, prefer=(1,), when_partial=bias_after_partial_sums),
)
def linear(x: TensorView, weight: TensorView, bias: TensorView | None = None) -> TensorView:
    """x[..., k] @ weight[n, k]^T (+ bias[n]) -> [..., n]; the product keeps a trailing rk axis."""
    x, weight = check_tensor(x, "linear"), check_tensor(weight, "linear", "weight")
    fusion_of(x, weight, *([check_tensor(bias, "linear", "bias")] if bias is not None else []))
    what = f"linear: {shape_text(x)} and weight {shape_text(weight)}"
    _check_contraction(what, x, "x", weight, "weight", k_axis=1)
    n = weight.shape[0]
    if bias is not None and bias.shape != (n,):
        raise FusionError(f"linear: bias {shape_text(bias)} must have shape [{n}]")
    out = TensorView(x.fusion, _contracted(x, n), promote(x, weight, "mul"))
    if bias is not None:  # the type of the product plus the bias
        out.dtype = promote(out, bias, "add")
    # One op with the bias, so that sharding sees one linear; where the contraction
    # axis is sharded, insert-reshardings adds the bias once, after the reduction
    # (bias_after_partial_sums, the op's sharding rule).
    Op("linear", [out], [x, weight] + ([bias] if bias is not None else []))
    return out
