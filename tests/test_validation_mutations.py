"""Validation cannot pass a clearly wrong result, in any dtype, and passes every right one.

Each mutation of a correct run's outputs (negating the small elements, dropping one
device's partial sum, swapping two devices' shards, an integer off by one) is rejected
by FusionExecutor.validate (the unsharded run on the same path, then the reference) and
by fl.validate (the reference alone), in float32, float16, bfloat16 and float64; the
unmutated outputs pass both on every compute path. Before the bounds per element, a
bfloat16 [16, 256] @ [256, 16] allowed 0.08 sum|a||b|: negating every output with
|y| < 4 (a quarter of them) passed.
"""

from __future__ import annotations

import numpy as np
import pytest
from pointwise_cases import sharded_sum
from three_way import PATHS

import fuserlite as fl
from fuserlite import models
from fuserlite.schedule.shard import shard_axis

FLOATS = ("float32", "float16", "bfloat16", "float64")
M2 = fl.DeviceMesh.for_num_devices(2)


def matmul(dtype: str, sharded: int) -> fl.Fusion:
    """a[16, 256] @ b[256, 16] on 2 devices: a's rows sharded (sharded=0: the output's
    rows too) or the contraction (sharded=1: partial sums, an Allreduce)."""
    with fl.Fusion() as f:
        a, b = fl.tensor([16, 256], dtype, name="a"), fl.tensor([256, 16], dtype, name="b")
        f.add_input(a)
        f.add_input(b)
        shard_axis(a, sharded, M2)
        if sharded == 1:
            shard_axis(b, 0, M2)
        else:
            b.set_device_mesh(M2)
        y = fl.matmul(a, b)
        y.set_device_mesh(M2)
        if sharded == 0:
            shard_axis(y, 0, M2)
        f.add_output(y)
    return f


def run(fusion: fl.Fusion, compute: str = "numpy", seed: int = 0, init: str = "normal"):
    ex = fl.FusionExecutor(fusion, compute=compute)
    inputs = fl.random_inputs(fusion, seed, init)
    return ex, inputs, ex.run(inputs)


def rejected(ex: fl.FusionExecutor, inputs, outputs) -> tuple[bool, bool]:
    """(ex.validate rejects it, fl.validate rejects it)."""
    found = []
    for check in (
        lambda: ex.validate(inputs, outputs),
        lambda: fl.validate(ex.fusion, inputs, outputs),
    ):
        try:
            check()
            found.append(False)
        except fl.ValidationError:
            found.append(True)
    return found[0], found[1]


@pytest.mark.parametrize("dtype", FLOATS)
def test_negating_the_small_quarter_of_the_outputs_is_rejected(dtype: str) -> None:
    ex, inputs, (y,) = run(matmul(dtype, 1))  # N(0, 1) inputs, the issue's numbers
    small = np.abs(y.astype(np.float64)) < np.quantile(np.abs(y.astype(np.float64)), 0.25)
    bad = y.copy()
    bad[small] = -bad[small]
    assert rejected(ex, inputs, [bad]) == (True, True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_the_issues_negation_is_rejected(dtype: str) -> None:
    """One device, a [16, 256] @ [256, 16] of N(0, 1) inputs, every |y| < 4 negated (17%
    of the outputs): bfloat16's old allowance, 0.08 + 0.08 sum|a||b| (about 13), let it
    pass."""
    with fl.Fusion() as f:
        a, b = fl.tensor([16, 256], dtype), fl.tensor([256, 16], dtype)
        f.add_input(a)
        f.add_input(b)
        f.add_output(fl.matmul(a, b))
    inputs = fl.random_inputs(f, 0, "normal")
    (y,) = fl.evaluate(f, inputs)
    bad = y.copy()
    small = np.abs(y.astype(np.float64)) < 4
    bad[small] = -bad[small]
    with pytest.raises(fl.ValidationError, match="differs from the reference"):
        fl.validate(f, inputs, [bad])


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_dropped_partial_sum_is_rejected(dtype: str) -> None:
    ex, inputs, (y,) = run(matmul(dtype, 1))
    a, b = (x.astype(np.float64) for x in inputs)
    partial = a[:, 128:] @ b[128:, :]  # device 1's share of the contraction
    bad = (y.astype(np.float64) - partial).astype(y.dtype)
    assert rejected(ex, inputs, [bad]) == (True, True)


@pytest.mark.parametrize("dtype", FLOATS)
def test_two_swapped_shards_are_rejected(dtype: str) -> None:
    ex, inputs, (y,) = run(matmul(dtype, 0))
    bad = np.concatenate([y[8:], y[:8]])  # device 1's rows where device 0's belong
    assert rejected(ex, inputs, [bad]) == (True, True)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_an_integer_off_by_one_is_rejected(dtype: str) -> None:
    ex, inputs, (y,) = run(sharded_sum([8, 6], dtype, 2))
    bad = y.copy()
    bad[3] += 1
    assert rejected(ex, inputs, [bad]) == (True, True)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("compute", PATHS)
def test_the_right_outputs_pass_on_every_path(dtype: str, compute: str) -> None:
    for sharded in (0, 1):
        ex, inputs, outputs = run(matmul(dtype, sharded), compute)
        checked = ex.validate(inputs, outputs)
        assert checked.unsharded is not None and checked.unsharded.ok, checked.lines()
        fl.validate(ex.fusion, inputs, outputs)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_transformer_block_rejects_its_small_outputs_negated(dtype: str) -> None:
    """The main job: 8 devices, every op of a GPT block; scaled weights (the default)."""
    ex, inputs, (y,) = run(models.transformer_block(8, dtype), init="scaled")
    ex.validate(inputs, [y])
    small = np.abs(y.astype(np.float64)) < np.quantile(np.abs(y.astype(np.float64)), 0.25)
    bad = y.copy()
    bad[small] = -bad[small]
    assert rejected(ex, inputs, [bad]) == (True, True)
