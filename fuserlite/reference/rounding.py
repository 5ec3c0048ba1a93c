"""How far two correct evaluations of a fusion can differ, element by element.

Two correct evaluations of one fusion differ only by rounding: the executor sums
each device's partial results and then folds them, blocks its GEMMs and rounds a
half tensor wherever a kernel stores it; the reference sums whole axes and keeps
half values in float up to the fusion's outputs; a compiled kernel calls the C
library's exp and may fuse a multiply into an add. `bounds` evaluates, next to the
reference's value of every tensor, the standard deviation sigma of that difference,
in three parts by where it comes from (Source):

- ORDER: sums and contractions accumulated in another order. A sum of n terms in
  any order is within sqrt(n) u sum|x| of the exact sum with high probability
  (Higham & Mary, "A new approach to probabilistic rounding error analysis", 2019;
  u is the unit roundoff of its compute dtype: 2**-24 in float32, 2**-53 in float64);
  a contraction over k: sqrt(k) u |a| @ |b|.
- LIBRARY: math functions from different libraries (exp, tanh, log and what uses
  them: 16 u |y|, a few ulps on each side: numpy's, glibc's scalar and vector ones).
  Every path rounds a * b + c twice (the compiled kernels are built without
  contraction into fused multiply-adds), so the other arithmetic rounds alike.
- STORE: half rounding where one side stores a float16 or bfloat16 tensor and the
  other keeps it in float: u_half |v| (2**-11 for float16, 2**-8 for bfloat16).

Rounding errors of different elements are independent, so each op carries its
operands' sigmas to its result in quadrature through its derivative (PROPAGATE:
|f'(x)| sigma for a function, sqrt((b sigma_a)**2 + (a sigma_b)**2) for a product,
sqrt(a**2 @ sigma_b**2 + sigma_a**2 @ b**2) for a matmul, the op itself for copies):
that is how the errors of sums of many terms behave, where adding their worst cases
would grow by sqrt(k) at every contraction (a transformer block's float32 output
would be allowed an error twice its size). Errors that are one value repeated (a
tensor broadcast along an axis, a row's mean or norm) are the exception: a sum along
that axis adds them up, not in quadrature, so each bound remembers the axes it is
repeated along (`coherent`) and a sum over them adds linearly. Where both sides round
a value that may already differ (every arithmetic result, a half tensor both store,
a cast) the rounding may land on neighbouring values: one more rounding there, and
only there. A value computed from exactly equal operands by the same exactly rounded
operation is exactly equal: sigma 0, so an element that should be bit-identical must
be. validate allows LAMBDA sigma; the parts say which source dominates (the report's
"where the error comes from").

Differences says which sources two evaluations have: the executor against the
float reference has all three (AGAINST_REFERENCE); the same program run sharded and
unsharded on one compute path has no STORE (SAME_PATH): the same kernels store the same
tensors in the same dtypes, and only the order of the sums across devices (and of GEMMs
over other shapes) differs, and which math function (vector or scalar) an element meets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from operator import attrgetter

import numpy as np

from fuserlite.ir.errors import ExecutionError, FuserliteError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.liveness import dead_after
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.ops.reductions import reduced_axes
from fuserlite.ops.registry import compute_dtype, is_scalar, operand_to_output
from fuserlite.reference.attention_rounding import (
    absolute,
    score_scale,
    sdpa_bwd_change,
    sdpa_sigma,
    swap_last,
)
from fuserlite.reference.evaluator import evaluate
from fuserlite.reference.numpy_ops import eval_expr
from fuserlite.reference.rows import Rows, Span

F64 = np.dtype(np.float64)
SMALLEST_NORMAL = 2.0**-126  # float32's (and bfloat16's)
LAMBDA = 10.0  # standard deviations validate allows; a flip is possible within them


class Source(Enum):
    """Where a difference between two correct evaluations comes from."""

    ORDER = "sum order"
    LIBRARY = "math library"
    STORE = "rounding at kernel stores"


SOURCES = tuple(Source)
K = len(SOURCES)  # a sigma is an array [K, *shape]: one part per source

# Unit roundoff (half an ulp at 1) of each float dtype; integers and bools are exact.
UNIT = {
    DType.float64: 2.0**-53,
    DType.float32: 2.0**-24,
    DType.float16: 2.0**-11,
    DType.bfloat16: 2.0**-8,
}
HALVES = frozenset({DType.float16, DType.bfloat16})
LIBM_ULPS = 16  # units of roundoff two math libraries' exp, tanh, log may differ by
BOTH = np.sqrt(2)  # two independent evaluations, each with its own rounding


@dataclass(frozen=True)
class Differences:
    """What may differ between the two evaluations compared (besides the order of sums,
    which always may)."""

    libraries: bool  # other math functions, fused multiply-adds (another compute path)
    stores: bool  # one side rounds half intermediates where kernels store them


AGAINST_REFERENCE = Differences(libraries=True, stores=True)
# One compute path computes exp, tanh and log alike only in alike loops: a compiled
# kernel calls glibc's vector functions (libmvec) in its vectorized loop and the scalar
# ones in its tail, and a device's shard puts an element in the other one.
SAME_PATH = Differences(libraries=True, stores=False)


def unit(dtype: DType) -> float:
    """The unit roundoff of `dtype` (0 for integers and bools: exact)."""
    return UNIT.get(dtype, 0.0)


@dataclass(frozen=True)
class Err:
    """A tensor's sigma [K, *shape] and the data axes along which it is one value
    repeated (a sum over them adds it up)."""

    parts: np.ndarray
    coherent: frozenset[int] = frozenset()

    @property
    def total(self) -> np.ndarray:
        return np.sqrt(np.sum(self.parts**2, axis=0))


def _quadrature(*terms: np.ndarray) -> np.ndarray:
    return np.sqrt(sum(t**2 for t in terms))


def _times(parts: np.ndarray, d) -> np.ndarray:
    """parts * d, 0 where parts is 0 (an exact operand adds nothing, even where the
    derivative is unbounded). A derivative is never negative: where it is finite
    everywhere, the product is 0 there already."""
    if np.isfinite(d).all():
        return parts * d
    return np.where(parts == 0, 0.0, parts * d)


def _inverse(room: np.ndarray) -> np.ndarray:
    """1 / room where room > 0; where it is not, the result is unbounded (inf)."""
    return np.where(room > 0, 1 / np.where(room > 0, room, 1), np.inf)


# -- pointwise ops: |d result / d operand| per operand, broadcastable like the values --
Derivatives = Callable[[list, np.ndarray, list], list]


def _exp_d(vals, y, sig):
    # first order |y|; grown by expm1 for a sigma that is not small
    reach = LAMBDA * sig[0]
    with np.errstate(all="ignore"):
        grow = np.where(reach > 1e-3, np.expm1(reach) / np.where(reach > 0, reach, 1), 1.0)
    return [absolute(y) * grow]


def _sqrt_d(vals, y, sig):
    # |sqrt(x + d) - sqrt(x)| <= |d| / sqrt(x), and <= sqrt(|d|) always
    return [1 / np.maximum(absolute(y), np.sqrt(LAMBDA * sig[0]))]


def _log_d(vals, y, sig):
    return [_inverse(absolute(vals[0]) - LAMBDA * sig[0])]  # near 0: unbounded


def _div_d(vals, y, sig):
    inv = _inverse(absolute(vals[1]) - LAMBDA * sig[1])
    return [inv, absolute(y) * inv]


def _rsqrt_d(vals, y, sig):
    # d x^-1/2 = -y / (2x) dx
    return [absolute(y) * _inverse(2 * (absolute(vals[0]) - LAMBDA * sig[0]))]


def _pow_d(vals, y, sig):
    # d a^b = b y / a da + y ln|a| db (0 where y is 0)
    ay = absolute(y)
    with np.errstate(all="ignore"):
        by_exponent = np.where(ay == 0, 0.0, ay * np.abs(np.log(absolute(vals[0]))))
    return [absolute(vals[1]) * ay * _inverse(absolute(vals[0]) - LAMBDA * sig[0]), by_exponent]


def _constant(*c: float) -> Derivatives:
    return lambda vals, y, sig: list(c)


DERIVATIVES: dict[str, Derivatives] = {
    "neg": _constant(1.0),
    "abs": _constant(1.0),
    "relu": _constant(1.0),
    "exp": _exp_d,
    "tanh": _constant(1.0),  # |tanh'| <= 1
    "gelu": _constant(1.13),  # |gelu'| < 1.13
    "erf": _constant(1.13),  # |erf'| <= 2 / sqrt(pi)
    "sqrt": _sqrt_d,
    "log": _log_d,
    "sigmoid": _constant(0.25),  # |sigmoid'| <= 1/4
    "silu": _constant(1.1),  # |silu'| < 1.1
    "sin": _constant(1.0),  # |sin'| <= 1
    "cos": _constant(1.0),  # |cos'| <= 1
    "rsqrt": _rsqrt_d,
    "add": _constant(1.0, 1.0),
    "sub": _constant(1.0, 1.0),
    "mul": lambda vals, y, sig: [absolute(vals[1]), absolute(vals[0])],
    "div": _div_d,
    "pow": _pow_d,
    "maximum": _constant(1.0, 1.0),
    "minimum": _constant(1.0, 1.0),
}


@dataclass
class _Op:
    """One expression as the rules see it: operand values and sigmas in operands()
    order (a scalar is exact: sigma None), and the outputs' values."""

    expr: Expr
    vals: list[np.ndarray]
    errs: list[Err | None]
    outs: tuple[np.ndarray, ...]
    start: tuple[int, ...] | None = None  # where the first output's block lies (None: whole)

    def parts(self, k: int, shape=None) -> np.ndarray:
        """Operand k's sigma parts (zeros where exact), broadcastable to `shape` from the
        right as its values are."""
        e = self.errs[k]
        v = self.vals[k]
        p = np.zeros((K, *np.shape(v))) if e is None else e.parts
        if shape is not None:
            p = p.reshape(K, *(1,) * (len(shape) - p.ndim + 1), *p.shape[1:])
        return p

    def sigma(self, k: int) -> np.ndarray:
        e = self.errs[k]
        return np.zeros(np.shape(self.vals[k])) if e is None else e.total


