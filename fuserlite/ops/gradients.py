"""What the ops' vjp rules share (OpDef.vjp; the driver is fuserlite.autodiff).

A rule builds its operands' cotangents from its outputs' with ordinary ops, so the
derived backward is a fusion like any other: sharded, lowered, explained and run by
the same passes. Constants are iotas of step 0 (no data to read, so nothing moves),
and the cotangent of an operand an op broadcast is summed back over the axes it was
stretched on.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.ops.creation import iota
from fuserlite.ops.reductions import sum as sum_of
from fuserlite.ops.views import expand, reshape


def full(like: TensorView, shape: Sequence[int], value: float, dtype: DType) -> TensorView:
    """A tensor of `shape` and `dtype` holding `value` everywhere, in like's fusion."""
    with like.fusion:
        one = iota(1, dtype, value, 0.0)
    if not shape:
        return reshape(one, [])
    ones = reshape(one, [1] * len(shape))
    return expand(ones, list(shape)) if any(e != 1 for e in shape) else ones


def zeros(like: TensorView, shape: Sequence[int]) -> TensorView:
    """Zeros of `shape` in like's dtype (like's fusion)."""
    return full(like, shape, 0.0, like.dtype)


def unbroadcast(g: TensorView, shape: Sequence[int]) -> TensorView:
    """g summed back to `shape`, the shape of an operand that was broadcast to g's: over
    the leading axes the operand lacks, then (kept, extent 1) over each axis where the
    operand has extent 1 and g does not."""
    extra = len(g.shape) - len(shape)
    if extra:
        g = sum_of(g, list(range(extra)))
    axes = [k for k, (e, want) in enumerate(zip(g.shape, shape)) if want == 1 and e != 1]
    return sum_of(g, axes, keepdim=True) if axes else g
