"""Contractions: matmul, linear and grouped_mm (evaluated whole; each its own kernel).

The output keeps the contracted axis as a trailing reduction axis `rk`, so a
sharded contraction axis makes the output partial (rDIDx), completed by a sum.
Batch axes broadcast as in numpy (matmul) or stack (linear's weight batch axes
come first, as nvFuser's linear with a device-batched weight `[D, n/D, k]`): a
sharded batch, row or output-feature axis passes through, the axis maps say so.

grouped_mm is nvFuser's (torch._grouped_mm) for mixture-of-experts: the rows of
mat1, sorted by expert, multiplied by their group's matrix; `offsets` (int, one per
group) are where each group's rows end. Which rows a group holds is data, so the
group axis is never sharded (an expert-sharded weight is gathered) and a device
holding some of the rows finds their groups from their global row indices.
"""

from __future__ import annotations

import math

from fuserlite.ir.domain import IterDomain
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import takes_place_of
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import IterType, ReductionOpType
from fuserlite.ops.common import X, check_tensor, data_axes, fusion_of, new_axis, shape_text
from fuserlite.ops.cost import contraction, grouped
from fuserlite.ops.forms import Template
from fuserlite.ops.gradients import unbroadcast
from fuserlite.ops.movement import squeeze, transpose, unsqueeze
from fuserlite.ops.pointwise import add, promote
from fuserlite.ops.reductions import sum as sum_of
from fuserlite.ops.registry import LocalRule, Op, Param, Rewrite, Sharding, define
from fuserlite.ops.views import broadcast, reshape

__all__ = ["matmul", "linear", "grouped_mm"]  # the builders of its ops


def _check_contraction(
    what: str, a: TensorView, a_arg: str, w: TensorView, w_arg: str, k_axis: int
) -> None:
    """a[..., k] against w[..., k, n] (k_axis -2) or w[..., n, k] (k_axis -1), both at
    least 1-D and 2-D: say which of these fails."""
    layout = "[..., k, n]" if k_axis == -2 else "[..., n, k]"
    if len(a.shape) < 1:
        raise FusionError(f"{what}: {a_arg} is 0-d; it needs a last axis k to contract")
    if len(w.shape) < 2:
        raise FusionError(
            f"{what}: {w_arg} must be {layout} (2-D or more), it has {len(w.shape)} axes; "
            f"a 1-D {w_arg} is not supported, broadcast it to 2-D"
        )
    if a.shape[-1] != w.shape[k_axis]:
        raise FusionError(
            f"{what}: the contracted extents differ: {a_arg}'s last axis has {a.shape[-1]}, "
            f"axis {len(w.shape) + k_axis} of {w_arg} ({layout}) has {w.shape[k_axis]}"
        )


def _copy(axes) -> list:
    return [new_axis(ax.extent, ax.iter_type) for ax in axes]


def _contraction_axes(k: int) -> IterDomain:
    return new_axis(k, IterType.REDUCTION)


def _trailing(positions: list[int], targets: list[int]) -> dict[int, int]:
    """positions onto the last len(positions) targets (numpy's batch alignment)."""
    return dict(zip(positions, targets[len(targets) - len(positions) :])) if positions else {}


def _matmul_axes(expr: Expr, position: int) -> dict[int, int]:
    """a[..., m, k] -> [batch..., m, n, rk]: batch axes aligned on the right, m in place,
    k onto rk; b[..., k, n]: batch likewise, k onto rk, n onto n."""
    rank = len(expr.output.domain.logical)
    n, rk = rank - 2, rank - 1
    has_m = len(expr.inputs[0].data_positions()) > 1  # a 1-D a has no m
    batch = list(range(rank - 2 - has_m))
    p = expr.inputs[position].data_positions()
    if position == 0:
        return {**_trailing(p[:-2], batch), **({p[-2]: rank - 3} if has_m else {}), p[-1]: rk}
    return {**_trailing(p[:-2], batch), p[-2]: rk, p[-1]: n}