def _pointwise_coherent(op: _Op, shape) -> frozenset[int]:
    """The output axes along which a positional pointwise op's sigma is one value
    repeated: each inexact operand's own, and those it is broadcast along (extent 1)."""
    out: set[int] = set()
    rank = len(shape)
    for v, e in zip(op.vals, op.errs):
        if e is None:
            continue
        vshape = np.shape(v)
        lead = rank - len(vshape)
        out.update(lead + a for a in e.coherent)
        out.update(lead + a for a, n in enumerate(vshape) if n == 1 and shape[lead + a] > 1)
        out.update(range(lead))
    return frozenset(out)


def _pointwise(op: _Op) -> list[Err]:
    y = op.outs[0]
    sig = [op.sigma(k) for k in range(len(op.vals))]
    ds = DERIVATIVES[op.expr.op_name](op.vals, y, sig)
    parts = np.sqrt(sum(_times(op.parts(k, y.shape), d) ** 2 for k, d in enumerate(ds)))
    return [Err(np.broadcast_to(parts, (K, *y.shape)), _pointwise_coherent(op, y.shape))]


def _flip_parts(op: _Op, ks: Sequence[int], near: np.ndarray, shape) -> np.ndarray:
    """A bool that may come out the other way where `near`: sigma 1 there, shared among
    the sources of the operands `ks`' sigmas."""
    var = sum(op.parts(k, shape) ** 2 for k in ks)
    total = np.sum(var, axis=0)
    share = np.divide(var, total, out=np.ones(np.shape(var)), where=total < np.inf)
    return np.sqrt(np.where(near & (total > 0), share, 0.0))


