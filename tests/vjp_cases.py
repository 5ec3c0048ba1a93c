"""Small fusions that together read every op with a vjp rule, for the finite-difference
checks of tests/test_autodiff.py (which also checks that they cover the registry)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import fuserlite as fl


@dataclass(frozen=True)
class Case:
    """A fusion of float inputs of `shapes` and the outputs `body` makes from them."""

    name: str
    shapes: tuple[tuple[int, ...], ...]
    body: Callable[..., object]  # the inputs -> an output or a tuple of outputs
    positive: bool = False  # inputs in [0.5, 2) (log, sqrt, div), else standard normal
    step: float = 1e-6  # the central difference's step
    tol: float = 1e-6  # float64 error allowed, relative to the largest gradient
    # Checked in float64 only: a dropout mask draws Philox in the compute dtype, so a
    # float32 dropout keeps other elements than a float64 one.
    float64_only: bool = False

    def build(self, dtype: str = "float64") -> fl.Fusion:
        """The case's fusion with inputs of `dtype`."""
        with fl.Fusion() as fusion:
            inputs = [fl.tensor(list(s), dtype, name=f"x{k}") for k, s in enumerate(self.shapes)]
            for t in inputs:
                fusion.add_input(t)
            out = self.body(*inputs)
            for t in out if isinstance(out, tuple) else (out,):
                fusion.add_output(t)
        return fusion

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        """float64 input values."""
        rng = np.random.default_rng(seed)
        if self.positive:
            return [rng.uniform(0.5, 2.0, s) for s in self.shapes]
        return [rng.standard_normal(s) for s in self.shapes]


def _case(name: str, *shapes: tuple[int, ...], **more) -> Callable[[Callable], Case]:
    def make(body: Callable) -> Case:
        return Case(name, shapes, body, **more)

    return make


A, R, C = (3, 4), (1, 4), (3, 1)  # a matrix, a row and a column: broadcasts both ways

