"""numpy semantics of every compute expression, shared by the reference evaluator,
the per-device executor (which passes local shapes) and the kernel runner.

Values are computed in their dtype's compute dtype (DType.compute: half in
float, as nvFuser's kernels do) and rounded to the storage dtype only where they
are stored (`store`): at kernel outputs in the executor, at the fusion's outputs
in the reference.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import (
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    ExpandOp,
    Expr,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    ReductionOp,
    ReductionOpType,
    ReshapeOp,
    UnaryOp,
    UnaryOpType,
)
from fuserlite.ir.tensor import TensorView

BLOCK = 1 << 18  # elements a pass over a whole array takes at a time


def blocks(size: int, block: int = BLOCK) -> Iterator[slice]:
    """Slices of `block` elements covering range(size): a pass over an array of GiBs
    that needs temporaries (float64 copies, random draws) keeps them a few MiB."""
    return (slice(start, start + block) for start in range(0, size, block))


def _gelu(x: np.ndarray) -> np.ndarray:
    c = np.asarray(math.sqrt(2.0 / math.pi), dtype=x.dtype)
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x * x * x)))


_UNARY = {
    UnaryOpType.neg: np.negative,
    UnaryOpType.exp: np.exp,
    UnaryOpType.tanh: np.tanh,
    UnaryOpType.relu: lambda x: np.maximum(x, np.zeros((), x.dtype)),
    UnaryOpType.abs: np.abs,
    UnaryOpType.gelu: _gelu,
    UnaryOpType.sqrt: np.sqrt,
    UnaryOpType.log: np.log,
}

_BINARY = {
    BinaryOpType.add: np.add,
    BinaryOpType.sub: np.subtract,
    BinaryOpType.mul: np.multiply,
    BinaryOpType.div: np.true_divide,
    BinaryOpType.max: np.maximum,
    BinaryOpType.min: np.minimum,
}


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b; a stack of rows times one matrix is one 2-D GEMM.

    numpy runs [..., m, k] @ [k, n] as one small GEMM per leading index; one
    [(...) * m, k] @ [k, n] GEMM is faster, most of all on a device's small shards.
    """
    if a.ndim <= 2 or b.ndim != 2:
        return np.matmul(a, b)
    return np.matmul(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])


def store(tv: TensorView, value: np.ndarray) -> np.ndarray:
    """`value` rounded to tv's storage dtype, as when a kernel writes it to global memory."""
    return value.astype(tv.dtype.numpy, copy=False)


def eval_expr(
    expr: Expr, args: list[np.ndarray], out_shape: tuple[int, ...], dtype: np.dtype | None = None
) -> np.ndarray:
    """Evaluate one single-output expression on arrays (global or local shards); the
    result is in the output's compute dtype (see `store`), or in `dtype` if given."""
    dtype = expr.output.dtype.compute.numpy if dtype is None else dtype
    with np.errstate(all="ignore"):
        if isinstance(expr, LoadStoreOp):
            out = args[0]
        elif isinstance(expr, UnaryOp):
            out = _UNARY[expr.op](args[0].astype(dtype, copy=False))
        elif isinstance(expr, BinaryOp):
            it = iter(args)
            lhs, rhs = (
                np.asarray(x, dtype)
                if isinstance(x, (int, float))
                else next(it).astype(dtype, copy=False)
                for x in expr.operands()
            )
            out = _BINARY[expr.op](lhs, rhs)
        elif isinstance(expr, BroadcastOp):
            axes = tuple(k for k, f in enumerate(expr.flags) if f)
            out = np.expand_dims(args[0], axes)
        elif isinstance(expr, ReductionOp):
            # Accumulate in the compute dtype: half sums in float, bool counts in int64.
            fn = np.sum if expr.op is ReductionOpType.sum else np.max
            out = fn(args[0].astype(dtype, copy=False), axis=expr.axes)
        elif isinstance(expr, ExpandOp):
            out = np.broadcast_to(args[0], out_shape)
        elif isinstance(expr, ReshapeOp):
            out = args[0].reshape(out_shape)
        elif isinstance(expr, (LinearOp, MatmulOp)):
            a, b, *bias = (x.astype(dtype, copy=False) for x in args)
            out = _matmul(a, b.T if isinstance(expr, LinearOp) else b)
            if bias:
                out = out + bias[0]
        else:
            raise ExecutionError(f"no numpy evaluation for expression {expr!r}")
    out = np.asarray(out).astype(dtype, copy=False)
    if out.shape != tuple(out_shape):
        raise ExecutionError(
            f"{expr!r} produced shape {out.shape}, expected {tuple(out_shape)} for {expr.output.name}"
        )
    return out