def _lt(op: _Op) -> list[Err]:
    y = op.outs[0]
    gap = np.abs(np.asarray(op.vals[0], F64) - np.asarray(op.vals[1], F64))
    near = gap <= LAMBDA * _quadrature(op.sigma(0), op.sigma(1))
    parts = np.broadcast_to(_flip_parts(op, (0, 1), near, y.shape), (K, *y.shape))
    return [Err(parts, _pointwise_coherent(op, y.shape))]


def _where(op: _Op) -> list[Err]:
    y = op.outs[0]
    chosen = np.where(np.asarray(op.vals[0]) != 0, op.parts(1, y.shape), op.parts(2, y.shape))
    gap = np.abs(np.asarray(op.vals[1], F64) - np.asarray(op.vals[2], F64))
    parts = _quadrature(chosen, op.parts(0, y.shape) * gap)  # a flipped condition: the other
    return [Err(np.broadcast_to(parts, (K, *y.shape)), _pointwise_coherent(op, y.shape))]


def _cast(op: _Op) -> list[Err]:
    y, target = op.outs[0], op.expr.attrs["dtype"]
    coherent = _pointwise_coherent(op, y.shape)
    if target.is_float:
        return [Err(np.broadcast_to(op.parts(0, y.shape), (K, *y.shape)), coherent)]
    sigma = op.sigma(0)
    # to bool: x != 0 may flip within its sigma of 0; to an integer: truncation may step
    near = absolute(op.vals[0]) <= LAMBDA * sigma if target is DType.bool else sigma > 0
    flip = _flip_parts(op, (0,), near, y.shape)
    parts = flip if target is DType.bool else _quadrature(op.parts(0, y.shape), flip)
    return [Err(np.broadcast_to(parts, (K, *y.shape)), coherent)]


