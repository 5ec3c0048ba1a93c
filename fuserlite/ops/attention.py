"""Scaled-dot-product attention, forward and backward: evaluated ops of several outputs.

    sdpa(query [..., L, E], key [..., S, E], value [..., S, Ev]) -> output [..., L, Ev]
        (query's dtype), logsumexp [..., L] (float32; float64 for float64)
    sdpa_bwd(grad_output, query, key, value, output, logsumexp) -> grad_query,
        grad_key [..., S, E, rL], grad_value [..., S, Ev, rL]

as nvFuser's SdpaFwdOp / SdpaBwdOp (fuserlite.numerics.attention has the math).
nvFuser also returns the Philox seed and offset as tensors, because torch's
generator advances at run time; in fuserlite they are the program's attributes
(`seed`, `offset`, as rand_like's), which the backward takes again, so the dropout
mask is drawn from the same global indices in both.

The sharding rule, through the axis maps: the batch axes (N, H, ...) map onto every
output, so sharded batch or heads need no communication; query's L maps onto the
outputs' L, so a query sharded on L with key and value whole computes its rows
(the causal diagonal and the dropout indices follow the global rows: both ops are
`indexed`, their numpy rows given the global start of a device's rows); key's S and
every head dim E, Ev map onto nothing, so a sharded S or head dim reshards
(an Allgather). In the backward, L maps onto the trailing reduction axis rL of
grad_key and grad_value: a query sharded on L leaves them partial sums, completed
by an Allreduce (or a ReduceScatter) as a sharded contraction is. Every output
needs whole rows of the probabilities, so a sharded S reshards in the backward too.
"""

from __future__ import annotations

import math

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType, ReductionOpType
from fuserlite.ops.common import check_tensor, fusion_of, new_axis, shape_text
from fuserlite.ops.cost import attention, attention_backward
from fuserlite.ops.forms import Template
from fuserlite.ops.registry import LocalRule, Op, Param, Sharding, define

__all__ = ["sdpa", "sdpa_bwd"]

_U64 = 2**64 - 1
_FLAGS = (
    Param("dropout_p", "float", required=False, keyword=True),
    Param("is_causal", "bool", required=False, keyword=True),
    Param("scale", "float", required=False, keyword=True),
    Param("seed", "int", required=False, keyword=True),
    Param("offset", "int", required=False, keyword=True),
)
_ATTRS = ("dropout_p", "is_causal", "scale", "seed", "offset")
_FLAGS_TEXT = (
    "dropout_p = {dropout_p:float},\n is_causal = {is_causal:bool},\n scale = {scale:float},\n"
    " seed = {seed:int},\n offset = {offset:int})"
)


def _check(op: str, q: TensorView, k: TensorView, v: TensorView) -> None:
    """q [..., L, E], k [..., S, E], v [..., S, Ev] with one batch shape, float, one dtype."""
    shapes = f"query {shape_text(q)}, key {shape_text(k)}, value {shape_text(v)}"
    if not len(q.shape) == len(k.shape) == len(v.shape) or len(q.shape) < 2:
        raise FusionError(f"{op}: query, key and value need one rank >= 2; got {shapes}")
    if q.shape[-1] != k.shape[-1]:
        raise FusionError(
            f"{op}: the head dims of query and key differ ({q.shape[-1]} vs {k.shape[-1]}); "
            f"{shapes}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise FusionError(
            f"{op}: key and value sequence lengths differ ({k.shape[-2]} vs {v.shape[-2]}); "
            f"{shapes}"
        )
    if not q.shape[:-2] == k.shape[:-2] == v.shape[:-2]:
        raise FusionError(f"{op}: the batch axes of query, key and value differ; {shapes}")
    if not q.dtype == k.dtype == v.dtype or not q.dtype.is_float:
        raise FusionError(
            f"{op}: query, key and value must share one float dtype, got {q.dtype.name}, "
            f"{k.dtype.name}, {v.dtype.name}"
        )


