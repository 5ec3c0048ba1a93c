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

import numpy as np

from fuserlite.ir.expr import BinaryOp, BinaryOpType, Expr, UnaryOp, UnaryOpType
from fuserlite.ir.fusion import Fusion
from fuserlite.runtime.numpy_ops import eval_expr
from fuserlite.runtime.reference import evaluate

F64 = np.dtype(np.float64)


def _divided(m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """m / d, with 0 where m is 0 (an exact operand adds no error, even where d is 0)."""
    return np.divide(m, d, out=np.zeros(np.broadcast_shapes(m.shape, d.shape)), where=m != 0)


# (x, m(x), f(x)) -> m(f(x)): |f(x)| for f's own rounding, plus |f'(x)| * m(x) carried over.
_UNARY: dict[UnaryOpType, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    UnaryOpType.neg: lambda x, m, y: m,
    UnaryOpType.abs: lambda x, m, y: m,
    UnaryOpType.relu: lambda x, m, y: m,
    UnaryOpType.exp: lambda x, m, y: np.abs(y) * (1 + m),
    UnaryOpType.tanh: lambda x, m, y: np.abs(y) + m,  # |tanh'| <= 1
    UnaryOpType.gelu: lambda x, m, y: np.abs(y) + 1.13 * m,  # |gelu'| < 1.13
    UnaryOpType.sqrt: lambda x, m, y: np.abs(y) + _divided(m, 2 * np.abs(y)),
    UnaryOpType.log: lambda x, m, y: np.abs(y) + _divided(m, np.abs(x)),
}

# (a, m(a), b, m(b), a op b) -> m(a op b)
_BINARY: dict[BinaryOpType, Callable[..., np.ndarray]] = {
    BinaryOpType.add: lambda a, ma, b, mb, y: ma + mb,
    BinaryOpType.sub: lambda a, ma, b, mb, y: ma + mb,
    BinaryOpType.mul: lambda a, ma, b, mb, y: ma * mb,
    BinaryOpType.div: lambda a, ma, b, mb, y: _divided(ma + np.abs(y) * mb, np.abs(b)),
    BinaryOpType.max: lambda a, ma, b, mb, y: np.maximum(ma, mb),
    BinaryOpType.min: lambda a, ma, b, mb, y: np.maximum(ma, mb),
}


def magnitude(
    expr: Expr, args: list[np.ndarray], mags: list[np.ndarray], value: np.ndarray
) -> np.ndarray:
    """m of `expr`'s output, from its arguments' values and magnitudes and its value."""
    with np.errstate(all="ignore"):
        if isinstance(expr, UnaryOp):
            return _UNARY[expr.op](args[0].astype(F64), mags[0], value.astype(F64))
        if isinstance(expr, BinaryOp):
            values, ms = iter(args), iter(mags)
            operands = [
                (np.asarray(float(x)), np.asarray(abs(float(x))))
                if isinstance(x, (int, float))
                else (next(values).astype(F64), next(ms))
                for x in expr.operands()
            ]
            (a, ma), (b, mb) = operands
            return _BINARY[expr.op](a, ma, b, mb, value.astype(F64))
        return eval_expr(expr, mags, value.shape, F64)


def magnitudes(fusion: Fusion, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """m per fusion output (float64), evaluated alongside the reference's values."""
    mags = {t: np.abs(np.asarray(a, F64)) for t, a in zip(fusion.inputs, inputs)}

    def visit(expr: Expr, args: list[np.ndarray], value: np.ndarray) -> None:
        mags[expr.output] = magnitude(expr, args, [mags[t] for t in expr.inputs], value)

    evaluate(fusion, inputs, visit)
    return [np.broadcast_to(mags[t], t.shape) for t in fusion.outputs]