def _mapped(op: _Op, k: int, out: TensorView) -> frozenset[int]:
    """Operand k's coherent axes as the output's data axes, through the op's axis map;
    every output axis where an axis does not map (conservative: sums add linearly)."""
    e = op.errs[k]
    if e is None or not e.coherent:
        return frozenset()
    producer = op.expr.inputs[k]
    data_in, data_out = producer.data_positions(), out.data_positions()
    try:
        amap = operand_to_output(op.expr, k, out)
        return frozenset(data_out.index(amap[data_in[a]]) for a in e.coherent)
    except (KeyError, ValueError, IndexError, FuserliteError):
        return frozenset(range(len(data_out)))


def _same(op: _Op) -> list[Err]:
    """An op that moves, copies or takes values: the same op on the sigmas; an expand
    repeats its operand's sigma along the axes it expands."""
    y, out = op.outs[0], op.expr.output
    parts = np.stack(
        [
            eval_expr(op.expr, [op.parts(k)[c] for k in range(len(op.vals))], y.shape, F64)
            for c in range(K)
        ]
    ).reshape(K, *y.shape)
    coherent = set().union(*(_mapped(op, k, out) for k in range(len(op.vals))))
    if op.expr.op_name == "expand":  # numpy's broadcast_to: from the right
        vshape = np.shape(op.vals[0])
        lead = len(y.shape) - len(vshape)
        coherent |= set(range(lead))
        coherent |= {lead + a for a, n in enumerate(vshape) if n == 1 and y.shape[lead + a] > 1}
    return [Err(parts, frozenset(coherent))]


def _reduced(op: _Op) -> list[Err]:
    """sum: quadrature over the reduced axes, linearly over those its sigma is repeated
    along; max and min: the largest sigma (|max(x + d) - max(x)| <= max |d|)."""
    y = op.outs[0]
    e = op.errs[0]
    reduced = set(reduced_axes(op.expr))
    shift = {a: a - sum(r < a for r in reduced) for a in range(np.ndim(op.vals[0]))}
    coherent = frozenset(shift[a] for a in e.coherent - reduced)
    p = e.parts
    axes = lambda s: tuple(1 + a for a in sorted(s))  # noqa: E731 - past the parts axis
    if op.expr.op_name in ("max", "min"):
        p = np.max(p, axis=axes(reduced), initial=0.0)
    else:
        p = np.sum(p, axis=axes(reduced & e.coherent), keepdims=True)
        p = np.sqrt(np.sum(p**2, axis=axes(reduced - e.coherent), keepdims=True))
    return [Err(p.reshape(K, *y.shape), coherent)]