def _flags(op: str, q: TensorView, dropout_p, is_causal, scale, seed, offset) -> dict:
    """The attributes, checked; scale None is 1 / sqrt(E)."""
    dropout_p = args.real(dropout_p, op, "dropout_p")
    if not 0.0 <= dropout_p <= 1.0:
        raise FusionError(f"{op}: dropout_p must be in [0, 1], got {dropout_p}")
    if not isinstance(is_causal, bool):
        raise FusionError(f"{op}: is_causal must be true or false, got {is_causal!r}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else args.real(scale, op, "scale")
    return {
        "dropout_p": dropout_p,
        "is_causal": is_causal,
        "scale": scale,
        "seed": args.integer(seed, op, "seed", minimum=0, maximum=_U64),
        "offset": args.integer(offset, op, "offset", minimum=0, maximum=_U64),
    }


def _like(tv: TensorView, dtype: DType | None = None, shape=None) -> TensorView:
    """A new tensor of `shape` (tv's by default); an extent-1 axis is a broadcast axis."""
    axes = [_axis(n) for n in (tv.shape if shape is None else shape)]
    return TensorView(tv.fusion, axes, dtype or tv.dtype)


def _axis(n: int):
    return new_axis(n, IterType.BROADCAST if n == 1 else IterType.ITERATION)


def _batch(expr: Expr) -> int:
    """The number of batch axes (N, H, ...)."""
    return len(expr.inputs[0].shape) - 2


def _fwd_axes(expr: Expr, position: int, consumer: TensorView) -> dict[int, int]:
    """Batch axes onto both outputs; query's L onto their L; S, E and Ev onto nothing."""
    b = _batch(expr)
    amap = {i: i for i in range(b)}
    if position == 0:  # the query
        amap[b] = b
    return amap


_LSE = {DType.float64: DType.float64}


def _sdpa_vjp(expr, operands, outputs, grads):
    """sdpa_bwd of the output's cotangent (the same flags, so the same dropout mask); a
    loss that reads the logsumexp has no rule here."""
    grad_output, grad_lse = grads
    if grad_lse is not None:
        raise FusionError(
            f"sdpa ({outputs[1].name}): the gradient reaches its logsumexp output, which "
            "sdpa's vjp rule (sdpa_bwd) does not take; differentiate a loss of the attention "
            "output only"
        )
    if grad_output is None:
        return [None, None, None]
    query, key, value = operands
    return list(sdpa_bwd(grad_output, query, key, value, *outputs, **expr.attributes()))


@define(
    Template("sdpa({query},\n {key},\n {value},\n " + _FLAGS_TEXT),
    (Param("query", "tensor"), Param("key", "tensor"), Param("value", "tensor"), *_FLAGS),
    attrs=_ATTRS,
    outputs_axis_map=_fwd_axes,
    indexed=True,  # the dropout mask: drawn at the global indices of its rows
    vjp=_sdpa_vjp,
    cost=attention,
    local=LocalRule.batch,
)
def sdpa(
    query: TensorView,
    key: TensorView,
    value: TensorView,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    seed: int = 0,
    offset: int = 0,
) -> tuple[TensorView, TensorView]:
    """Attention softmax(scale q k^T [causal]) (dropout) v -> (output, logsumexp)."""
    q, k, v = (
        check_tensor(t, "sdpa", n) for t, n in ((query, "query"), (key, "key"), (value, "value"))
    )
    fusion_of(q, k, v)
    _check("sdpa", q, k, v)
    attrs = _flags("sdpa", q, dropout_p, is_causal, scale, seed, offset)
    out = _like(q, shape=(*q.shape[:-1], v.shape[-1]))
    lse = _like(q, _LSE.get(q.dtype, DType.float32), shape=q.shape[:-1])
    Op("sdpa", [out, lse], [q, k, v], **attrs)
    return out, lse


_DQ = 0  # grad_query: the output with the query's L; grad_key, grad_value sum over it


def _bwd_axes(expr: Expr, position: int, consumer: TensorView) -> dict[int, int]:
    """Batch axes onto every gradient; L (of grad_output, query, output, logsumexp) onto
    grad_query's L and grad_key's and grad_value's rL. Key's and value's S map onto
    nothing: every gradient needs whole rows of the probabilities, so all of S."""
    b = _batch(expr)
    amap = {i: i for i in range(b)}
    if position in (0, 1, 4, 5):  # an operand with the query's L
        amap[b] = b if consumer is expr.outputs[_DQ] else len(consumer.domain.logical) - 1
    return amap


@define(
    Template(
        "sdpa_bwd({grad_output},\n {query},\n {key},\n {value},\n {output},\n"
        " logsum_exp = {logsumexp},\n " + _FLAGS_TEXT
    ),
    (
        Param("grad_output", "tensor"),
        Param("query", "tensor"),
        Param("key", "tensor"),
        Param("value", "tensor"),
        Param("output", "tensor"),
        Param("logsumexp", "tensor"),
        *_FLAGS,
    ),
    attrs=_ATTRS,
    outputs_axis_map=_bwd_axes,
    sharding=Sharding(partial=ReductionOpType.sum),
    indexed=True,  # as sdpa's
    cost=attention_backward,
    local=LocalRule.batch,
)
def sdpa_bwd(
    grad_output: TensorView,
    query: TensorView,
    key: TensorView,
    value: TensorView,
    output: TensorView,
    logsumexp: TensorView,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    seed: int = 0,
    offset: int = 0,
) -> tuple[TensorView, TensorView, TensorView]:
    """The gradients (of query, key, value) of sdpa, the probabilities recomputed."""
    names = ("grad_output", "query", "key", "value", "output", "logsumexp")
    given = (grad_output, query, key, value, output, logsumexp)
    dout, q, k, v, out, lse = (check_tensor(t, "sdpa_bwd", n) for t, n in zip(given, names))
    fusion_of(dout, q, k, v, out, lse)
    _check("sdpa_bwd", q, k, v)
    want = (*q.shape[:-1], v.shape[-1])
    if dout.shape != want or out.shape != want or lse.shape != q.shape[:-1]:
        raise FusionError(
            f"sdpa_bwd: grad_output {shape_text(dout)} and output {shape_text(out)} must be "
            f"{list(want)} and logsumexp {shape_text(lse)} {list(q.shape[:-1])}"
        )
    attrs = _flags("sdpa_bwd", q, dropout_p, is_causal, scale, seed, offset)
    rows = q.shape[-2]
    grads = [_like(q)]
    for t in (k, v):  # the query rows they sum over: a trailing reduction axis rL
        axes = [_axis(n) for n in t.shape] + [new_axis(rows, IterType.REDUCTION)]
        grads.append(TensorView(t.fusion, axes, t.dtype))
    Op("sdpa_bwd", grads, [dout, q, k, v, out, lse], **attrs)
    return tuple(grads)
