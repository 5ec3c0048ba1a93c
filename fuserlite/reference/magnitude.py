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
from fuserlite.ir.liveness import dead_after
from fuserlite.numerics import attention
from fuserlite.ops.registry import is_scalar
from fuserlite.reference.evaluator import evaluate
from fuserlite.reference.numpy_ops import eval_expr

F64 = np.dtype(np.float64)


def _abs(v: np.ndarray) -> np.ndarray:
    """|v|, exact: a float stays in its dtype (numpy widens it against a float64 m),
    anything else becomes float64 first (|int64 min| does not fit an int64)."""
    v = np.asarray(v)
    return np.abs(v) if v.dtype.kind == "f" else np.abs(v.astype(F64))


def _divided(m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """m / d, with 0 where m is 0 (an exact operand adds no error, even where d is 0)."""
    return np.divide(m, d, out=np.zeros(np.broadcast_shapes(m.shape, d.shape)), where=m != 0)


def _t(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


def _weights(expr: Expr, q: np.ndarray, k: np.ndarray) -> tuple:
    """(p, dropout factor, scale) of an attention over the whole tensors, and the
    magnitude function of its scores: m(s) = scale (m(q) |k|^T + |q| m(k)^T)."""
    a = expr.attrs
    p, factor, scale = attention.probabilities(
        q, k, a["dropout_p"], a["is_causal"], a["scale"], seed=a["seed"], offset=a["offset"]
    )
    return p.astype(F64), np.asarray(factor, F64), scale


def _sdpa(expr: Expr, a: list, m: list, outs: tuple) -> tuple[np.ndarray, np.ndarray]:
    """out = sum_s D_s p_s v_s and lse = log sum exp(s): first order in m(v) and in the
    scores' m through the probabilities (dp_s = p_s (ds_s - sum_t p_t ds_t))."""
    (q, k, v), (mq, mk, mv) = a, m
    p, factor, scale = _weights(expr, q, k)
    aq, ak, av = (_abs(x) for x in (q, k, v))
    ms = scale * (mq @ _t(ak) + aq @ _t(mk))
    pd = p * factor
    spread = np.sum(p * ms, axis=-1, keepdims=True)
    m_out = _abs(outs[0]) + pd @ mv + (pd * ms) @ av + (pd @ av) * spread
    return m_out, _abs(outs[1]) + spread[..., 0]


def _sdpa_bwd(expr: Expr, a: list, m: list, outs: tuple) -> tuple[np.ndarray, ...]:
    """The gradients' terms in magnitude (sdpa_bwd's formulas on |x| and m(x)), with the
    probabilities' first-order change through the scores."""
    (dout, q, k, v, out, _), (mdo, mq, mk, mv, mo, _) = a, m
    p, factor, scale = _weights(expr, q, k)
    ado, aq, ak, av, ao = (_abs(x) for x in (dout, q, k, v, out))
    ms = scale * (mq @ _t(ak) + aq @ _t(mk))
    grad_p = factor * (ado @ _t(av))
    row = np.sum(ado * ao, axis=-1, keepdims=True)
    m_grad_p = factor * (mdo @ _t(av) + ado @ _t(mv))
    m_row = np.sum(mdo * ao + ado * mo, axis=-1, keepdims=True)
    grad_s = p * (grad_p + row)
    m_grad_s = p * (m_grad_p + m_row) + grad_s * (ms + np.sum(p * ms, axis=-1, keepdims=True))
    pd = p * factor
    m_dq = _abs(outs[0]) + scale * (m_grad_s @ ak + grad_s @ mk)
    m_dk = _abs(outs[1]) + scale * (_t(m_grad_s) @ aq + _t(grad_s) @ mq)
    m_dv = _abs(outs[2]) + _t(pd) @ mdo + _t(pd * ms) @ ado
    return m_dq, m_dk, m_dv


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
    "lt": lambda a, m, y: _abs(y),  # exact: a bool is its own magnitude, as an input is
    "rand_like": lambda a, m, y: _abs(y),  # drawn exactly, as an input is given
    # start + step * i: its terms |start| and |step * i| (= |y - start| to rounding)
    "iota": lambda a, m, y: _abs(a[0]) + _abs(np.subtract(y, a[0], dtype=F64)),
    # several outputs: (expr, values, magnitudes, the outputs' values) -> their m
    "sdpa": _sdpa,
    "sdpa_bwd": _sdpa_bwd,
}


def magnitude(
    expr: Expr, args: list[np.ndarray], mags: list[np.ndarray], value: np.ndarray, *more
) -> np.ndarray | tuple[np.ndarray, ...]:
    """m of `expr`'s output, from its arguments' values and magnitudes and its value
    (an op of several outputs: their values, and a tuple of their m).

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
        if len(expr.outputs) > 1:
            return rule(expr, [v for v, _ in operands], [m for _, m in operands], (value, *more))
        return rule([v for v, _ in operands], [m for _, m in operands], value)


def magnitudes(fusion: Fusion, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """m per fusion output (float64), evaluated alongside the reference's values.

    An input's m is made when an expression first reads it and, like every m, dropped
    after the last one that does, as the reference drops values (ir/liveness.py)."""
    given = dict(zip(fusion.inputs, inputs))
    mags: dict = {}
    exprs = fusion.exprs()
    dead = dead_after(exprs, attrgetter("inputs"), attrgetter("outputs"), keep=fusion.outputs)
    dead_of = {id(e): d for e, d in zip(exprs, dead)}

    def mag(t) -> np.ndarray:
        if t not in mags:
            mags[t] = np.abs(np.asarray(given[t], F64))
        return mags[t]

    def visit(expr: Expr, args: list[np.ndarray], values: list[np.ndarray]) -> None:
        made = magnitude(expr, args, [mag(t) for t in expr.inputs], *values)
        mags.update(zip(expr.outputs, made if isinstance(made, tuple) else (made,)))
        for t in dead_of[id(expr)]:
            mags.pop(t, None)

    evaluate(fusion, inputs, visit)
    return [np.broadcast_to(mag(t), t.shape) for t in fusion.outputs]