def _bilinear(op: _Op) -> list[Err]:
    """matmul, linear: sqrt(a**2 @ sigma_b**2 + sigma_a**2 @ b**2) (+ a linear's bias's)."""
    bias = op.vals[2:]
    sigma_bias = lambda c: [op.parts(2)[c] ** 2] if bias else []  # noqa: E731 - its sigma
    exact_bias = [np.zeros(np.shape(v)) for v in bias]  # in sigma_a's term
    inexact = any(e is not None for e in op.errs[2:])
    return [Err(np.stack(_contracted(op, sigma_bias, exact_bias, inexact)))]


def _grouped(op: _Op) -> list[Err]:
    """grouped_mm: as _bilinear, its offsets exact (they pick groups, they are not added)."""
    ends = op.vals[2:]
    return [Err(np.stack(_contracted(op, lambda c: ends, ends, False)))]


def _contracted(op: _Op, with_b: Callable, with_a: list, rest_inexact: bool) -> list:
    """Per source c, sqrt(a**2 @ sigma_b**2 + sigma_a**2 @ b**2) of a contraction: the
    operands past a and b are with_b(c) in the first term, with_a in the second. A term of
    an exact operand is left out, not computed as a product with zeros: it adds nothing
    (as _times says), and a weight's zeros would be a sigma of its size."""
    y, expr = op.outs[0], op.expr
    by_b = op.errs[1] is not None or rest_inexact
    by_a = op.errs[0] is not None
    a2 = np.asarray(op.vals[0], F64) ** 2 if by_b else None
    b2 = np.asarray(op.vals[1], F64) ** 2 if by_a else None

    def one(c: int) -> np.ndarray:
        var = np.zeros(y.shape)
        if by_b:
            var = var + eval_expr(expr, [a2, op.parts(1)[c] ** 2, *with_b(c)], y.shape, F64)
        if by_a:
            var = var + eval_expr(expr, [op.parts(0)[c] ** 2, b2, *with_a], y.shape, F64)
        return np.sqrt(var)

    return [one(c) for c in range(K)]


def _none(op: _Op) -> list[Err | None]:
    """A value that depends on no operand's value (random bits, positions)."""
    return [None] * len(op.outs)


def _sdpa(op: _Op) -> list[Err]:
    sources = [(*(op.parts(k)[c] for k in range(3)), 0.0) for c in range(K)]
    made = sdpa_sigma(op.expr, op.vals, sources, op.start)
    return [Err(np.stack([m[j] for m in made])) for j in range(2)]


def _sdpa_bwd(op: _Op) -> list[Err]:
    """The gradients' first-order change added up (an upper bound of its sigma)."""
    made = [
        sdpa_bwd_change(op.expr, op.vals, [op.parts(k)[c] for k in range(len(op.vals))])
        for c in range(K)
    ]
    return [Err(np.stack([m[j] for m in made])) for j in range(3)]


def _index_flips(op: _Op, k: int, shape) -> np.ndarray:
    """Where integer indices (operand k) may differ between the evaluations, anything may."""
    return np.where(op.sigma(k) > 0, np.inf, 0.0).reshape(shape)


def _gathered(op: _Op) -> list[Err]:
    """embedding: the weight's sigma at the rows its indices name."""
    y = op.outs[0]
    idx = np.asarray(op.vals[1]).astype(np.int64)
    parts = np.take(op.parts(0), idx, axis=1).reshape(K, *y.shape)
    flips = _index_flips(op, 1, (*idx.shape, *(1,) * (y.ndim - idx.ndim)))
    return [Err(np.maximum(parts, flips), _mapped(op, 0, op.expr.output))]


