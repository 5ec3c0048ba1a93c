"""Normalizations, softmax and the backward helpers: composites of primitives.

Each builder makes the primitives nvFuser's composite makes (csrc/ops/composite.cpp,
csrc/ops/normalization.cpp), with the formulas of fuserlite.numerics.nn; nvFuser
computes the statistics with Welford, which fuserlite lacks, so they are sums here
(mean first, then the squared deviations: the two-pass formula, as accurate as
Welford). The fusion holds only the primitives, so sharding propagation, the
scheduler and every backend see through a composite. Normalizing over a sharded
axis makes each sum partial: insert-reshardings completes the statistics with an
Allreduce of [rows] values, which moves N times less than gathering the rows
(docs/ops.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.common import X, check_rank, check_tensor, shape_text
from fuserlite.ops.pointwise import add, div, exp, log, mul, sqrt, sub, tanh
from fuserlite.ops.reductions import max as max_of
from fuserlite.ops.reductions import sum as sum_of
from fuserlite.ops.registry import Param, composite

__all__ = ["softmax", "log_softmax", "var_mean", "layer_norm", "rms_norm"]
__all__ += ["layer_norm_backward", "gelu_backward", "tanh_backward"]

_DIM = Param("dim", "int")


def _float_input(x: object, op: str, arg: str = "x") -> TensorView:
    x = check_tensor(x, op, arg)
    if not x.dtype.is_float:
        raise FusionError(f"{op}: {shape_text(x)} is {x.dtype.name}; {op} needs a float tensor")
    return x


def _dim(x: TensorView, dim: object, op: str) -> int:
    n = len(x.shape)
    dim = args.integer(dim, op, "dim")
    if not -n <= dim < n:
        raise FusionError(f"{op}: {shape_text(x)} has {n} axes; dim {dim} is out of range")
    return dim % n


def _mean(x: TensorView, axes: list[int]) -> TensorView:
    """mean over `axes`, kept as broadcast axes (a sum times 1/N)."""
    n = math.prod(x.shape[a] for a in axes)
    return mul(sum_of(x, axes, keepdim=True), 1.0 / n)


# -- softmax --------------------------------------------------------------------------
@composite((X, _DIM))
def softmax(x: TensorView, dim: int) -> TensorView:
    """exp(x - max) / sum(exp(x - max)) along `dim`."""
    x = _float_input(x, "softmax")
    d = _dim(x, dim, "softmax")
    e = exp(sub(x, max_of(x, [d], keepdim=True)))
    return mul(e, div(1.0, sum_of(e, [d], keepdim=True)))


@composite((X, _DIM))
def log_softmax(x: TensorView, dim: int) -> TensorView:
    """x - max - log(sum(exp(x - max))) along `dim`."""
    x = _float_input(x, "log_softmax")
    d = _dim(x, dim, "log_softmax")
    shifted = sub(x, max_of(x, [d], keepdim=True))
    return sub(shifted, log(sum_of(exp(shifted), [d], keepdim=True)))


# -- statistics and normalizations ----------------------------------------------------
def _dims(x: TensorView, dims: object, op: str) -> list[int]:
    n = len(x.shape)
    check_rank(dims, op, "dims")
    given = args.integers(dims, op, "dims", scalar_ok=True)
    for d in given:
        if not -n <= d < n:
            raise FusionError(f"{op}: {shape_text(x)} has {n} axes; axis {d} is out of range")
    axes = sorted({d % n for d in given})
    if len(axes) != len(given) or not axes:
        raise FusionError(f"{op}: dims {given} must name distinct axes, at least one")
    return axes


@composite(
    (
        X,
        Param("dims", "axes"),
        Param("correction", "int", required=False, keyword=True),
        Param("keepdim", "bool", required=False, keyword=True),
    )
)
def var_mean(
    x: TensorView, dims: int | Sequence[int], correction: int = 1, keepdim: bool = False
) -> tuple[TensorView, TensorView]:
    """(variance, mean) over `dims` as torch.var_mean: squared deviations / (N - correction)."""
    x = _float_input(x, "var_mean")
    axes = _dims(x, dims, "var_mean")
    correction = args.integer(correction, "var_mean", "correction", minimum=0)
    keepdim = args.boolean(keepdim, "var_mean", "keepdim")
    n = math.prod(x.shape[a] for a in axes)
    mean = _mean(x, axes)
    centered = sub(x, mean)
    # N - correction = 0 divides by zero: inf or NaN, as torch gives
    var = div(sum_of(mul(centered, centered), axes, keepdim=keepdim), float(max(n - correction, 0)))
    if not keepdim:
        mean = mul(sum_of(x, axes), 1.0 / n)
    return var, mean


def _normalized(x: TensorView, shape: object, op: str, **params: TensorView | None) -> list[int]:
    """The trailing axes normalized_shape names; weight and bias must have that shape."""
    check_rank(shape, op, "normalized_shape")
    shape = tuple(args.integers(shape, op, "normalized_shape", scalar_ok=True))
    k = len(shape)
    if not 1 <= k <= len(x.shape) or tuple(x.shape[len(x.shape) - k :]) != shape:
        raise FusionError(
            f"{op}: normalized_shape {list(shape)} must be the trailing axes of "
            f"{shape_text(x)} (at least one)"
        )
    for name, t in params.items():
        if t is not None and tuple(check_tensor(t, op, name).shape) != shape:
            raise FusionError(
                f"{op}: {name} {shape_text(t)} must have the normalized shape {list(shape)}"
            )
    return list(range(len(x.shape) - k, len(x.shape)))


_NORM = (Param("normalized_shape", "ints"), Param("weight", "tensor", required=False))
_EPS = Param("eps", "float", required=False, keyword=True)


def _invstd(mean_square: TensorView, eps: float) -> TensorView:
    return div(1.0, sqrt(add(mean_square, float(eps))))


def layer_norm_stats(
    x: TensorView, axes: list[int], eps: float
) -> tuple[TensorView, TensorView, TensorView]:
    """(x - mean, mean, invstd) over `axes`, mean and invstd kept as broadcast axes."""
    mean = _mean(x, axes)
    centered = sub(x, mean)
    return centered, mean, _invstd(_mean(mul(centered, centered), axes), eps)


def _scaled(y: TensorView, weight: TensorView | None, bias: TensorView | None) -> TensorView:
    if weight is not None:
        y = mul(y, weight)
    return y if bias is None else add(y, bias)


@composite((X, *_NORM, Param("bias", "tensor", required=False), _EPS))
def layer_norm(
    x: TensorView,
    normalized_shape: Sequence[int],
    weight: TensorView | None = None,
    bias: TensorView | None = None,
    eps: float = 1e-5,
) -> TensorView:
    """(x - mean) * invstd * weight + bias over the trailing normalized_shape axes."""
    x = _float_input(x, "layer_norm")
    axes = _normalized(x, normalized_shape, "layer_norm", weight=weight, bias=bias)
    centered, _, invstd = layer_norm_stats(x, axes, args.real(eps, "layer_norm", "eps"))
    return _scaled(mul(centered, invstd), weight, bias)


@composite((X, *_NORM, _EPS))
def rms_norm(
    x: TensorView,
    normalized_shape: Sequence[int],
    weight: TensorView | None = None,
    eps: float | None = None,
) -> TensorView:
    """x * invstd * weight, invstd = 1 / sqrt(mean(x**2) + eps) (eps None: the dtype's epsilon)."""
    x = _float_input(x, "rms_norm")
    axes = _normalized(x, normalized_shape, "rms_norm", weight=weight)
    eps = (
        float(ml_dtypes.finfo(x.dtype.numpy).eps)
        if eps is None
        else args.real(eps, "rms_norm", "eps")
    )
    return _scaled(mul(x, _invstd(_mean(mul(x, x), axes), eps)), weight, None)


# -- backward helpers -----------------------------------------------------------------
def layer_norm_backward(
    dy: TensorView,
    x: TensorView,
    normalized_shape: Sequence[int],
    weight: TensorView | None = None,
    bias: TensorView | None = None,
    eps: float = 1e-5,
) -> tuple[TensorView, TensorView | None, TensorView | None]:
    """(dx, dweight, dbias) of layer_norm, the statistics recomputed from x.

    With x_hat = (x - mean) * invstd and g = dy * weight over N normalized elements:
    dx = invstd / N * (N g - sum(g) - x_hat sum(g x_hat)); dweight = sum(dy x_hat) and
    dbias = sum(dy) over the outer axes (partial, then one Allreduce, where the rows
    are sharded). None where there is no weight / bias."""
    op = "layer_norm_backward"
    x, dy = _float_input(x, op), _float_input(dy, op, "dy")
    if dy.shape != x.shape:
        raise FusionError(f"{op}: dy {shape_text(dy)} must have the shape of x {shape_text(x)}")
    axes = _normalized(x, normalized_shape, op, weight=weight, bias=bias)
    centered, _, invstd = layer_norm_stats(x, axes, args.real(eps, op, "eps"))
    x_hat = mul(centered, invstd)
    g = dy if weight is None else mul(dy, weight)
    n = float(math.prod(x.shape[a] for a in axes))
    b = sum_of(g, axes, keepdim=True)
    c = sum_of(mul(g, x_hat), axes, keepdim=True)
    dx = mul(mul(invstd, 1.0 / n), sub(sub(mul(g, n), b), mul(x_hat, c)))
    outer = list(range(len(x.shape) - len(axes)))
    dw = None if weight is None else sum_of(mul(dy, x_hat), outer)
    db = None if bias is None else sum_of(dy, outer)
    return dx, dw, db


_BETA = math.sqrt(2.0 / math.pi)
_KAPPA = 0.044715


@composite((Param("dy", "tensor"), X))
def gelu_backward(dy: TensorView, x: TensorView) -> TensorView:
    """The gradient of gelu (tanh approximation) at x, times dy."""
    dy, x = _float_input(dy, "gelu_backward", "dy"), _float_input(x, "gelu_backward")
    x_sq = mul(x, x)
    t = tanh(mul(add(x, mul(mul(x, x_sq), _KAPPA)), _BETA))
    inner = mul(add(mul(x_sq, 3 * _KAPPA), 1.0), _BETA)
    left = mul(x, 0.5)
    slope = add(mul(add(t, 1.0), 0.5), mul(mul(left, sub(1.0, mul(t, t))), inner))
    return mul(dy, slope)


@composite((Param("dy", "tensor"), Param("y", "tensor")))
def tanh_backward(dy: TensorView, y: TensorView) -> TensorView:
    """dy * (1 - y**2), the gradient of tanh from its output y."""
    dy, y = _float_input(dy, "tanh_backward", "dy"), _float_input(y, "tanh_backward", "y")
    return mul(dy, sub(1.0, mul(y, y)))
