"""fuserlite.numerics.nn against float64 closed forms and finite differences."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from finite_differences import gradient

import fuserlite as fl
from fuserlite.numerics import nn
from fuserlite.numerics.philox import Block, keep_mask

BF16 = np.dtype(ml_dtypes.bfloat16)
RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4, 5))


def close(got, want, tol=1e-12):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


# -- activations ------------------------------------------------------------------
def test_sigmoid_and_silu_closed_forms():
    x = np.array([-50.0, -3.0, -0.5, 0.0, 0.5, 3.0, 50.0])
    want = np.array([1 / (1 + math.exp(-t)) for t in x])
    close(nn.sigmoid(x), want)
    close(nn.silu(x), x * want)


def test_sigmoid_saturates_without_nan():
    got = nn.sigmoid(np.array([-1e4, -100.0, 100.0, 1e4], np.float32))
    np.testing.assert_array_equal(got, np.array([0, 0, 1, 1], np.float32))


def test_bfloat16_is_computed_in_float_and_rounded_once():
    x = np.linspace(-4, 4, 101).astype(BF16)
    got = nn.silu(x)
    assert got.dtype == BF16
    x32 = x.astype(np.float32)
    want = (x32 * (1 / (1 + np.exp(-x32)))).astype(BF16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def gelu64(x: np.ndarray) -> np.ndarray:
    """fuserlite's own gelu (the tanh approximation), through the reference evaluator."""
    with fl.Fusion() as f:
        t = fl.tensor(list(x.shape), "float64")
        f.add_input(t)
        f.add_output(fl.gelu(t))
    return fl.evaluate(f, [x])[0]


def test_gelu_backward_is_the_gradient_of_fuserlites_gelu():
    x = np.linspace(-5, 5, 41)
    dy = RNG.standard_normal(41)
    want = gradient(lambda t: float(np.sum(gelu64(t) * dy)), x)
    close(nn.gelu_backward(dy, x), want, 1e-8)


def test_tanh_backward_takes_tanhs_output():
    x = np.linspace(-3, 3, 25)
    dy = RNG.standard_normal(25)
    want = gradient(lambda t: float(np.sum(np.tanh(t) * dy)), x)
    close(nn.tanh_backward(dy, np.tanh(x)), want, 1e-8)


def test_mixed_dtypes_promote_as_torch():
    dy, x = np.ones(4, np.float16), np.ones(4, BF16)
    assert nn.gelu_backward(dy, x).dtype == np.float32
    assert nn.tanh_backward(np.ones(4, np.float32), np.ones(4, np.float64)).dtype == np.float64


# -- softmax ----------------------------------------------------------------------
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_and_log_softmax_closed_forms(dim):
    e = np.exp(X)
    want = e / e.sum(axis=dim, keepdims=True)
    close(nn.softmax(X, dim), want)
    close(nn.log_softmax(X, dim), np.log(want))