def _scattered(op: _Op) -> list[Err]:
    """embedding_backward: the rows' sigmas summed in quadrature onto the rows their
    indices name."""
    y = op.outs[0]
    idx = np.asarray(op.vals[1]).astype(np.int64)
    var = np.zeros((K, *y.shape))
    for c in range(K):
        np.add.at(var[c], idx, op.parts(0)[c] ** 2)
    flips = np.where(np.any(op.sigma(1) > 0), np.inf, 0.0)
    return [Err(np.maximum(np.sqrt(var), flips))]


Rule = Callable[[_Op], list]

# One row per op: the sigma of each output, carried from the operands' (module doc).
PROPAGATE: dict[str, Rule] = {
    "set": _same,
    "broadcast": _same,
    "permute": _same,
    "expand": _same,
    "reshape": _same,
    "take": _same,
    "squeeze": _same,
    "select": _same,
    "slice": _same,
    "cat": _same,
    "sum": _reduced,
    "max": _reduced,
    "min": _reduced,
    "matmul": _bilinear,
    "linear": _bilinear,
    "grouped_mm": _grouped,
    **{name: _pointwise for name in DERIVATIVES},
    "cast": _cast,
    "where": _where,
    "lt": _lt,
    "rand_like": _none,
    "rand": _none,
    "iota": _none,
    "sdpa": _sdpa,
    "sdpa_bwd": _sdpa_bwd,
    "embedding": _gathered,
    "embedding_backward": _scattered,
}

# Ops whose result is exactly its operands' values, or a choice among them: no rounding
# of their own, so equal operands give equal results (all others round their result).
EXACT = frozenset(
    {"set", "broadcast", "permute", "expand", "reshape", "take", "squeeze", "select"}
    | {"slice", "cat", "max", "min", "neg", "abs", "relu", "maximum", "minimum", "where", "lt"}
    | {"rand_like", "rand", "cast"}  # a cast rounds as a store does (its output dtype's)
    | {"embedding"}  # rows of its weight
)
LIBRARY_OPS = frozenset(
    {"exp", "tanh", "log", "sigmoid", "silu", "gelu", "sin", "cos", "pow", "erf"}
)


def _terms(expr: Expr, vals: list, shape) -> np.ndarray:
    """The op on |operands|: the magnitude of the terms of a sum or a contraction."""
    return eval_expr(expr, [absolute(v) for v in vals], shape, F64)


Own = tuple[Source, np.ndarray] | None


def _own(op: _Op, differences: Differences) -> list[Own]:
    """Per output: its own rounding's source and sigma, given exact operands (None: it
    rounds nothing of its own, or only as EXACT and the stores say)."""
    expr, vals, outs = op.expr, op.vals, op.outs
    u = unit(compute_dtype(expr))
    name, y = expr.op_name, outs[0]
    own: Own = None
    if not u:
        pass  # integers and bools: exact
    elif name == "sum":
        n = np.size(vals[0]) // y.size if y.size else 0  # terms per element
        own = (Source.ORDER, BOTH * np.sqrt(n) * u * _terms(expr, vals, y.shape))
    elif name == "embedding_backward":  # a sum of the rows with each index
        rows = np.bincount(np.asarray(vals[1]).astype(np.int64).ravel(), minlength=1)
        n = int(rows.max()) if rows.size else 0
        own = (Source.ORDER, BOTH * np.sqrt(n) * u * _terms(expr, vals, y.shape))
    elif name in ("matmul", "linear", "grouped_mm"):
        # + a bias: one more term; a grouped_mm's offsets are no term, and its k bounds
        # the terms of a k group
        k = np.shape(vals[0])[-1] + (len(vals) - 2 if name == "linear" else 0)
        own = (
            Source.ORDER,
            BOTH * np.sqrt(k) * u * _terms(expr, vals, y.shape) + _flushed(vals, k, u),
        )
    elif name == "sdpa":
        q, k, v = vals[:3]
        # each score rounded over d terms, exp and softmax a few roundings; p @ v over S
        ss = u * (
            np.sqrt(q.shape[-1]) * score_scale(expr, q) * (absolute(q) @ swap_last(absolute(k))) + 4
        )
        sv = u * np.sqrt(k.shape[-2]) * absolute(v)
        return [
            (Source.ORDER, BOTH * (s + u * absolute(o)))
            for s, o in zip(sdpa_sigma(expr, vals, [(0.0 * q, 0.0 * k, sv, ss)], op.start)[0], outs)
        ]
    elif name == "sdpa_bwd":
        q, k = vals[1], vals[2]
        n = BOTH * np.sqrt(q.shape[-1] + 2 * k.shape[-2] + 10) * u  # scores, softmax, sums
        change = sdpa_bwd_change(expr, vals, [absolute(v) for v in vals])
        return [(Source.ORDER, n * (c + absolute(o))) for c, o in zip(change, outs)]
    elif differences.libraries and name in LIBRARY_OPS:
        m = absolute(y) + (absolute(vals[0]) if name == "gelu" else 0)  # gelu: its 1 + tanh
        own = (Source.LIBRARY, LIBM_ULPS * u * m)
    return [own] + [None] * (len(outs) - 1)


