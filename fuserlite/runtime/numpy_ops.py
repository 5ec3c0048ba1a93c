"""numpy semantics of every compute expression, shared by the reference evaluator,
the per-device executor (which passes local shapes) and the kernel runner.

Values are computed in their dtype's compute dtype (DType.compute: half in
float, as nvFuser's kernels do) and rounded to the storage dtype only where they
are stored (`store`): at kernel outputs in the executor, at the fusion's outputs
in the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ReductionOpType
from fuserlite.numerics import casts, nn
from fuserlite.ops.reductions import reduced_axes
from fuserlite.ops.registry import (
    Category,
    definition_of,
    positional,
    producer_to_consumer,
)
from fuserlite.runtime.communicator import identity

BLOCK = 1 << 18  # elements a pass over a whole array takes at a time


def blocks(size: int, block: int = BLOCK) -> Iterator[slice]:
    """Slices of `block` elements covering range(size): a pass over an array of GiBs
    that needs temporaries (float64 copies, random draws) keeps them a few MiB."""
    return (slice(start, start + block) for start in range(0, size, block))


def _gelu(x: np.ndarray) -> np.ndarray:
    c = np.asarray(math.sqrt(2.0 / math.pi), dtype=x.dtype)
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x * x * x)))


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b; a stack of rows times one matrix is one 2-D GEMM.

    numpy runs [..., m, k] @ [k, n] as one small GEMM per leading index; one
    [(...) * m, k] @ [k, n] GEMM is faster, most of all on a device's small shards.
    """
    if a.ndim <= 2 or b.ndim != 2:
        return np.matmul(a, b)
    rows = math.prod(a.shape[:-1])  # not -1: a device's empty chunk of k has no rows to infer
    return np.matmul(a.reshape(rows, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])