def _linear_axes(expr: Expr, position: int) -> dict[int, int]:
    """x[..., k] -> [wbatch..., xbatch..., n, rk]: x's leading axes after the weight's
    batch axes, k onto rk; weight[wbatch..., n, k]: batch first, n onto n, k onto rk;
    bias[wbatch..., n]: batch first, n onto n."""
    *batch, n, rk = range(len(expr.output.domain.logical))
    p = expr.inputs[position].data_positions()
    wbatch = len(expr.inputs[1].data_positions()) - 2
    if position == 0:
        return {**dict(zip(p[:-1], batch[wbatch:])), p[-1]: rk}
    if position == 1:
        return {**dict(zip(p[:-2], batch)), p[-2]: n, p[-1]: rk}
    return {**dict(zip(p[:-1], batch)), p[-1]: n}


_PARTIAL_SUMS = ReductionOpType.sum


# -- vector-Jacobian products (OpDef.vjp): (expr, operands, outputs, cotangents) ------
def _matmul_vjp(expr, operands, outputs, grads):
    """ga = g b^T, gb = a^T g, each summed over the batch axes its operand broadcast; a
    1-D a is a row [1, k] (its output a row [..., 1, n]). A 2-D b read by a batched a
    (a weight) gets its cotangent from one contraction over all of a's rows."""
    (a, b), (g,) = operands, grads
    vector = len(a.shape) == 1
    if vector:
        a, g = unsqueeze(a, 0), unsqueeze(g, -2)
    ga = unbroadcast(matmul(g, transpose(b, -1, -2)), a.shape)
    if len(b.shape) == 2 and len(a.shape) > 2:
        gb = matmul(transpose(_rows(a), -1, -2), _rows(g))
    else:
        gb = unbroadcast(matmul(transpose(a, -1, -2), g), b.shape)
    return [squeeze(ga, 0) if vector else ga, gb]


def _rows(t: TensorView, keep: int = 0) -> TensorView:
    """t with its axes between the first `keep` and the last merged into one: the rows
    of a contraction (a reshape; an outer sharding of them stays local)."""
    shape = list(t.shape)
    if len(shape) - keep <= 2:
        return t
    return reshape(t, [*shape[:keep], math.prod(shape[keep:-1]), shape[-1]])


def _linear_vjp(expr, operands, outputs, grads):
    """out[wb..., xb..., n] = x[xb..., k] w[wb..., n, k]^T (+ bias[wb..., n]):
    gx = g w summed over wb; gw = g^T x, one contraction over x's rows (xb merged, so
    that gw is one matmul's output, placed as w); gbias = g summed over xb. A 1-D x is
    a row [1, k]."""
    x, w = operands[0], operands[1]
    g = grads[0]
    wb = len(w.shape) - 2
    vector = len(x.shape) == 1
    if vector:
        x, g = unsqueeze(x, 0), unsqueeze(g, -2)
    xb = len(x.shape) - 1  # >= 1: the rows, and any batch axes before them
    # w's batch axes first, then broadcast over x's batch axes but its rows
    w_rows = broadcast(w, [False] * wb + [True] * (xb - 1) + [False, False]) if wb else w
    gx = matmul(g, w_rows)  # [wb..., xb..., k]
    gx = sum_of(gx, list(range(wb))) if wb else gx
    gw = matmul(transpose(_rows(g, wb), -1, -2), _rows(x))  # [wb..., n, k]
    cotangents = [squeeze(gx, 0) if vector else gx, gw]
    if len(operands) == 3:
        cotangents.append(sum_of(g, list(range(wb, wb + xb))))
    return cotangents


@define(
    Template("matmul({a},\n          {b})"),
    (Param("a", "tensor"), Param("b", "tensor")),
    axis_map=_matmul_axes,
    # Tensor parallelism keeps weights in place and moves activations.
    sharding=Sharding(partial=_PARTIAL_SUMS, prefer=(1,)),
    vjp=_matmul_vjp,
    cost=contraction,
    local=LocalRule.matmul,
    rowwise=True,
)
def matmul(a: TensorView, b: TensorView) -> TensorView:
    """a[..., m, k] @ b[..., k, n] -> [batch..., m, n] (batch axes broadcast as in numpy;
    a trailing reduction axis rk)."""
    a, b = check_tensor(a, "matmul", "a"), check_tensor(b, "matmul", "b")
    fusion_of(a, b)
    what = f"matmul: {shape_text(a)} @ {shape_text(b)}"
    _check_contraction(what, a, "a", b, "b", k_axis=-2)
    a_axes, b_axes = data_axes(a), data_axes(b)
    batch = _broadcast_batch(what, a_axes[:-2], b_axes[:-2])
    rows = _copy(a_axes[-2:-1])  # m, absent for a 1-D a
    axes = batch + rows + _copy(b_axes[-1:]) + [_contraction_axes(a.shape[-1])]
    out = TensorView(a.fusion, axes, promote(a, b, "mul"))
    Op("matmul", [out], [a, b])
    return out


