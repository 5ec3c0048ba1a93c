"""One small torch function per row of the ATen table (fuserlite.frontends.aten), for
tests/test_torch_frontend.py: each is exported, imported and compared with torch's own
result in every dtype torch computes it in on the CPU. CASES covers the table:
test_every_row_has_a_case fails when a row has none."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

A = torch.ops.aten
FLOATS = ("float32", "float64", "float16", "bfloat16")


@dataclass(frozen=True)
class Case:
    """`fn` of inputs `make(dtype)` (a tuple of tensors) exports to the ATen op `op`."""

    op: str
    fn: Callable
    make: Callable[[torch.dtype], tuple]
    dtypes: tuple[str, ...] = FLOATS
    name: str = ""

    @property
    def id(self) -> str:
        return self.op.removeprefix("aten.") + (f"-{self.name}" if self.name else "")


def rand(*shape: int, positive: bool = False) -> Callable[[torch.dtype], torch.Tensor]:
    def make(dtype: torch.dtype) -> torch.Tensor:
        t = torch.randn(shape, dtype=torch.float64)
        return (t.abs() + 0.5 if positive else t).to(dtype)

    return make


def inputs(*makers: Callable) -> Callable[[torch.dtype], tuple]:
    return lambda dtype: tuple(m(dtype) for m in makers)


def ints(*shape: int, high: int = 5) -> Callable[[torch.dtype], torch.Tensor]:
    return lambda dtype: torch.randint(0, high, shape)


def bools(*shape: int) -> Callable[[torch.dtype], torch.Tensor]:
    return lambda dtype: torch.rand(*shape) < 0.5


def specials(dtype: torch.dtype) -> torch.Tensor:
    """Values that compare equal, NaN, infinities and signed zeros."""
    row = [0.5, float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -2.0]
    return torch.tensor([row, row[::-1]], dtype=dtype)


X, Y, ROW = rand(3, 4), rand(3, 4), rand(4)
S = specials
POS = rand(3, 4, positive=True)
Q, KV = rand(2, 2, 5, 4), rand(2, 2, 6, 4)

COMPARISONS = {
    "lt": lambda a, b: a < b,
    "gt": lambda a, b: a > b,
    "le": lambda a, b: a <= b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}

CASES: list[Case] = [
    # contractions
    Case("aten.linear.default", lambda x, w, b: F.linear(x, w, b), inputs(X, rand(5, 4), rand(5))),
    Case("aten.linear.default", lambda x, w: F.linear(x, w), inputs(X, rand(5, 4)), name="nobias"),
    Case("aten.matmul.default", torch.matmul, inputs(rand(2, 3, 4), rand(4, 5))),
    Case("aten.mm.default", torch.mm, inputs(X, rand(4, 5))),
    Case("aten.bmm.default", torch.bmm, inputs(rand(2, 3, 4), rand(2, 4, 5))),
    Case(
        "aten.addmm.default", lambda b, x, w: torch.addmm(b, x, w), inputs(rand(5), X, rand(4, 5))
    ),
    Case(
        "aten.baddbmm.default",
        lambda b, x, y: torch.baddbmm(b, x, y, beta=0.5, alpha=2),
        inputs(rand(2, 3, 5), rand(2, 3, 4), rand(2, 4, 5)),
    ),
    Case("aten.t.default", lambda w: w.t() * 2, inputs(X)),
    # pointwise
    *[
        Case(
            f"aten.{name}.default",
            getattr(torch, name),
            inputs(POS if name in ("sqrt", "log", "reciprocal", "rsqrt") else X),
        )
        for name in (
            "neg",
            "exp",
            "tanh",
            "relu",
            "abs",
            "sqrt",
            "log",
            "sigmoid",
            "erf",
            "reciprocal",
            "sin",
            "cos",
            "rsqrt",
        )
    ],
    Case("aten.silu.default", F.silu, inputs(X)),
    Case("aten.square.default", torch.square, inputs(X)),
    Case("aten.pow.Tensor_Scalar", lambda x: x.pow(3), inputs(X)),
    Case("aten.pow.Tensor_Scalar", lambda x: x**0.5, inputs(POS), name="root"),
    Case("aten.pow.Tensor_Tensor", torch.pow, inputs(POS, Y)),
    Case("aten.pow.Scalar", lambda x: 2**x, inputs(X)),
    Case("aten.clamp.default", lambda x: x.clamp(-1.0, 0.25), inputs(S)),
    Case("aten.clamp.default", lambda x: x.clamp(max=0.25), inputs(X), name="max"),
    Case("aten.clamp.Tensor", lambda x, lo, hi: x.clamp(lo, hi), inputs(S, rand(2, 8), rand(8))),
    Case("aten.clamp_min.default", lambda x: A.clamp_min.default(x, 0.1), inputs(S)),
    Case("aten.clamp_max.default", lambda x: A.clamp_max.default(x, 0.1), inputs(S)),
    Case("aten.gelu.default", F.gelu, inputs(rand(3, 40))),
    Case("aten.gelu.default", lambda x: F.gelu(x, approximate="tanh"), inputs(X), name="tanh"),
    Case("aten.add.Tensor", lambda x, y: x + y * 1.5, inputs(X, ROW)),
    Case("aten.add.Tensor", lambda x, y: torch.add(x, y, alpha=2), inputs(X, Y), name="alpha"),
    Case("aten.add.Scalar", lambda x: A.add.Scalar(x, 2.5), inputs(X)),
    Case("aten.sub.Tensor", lambda x, y: x - y, inputs(X, ROW)),
    Case("aten.sub.Scalar", lambda x: A.sub.Scalar(x, 2, 3), inputs(X)),
    Case("aten.rsub.Scalar", lambda x: 1.0 - x, inputs(X)),
    Case("aten.rsub.Tensor", lambda x, y: A.rsub.Tensor(x, y), inputs(X, Y)),
    Case("aten.mul.Tensor", lambda x, y: x * y, inputs(X, ROW)),
    Case("aten.mul.Scalar", lambda x: A.mul.Scalar(x, -3), inputs(X)),
    Case("aten.div.Tensor", lambda x, y: x / y, inputs(X, POS)),
    Case("aten.div.Scalar", lambda x: A.div.Scalar(x, 4), inputs(X)),
    Case("aten.div.Tensor_mode", lambda x, y: torch.div(x, y, rounding_mode=None), inputs(X, POS)),
    Case("aten.maximum.default", torch.maximum, inputs(X, ROW)),
    Case("aten.minimum.default", torch.minimum, inputs(X, Y)),
    Case("aten.where.self", lambda c, x, y: torch.where(c, x, y), inputs(bools(3, 4), X, ROW)),
    Case("aten.where.ScalarOther", lambda c, x: torch.where(c, x, -1.5), inputs(bools(3, 4), X)),
    Case("aten.where.ScalarSelf", lambda c, x: torch.where(c, 2.0, x), inputs(bools(3, 4), X)),
    Case(
        "aten.where.Scalar",
        lambda c, x: torch.where(c, 1.0, 0.0).to(x.dtype) + x,
        inputs(bools(3, 4), X),
    ),
    Case(
        "aten.masked_fill.Scalar",
        lambda x, m: x.masked_fill(m, float("-inf")),
        inputs(X, bools(3, 4)),
    ),
    Case(
        "aten.masked_fill.Tensor",
        lambda x, m, v: x.masked_fill(m, v),
        inputs(X, bools(3, 4), rand()),
    ),
    *[
        Case(
            f"aten.{op}.Tensor",
            lambda x, y, f=f: f(x, y).to(x.dtype),
            inputs(S, lambda dt: S(dt).flip(1)),
        )
        for op, f in COMPARISONS.items()
    ],
    *[
        Case(f"aten.{op}.Scalar", lambda x, f=f: f(x, 0.5).to(x.dtype), inputs(S))
        for op, f in COMPARISONS.items()
    ],
    Case(
        "aten.logical_not.default",
        lambda c, x: torch.where(c.logical_not(), x, 0.0),
        inputs(bools(3, 4), X),
    ),
    Case("aten.bitwise_not.default", lambda c, x: torch.where(~c, x, 0.0), inputs(bools(3, 4), X)),
    # normalizations, softmax
    Case(
        "aten.layer_norm.default", lambda x, w, b: F.layer_norm(x, [4], w, b), inputs(X, ROW, ROW)
    ),
    Case(
        "aten.layer_norm.default",
        lambda x: F.layer_norm(x, [3, 4]),
        inputs(rand(2, 3, 4)),
        name="plain",
    ),
    Case("aten.rms_norm.default", lambda x, w: F.rms_norm(x, [4], w), inputs(X, ROW)),
    Case("aten.rms_norm.default", lambda x: F.rms_norm(x, [4], eps=1e-3), inputs(X), name="eps"),
    Case("aten.softmax.int", lambda x: torch.softmax(x, -1), inputs(X)),
    Case(
        "aten.softmax.int",
        lambda x: torch.softmax(x, 0, dtype=torch.float64),
        inputs(X),
        name="dtype",
    ),
    Case("aten._softmax.default", lambda x: A._softmax.default(x, 1, False), inputs(X)),
    Case("aten.log_softmax.int", lambda x: torch.log_softmax(x, -1), inputs(X)),
    Case("aten._log_softmax.default", lambda x: A._log_softmax.default(x, 0, False), inputs(X)),
    # attention
    Case(
        "aten.scaled_dot_product_attention.default",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        inputs(Q, rand(2, 2, 5, 4), rand(2, 2, 5, 4)),
        name="causal",
    ),
    Case(
        "aten.scaled_dot_product_attention.default",
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        inputs(Q, KV, KV, lambda dt: torch.rand(5, 6) < 0.8),
        name="bool-mask",
    ),
    Case(
        "aten.scaled_dot_product_attention.default",
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
        inputs(Q, KV, KV, rand(2, 1, 5, 6)),
        name="additive-mask",
    ),
    Case(
        "aten.scaled_dot_product_attention.default",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        inputs(rand(2, 4, 5, 4), rand(2, 2, 6, 4), rand(2, 2, 6, 4)),
        name="gqa",
    ),
    Case("aten.dropout.default", lambda x: F.dropout(x, 0.3, training=False) * 2, inputs(X)),
    # views and movement
    Case("aten.view.default", lambda x: x.view(2, 6), inputs(X)),
    Case("aten.reshape.default", lambda x: A.reshape.default(x, [4, -1]), inputs(X)),
    Case("aten._unsafe_view.default", lambda x: A._unsafe_view.default(x, [12]), inputs(X)),
    Case("aten.transpose.int", lambda x: x.transpose(0, 2), inputs(rand(2, 3, 4))),
    Case("aten.permute.default", lambda x: x.permute(2, 0, 1), inputs(rand(2, 3, 4))),
    Case("aten.contiguous.default", lambda x: x.t().contiguous() + 1, inputs(X)),
    Case("aten.clone.default", lambda x: x.clone() * 2, inputs(X)),
    Case("aten.alias.default", lambda x: A.alias.default(x) * 2, inputs(X)),
    Case("aten.detach.default", lambda x: A.detach.default(x) * 2, inputs(X)),
    Case("aten.lift_fresh_copy.default", lambda x: A.lift_fresh_copy.default(x) * 2, inputs(X)),
    Case("aten.unsqueeze.default", lambda x: x.unsqueeze(1), inputs(X)),
    Case("aten.squeeze.dim", lambda x: x.squeeze(1), inputs(rand(3, 1, 4))),
    Case("aten.squeeze.dims", lambda x: x.squeeze((0, 2)), inputs(rand(1, 3, 1, 4))),
    Case("aten.squeeze.default", lambda x: A.squeeze.default(x), inputs(rand(1, 3, 1, 4))),
    Case("aten.expand.default", lambda x: x.expand(2, 3, 4), inputs(rand(3, 1))),
    Case("aten.flatten.using_ints", lambda x: x.flatten(1), inputs(rand(2, 3, 4))),
    Case("aten.unflatten.int", lambda x: x.unflatten(1, (2, -1)), inputs(X)),
    Case("aten.split.Tensor", lambda x: x.split(3, dim=1)[1] * 2, inputs(rand(2, 7))),
    Case("aten.split_with_sizes.default", lambda x: x.split([1, 2], dim=0)[0] - 1, inputs(X)),
    Case("aten.chunk.default", lambda x: x.chunk(2, dim=-1)[1] * 3, inputs(rand(3, 5))),
    Case("aten.unbind.int", lambda x: x.unbind(0)[2] + 1, inputs(X)),
    Case("aten.cat.default", lambda x, y: torch.cat([x, y], 1), inputs(X, Y)),
    Case("aten.stack.default", lambda x, y: torch.stack([x, y], 1), inputs(X, Y)),
    Case("aten.slice.Tensor", lambda x: x[:, 1:3] * 2, inputs(X)),
    Case("aten.slice.Tensor", lambda x: x[::2, -3:] * 2, inputs(rand(5, 4)), name="steps"),
    Case("aten.select.int", lambda x: x[:, -1] + 1, inputs(X)),
    Case("aten.embedding.default", lambda i, w: F.embedding(i, w), inputs(ints(2, 3), rand(5, 4))),
    Case(
        "aten.index_select.default",
        lambda x, i: x.index_select(1, i),
        inputs(rand(2, 5, 3), ints(4)),
    ),
    Case(
        "aten.index_select.default",
        lambda x, i: x.index_select(0, i),
        inputs(rand(5, 3), ints(4)),
        name="rows",
    ),
    # casts
    Case("aten.to.dtype", lambda x: x.to(torch.float32) * 2, inputs(X)),
    Case("aten._to_copy.default", lambda x: A._to_copy.default(x, dtype=torch.float64), inputs(X)),
    Case("aten.to.dtype_layout", lambda x: A.to.dtype_layout(x, dtype=torch.float16), inputs(X)),
    Case(
        "aten.to.device", lambda x: A.to.device(x, torch.device("cpu"), torch.bfloat16), inputs(X)
    ),
    Case(
        "aten.type_as.default",
        lambda x, y: x.type_as(y) * 2,
        inputs(X, lambda dt: torch.zeros(1, dtype=torch.float64)),
    ),
    # reductions
    Case("aten.sum.dim_IntList", lambda x: x.sum((0, 2), keepdim=True), inputs(rand(2, 3, 4))),
    Case("aten.sum.default", lambda x: x.sum(), inputs(X)),
    Case("aten.mean.dim", lambda x: x.mean(-1), inputs(rand(2, 3, 4))),
    Case("aten.mean.default", lambda x: x.mean(), inputs(X)),
    Case("aten.amax.default", lambda x: x.amax(1, keepdim=True), inputs(X)),
    Case("aten.var.dim", lambda x: x.var(1), inputs(X)),
    Case("aten.var.correction", lambda x: torch.var(x, 1, correction=2), inputs(X)),
    Case("aten.var_mean.correction", lambda x: torch.var_mean(x, 0, correction=0)[0], inputs(X)),
    # made from a tensor's shape
    Case("aten.zeros_like.default", lambda x: torch.zeros_like(x) + x, inputs(X)),
    Case("aten.ones_like.default", lambda x: torch.ones_like(x) * x, inputs(X)),
    Case("aten.new_zeros.default", lambda x: x.new_zeros(2, 3, 4) + x, inputs(X)),
    Case("aten.new_ones.default", lambda x: x.new_ones(3, 1) * x, inputs(X)),
    Case("aten.new_full.default", lambda x: x.new_full((4,), -2.0) - x, inputs(X)),
    Case("aten.full_like.default", lambda x: torch.full_like(x, 0.5) - x, inputs(X)),
]
