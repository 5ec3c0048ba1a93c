"""Rows at tensor indices: embedding (torch's F.embedding, nvFuser's embedding_fwd) and
its vjp, embedding_backward (a scatter-add). Evaluated, a kernel each.

    embedding(weight [V, ...], indices [I...] int) -> [I..., ..., rV]
        output element (i..., j...) is weight[indices[i...], j...]
    embedding_backward(grad [N, ...], indices [N] int, num_weights V) -> [V, ..., rN]
        output row v is the sum of the grad rows whose index is v

Both keep the axis they pick from or scatter over as a trailing reduction axis, as a
contraction keeps its k: the output is a sum over the vocabulary V (embedding: one
term per row, the row its index names) or over the N gradient rows. So the sharding
rules are the ones of a sharded contraction, through the axis maps:

- indices (or the gradient rows) sharded on a batch axis: the output is sharded on it,
  no communication;
- weight sharded on an embedding axis (DTensor's colwise embedding, `Shard(1)`): the
  output is sharded on that axis, no communication;
- weight sharded on the vocabulary (Megatron's vocab-parallel embedding, DTensor's
  rowwise `Shard(0)`): V maps onto rV, so each device looks up only the rows it holds
  and writes zeros for the other indices, and the output is Partial: one Allreduce (or
  ReduceScatter) completes it. The numpy row knows which rows a device holds from the
  global start of its block of rV (`indexed`);
- embedding_backward's gradient rows sharded (data parallel): partial sums, completed
  as any; its V output sharded (a gradient placed as a vocab-parallel weight): V maps
  from no operand, so it is computed whole and sliced (insert-reshardings).

An index outside 0..V-1 is an ExecutionError when the op runs (torch's IndexError), on
every device and compute path.
"""

from __future__ import annotations

import math

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType, ReductionOpType
from fuserlite.ops.common import check_tensor, fusion_of, new_axis, shape_text
from fuserlite.ops.cost import MOVES_DATA, elementwise
from fuserlite.ops.forms import Template
from fuserlite.ops.registry import LocalRule, Op, Param, Sharding, define

__all__ = ["embedding", "embedding_backward"]

_INDEX_DTYPES = (DType.int32, DType.int64)
_SUMS = Sharding(partial=ReductionOpType.sum)


def _indices(indices: object, op: str) -> TensorView:
    indices = check_tensor(indices, op, "indices")
    if indices.dtype not in _INDEX_DTYPES:
        raise FusionError(
            f"{op}: indices {shape_text(indices)} are {indices.dtype.name}; they must be int32 "
            "or int64 (cast them: cast(indices, int64))"
        )
    return indices


def _axis(extent: int, iter_type: IterType = IterType.ITERATION):
    return new_axis(extent, IterType.BROADCAST if extent == 1 else iter_type)


def _embedding_axes(expr: Expr, position: int) -> dict[int, int]:
    """indices' axes onto the leading output axes; weight's axis 0 onto the trailing rV,
    its other axes onto the ones after the indices' (as the output shape lists them)."""
    weight, indices = expr.inputs
    w, i = weight.data_positions(), indices.data_positions()
    if position == 1:
        return {p: k for k, p in enumerate(i)}
    rank = len(expr.output.domain.logical)
    return {w[0]: rank - 1, **{p: len(i) + k for k, p in enumerate(w[1:])}}


def _embedding_vjp(expr, operands, outputs, grads):
    """The weight's cotangent: the output's scattered back onto the rows it read, with
    the indices flattened into one axis of gradient rows; none for the indices."""
    from fuserlite.ops.views import reshape  # views builds on nothing here

    weight, indices = operands
    (g,) = grads
    if len(indices.shape) != 1:
        n = math.prod(indices.shape)
        g, indices = reshape(g, [n, *weight.shape[1:]]), reshape(indices, [n])
    return [embedding_backward(g, indices, weight.shape[0]), None]


@define(
    Template("embedding( {weight}, {indices} )"),
    (Param("weight", "tensor"), Param("indices", "tensor")),
    axis_map=_embedding_axes,
    sharding=_SUMS,
    indexed=True,  # a device's rows of weight: from the start of its block of rV
    converts=True,  # integer indices stay integers (a float32 index is exact to 2**24 only)
    vjp=_embedding_vjp,
    cost=MOVES_DATA,
    local=LocalRule.lookup,
)
def embedding(weight: TensorView, indices: TensorView) -> TensorView:
    """Rows of weight at integer indices (F.embedding): out[i..., :] = weight[indices[i...], :]."""
    weight = check_tensor(weight, "embedding", "weight")
    indices = _indices(indices, "embedding")
    fusion_of(weight, indices)
    if not weight.shape:
        raise FusionError("embedding: weight is 0-d; it needs an axis 0 of rows to look up")
    axes = [_axis(e) for e in (*indices.shape, *weight.shape[1:])]
    axes.append(new_axis(weight.shape[0], IterType.REDUCTION))
    out = TensorView(weight.fusion, axes, weight.dtype)
    Op("embedding", [out], [weight, indices])
    return out


def _backward_axes(expr: Expr, position: int) -> dict[int, int]:
    """The gradient rows (and the indices) onto the trailing rN; the gradient's other
    axes onto the output's after V, which maps from nothing."""
    p = expr.inputs[position].data_positions()
    rank = len(expr.output.domain.logical)
    if position == 1:
        return {p[0]: rank - 1}
    return {p[0]: rank - 1, **{q: k + 1 for k, q in enumerate(p[1:])}}


def _backward_vjp(expr, operands, outputs, grads):
    """A scatter-add's cotangent is a gather: each gradient row gets its row's."""
    return [embedding(grads[0], operands[1]), None]


@define(
    Template("embedding_backward( {grad}, {indices}, num_weights = {num_weights:int} )"),
    (Param("grad", "tensor"), Param("indices", "tensor"), Param("num_weights", "int")),
    attrs=("num_weights",),
    axis_map=_backward_axes,
    sharding=_SUMS,
    converts=True,  # as embedding's
    vjp=_backward_vjp,
    cost=elementwise(1),  # an add per gradient element
    local=LocalRule.whole,
)
def embedding_backward(grad: TensorView, indices: TensorView, num_weights: int) -> TensorView:
    """The gradient of embedding's weight: out[v, ...] = sum of grad[n, ...] with indices[n] = v."""
    grad = check_tensor(grad, "embedding_backward", "grad")
    indices = _indices(indices, "embedding_backward")
    fusion_of(grad, indices)
    v = args.integer(num_weights, "embedding_backward", "num_weights", minimum=1)
    if len(indices.shape) != 1 or not grad.shape or grad.shape[0] != indices.shape[0]:
        raise FusionError(
            f"embedding_backward: grad {shape_text(grad)} must be [N, ...] and indices "
            f"{shape_text(indices)} [N] (flatten the looked-up axes into one)"
        )
    if not grad.dtype.is_float:
        raise FusionError(f"embedding_backward: grad {shape_text(grad)} must be a float tensor")
    axes = [_axis(e) for e in (v, *grad.shape[1:])]
    axes.append(new_axis(grad.shape[0], IterType.REDUCTION))
    out = TensorView(grad.fusion, axes, grad.dtype)
    Op("embedding_backward", [out], [grad, indices], num_weights=v)
    return out