def _linear(x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    """x[..., k] @ w[wbatch..., n, k]^T (+ bias[wbatch..., n]) -> [wbatch..., ..., n]:
    one GEMM against all the weight's rows, its batch axes then moved to the front."""
    wbatch, n = w.shape[:-2], w.shape[-2]
    rows = math.prod(w.shape[:-1])  # not -1: an empty chunk of k has no rows to infer
    out = _matmul(x, w.reshape(rows, w.shape[-1]).T).reshape(*x.shape[:-1], *wbatch, n)
    xb = x.ndim - 1
    out = np.moveaxis(out, range(xb, xb + len(wbatch)), range(len(wbatch)))
    return out + bias[0].reshape(*wbatch, *[1] * xb, n) if bias else out


def _same(x: np.ndarray) -> np.ndarray:
    return x


def _cast(expr: Expr, x: np.ndarray) -> np.ndarray:
    """x (in its own dtype) converted to the cast's dtype, rounded once."""
    return casts.cast(x, expr.attrs["dtype"].numpy)


# One row per op. A pointwise op's row computes elementwise from operands that are
# already laid out on its output's points (operands() order, scalars as 0-d arrays),
# in the output's compute dtype; a conversion's row (OpDef.converts) takes
# (expr, operands in their own dtypes); any other op's row takes (expr, operand
# arrays, output shape).
Row = Callable[..., np.ndarray]
NUMPY: dict[str, Row] = {
    "set": _same,
    "broadcast": _same,  # its operand is laid out on the output's axes: a copy
    "permute": _same,  # likewise, transposed by its axis map
    "neg": np.negative,
    "exp": np.exp,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "abs": np.abs,
    "gelu": _gelu,
    "sqrt": np.sqrt,
    "log": np.log,
    "sigmoid": nn.sigmoid,
    "silu": nn.silu,
    "where": lambda c, a, b: np.where(c != 0, a, b),  # c arrives in the output's type
    "cast": _cast,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
    # Reductions accumulate in the compute dtype: half sums in float, bool counts in int64.
    "sum": lambda e, a, shape: np.sum(a[0], axis=reduced_axes(e)),
    # A device's empty chunk of a sharded axis has the identity as its partial maximum.
    "max": lambda e, a, shape: np.max(
        a[0], axis=reduced_axes(e), initial=identity(a[0].dtype, ReductionOpType.max)
    ),
    "expand": lambda e, a, shape: np.broadcast_to(a[0], shape),
    "reshape": lambda e, a, shape: a[0].reshape(shape),
    "take": lambda e, a, shape: np.take(a[0], e.attrs["indices"], axis=0),
    "squeeze": lambda e, a, shape: a[0].reshape(shape),
    "select": lambda e, a, shape: np.take(a[0], e.attrs["index"], axis=e.attrs["axis"]),
    "slice": lambda e, a, shape: a[0][tuple(slice(*r) for r in e.attrs["ranges"])],
    "cat": lambda e, a, shape: np.concatenate(a, axis=e.attrs["axis"]),
    "matmul": lambda e, a, shape: _matmul(*a),
    "linear": lambda e, a, shape: _linear(*a),
}


def store(tv: TensorView, value: np.ndarray) -> np.ndarray:
    """`value` rounded to tv's storage dtype, as when a kernel writes it to global memory."""
    return value.astype(tv.dtype.numpy, copy=False)


def _row(expr: Expr) -> Row:
    row = NUMPY.get(expr.op_name)
    if row is None:
        raise ExecutionError(f"no numpy evaluation for expression {expr!r}")
    return row


def _laid_out(expr: Expr, producer: TensorView, value: np.ndarray) -> np.ndarray:
    """A pointwise operand's data on the output's data axes, through the op's axis map:
    its axes where they map (transposed into the output's order), extent 1 elsewhere."""
    out_data = {li: k for k, li in enumerate(expr.output.data_positions())}
    amap = producer_to_consumer(expr, producer)
    try:
        target = [out_data[amap[li]] for li in producer.data_positions()]
    except KeyError:
        raise ExecutionError(
            f"{expr!r}: an axis of {producer.name} maps to no data axis of {expr.output.name}"
        ) from None
    order = sorted(range(len(target)), key=target.__getitem__)
    shape = [1] * len(out_data)
    for k, t in enumerate(target):
        shape[t] = value.shape[k]
    return value.transpose(order).reshape(shape)


def _operands(expr: Expr, args: list[np.ndarray], dtype: np.dtype) -> list[np.ndarray]:
    """operands() as arrays in `dtype`: the tensor arrays given, scalars as 0-d arrays
    in their places."""
    operands = [a.astype(dtype, copy=False) for a in args]
    for k, x in getattr(expr, "scalars", {}).items():  # only an Op takes scalars
        operands.insert(k, np.asarray(x, dtype))
    return operands


def eval_expr(
    expr: Expr, args: list[np.ndarray], out_shape: tuple[int, ...], dtype: np.dtype | None = None
) -> np.ndarray:
    """Evaluate one single-output expression on arrays (global or local shards); the
    result is in the output's compute dtype (see `store`), or in `dtype` if given."""
    dtype = expr.output.dtype.compute.numpy if dtype is None else dtype
    d = definition_of(expr)
    row = _row(expr)
    if d.category is Category.POINTWISE and d.axis_map is not positional:
        args = [_laid_out(expr, t, a) for t, a in zip(expr.inputs, args)]
    with np.errstate(all="ignore"):
        if d.converts:
            out = row(expr, *args)
        elif d.category is Category.POINTWISE:
            out = row(*_operands(expr, args, dtype))
        else:
            out = row(expr, _operands(expr, args, dtype), tuple(out_shape))
    out = np.asarray(out).astype(dtype, copy=False)
    if out.shape != tuple(out_shape):
        raise ExecutionError(
            f"{expr!r} produced shape {out.shape}, expected {tuple(out_shape)} for {expr.output.name}"
        )
    return out


def eval_at_points(expr: Expr, args: list[np.ndarray]) -> np.ndarray:
    """Evaluate a pointwise expression on operand values already gathered at its
    output's points (the kernel runner's chunks); the result in the output's compute
    dtype."""
    dtype = expr.output.dtype.compute.numpy
    with np.errstate(all="ignore"):
        if definition_of(expr).converts:
            out = _row(expr)(expr, *args)
        else:
            out = _row(expr)(*_operands(expr, args, dtype))
        return np.asarray(out).astype(dtype, copy=False)
