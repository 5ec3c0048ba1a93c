"""Pointwise ops: each output element from the operand elements at the same position.

Operands align axis by axis on their data axes (reduction axes are not data).
Extents must be equal, or one side a broadcast axis. A lower-rank operand is
broadcast on its leading axes first, as numpy would. A binary op takes a Python
number on either side (not both).
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from fuserlite.ir import args
from fuserlite.ir.domain import IterDomain, TensorDomain
from fuserlite.ir.errors import FusionError
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType, result_type, scalar_dtype
from fuserlite.ir.values import fact
from fuserlite.ops.common import (
    BINARY,
    UNARY,
    check_tensor,
    data_axes,
    fusion_of,
    like,
    shape_text,
)
from fuserlite.ops.cost import elementwise
from fuserlite.ops.forms import Template, binary_call, call, infix
from fuserlite.ops.gradients import unbroadcast
from fuserlite.ops.registry import (
    Category,
    Op,
    Operand,
    Param,
    Scalar,
    define,
    is_scalar,
    no_gradient,
)
from fuserlite.ops.views import broadcast

# The builders of its ops.
__all__ = ["neg", "exp", "tanh", "relu", "abs", "gelu", "erf", "sqrt", "log", "sigmoid", "silu"]
__all__ += ["sin", "cos", "rsqrt"]
__all__ += ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "lt", "where"]

POINTWISE = Category.POINTWISE


def unary(name: str, x: TensorView, keep_dtype: bool = False, numbers_only: bool = False):
    """`name(x)`: a float result (integers and bools computed as float32), or x's own
    dtype with `keep_dtype`; `numbers_only` refuses bool."""
    x = check_tensor(x, name)
    if numbers_only and x.dtype is DType.bool:
        raise FusionError(f"{name}: {x.name} is bool; {name} needs a number type")
    dtype = x.dtype if x.dtype.is_float or keep_dtype else DType.float32
    out = like(x, dtype)
    Op(name, [out], [x])
    return out


# -- vector-Jacobian products (OpDef.vjp): (expr, operands, outputs, cotangents) ------
def _unary_vjp(slope):
    """The vjp of a unary op whose derivative is slope(x, y) (y its output): g * slope."""

    def vjp(expr, operands, outputs, grads):
        return [mul(grads[0], slope(operands[0], outputs[0]))]

    return vjp


def _neg_vjp(expr, operands, outputs, grads):
    return [neg(grads[0])]


def _relu_vjp(expr, operands, outputs, grads):
    return [where(lt(0, operands[0]), grads[0], 0.0)]


def _abs_vjp(expr, operands, outputs, grads):  # sign(x) g, 0 at 0 as torch
    (x,), (g,) = operands, grads
    return [where(lt(x, 0), neg(g), where(lt(0, x), g, 0.0))]


def _gelu_vjp(expr, operands, outputs, grads):
    from fuserlite.ops.normalization import gelu_backward  # builds on these ops

    return [gelu_backward(grads[0], operands[0])]


def _silu_slope(x: TensorView, y: TensorView) -> TensorView:
    s = sigmoid(x)  # d(x s)/dx = s (1 + x (1 - s))
    return mul(s, add(mul(x, sub(1.0, s)), 1.0))


@define(Template("-{x};"), UNARY, POINTWISE, vjp=_neg_vjp)
def neg(x: TensorView) -> TensorView:
    """-x"""
    return unary("neg", x, keep_dtype=True, numbers_only=True)


@define(call("exp"), UNARY, POINTWISE, vjp=_unary_vjp(lambda x, y: y))
def exp(x: TensorView) -> TensorView:
    """e**x"""
    return unary("exp", x)


@define(call("tanh"), UNARY, POINTWISE, vjp=_unary_vjp(lambda x, y: sub(1.0, mul(y, y))))
def tanh(x: TensorView) -> TensorView:
    """tanh(x)"""
    return unary("tanh", x)


@define(call("relu"), UNARY, POINTWISE, vjp=_relu_vjp)
def relu(x: TensorView) -> TensorView:
    """max(x, 0)"""
    return unary("relu", x, keep_dtype=True)


@define(call("abs"), UNARY, POINTWISE, vjp=_abs_vjp)
def abs(x: TensorView) -> TensorView:  # noqa: A001 - mirrors the op name
    """|x|"""
    return unary("abs", x, keep_dtype=True)


_GELU = ("tanh", "none")  # torch's approximate= values
_SQRT_HALF = 0.7071067811865476  # M_SQRT1_2


def _erf_slope(x: TensorView, y: TensorView) -> TensorView:
    return mul(exp(neg(mul(x, x))), 1.1283791670955126)  # 2 / sqrt(pi) e**(-x**2)


@define(
    call("gelu"),
    (*UNARY, Param("approximate", "ident", required=False, choices=_GELU, keyword=True)),
    POINTWISE,
    vjp=_gelu_vjp,
    cost=elementwise(8),
)
def gelu(x: TensorView, approximate: str = "tanh") -> TensorView:
    """GELU, tanh approximation (the op); approximate="none": exact, from erf."""
    if approximate not in _GELU:
        raise args.fail("gelu", "approximate", '"tanh" or "none" (torch\'s values)', approximate)
    if approximate == "none":  # nvFuser's gelu composite, torch's formula: x/2 (1 + erf(x/√2))
        x = check_tensor(x, "gelu")
        return mul(mul(x, 0.5), add(erf(mul(x, _SQRT_HALF)), 1.0))
    return unary("gelu", x)


@define(call("erf"), UNARY, POINTWISE, vjp=_unary_vjp(_erf_slope), cost=elementwise(24))
def erf(x: TensorView) -> TensorView:
    """The error function (fuserlite.numerics.erf: one algorithm on every path)."""
    return unary("erf", x)


@define(call("sqrt"), UNARY, POINTWISE, vjp=_unary_vjp(lambda x, y: div(0.5, y)))
def sqrt(x: TensorView) -> TensorView:
    """square root"""
    return unary("sqrt", x)


@define(call("log"), UNARY, POINTWISE, vjp=_unary_vjp(lambda x, y: div(1.0, x)))
def log(x: TensorView) -> TensorView:
    """natural logarithm"""
    return unary("log", x)


@define(
    call("sigmoid"),
    UNARY,
    POINTWISE,
    vjp=_unary_vjp(lambda x, y: mul(y, sub(1.0, y))),
    cost=elementwise(3),
)
def sigmoid(x: TensorView) -> TensorView:
    """1 / (1 + e**-x)"""
    return unary("sigmoid", x)


@define(call("silu"), UNARY, POINTWISE, vjp=_unary_vjp(_silu_slope), cost=elementwise(4))
def silu(x: TensorView) -> TensorView:
    """x * sigmoid(x)"""
    return unary("silu", x)


@define(call("sin"), UNARY, POINTWISE, vjp=_unary_vjp(lambda x, y: cos(x)))
def sin(x: TensorView) -> TensorView:
    """sine (radians), as rotary position embeddings use it"""
    return unary("sin", x)


@define(call("cos"), UNARY, POINTWISE, vjp=_unary_vjp(lambda x, y: neg(sin(x))))
def cos(x: TensorView) -> TensorView:
    """cosine (radians)"""
    return unary("cos", x)


@define(call("rsqrt"), UNARY, POINTWISE, vjp=_unary_vjp(lambda x, y: mul(-0.5, div(y, x))))
def rsqrt(x: TensorView) -> TensorView:
    """1 / sqrt(x), both steps rounded exactly (nvFuser's rsqrt; normalizations use it)"""
    return unary("rsqrt", x)


# -- binary -----------------------------------------------------------------------
def promote(a: Operand, b: Operand, name: str) -> DType:
    """The result dtype of a binary op (torch's promotion; true division gives a float):
    a fact of the op and each operand's dtype or Python scalar type, all it reads."""
    return _promoted(name, _kind(a), _kind(b))


def _kind(x: Operand) -> DType | type:
    return x.dtype if isinstance(x, TensorView) else type(x)


@fact
def _promoted(name: str, a: DType | type, b: DType | type) -> DType:
    tensors = [k for k in (a, b) if isinstance(k, DType)]
    scalars = [k() for k in (a, b) if not isinstance(k, DType)]  # a value of that type
    dtype = result_type(tensors, scalars)
    if name in ("div", "pow") and not dtype.is_float:
        # true division of integers or bools, as in torch; pow of integers in float too
        # (C's pow is a float function: an integer power that overflows is no wrap-around)
        dtype = DType.float32
    return dtype


_INF = float("inf")


def _fits(value: Scalar, dtype: DType) -> bool:
    """True if a Python scalar converts to `dtype` without overflow."""
    if isinstance(value, bool) or dtype is DType.bool:
        return True
    if dtype.is_float:
        try:
            f = float(value)
        except OverflowError:
            return False
        return f != f or builtins.abs(f) <= dtype.largest or f in (_INF, -_INF)
    info = np.iinfo(dtype.numpy)
    return isinstance(value, int) and info.min <= value <= info.max


def _check_broadcastable(name: str, a: TensorView, b: TensorView) -> None:
    """Compare trailing-aligned axes before anything is added to the fusion."""
    xs, ys = data_axes(a), data_axes(b)
    n = builtins.min(len(xs), len(ys))
    for k in range(1, n + 1):
        x, y = xs[-k], ys[-k]
        if not (x.is_broadcast or y.is_broadcast or x.extent == y.extent):
            raise FusionError(
                f"{name}: shapes {shape_text(a)} and {shape_text(b)} do not broadcast: "
                f"axis {len(xs) - k} of {a.name} has extent {x.extent} and axis {len(ys) - k} of "
                f"{b.name} has extent {y.extent}; make one of them a broadcast axis (extent 1) "
                "or use equal extents"
            )


def _align_ranks(*tensors: TensorView) -> list[TensorView]:
    """Each tensor with leading broadcast axes up to the highest rank (numpy's rule)."""
    rank = builtins.max(len(t.shape) for t in tensors)
    return [
        t
        if len(t.shape) == rank
        else broadcast(t, [True] * (rank - len(t.shape)) + [False] * len(t.shape))
        for t in tensors
    ]


def _broadcast_output(name: str, operands: list[Operand], dtype: DType) -> tuple[TensorView, list]:
    """The output of a pointwise op over operands that broadcast (numpy's rule), and the
    operands with the tensors aligned to its rank; shapes are checked before anything
    is added to the fusion. Checks and output axes are a fact of the tensors' domains
    (`broadcast_shape`)."""
    tensors = [x for x in operands if isinstance(x, TensorView)]
    shape, aligned = _broadcast(tuple([t.domain for t in tensors]))
    if shape is None:
        for k, a in enumerate(tensors):
            for b in tensors[k + 1 :]:
                _check_broadcastable(name, a, b)
    if not aligned:
        ranked = iter(_align_ranks(*tensors))
        operands = [next(ranked) if isinstance(x, TensorView) else x for x in operands]
    return TensorView(tensors[0].fusion, TensorDomain(shape), dtype), operands


@fact
def _broadcast(domains: tuple[TensorDomain, ...]) -> tuple[tuple[IterDomain, ...] | None, bool]:
    """broadcast_shape of the domains, and whether each has as many data axes as it."""
    shape = broadcast_shape(domains)
    return shape, shape is not None and all(
        len(dom.data_positions()) == len(shape) for dom in domains
    )


_PADDING = IterDomain(1, IterType.BROADCAST)  # a leading axis numpy's rule adds to a lower rank


@fact
def broadcast_shape(domains: tuple[TensorDomain, ...]) -> tuple[IterDomain, ...] | None:
    """The output axes of a pointwise op over operands of these domains: per
    trailing-aligned column of their data axes, the data extent, or a broadcast of the
    largest; None where they do not broadcast."""
    columns = [[dom.logical[li] for li in dom.data_positions()] for dom in domains]
    rank = builtins.max(len(c) for c in columns)
    padded = [[_PADDING] * (rank - len(c)) + c for c in columns]
    shape = []
    for column in zip(*padded):
        data = {ax.extent for ax in column if not ax.is_broadcast}
        if len(data) > 1:
            return None
        if data:
            shape.append(IterDomain(data.pop(), IterType.ITERATION))
        else:
            shape.append(IterDomain(builtins.max(ax.extent for ax in column), IterType.BROADCAST))
    return tuple(shape)


def _operands(name: str, a: object, b: object) -> tuple[Operand, Operand]:
    """Tensors as they are, Python/numpy numbers as Python numbers; one must be a tensor."""
    a_tensor, b_tensor = isinstance(a, TensorView), isinstance(b, TensorView)
    a = a if a_tensor else args.scalar(a, name, "a")
    b = b if b_tensor else args.scalar(b, name, "b")
    if not a_tensor and not b_tensor:
        raise FusionError(f"{name}: a and b are both numbers ({a!r}, {b!r}); one must be a tensor")
    return a, b


def binary(name: str, a: object, b: object, numbers_only: bool = False) -> TensorView:
    """`name(a, b)` with numpy broadcasting and torch's type promotion; `numbers_only`
    refuses two bool operands."""
    a, b = _operands(name, a, b)
    fusion_of(a, b)
    dtype = promote(a, b, name)
    if numbers_only and dtype is DType.bool:
        raise FusionError(f"{name}: both operands are bool; {name} needs numbers")
    for x in (a, b):
        if is_scalar(x) and not _fits(x, dtype):
            raise FusionError(f"{name}: the scalar {x!r} does not fit the {dtype.name} result")
    out, operands = _broadcast_output(name, [a, b], dtype)
    Op(name, [out], operands)
    return out


def _summed(cotangents: list, operands) -> list:
    """Each tensor operand's cotangent summed back to its shape (broadcast axes); None
    for a scalar operand."""
    return [
        unbroadcast(g, x.shape) if isinstance(x, TensorView) and g is not None else None
        for g, x in zip(cotangents, operands)
    ]


def _add_vjp(expr, operands, outputs, grads):
    return _summed([grads[0], grads[0]], operands)


def _sub_vjp(expr, operands, outputs, grads):
    return _summed([grads[0], neg(grads[0])], operands)


def _mul_vjp(expr, operands, outputs, grads):
    (a, b), (g,) = operands, grads
    return _summed([mul(g, b), mul(g, a)], operands)


def _div_vjp(expr, operands, outputs, grads):  # d(a/b) = da / b - y db / b
    b, (y,), (g,) = operands[1], outputs, grads
    ga = div(g, b)
    return _summed([ga, neg(mul(ga, y)) if isinstance(b, TensorView) else None], operands)


def _extremum_vjp(expr, operands, outputs, grads):
    """maximum / minimum: g to the operand that wins, half to each at a tie (torch)."""
    (a, b), (g,) = operands, grads
    first, second = (a, b) if expr.op_name == "maximum" else (b, a)  # a wins: second < first
    half = mul(g, 0.5)
    to_a = where(lt(second, first), g, where(lt(first, second), 0.0, half))
    to_b = where(lt(first, second), g, where(lt(second, first), 0.0, half))
    return _summed([to_a, to_b], operands)


@define(infix("+"), BINARY, POINTWISE, vjp=_add_vjp)
def add(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a + b"""
    return binary("add", a, b)


@define(infix("-"), BINARY, POINTWISE, vjp=_sub_vjp)
def sub(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a - b"""
    return binary("sub", a, b, numbers_only=True)


@define(infix("*"), BINARY, POINTWISE, vjp=_mul_vjp)
def mul(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a * b"""
    return binary("mul", a, b)


@define(infix("/"), BINARY, POINTWISE, vjp=_div_vjp)
def div(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a / b (true division)"""
    return binary("div", a, b)


def _ln(a: Scalar) -> float:
    """ln of a number as numpy's log has it: -inf at 0, NaN below."""
    return math.log(a) if a > 0 else (float("-inf") if a == 0 else float("nan"))


def _pow_vjp(expr, operands, outputs, grads):
    """d(a ** b) = b a ** (b - 1) da + a ** b ln(a) db (the second only for a tensor b)."""
    (a, b), (y,), (g,) = operands, outputs, grads
    ga = mul(g, mul(b, pow(a, sub(b, 1) if isinstance(b, TensorView) else b - 1)))
    ln_a = log(a) if isinstance(a, TensorView) else _ln(a)
    gb = mul(g, mul(y, ln_a)) if isinstance(b, TensorView) else None
    return _summed([ga if isinstance(a, TensorView) else None, gb], operands)


@define(binary_call("pow"), BINARY, POINTWISE, vjp=_pow_vjp)
def pow(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:  # noqa: A001
    """a ** b, a float (integer and bool operands are computed in float32)"""
    return binary("pow", a, b, numbers_only=True)


@define(binary_call("fmax"), BINARY, POINTWISE, vjp=_extremum_vjp)
def maximum(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """Elementwise max(a, b)."""
    return binary("maximum", a, b)


@define(binary_call("fmin"), BINARY, POINTWISE, vjp=_extremum_vjp)
def minimum(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """Elementwise min(a, b)."""
    return binary("minimum", a, b)


def _where_vjp(expr, operands, outputs, grads):
    cond, (g,) = operands[0], grads
    return _summed([None, where(cond, g, 0.0), where(cond, 0.0, g)], operands)


@define(
    Template("where({cond}\n  , {a:operand}\n  , {b:operand});"),
    (Param("cond", "tensor"), *BINARY),
    POINTWISE,
    vjp=_where_vjp,
)
def where(cond: TensorView, a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a where cond is true, else b (cond bool; the three broadcast as in numpy)."""
    cond = check_tensor(cond, "where", "cond")
    if cond.dtype is not DType.bool:
        raise FusionError(
            f"where: cond {shape_text(cond)} is {cond.dtype.name}; it must be bool "
            "(cast it: cast(cond, bool))"
        )
    a, b = (
        x if isinstance(x, TensorView) else args.scalar(x, "where", n)
        for x, n in ((a, "a"), (b, "b"))
    )
    fusion_of(cond, a, b)
    # Two numbers: torch's dtypes for them (float32, int64, bool), promoted.
    tensors = [x.dtype for x in (a, b) if isinstance(x, TensorView)]
    dtype = result_type(tensors or [scalar_dtype(a), scalar_dtype(b)], [])
    dtype = result_type([dtype], [x for x in (a, b) if is_scalar(x)])
    for x in (a, b):
        if is_scalar(x) and not _fits(x, dtype):
            raise FusionError(f"where: the scalar {x!r} does not fit the {dtype.name} result")
    out, operands = _broadcast_output("where", [cond, a, b], dtype)
    Op("where", [out], operands)
    return out


def _compared(expr) -> DType:
    """A comparison computes in its operands' promoted dtype."""
    a, b = expr.operands()
    return promote(a, b, "lt")


@define(infix("<"), BINARY, POINTWISE, compute=_compared, vjp=no_gradient)
def lt(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a < b, a bool tensor."""
    out = binary("lt", a, b, numbers_only=True)
    out.dtype = DType.bool
    return out


def install_operators() -> None:
    """`x + y`, `2 * x`, `x / y`, `x ** 2`, `-x` on TensorViews: the ops side installs the sugar
    (as torch.fx installs Proxy's magic methods); the IR imports no ops."""
    pairs = ((add, "add"), (sub, "sub"), (mul, "mul"), (div, "truediv"), (pow, "pow"))
    for builder, name in pairs:
        setattr(TensorView, f"__{name}__", lambda a, b, f=builder: f(a, b))
        setattr(TensorView, f"__r{name}__", lambda a, b, f=builder: f(b, a))
    TensorView.__neg__ = neg  # type: ignore[method-assign]


install_operators()
