"""numpy references for the transformer ops' pointwise and normalization math.

Each function computes in the compute dtype of its inputs (float32 for half,
bfloat16 and float32; float64 for float64) and rounds its results to the inputs'
dtype (torch's promotion where there are several) once, at the end; statistics
(mean, invstd) stay in the compute dtype, as torch's CUDA kernels return them.
Formulas are nvFuser's (csrc/ops/composite.cpp, csrc/ops/normalization.cpp and
runtime/helpers.cu), so a later kernel computes the same expressions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.types import DType, result_type
from fuserlite.numerics.philox import Block, keep_mask


def storage_dtype(op: str, *arrays: np.ndarray) -> np.dtype:
    """The dtype of the op's result: the inputs' dtypes promoted as torch does; floats only."""
    dtypes = [DType.from_numpy(np.asarray(a).dtype) for a in arrays]
    bad = [d.name for d in dtypes if not d.is_float]
    if bad:
        raise ExecutionError(f"{op}: expected floating-point arrays, got {', '.join(bad)}")
    return result_type(dtypes, []).numpy


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float64 for float64, float32 for every narrower float."""
    return DType.from_numpy(dtype).compute.numpy


def _operands(op: str, *arrays: np.ndarray) -> tuple[np.dtype, list[np.ndarray]]:
    """(result dtype, the arrays in its compute dtype)."""
    dtype = storage_dtype(op, *arrays)
    c = compute_dtype(dtype)
    return dtype, [np.asarray(a).astype(c, copy=False) for a in arrays]


def _axis(op: str, x: np.ndarray, dim: int) -> int:
    if not -x.ndim <= dim < x.ndim:
        raise ExecutionError(f"{op}: dim {dim} is out of range for a {x.ndim}-d array")
    return dim % x.ndim


# -- activations and their backward helpers -------------------------------------------
def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x))."""
    dtype, (xc,) = _operands("sigmoid", x)
    with np.errstate(over="ignore"):  # exp(-x) = inf for very negative x: sigmoid is 0
        return (1 / (1 + np.exp(-xc))).astype(dtype)


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x)."""
    dtype, (xc,) = _operands("silu", x)
    with np.errstate(over="ignore"):
        return (xc * (1 / (1 + np.exp(-xc)))).astype(dtype)


