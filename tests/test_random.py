"""rand_like, uniform and dropout: Philox at global indices, so a sharded program
draws the unsharded numbers on every device, compute path and backend."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuserlite as fl
from fuserlite.numerics import philox
from fuserlite.numerics.philox import Block
from fuserlite.schedule.shard import shard_axis

SHAPE = (8, 12)


def _fusion(build, dtype="float32", axis=None, devices=4):
    with fl.Fusion() as f:
        x = fl.tensor(SHAPE, dtype, name="x")
        f.add_input(x)
        if axis is not None:
            shard_axis(x, axis, fl.DeviceMesh.for_num_devices(devices))
        f.add_output(build(x))
    return f


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_rand_like_is_philox_at_the_global_index(dtype: str) -> None:
    f = _fusion(lambda x: fl.rand_like(x, seed=5, offset=9), dtype)
    (got,) = fl.evaluate(f, fl.random_inputs(f))
    want = philox.uniform(5, 9, np.arange(96).reshape(SHAPE), np.dtype(got.dtype))
    np.testing.assert_array_equal(got, want)
    assert got.astype(np.float64).min() >= 0 and got.astype(np.float64).max() < 1


def test_dropout_keeps_the_numerics_mask() -> None:
    f = _fusion(lambda x: fl.dropout(x, 0.4, seed=3, offset=1))
    (x,) = fl.random_inputs(f)
    (got,) = fl.evaluate(f, [x])
    mask = philox.keep_mask(0.4, 3, 1, np.arange(x.size).reshape(SHAPE), np.float32)
    np.testing.assert_array_equal(got, np.where(mask, x * np.float32(1 / 0.6), 0))
    assert 0.2 < 1 - mask.mean() < 0.6


@pytest.mark.parametrize("p,kept", [(0.0, 1.0), (1.0, 0.0)])
def test_dropout_extremes(p: float, kept: float) -> None:
    f = _fusion(lambda x: fl.dropout(x, p))
    (x,) = fl.random_inputs(f)
    (got,) = fl.evaluate(f, [x])
    np.testing.assert_array_equal(got, x * kept)


def test_uniform_range() -> None:
    f = _fusion(lambda x: fl.uniform(x, -2.0, 3.0, seed=1))
    (got,) = fl.evaluate(f, fl.random_inputs(f))
    u = philox.uniform(1, 0, np.arange(96).reshape(SHAPE), np.float32)
    np.testing.assert_allclose(got, u * 5 - 2, rtol=1e-6)


@pytest.mark.parametrize("compute", ["numpy", "interpret", "compiled"])
@pytest.mark.parametrize("axis,devices", [(0, 4), (1, 4), (1, 3), (0, 8)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_sharded_dropout_is_the_unsharded_mask(compute, axis, devices, dtype) -> None:
    """Each device draws its own shard's numbers: no communication, and the unsharded
    program's mask on every device (validate compares the kept elements exactly)."""
    f = _fusion(lambda x: fl.dropout(fl.gelu(x), 0.3, seed=7, offset=2), dtype, axis, devices)
    inputs = fl.random_inputs(f, seed=4)
    ex = fl.FusionExecutor(f, compute=compute)
    (got,) = ex.run(inputs)
    (want,) = fl.evaluate(f, inputs)
    np.testing.assert_array_equal(got != 0, want != 0)
    fl.validate(f, inputs, [got])
    assert ex.communications == []


def test_each_device_draws_its_block() -> None:
    """Device d's shard of rand_like is Philox on d's block of the global indices."""
    f = _fusion(lambda x: fl.rand_like(x, seed=2), "bfloat16", axis=1, devices=4)
    per_device = fl.FusionExecutor(f, compute="numpy").run_per_device(fl.random_inputs(f))
    for d, (shard,) in per_device.items():
        index = Block(SHAPE, (0, 3 * d)).index((8, 3))
        want = philox.uniform(2, 0, index, np.dtype(ml_dtypes.bfloat16))
        np.testing.assert_array_equal(shard, want)


def test_dropout_from_fus_text_round_trips() -> None:
    f = fl.parse("input x: float32[4, 8]\ny = dropout(x, 0.5, seed=3)\noutput y\n")
    text = fl.to_fus(f)
    assert "rand_like(x, seed=3, offset=0)" in text or "rand_like(T0, seed=3" in text
    again = fl.parse(text)
    inputs = fl.random_inputs(f)
    np.testing.assert_array_equal(fl.evaluate(f, inputs)[0], fl.evaluate(again, inputs)[0])
    assert "rng_uniform(T0_g_float[" in f.print_math() and "seed = 3, offset = 0" in f.print_math()


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda x: fl.rand_like(fl.tensor([2], "int32")), r"rand_like: T1\[2\] is int32"),
        (lambda x: fl.rand_like(x, seed=-1), "rand_like: seed"),
        (lambda x: fl.rand_like(x, offset=2**64), "rand_like: offset"),
        (lambda x: fl.dropout(x, 1.5), r"dropout: the probability p must be in \[0, 1\]"),
        (lambda x: fl.dropout(x, "0.1"), "dropout: p"),
        (lambda x: fl.uniform(x, 2.0, 1.0), "uniform: low 2.0 must not exceed high 1.0"),
    ],
)
def test_bad_input(build, match) -> None:
    with fl.Fusion():
        x = fl.tensor([4], name="x")
        with pytest.raises(fl.FusionError, match=match):
            build(x)


@pytest.mark.parametrize("compute", ["numpy", "interpret", "compiled"])
def test_lt_compares_in_its_operands_dtype(compute: str) -> None:
    """A bool result computed from float operands (not from operands cast to bool)."""
    with fl.Fusion() as f:
        a, b = fl.tensor([4, 3], "bfloat16", name="a"), fl.tensor([3], name="b")
        f.add_input(a)
        f.add_input(b)
        f.add_output(fl.lt(fl.mul(a, 0.5), b))
        f.add_output(fl.lt(0.25, a))
    inputs = fl.random_inputs(f, seed=2)
    a, b = inputs
    outs = fl.FusionExecutor(f, compute=compute).run(inputs)
    want = [a.astype(np.float32) * 0.5 < b, np.float32(0.25) < a.astype(np.float32)]
    for got, ref in zip(outs, want):
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, ref)
