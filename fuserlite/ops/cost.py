"""What an op costs: the FLOPs one expression computes and the bytes it reads and writes.

An OpDef's `cost` is a function of one expression and the shape `shape(tv)` each of
its tensors has on one device (its local rows), so a sharded matmul counts only its
own block of the contraction. It returns an OpCost:

    flops    arithmetic operations (a multiply-add is 2, as datasheets count peaks)
    bytes    what the expression reads and writes if it runs alone: every operand and
             output once (a fused kernel reads its inputs and writes its outputs only,
             which fuserlite.timing counts instead)
    matmul   its FLOPs run on the matrix units (tensor cores), at the matmul peak of
             the operands' dtype; otherwise on the vector units

fuserlite.timing turns kernels of these into time with a roofline. The counts:

| op | FLOPs |
|---|---|
| pointwise, reductions (default) | 1 per element of the largest of its tensors |
| gelu, silu, sigmoid, rand_like | 8, 4, 3 and 10 per element (their formulas' operations) |
| views, copies, cat, cast | 0: they only move data |
| matmul, linear | 2 m n k on the local blocks (+ m n for linear's bias) |
| grouped_mm | 2 m n k: each row (or each k) in one group |
| sdpa | 2 (E + Ev) L S per batch entry, half of it causal (FlashAttention's count) |
| sdpa_bwd | 2.5 x sdpa's (FlashAttention-2: five matmuls for two) |
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView

ShapeOf = Callable[[TensorView], tuple[int, ...]]


@dataclass(frozen=True)
class OpCost:
    """One expression's FLOPs and bytes on one device."""

    flops: int
    bytes: int
    matmul: bool = False  # the FLOPs run on the matrix units (tensor cores)


CostRule = Callable[[Expr, ShapeOf], OpCost]


def elements(shape: tuple[int, ...]) -> int:
    """The elements of a (local) shape."""
    return math.prod(shape)


def io_bytes(expr: Expr, shape: ShapeOf) -> int:
    """Every operand read once and every output written once, in their dtypes' sizes
    (an operand read twice, matmul(x, x), is read twice)."""
    return sum(elements(shape(t)) * t.dtype.itemsize for t in (*expr.inputs, *expr.outputs))


def elementwise(flops_per_element: int) -> CostRule:
    """`flops_per_element` per element of the largest of the expression's tensors (a
    reduction's input, a broadcasting add's output), and its operands and outputs once."""

    def cost(expr: Expr, shape: ShapeOf) -> OpCost:
        largest = max((elements(shape(t)) for t in (*expr.inputs, *expr.outputs)), default=0)
        return OpCost(flops_per_element * largest, io_bytes(expr, shape))

    return cost


DEFAULT_COST = elementwise(1)  # one operation per element
MOVES_DATA = elementwise(0)  # views, copies, gathers: bytes only


def contraction(expr: Expr, shape: ShapeOf) -> OpCost:
    """matmul and linear: 2 m n k multiply-adds on each device's blocks (k: the first
    operand's last axis, as much of it as the device holds), plus a bias's m n adds."""
    out = elements(shape(expr.output))
    k = shape(expr.inputs[0])[-1] if shape(expr.inputs[0]) else 1
    bias = out if expr.op_name == "linear" and len(expr.inputs) == 3 else 0
    return OpCost(2 * out * k + bias, io_bytes(expr, shape), matmul=True)


def grouped(expr: Expr, shape: ShapeOf) -> OpCost:
    """grouped_mm: 2 m n k, each row by its one group's matrix (or each k in one group's
    product: the [g, m, n] form's g products share its k)."""
    m, k = shape(expr.inputs[0])
    n = shape(expr.inputs[1])[-1]
    return OpCost(2 * m * n * k, io_bytes(expr, shape), matmul=True)


def _attention_flops(expr: Expr, shape: ShapeOf, query: int) -> int:
    """2 (E + Ev) L S per batch entry: q k^T and p v; half of it where causal."""
    q, k, v = (shape(expr.inputs[query + i]) for i in range(3))
    batch, rows, e = elements(q[:-2]), q[-2], q[-1]
    flops = 2 * batch * rows * k[-2] * (e + v[-1])
    return flops // 2 if expr.attrs.get("is_causal") else flops


def attention(expr: Expr, shape: ShapeOf) -> OpCost:
    """sdpa: the two matmuls of attention (the softmax's few operations per score aside)."""
    return OpCost(_attention_flops(expr, shape, 0), io_bytes(expr, shape), matmul=True)


def attention_backward(expr: Expr, shape: ShapeOf) -> OpCost:
    """sdpa_bwd: 2.5 times the forward's matmuls (the scores recomputed, four more)."""
    flops = 5 * _attention_flops(expr, shape, 1) // 2
    return OpCost(flops, io_bytes(expr, shape), matmul=True)
