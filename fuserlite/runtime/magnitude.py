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

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ops.registry import is_scalar
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


SAME = None  # the op itself, applied to the magnitudes (copies, sums, max, matmul, ...)

# One row per op: (operand values, their magnitudes, the op's value) -> its magnitude.
# A unary f: |f(x)| for f's own rounding, plus |f'(x)| * m(x) carried over.
MAGNITUDE: dict[str, Callable[[list, list, np.ndarray], np.ndarray] | None] = {
    "set": SAME,
    "broadcast": SAME,
    "permute": SAME,
    "expand": SAME,
    "reshape": SAME,
    "take": SAME,
    "squeeze": SAME,
    "select": SAME,
    "slice": SAME,
    "cat": SAME,
    "sum": SAME,
    "max": SAME,
    "matmul": SAME,
    "linear": SAME,
    "neg": lambda a, m, y: m[0],
    "abs": lambda a, m, y: m[0],
    "relu": lambda a, m, y: m[0],
    "exp": lambda a, m, y: _abs(y) * (1 + m[0]),
    "tanh": lambda a, m, y: _abs(y) + m[0],  # |tanh'| <= 1
    "gelu": lambda a, m, y: _abs(y) + 1.13 * m[0],  # |gelu'| < 1.13
    "sqrt": lambda a, m, y: _abs(y) + _divided(m[0], np.multiply(_abs(y), 2, dtype=F64)),
    "log": lambda a, m, y: _abs(y) + _divided(m[0], _abs(a[0])),
    "sigmoid": lambda a, m, y: _abs(y) + 0.25 * m[0],  # |sigmoid'| <= 1/4
    "cast": lambda a, m, y: _abs(y) + m[0],  # its own rounding, and x's carried over
    "silu": lambda a, m, y: _abs(y) + 1.1 * m[0],  # |silu'| < 1.1
    "where": lambda a, m, y: np.where(a[0], m[1], m[2]),  # the chosen operand's
    "add": lambda a, m, y: m[0] + m[1],
    "sub": lambda a, m, y: m[0] + m[1],
    "mul": lambda a, m, y: m[0] * m[1],
    "div": lambda a, m, y: _divided(m[0] + _abs(y) * m[1], _abs(a[1])),
    "maximum": lambda a, m, y: np.maximum(m[0], m[1]),
    "minimum": lambda a, m, y: np.maximum(m[0], m[1]),
}


def magnitude(
    expr: Expr, args: list[np.ndarray], mags: list[np.ndarray], value: np.ndarray
) -> np.ndarray:
    """m of `expr`'s output, from its arguments' values and magnitudes and its value.

    Values stay in their dtype (no float64 copy of a GiB tensor): each formula takes
    |v| first (`_abs`, exact), which numpy widens against the float64 m."""
    if expr.op_name not in MAGNITUDE:
        raise ExecutionError(f"no magnitude rule for expression {expr!r}")
    rule = MAGNITUDE[expr.op_name]
    if rule is SAME:
        return eval_expr(expr, mags, value.shape, F64)
    values, ms = iter(args), iter(mags)
    # A scalar operand is exact: m = |x|.
    operands = [
        (np.asarray(float(x)), np.asarray(abs(float(x))))
        if is_scalar(x)
        else (next(values), next(ms))
        for x in expr.operands()
    ]
    with np.errstate(all="ignore"):
        return rule([v for v, _ in operands], [m for _, m in operands], value)


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