def _broadcast_batch(what: str, xs: list, ys: list) -> list:
    """The batch axes of two operands aligned on the right, as numpy broadcasts them."""
    n = max(len(xs), len(ys))
    xs, ys = [None] * (n - len(xs)) + list(xs), [None] * (n - len(ys)) + list(ys)
    out = []
    for k, (x, y) in enumerate(zip(xs, ys)):
        if x is None or y is None:
            out += _copy([x or y])
        elif x.is_broadcast or y.is_broadcast or x.extent == y.extent:
            out += _copy([y if x.is_broadcast else x])
        else:
            raise FusionError(
                f"{what}: batch axis {k} (counted from the left of the broadcast batch) has "
                f"extent {x.extent} in one operand and {y.extent} in the other; batch axes "
                "must be equal or broadcast (extent 1)"
            )
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
    if not any(t is bias for t in linear.inputs):  # linear(x, w, x) still reads it as x
        bias.uses = [u for u in bias.uses if u is not linear]
    users = list(dict.fromkeys(out.uses))
    made = len(out.fusion.tensors_created)
    # bias[wbatch..., n] onto out[wbatch..., xbatch..., n]: broadcast over x's batch axes.
    wbatch = len(bias.shape) - 1
    xbatch = len(out.shape) - 1 - wbatch
    if xbatch:
        bias = broadcast(bias, [False] * wbatch + [True] * xbatch + [False])
    result = add(out, bias)
    Expr.replace_uses(out, result, users)
    takes_place_of(result, out)
    exprs = [t.definition for t in out.fusion.tensors_created[made:]]
    return Rewrite(out, result, exprs)


@define(
    Template("linear({x},\n          {weight}[,\n          {bias}])"),
    (X, Param("weight", "tensor"), Param("bias", "tensor", required=False)),
    axis_map=_linear_axes,
    sharding=Sharding(partial=_PARTIAL_SUMS, prefer=(1,), when_partial=bias_after_partial_sums),
    vjp=_linear_vjp,
    cost=contraction,
    local=LocalRule.linear,
    rowwise=True,
)
def linear(x: TensorView, weight: TensorView, bias: TensorView | None = None) -> TensorView:
    """x[..., k] @ weight[..., n, k]^T (+ bias[..., n]) -> [wbatch..., ..., n]: a batched
    weight ([D, n/D, k], nvFuser's device-batched layout) puts its batch axes first."""
    x, weight = check_tensor(x, "linear"), check_tensor(weight, "linear", "weight")
    fusion_of(x, weight, *([check_tensor(bias, "linear", "bias")] if bias is not None else []))
    what = f"linear: {shape_text(x)} and weight {shape_text(weight)}"
    _check_contraction(what, x, "x", weight, "weight", k_axis=-1)
    w_axes = data_axes(weight)
    if bias is not None and bias.shape != weight.shape[:-1]:
        raise FusionError(
            f"linear: bias {shape_text(bias)} must have shape {list(weight.shape[:-1])} "
            f"(weight {shape_text(weight)} without its last axis k)"
        )
    axes = _copy(w_axes[:-2]) + _copy(data_axes(x)[:-1]) + _copy(w_axes[-2:-1])
    axes.append(_contraction_axes(x.shape[-1]))
    operands = [x, weight, *([bias] if bias is not None else [])]
    out = TensorView(x.fusion, axes, promote(x, weight, "mul"))
    if bias is not None:  # the type of the product plus the bias
        out.dtype = promote(out, bias, "add")
    # One op with the bias, so that sharding sees one linear; where the contraction
    # axis is sharded, insert-reshardings adds the bias once, after the reduction
    # (bias_after_partial_sums, the op's sharding rule).
    Op("linear", [out], operands)
    return out