def tanh_backward(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    """dy * (1 - y**2), y = tanh(x): the gradient of tanh from its output."""
    dtype, (dyc, yc) = _operands("tanh_backward", dy, y)
    return (dyc * (1 - yc * yc)).astype(dtype)


_BETA = math.sqrt(2.0 / math.pi)  # M_SQRT2 * M_2_SQRTPI * 0.5 in nvFuser
_KAPPA = 0.044715


def gelu_backward(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The gradient of the tanh-approximated gelu (fuserlite's gelu), nvFuser's
    tanh_gelu_backward: dy * (0.5 (1 + t) + 0.5 x (1 - t**2) beta (1 + 3 kappa x**2))
    with t = tanh(beta (x + kappa x**3))."""
    dtype, (dyc, xc) = _operands("gelu_backward", dy, x)
    beta, kappa = xc.dtype.type(_BETA), xc.dtype.type(_KAPPA)
    x_sq = xc * xc
    t = np.tanh(beta * (xc + kappa * (xc * x_sq)))
    left = 0.5 * xc
    inner_derivative = beta * (1 + (3 * kappa) * x_sq)
    return (dyc * (0.5 * (1 + t) + left * (1 - t * t) * inner_derivative)).astype(dtype)


# -- softmax --------------------------------------------------------------------------
def log_softmax(x: np.ndarray, dim: int) -> np.ndarray:
    """x - max - log(sum(exp(x - max))) along `dim`: finite for any finite logits."""
    dtype, (xc,) = _operands("log_softmax", x)
    axis = _axis("log_softmax", xc, dim)
    shifted = xc - _row_max(xc, axis)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))).astype(dtype)


def softmax(x: np.ndarray, dim: int) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along `dim`."""
    dtype, (xc,) = _operands("softmax", x)
    axis = _axis("softmax", xc, dim)
    e = np.exp(xc - _row_max(xc, axis))
    return (e * (1 / np.sum(e, axis=axis, keepdims=True))).astype(dtype)


def _row_max(x: np.ndarray, axis: int) -> np.ndarray:
    """The max along `axis`, 0 where it is not finite (a row of -inf stays -inf - 0)."""
    m = np.max(x, axis=axis, keepdims=True)
    return np.where(np.isfinite(m), m, np.zeros((), x.dtype))


# -- statistics and normalizations ----------------------------------------------------
def _dims(op: str, x: np.ndarray, dims: Sequence[int]) -> tuple[int, ...]:
    axes = tuple(sorted({_axis(op, x, d) for d in dims}))
    if len(axes) != len(dims):
        raise ExecutionError(f"{op}: dims {list(dims)} name an axis twice")
    return axes


def var_mean(
    x: np.ndarray, dims: Sequence[int], correction: int = 1, keepdim: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(variance, mean) over `dims`, torch.var_mean: the squared deviations summed and
    divided by max(N - correction, 0) (inf or NaN where that is 0)."""
    if isinstance(correction, bool) or not isinstance(correction, int) or correction < 0:
        raise ExecutionError(f"var_mean: correction must be an integer >= 0, got {correction!r}")
    dtype, (xc,) = _operands("var_mean", x)
    axes = _dims("var_mean", xc, dims)
    n = math.prod(xc.shape[a] for a in axes)
    mean = np.mean(xc, axis=axes, keepdims=True)
    var_sum = np.sum(np.square(xc - mean), axis=axes, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = var_sum / xc.dtype.type(max(n - correction, 0))
    if not keepdim:
        var, mean = np.squeeze(var, axes), np.squeeze(mean, axes)
    return var.astype(dtype), mean.astype(dtype)


def _normalized(op: str, x: np.ndarray, shape: Sequence[int], **params) -> tuple[int, ...]:
    """The trailing axes `shape` names; weight/bias (params) must have that shape."""
    shape = tuple(shape)
    if not shape or len(shape) > x.ndim or tuple(x.shape[x.ndim - len(shape) :]) != shape:
        raise ExecutionError(
            f"{op}: normalized_shape {list(shape)} is not the trailing shape of the input "
            f"{list(x.shape)}"
        )
    for name, a in params.items():
        if a is not None and tuple(np.shape(a)) != shape:
            raise ExecutionError(
                f"{op}: {name} has shape {list(np.shape(a))}, expected normalized_shape "
                f"{list(shape)}"
            )
    return tuple(range(x.ndim - len(shape), x.ndim))


def layer_norm(
    x: np.ndarray,
    normalized_shape: Sequence[int],
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    eps: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, mean, invstd): y = (x - mean) * invstd * weight + bias over the trailing
    normalized_shape axes, invstd = 1 / sqrt(biased variance + eps); mean and invstd
    keep those axes (extent 1), in the compute dtype."""
    axes = _normalized("layer_norm", x, normalized_shape, weight=weight, bias=bias)
    given = [a for a in (weight, bias) if a is not None]
    dtype, (xc, *wb) = _operands("layer_norm", x, *given)
    c = xc.dtype.type
    mean = np.mean(xc, axis=axes, keepdims=True)
    centered = xc - mean
    invstd = 1 / np.sqrt(np.mean(np.square(centered), axis=axes, keepdims=True) + c(eps))
    y = centered * invstd
    it = iter(wb)
    if weight is not None:
        y = y * next(it)
    if bias is not None:
        y = y + next(it)
    return y.astype(dtype), mean, invstd


def rms_norm(
    x: np.ndarray,
    normalized_shape: Sequence[int],
    weight: np.ndarray | None = None,
    eps: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(y, invstd): y = x * invstd * weight, invstd = 1 / sqrt(mean(x**2) + eps) over
    the trailing normalized_shape axes (torch.nn.functional.rms_norm; eps None is the
    input dtype's machine epsilon, as torch's); invstd in the compute dtype."""
    axes = _normalized("rms_norm", x, normalized_shape, weight=weight)
    dtype, (xc, *w) = _operands("rms_norm", x, *([] if weight is None else [weight]))
    if eps is None:
        eps = float(ml_dtypes.finfo(x.dtype).eps)  # ml_dtypes' finfo knows bfloat16
    invstd = 1 / np.sqrt(np.mean(np.square(xc), axis=axes, keepdims=True) + xc.dtype.type(eps))
    y = xc * invstd
    if w:
        y = y * w[0]
    return y.astype(dtype), invstd


def layer_norm_backward(
    dy: np.ndarray,
    x: np.ndarray,
    normalized_shape: Sequence[int],
    mean: np.ndarray,
    invstd: np.ndarray,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(dx, dweight, dbias) of layer_norm, nvFuser's layer_norm_backward: with
    x_hat = (x - mean) * invstd and g = dy * weight over N normalized elements,
    dx = invstd / N * (N g - sum(g) - x_hat sum(g x_hat)); dweight = sum(dy x_hat)
    and dbias = sum(dy) over the outer axes (None without weight / bias)."""
    axes = _normalized("layer_norm_backward", x, normalized_shape, weight=weight, bias=bias)
    dtype, (dyc, xc, mc, ic) = _operands("layer_norm_backward", dy, x, mean, invstd)
    n = xc.dtype.type(math.prod(x.shape[a] for a in axes))
    x_hat = (xc - mc) * ic
    g = dyc if weight is None else dyc * np.asarray(weight).astype(xc.dtype)
    b = np.sum(g, axis=axes, keepdims=True)
    c = np.sum(g * x_hat, axis=axes, keepdims=True)
    dx = (ic / n) * (n * g - b - x_hat * c)
    outer = tuple(range(x.ndim - len(axes)))
    dw = None if weight is None else np.sum(dyc * x_hat, axis=outer).astype(weight.dtype)
    db = None if bias is None else np.sum(dyc, axis=outer).astype(bias.dtype)
    return dx.astype(dtype), dw, db


# -- dropout --------------------------------------------------------------------------
def dropout(
    x: np.ndarray, p: float, seed: int, offset: int, block: Block | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(y, mask), nvFuser's dropout: mask = rand_like(x) < 1 - p (Philox at each
    element's global linear index; `block` places a shard of x in the whole tensor),
    y = x * mask / (1 - p) (y = 0 for p = 1)."""
    dtype, (xc,) = _operands("dropout", x)
    block = block or Block.whole(x.shape)
    mask = keep_mask(p, seed, offset, block.index(x.shape), dtype)
    scale = xc.dtype.type(1.0 / (1.0 - p) if p < 1 else 1.0)
    return (xc * mask * scale).astype(dtype), mask