def _flushed(vals: list, k: int, u: float) -> float:
    """What a GEMM that flushes subnormals (AMX's, kernel/amx.py) may lose on top of its
    order, at most: each of k terms a subnormal operand read as 0 (less than 2**-126
    times the other operand) and each partial sum flushed (less than 2**-126), so
    k 2**-126 (1 + max|a| + max|b|): about 1e-38 k for values of order 1, nothing a wrong
    lowering could hide behind. Only a float32 GEMM (AMX's sum) is ever flushed."""
    if u != UNIT[DType.float32]:
        return 0.0
    largest = [float(np.max(absolute(v))) if np.size(v) else 0.0 for v in vals[:2]]
    return k * SMALLEST_NORMAL * (1.0 + sum(largest))


def _plus(e: Err | None, source: Source, sigma: np.ndarray, shape) -> Err:
    """`e` with `sigma` more from `source`, in quadrature."""
    parts = np.zeros((K, *shape)) if e is None else np.array(np.broadcast_to(e.parts, (K, *shape)))
    k = SOURCES.index(source)
    parts[k] = np.sqrt(parts[k] ** 2 + np.broadcast_to(sigma, shape) ** 2)
    return Err(parts, frozenset() if e is None else e.coherent)


def _rounded(e: Err | None, sigma: np.ndarray) -> Err | None:
    """`e` where both sides round a value that may differ: `sigma` more where it is not
    0, shared among its sources."""
    if e is None:
        return None
    # Each part's variance grows by its share of the total, var_k / total * sigma**2: the
    # parts scale by one factor, sqrt(1 + sigma**2 / total) (1 where total is 0 or inf).
    total = np.sum(e.parts**2, axis=0)
    held = (total > 0) & (total < np.inf)
    grow = np.divide(sigma**2, total, out=np.zeros(total.shape), where=held)
    return Err(e.parts * np.sqrt(1 + grow), e.coherent)


@dataclass(frozen=True)
class Bounds:
    """Per fusion output, its sigma (None: exactly equal); `dtypes` per source, the
    dtypes whose rounding made it."""

    errs: list[Err | None]
    dtypes: dict[Source, frozenset[DType]]


