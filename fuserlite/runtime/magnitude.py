"""How large the terms behind each element of a result are: the scale of its rounding error.

Two correct evaluations of a fusion differ by rounding: the executor sums partial
results per device, blocks its GEMMs and rounds half where kernels store it, the
reference does neither. To first order, every such difference in an element is at
most a few units of rounding of the *terms* that element is made of, not of the
element itself: a sum of large terms that cancel to nearly 0 carries the error of
the large terms. `magnitudes` evaluates, next to each value, that scale m >= |value|:

    add, sub: m(a) + m(b)          mul: m(a) * m(b)          max, min: max(m(a), m(b))
    div: (m(a) + |a / b| * m(b)) / |b|
    sum, linear, matmul: the same op on the magnitudes (sum of |terms|, |a| @ |b|)
    a unary f: |f(x)| + |f'(x)| * m(x), with f' bounded (tanh, gelu) or exact (exp, sqrt, log)
    copies, broadcasts, reshapes, max reductions: the same op on the magnitudes

Fusion inputs are exact: m(x) = |x|. validate compares |out - ref| <= atol + rtol * m.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

import numpy as np

from fuserlite.ir.expr import BinaryOp, BinaryOpType, Expr, UnaryOp, UnaryOpType
from fuserlite.ir.fusion import Fusion
from fuserlite.runtime.liveness import dead_after
from fuserlite.runtime.numpy_ops import eval_expr
from fuserlite.runtime.reference import evaluate

F64 = np.dtype(np.float64)


def _abs(v: np.ndarray) -> np.ndarray:
    """|v|, exact: a float stays in its dtype (numpy widens it against a float64 m),
    anything else becomes float64 first (|int64 min| does not fit an int64)."""
    v = np.asarray(v)
    return np.abs(v) if v.dtype.kind == "f" else np.abs(v.astype(F64))


def _divided(m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """m / d, with 0 where m is 0 (an exact operand adds no error, even where d is 0)."""
    return np.divide(m, d, out=np.zeros(np.broadcast_shapes(m.shape, d.shape)), where=m != 0)


# (x, m(x), f(x)) -> m(f(x)): |f(x)| for f's own rounding, plus |f'(x)| * m(x) carried over.
_UNARY: dict[UnaryOpType, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    UnaryOpType.neg: lambda x, m, y: m,
    UnaryOpType.abs: lambda x, m, y: m,
    UnaryOpType.relu: lambda x, m, y: m,
    UnaryOpType.exp: lambda x, m, y: _abs(y) * (1 + m),
    UnaryOpType.tanh: lambda x, m, y: _abs(y) + m,  # |tanh'| <= 1
    UnaryOpType.gelu: lambda x, m, y: _abs(y) + 1.13 * m,  # |gelu'| < 1.13
    UnaryOpType.sqrt: lambda x, m, y: _abs(y) + _divided(m, np.multiply(_abs(y), 2, dtype=F64)),
    UnaryOpType.log: lambda x, m, y: _abs(y) + _divided(m, _abs(x)),
}

# (a, m(a), b, m(b), a op b) -> m(a op b)
_BINARY: dict[BinaryOpType, Callable[..., np.ndarray]] = {
    BinaryOpType.add: lambda a, ma, b, mb, y: ma + mb,
    BinaryOpType.sub: lambda a, ma, b, mb, y: ma + mb,
    BinaryOpType.mul: lambda a, ma, b, mb, y: ma * mb,
    BinaryOpType.div: lambda a, ma, b, mb, y: _divided(ma + _abs(y) * mb, _abs(b)),
    BinaryOpType.max: lambda a, ma, b, mb, y: np.maximum(ma, mb),
    BinaryOpType.min: lambda a, ma, b, mb, y: np.maximum(ma, mb),
}


def magnitude(
    expr: Expr, args: list[np.ndarray], mags: list[np.ndarray], value: np.ndarray
) -> np.ndarray:
    """m of `expr`'s output, from its arguments' values and magnitudes and its value.

    Values stay in their dtype (no float64 copy of a GiB tensor): each formula takes
    |v| first (`_abs`, exact), which numpy widens against the float64 m."""
    with np.errstate(all="ignore"):
        if isinstance(expr, UnaryOp):
            return _UNARY[expr.op](args[0], mags[0], value)
        if isinstance(expr, BinaryOp):
            values, ms = iter(args), iter(mags)
            operands = [
                (np.asarray(float(x)), np.asarray(abs(float(x))))
                if isinstance(x, (int, float))
                else (next(values), next(ms))
                for x in expr.operands()
            ]
            (a, ma), (b, mb) = operands
            return _BINARY[expr.op](a, ma, b, mb, value)
        return eval_expr(expr, mags, value.shape, F64)


def magnitudes(fusion: Fusion, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """m per fusion output (float64), evaluated alongside the reference's values.

    An input's m is made when an expression first reads it and, like every m, dropped
    after the last one that does, as the reference drops values (runtime/liveness.py)."""
    given = dict(zip(fusion.inputs, inputs))
    mags: dict = {}
    exprs = fusion.exprs()
    dead = dead_after(exprs, attrgetter("inputs"), attrgetter("outputs"), keep=fusion.outputs)
    dead_of = {id(e): d for e, d in zip(exprs, dead)}

    def mag(t) -> np.ndarray:
        if t not in mags:
            mags[t] = np.abs(np.asarray(given[t], F64))
        return mags[t]

    def visit(expr: Expr, args: list[np.ndarray], value: np.ndarray) -> None:
        mags[expr.output] = magnitude(expr, args, [mag(t) for t in expr.inputs], value)
        for t in dead_of[id(expr)]:
            mags.pop(t, None)

    evaluate(fusion, inputs, visit)
    return [np.broadcast_to(mag(t), t.shape) for t in fusion.outputs]