def test_softmax_is_stable_on_large_logits():
    x = np.array([[1000.0, 1000.0, -1000.0], [1e4, 0.0, -np.inf]], np.float32)
    np.testing.assert_array_equal(nn.softmax(x, 1), [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_array_equal(nn.log_softmax(x[1:], 1), [[0.0, -1e4, -np.inf]])
    close(nn.log_softmax(x[:1], -1), [[-math.log(2), -math.log(2), -2000 - math.log(2)]], 1e-6)


def test_softmax_of_half_is_half():
    assert nn.softmax(np.zeros((2, 4), np.float16), 1).dtype == np.float16


# -- var_mean and the norms -------------------------------------------------------
@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("dims", [[0], [2], [0, 2], [-1, 1]])
def test_var_mean_is_torchs(correction, dims):
    var, mean = nn.var_mean(X, dims, correction)
    axes = tuple(d % 3 for d in dims)
    close(var, np.var(X, axis=axes, ddof=correction))
    close(mean, np.mean(X, axis=axes))
    var_k, mean_k = nn.var_mean(X, dims, correction, keepdim=True)
    assert var_k.shape == mean_k.shape == np.mean(X, axis=axes, keepdims=True).shape


def test_var_with_no_degrees_of_freedom_is_nan_or_inf_as_in_torch():
    var, _ = nn.var_mean(np.array([2.0]), [0])  # 0 / 0
    assert np.isnan(var)
    var, _ = nn.var_mean(np.array([1.0, 2.0]), [0], correction=3)  # 0.5 / max(-1, 0)
    assert var == np.inf


def layer_norm64(x, shape, w, b, eps):
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


@pytest.mark.parametrize("shape", [(5,), (4, 5)])
def test_layer_norm_closed_form(shape):
    w, b = RNG.standard_normal(shape), RNG.standard_normal(shape)
    y, mean, invstd = nn.layer_norm(X, shape, w, b, eps=1e-3)
    close(y, layer_norm64(X, shape, w, b, 1e-3))
    assert mean.shape == invstd.shape == X.shape[: 3 - len(shape)] + (1,) * len(shape)
    close(nn.layer_norm(X, shape)[0], layer_norm64(X, shape, 1.0, 0.0, 1e-5))


def test_layer_norm_of_bfloat16_keeps_float_statistics():
    y, mean, invstd = nn.layer_norm(X.astype(BF16), (5,))
    assert y.dtype == BF16 and mean.dtype == invstd.dtype == np.float32


def test_rms_norm_closed_form():
    w = RNG.standard_normal(5)
    y, invstd = nn.rms_norm(X, (5,), w, eps=1e-4)
    want = X / np.sqrt((X**2).mean(axis=-1, keepdims=True) + 1e-4) * w
    close(y, want)
    close(invstd, 1 / np.sqrt((X**2).mean(axis=-1, keepdims=True) + 1e-4))
    # eps=None is the dtype's epsilon, as torch.nn.functional.rms_norm
    zeros = np.zeros((2, 5), np.float32)
    _, inv = nn.rms_norm(zeros, (5,))
    close(inv, 1 / np.sqrt(np.finfo(np.float32).eps), 1e-6)


def test_layer_norm_backward_equals_finite_differences():
    shape = (4, 5)
    w, b = RNG.standard_normal(shape), RNG.standard_normal(shape)
    dy = RNG.standard_normal(X.shape)
    _, mean, invstd = nn.layer_norm(X, shape, w, b)
    dx, dw, db = nn.layer_norm_backward(dy, X, shape, mean, invstd, w, b)

    def loss(x=X, w=w, b=b) -> float:
        return float(np.sum(nn.layer_norm(x, shape, w, b)[0] * dy))

    close(dx, gradient(lambda t: loss(x=t), X), 1e-7)
    close(dw, gradient(lambda t: loss(w=t), w), 1e-7)
    close(db, gradient(lambda t: loss(b=t), b), 1e-7)
    dx_plain, none_w, none_b = nn.layer_norm_backward(dy, X, shape, mean, invstd)
    assert none_w is None and none_b is None and dx_plain.shape == X.shape


# -- dropout ----------------------------------------------------------------------
def test_dropout_scales_the_kept_elements_of_the_philox_mask():
    x = RNG.standard_normal((8, 6)).astype(np.float32)
    y, mask = nn.dropout(x, 0.25, seed=5, offset=2)
    np.testing.assert_array_equal(mask, keep_mask(0.25, 5, 2, np.arange(48).reshape(8, 6), x.dtype))
    np.testing.assert_array_equal(y, np.where(mask, x * np.float32(1 / 0.75), 0))
    assert 0 < mask.mean() < 1
    np.testing.assert_array_equal(nn.dropout(x, 0.0, 5, 2)[0], x)
    assert not nn.dropout(x, 1.0, 5, 2)[0].any()


def test_dropout_of_a_shard_is_the_shard_of_dropout():
    x = RNG.standard_normal((8, 6))
    whole, _ = nn.dropout(x, 0.5, 9, 0)
    for r in (0, 4):
        part, _ = nn.dropout(x[r : r + 4], 0.5, 9, 0, Block((8, 6), (r, 0)))
        np.testing.assert_array_equal(part, whole[r : r + 4])


# -- bad input --------------------------------------------------------------------
@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: nn.softmax(X, 3), "softmax: dim 3 is out of range for a 3-d array"),
        (lambda: nn.var_mean(X, [0, -3]), r"dims \[0, -3\] name an axis twice"),
        (lambda: nn.var_mean(X, [0], correction=-1), "correction must be an integer >= 0"),
        (lambda: nn.layer_norm(X, (4,)), r"normalized_shape \[4\] is not the trailing shape"),
        (lambda: nn.layer_norm(X, (2, 3, 4, 5)), "is not the trailing shape"),
        (lambda: nn.layer_norm(X, (5,), np.ones(4)), r"weight has shape \[4\], expected"),
        (lambda: nn.sigmoid(np.arange(3)), "expected floating-point arrays, got int64"),
    ],
)
def test_bad_arguments_are_clear_errors(call, message):
    with pytest.raises(fl.ExecutionError, match=message):
        call()
