"""erf (fuserlite.numerics.erf) and the exact gelu built on it: accuracy against a
correctly rounded erf, special values, the same numbers on every compute path."""

from __future__ import annotations

import math

import numpy as np
import pytest
from three_way import run_three_ways

import fuserlite as fl
from fuserlite.numerics.erf import erf

# Dense over the polynomials' intervals and their edges, and down to the subnormals.
POINTS = np.concatenate(
    [
        np.linspace(-7.0, 7.0, 40001),
        np.array([1.0, 2.0, 3.0, 4.0, 6.0]) + np.array([[-1e-15], [0.0], [1e-15]]).ravel()[:, None],
    ]
    + [s * np.geomspace(1e-310, 1.0, 400) for s in (1.0, -1.0)],
    axis=None,
)


def _ulps(got: np.ndarray, want: np.ndarray, dtype) -> float:
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    return float(np.max(np.abs(got.astype(np.float64) - want) / spacing))


def test_float64_within_two_ulps_of_the_correctly_rounded_erf() -> None:
    want = np.array([math.erf(v) for v in POINTS])
    assert _ulps(erf(POINTS), want, np.float64) <= 2.0


def test_float32_is_correctly_rounded() -> None:
    x = POINTS.astype(np.float32)
    want = np.array([math.erf(float(v)) for v in x])
    got = erf(x)
    assert got.dtype == np.float32
    assert _ulps(got, want, np.float32) <= 0.5


def test_special_values() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 6.0, -1e300])
    got = erf(x)
    assert np.isnan(got[0]) and list(got[1:3]) == [1.0, -1.0]
    assert np.signbit(got[4]) and not np.signbit(got[3])  # erf(-0) = -0
    assert list(got[5:]) == [1.0, -1.0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_erf_and_exact_gelu_on_every_path(dtype: str) -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([67, 5], dtype, name="x")
        fusion.add_input(x)
        fusion.add_output(fl.erf(x))
        fusion.add_output(fl.gelu(x, approximate="none"))
    values = np.random.default_rng(0).standard_normal((67, 5)) * 3
    inputs = [values.astype(fl.DType.parse(dtype).numpy)]
    runs = run_three_ways(fusion, inputs)  # each validated; bits compared where they can be
    x64 = inputs[0].astype(np.float64)
    gelu = x64 * 0.5 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    tol = {"float64": 1e-15, "float32": 1e-6, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    for outputs in runs.values():
        np.testing.assert_allclose(outputs[1].astype(np.float64), gelu, rtol=tol, atol=tol)


def test_exact_gelu_is_written_as_its_ops() -> None:
    fusion = fl.parse("input x: float32[4]\ny = gelu(x, approximate=none)\noutput y\n")
    ops = [e.op_name for e in fusion.exprs()]
    assert ops == ["mul", "mul", "erf", "add", "mul"]
    assert str(fl.parse(fl.to_fus(fusion))) == str(fusion)
    with pytest.raises(fl.FuserliteError, match="approximate"):
        fl.parse("input x: float32[4]\ny = gelu(x, approximate=sigmoid)\noutput y\n")