CASES: list[Case] = [
    _case("neg", A)(fl.neg),
    _case("exp", A)(fl.exp),
    _case("tanh", A)(fl.tanh),
    _case("relu", A)(fl.relu),
    _case("abs", A)(fl.abs),
    _case("gelu", A)(fl.gelu),
    _case("erf", A)(fl.erf),
    _case("embedding", (5, 3))(lambda w: fl.embedding(w, fl.iota(5, "int64", 4, -1))),
    _case("embedding_backward", (4, 3))(
        lambda g: fl.embedding_backward(g, fl.iota(4, "int64", 0, 1), 6)
    ),
    _case("embedding repeated rows", (5, 3))(
        lambda w: fl.embedding(w, fl.reshape(fl.iota(6, "int64", 2, 0), [2, 3]))
    ),
    _case("gelu exact", A)(lambda x: fl.gelu(x, approximate="none")),
    _case("sqrt", A, positive=True)(fl.sqrt),
    _case("log", A, positive=True)(fl.log),
    _case("sigmoid", A)(fl.sigmoid),
    _case("silu", A)(fl.silu),
    _case("add broadcast", A, R)(fl.add),
    _case("add scalar", A)(lambda x: fl.add(2.5, x)),
    _case("sub broadcast", C, A)(fl.sub),
    _case("mul broadcast", A, C)(fl.mul),
    _case("mul same tensor", A)(lambda x: fl.mul(x, x)),
    _case("div broadcast", A, R, positive=True)(fl.div),
    _case("div scalar", A, positive=True)(lambda x: fl.div(1.5, x)),
    _case("maximum", A, R)(fl.maximum),
    _case("minimum", A, C)(fl.minimum),
    _case("where lt", A, R)(lambda a, b: fl.where(fl.lt(a, b), fl.mul(a, b), b)),
    _case("set", A)(fl.set),
    _case("broadcast", (4,))(lambda x: fl.mul(fl.broadcast(x, [True, False]), 2.0)),
    _case("expand", R)(lambda x: fl.expand(x, [3, 4])),
    _case("reshape", A)(lambda x: fl.reshape(x, [2, 6])),
    _case("take", (4, 3))(lambda x: fl.take(x, [3, 0, 0, 2])),
    _case("take permutation", (3, 2))(lambda x: fl.take(x, [2, 0, 1])),
    _case("sum", (2, 3, 4))(lambda x: fl.sum(x, [0, 2])),
    _case("sum keepdim", A)(lambda x: fl.mul(fl.sum(x, [1], keepdim=True), x)),
    _case("mean of all", A)(lambda x: fl.mul(fl.sum(fl.mul(x, x)), 1.0 / 12)),
    _case("max", A)(lambda x: fl.max(x, [1])),
    _case("min", A)(lambda x: fl.min(x, [0])),
    _case("sin", A)(lambda x: fl.sin(fl.mul(x, 3.0))),
    _case("cos", A)(lambda x: fl.cos(fl.mul(x, 3.0))),
    _case("rsqrt", A, positive=True)(fl.rsqrt),
    _case("pow", A, R, positive=True)(fl.pow),
    _case("pow scalar exponent", A, positive=True)(lambda x: fl.add(x**2.5, fl.pow(2.0, x))),
    _case("grouped_mm rows", (7, 3), (2, 3, 4))(  # rows 0-2, 3-5; row 6 in no group
        lambda x, w: fl.grouped_mm(x, w, fl.iota(2, "int32", 3, 3))
    ),
    _case("grouped_mm k", (3, 7), (7, 4))(  # k 0-1, 2-5; k 6 in no group
        lambda x, w: fl.grouped_mm(x, w, fl.iota(2, "int64", 2, 4))
    ),
    _case("matmul", (2, 3, 4), (4, 5))(fl.matmul),
    _case("matmul batch broadcast", (1, 3, 4), (2, 4, 2))(fl.matmul),
    _case("matmul vector", (4,), (2, 4, 3))(fl.matmul),
    _case("linear", (2, 3, 4), (5, 4), (5,))(fl.linear),
    _case("linear no bias", (3, 4), (2, 4))(fl.linear),
    _case("linear vector", (4,), (2, 4), (2,))(fl.linear),
    _case("linear batched weight", (3, 4), (2, 5, 4), (2, 5))(fl.linear),
    _case("cast", A, step=1e-2, tol=1e-4)(
        lambda x: fl.cast(fl.mul(fl.cast(x, "float32"), 3.0), "float64")
    ),
    _case("permute", (2, 3, 4))(lambda x: fl.permute(x, [2, 0, 1])),
    _case("squeeze unsqueeze", (3, 1, 4))(lambda x: fl.unsqueeze(fl.squeeze(x, 1), 0)),
    _case("select", A)(lambda x: fl.select(x, 1, 2)),
    _case("slice with steps", (5, 7))(lambda x: fl.slice(x, [1, 0], [4, 7], [1, 3])),
    _case("cat", A, (2, 4))(lambda a, b: fl.cat([a, b, a], 0)),
    _case("split chunk", (3, 6))(lambda x: (*fl.chunk(x, 3, 1), *fl.split(x, [1, 2], 0))),
    _case("transpose flatten", (2, 3, 2))(lambda x: fl.flatten(fl.transpose(x, 0, 2))),
    _case("softmax", A)(lambda x: fl.softmax(x, 1)),
    _case("log_softmax", A)(lambda x: fl.log_softmax(x, 0)),
    _case("layer_norm", (2, 3, 4), (4,), (4,))(lambda x, w, b: fl.layer_norm(x, [4], w, b)),
    _case("rms_norm", A, (4,))(lambda x, w: fl.rms_norm(x, [4], w, eps=1e-6)),
    _case("var_mean", A)(lambda x: fl.var_mean(x, [1])),
    _case("dropout", A, float64_only=True)(lambda x: fl.dropout(x, 0.5, seed=3)),
    _case("iota", A)(lambda x: fl.mul(x, fl.iota(4, "float64", 0.5, 1.0))),
    _case("rand", A)(lambda x: fl.mul(x, fl.rand(list(A), "float64", seed=3))),
    _case("sdpa", (1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4))(
        lambda q, k, v: fl.sdpa(q, k, v, is_causal=True)[0]
    ),
    _case("sdpa dropout", (1, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4), float64_only=True)(
        lambda q, k, v: fl.sdpa(q, k, v, dropout_p=0.25, is_causal=True, seed=5)[0]
    ),
]