def _grouped_axes(expr: Expr, position: int) -> dict[int, int]:
    """mat1[m, k] @ mat2[g, k, n] -> [m, n, rk]: m in place, k onto rk, n onto n, g onto
    nothing (its rows are data); mat1[m, k] @ mat2[k, n] in groups of k -> [g, m, n]:
    m and n in place, k onto nothing (a group's rows are data); offsets onto nothing."""
    p = expr.inputs[position].data_positions()
    if position == 2:
        return {}
    if len(expr.inputs[1].shape) == 3:  # rows in groups: [m, n, rk]
        return {p[0]: 0, p[1]: 2} if position == 0 else {p[1]: 2, p[2]: 1}
    return {p[0]: 1} if position == 0 else {p[1]: 2}  # k in groups: [g, m, n]


def _grouped_vjp(expr, operands, outputs, grads):
    """grouped_mm's gradients are grouped_mms: rows in groups, out[m, n] = a[m, k] @
    b[g, k, n]: da = g @ b^T per group (rows in groups), db[g] = a_g^T @ g_g (k of the
    k-grouped form, the rows); k in groups, out[g, m, n]: da^T = b @ g^T per group and
    db = a^T @ g per group (both rows in groups). The offsets have none."""
    from fuserlite.ops.movement import permute

    (a, b, ends), (g,) = operands, grads
    if len(b.shape) == 3:
        return [
            grouped_mm(g, permute(b, [0, 2, 1]), ends),
            grouped_mm(permute(a, [1, 0]), g, ends),
            None,
        ]
    da = permute(grouped_mm(b, permute(g, [0, 2, 1]), ends), [1, 0])
    return [da, grouped_mm(permute(a, [1, 0]), g, ends), None]


@define(
    Template("grouped_mm({mat1},\n          {mat2},\n          {offsets})"),
    (Param("mat1", "tensor"), Param("mat2", "tensor"), Param("offsets", "tensor")),
    axis_map=_grouped_axes,
    # Column- and row-parallel experts keep their weights in place, as linear does.
    sharding=Sharding(partial=_PARTIAL_SUMS, prefer=(1,)),
    indexed=True,  # a device's rows find their groups by their global row index
    local=LocalRule.whole,
    vjp=_grouped_vjp,
    cost=grouped,
)
def grouped_mm(mat1: TensorView, mat2: TensorView, offsets: TensorView) -> TensorView:
    """Grouped matmul (nvFuser's, mixture of experts): mat1[m, k] @ mat2[g, k, n] ->
    [m, n], rows offsets[i-1]:offsets[i] by mat2[i]; or mat1[m, k] @ mat2[k, n] with
    offsets over k -> [g, m, n], group i contracting k offsets[i-1]:offsets[i]."""
    names = ("mat1", "mat2", "offsets")
    a, b, ends = (check_tensor(t, "grouped_mm", n) for t, n in zip((mat1, mat2, offsets), names))
    fusion_of(a, b, ends)
    what = f"grouped_mm: {shape_text(a)} @ {shape_text(b)}"
    if len(a.shape) != 2 or len(b.shape) not in (2, 3):
        raise FusionError(
            f"{what}: mat1 is [m, k] and mat2 [g, k, n] (rows in groups) or [k, n] (k in "
            "groups); other ranks are not supported"
        )
    if ends.dtype.name not in ("int32", "int64") or len(ends.shape) != 1:
        raise FusionError(
            f"grouped_mm: offsets {shape_text(ends)} must be a 1-D int32 or int64 tensor, "
            "the end of each group (a cumulative sum of the group sizes)"
        )
    groups = ends.shape[0]
    if len(b.shape) == 3 and b.shape[0] != groups:
        raise FusionError(
            f"{what}: mat2 has {b.shape[0]} groups but offsets {shape_text(ends)} {groups}; "
            "give one offset per group"
        )
    if a.shape[1] != b.shape[-2]:
        raise FusionError(
            f"{what}: the contracted extents differ: mat1's k is {a.shape[1]}, mat2's {b.shape[-2]}"
        )
    rows, cols = _copy(data_axes(a)[:1]), _copy(data_axes(b)[-1:])
    if len(b.shape) == 3:
        axes = [*rows, *cols, _contraction_axes(a.shape[1])]
    else:
        g = new_axis(groups, IterType.BROADCAST if groups == 1 else IterType.ITERATION)
        axes = [g, *rows, *cols]
    out = TensorView(a.fusion, axes, promote(a, b, "mul"))
    Op("grouped_mm", [out], [a, b, ends])
    return out