class _Bounding:
    """The sigmas of one evaluation: a visitor of the reference evaluator."""

    def __init__(
        self, fusion: Fusion, differences: Differences, block: tuple[Rows, Span] | None = None
    ) -> None:
        self.differences = differences
        self.block = block
        self.errs: dict[TensorView, Err] = {}  # absent: exact
        exprs = fusion.exprs()
        dead = dead_after(exprs, attrgetter("inputs"), attrgetter("outputs"), keep=fusion.outputs)
        self.dead_of = {id(e): d for e, d in zip(exprs, dead)}
        self.outputs = set(fusion.outputs)
        self.final: dict[TensorView, Err | None] = {}  # an output's sigma as the fusion gives it
        self.seen: dict[Source, set[DType]] = {s: set() for s in SOURCES}

    def __call__(self, expr: Expr, args: list[np.ndarray], values: list[np.ndarray]) -> None:
        if expr.op_name not in PROPAGATE:
            raise ExecutionError(f"no rounding rule for expression {expr!r}")
        tensors = iter(zip(args, expr.inputs))
        vals: list[np.ndarray] = []
        errs: list[Err | None] = []
        for x in expr.operands():
            if is_scalar(x):  # exact
                vals.append(np.asarray(float(x)))
                errs.append(None)
            else:
                v, t = next(tensors)
                vals.append(v)
                errs.append(self.errs.get(t))
        start = None if self.block is None else self.block[0].start(expr.output, self.block[1])
        op = _Op(expr, vals, errs, tuple(values), start)
        with np.errstate(all="ignore"):
            exact = all(e is None for e in errs)
            made = [None] * len(values) if exact else PROPAGATE[expr.op_name](op)
            for t, y, e, mine in zip(expr.outputs, values, made, _own(op, self.differences)):
                e, final = self._stored(expr, t, y, e, mine)
                if e is not None:
                    self.errs[t] = _unbounded_nan(e)
                if t in self.outputs:
                    self.final[t] = None if final is None else _unbounded_nan(final)
        for t in self.dead_of[id(expr)]:
            self.errs.pop(t, None)

    def _stored(self, expr: Expr, t: TensorView, y: np.ndarray, e: Err | None, mine: Own):
        """t's sigma as its readers see it and as the fusion's output: carried (`e`), its
        own rounding's, and its rounding to its dtype where one side or both round it."""
        c = compute_dtype(expr)
        if mine is not None:
            e = _plus(e, mine[0], mine[1], y.shape)
            self.seen[mine[0]].add(c)
        if expr.op_name not in EXACT and unit(c):
            e = _rounded(e, unit(c) * absolute(y))
        u = unit(t.dtype)
        # A copy or a choice of values (or random bits drawn in their dtype) was rounded
        # where its values were made, if at all: storing it again changes nothing.
        copied = expr.op_name in EXACT and expr.op_name != "cast" and t not in self.outputs
        if t.dtype in HALVES and not copied:
            both = _rounded(e, u * absolute(y))  # both round it: where it may differ
            if expr.op_name == "cast" or not self.differences.stores:
                return both, both
            # The reference rounds a half output only as it gives it back: its readers
            # read the float value, where a kernel's store may have rounded it.
            self.seen[Source.STORE].add(t.dtype)  # one side stores it in half, the other not
            return _plus(e, Source.STORE, u * absolute(y), y.shape), both
        if expr.op_name == "cast" and u > unit(expr.inputs[0].dtype):  # both round it
            e = _rounded(e, u * absolute(y))
        return e, e


def _unbounded_nan(e: Err) -> Err:
    """`e` where 0 * inf (an unbounded sigma meeting a 0) is unbounded, not NaN. (Parts
    are never negative, so their sum is NaN exactly where one is.)"""
    if not np.isnan(np.sum(e.parts)):
        return e
    return Err(np.where(np.isnan(e.parts), np.inf, e.parts), e.coherent)


def bounds(
    fusion: Fusion,
    inputs: Sequence[np.ndarray],
    differences: Differences,
    block: tuple[Rows, Span] | None = None,
) -> Bounds:
    """The sigma of every fusion output, evaluated alongside the reference's values.

    Inputs are exact (sigma 0); each sigma is dropped after its last reader, as the
    reference drops values (ir/liveness.py). `block`: the fusion's rows and a span of
    them (reference/rows.py): the sigmas of those rows of the outputs."""
    bounding = _Bounding(fusion, differences, block)
    evaluate(fusion, inputs, bounding, block)
    return Bounds(
        [bounding.final.get(t) for t in fusion.outputs],
        {s: frozenset(d) for s, d in bounding.seen.items()},
    )
