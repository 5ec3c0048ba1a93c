"""The transformer block (fuserlite.models.transformer_block): tensor + sequence
parallel on 8 devices moves exactly Megatron-SP's four collectives and validates."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.reference.rounding import AGAINST_REFERENCE, bounds

MEGATRON_SP = ["Allgather", "ReduceScatter", "Allgather", "ReduceScatter"]


@pytest.mark.parametrize("compute", ["numpy", "interpret", "compiled"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_block_moves_exactly_megatron_sp_and_validates(dtype: str, compute: str) -> None:
    fusion = models.transformer_block(8, dtype)
    executor = fl.FusionExecutor(fusion, compute=compute)
    inputs = fl.random_inputs(fusion, seed=1)
    fl.validate(fusion, inputs, executor.run(inputs))
    comms = executor.communications
    assert [c.kind.value for c in comms] == MEGATRON_SP
    # each of the activation size [B, S, H]: the lower bound of sequence parallelism
    assert all(c.input.shape == (2, 16, 64) for c in comms)


def test_sharded_dropout_masks_are_the_unsharded_ones() -> None:
    """1 device and 8 devices drop the same elements (validate would not notice a
    mask that drops other elements of similar size as often)."""
    outs = []
    for devices in (1, 8):
        fusion = models.transformer_block(devices, "float32", dropout_p=0.5)
        inputs = fl.random_inputs(fusion, seed=2)
        outs.append(fl.FusionExecutor(fusion, compute="numpy").run(inputs)[0])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-3, atol=1e-2)  # another mask: O(10)


def test_rounding_bounds_are_zero_only_where_the_block_is_exact() -> None:
    """sigma is finite, and 0 only where both dropouts dropped the element: y = x + 0 + 0
    there, bit for bit on every path (elsewhere rounded arithmetic made it)."""
    fusion = models.transformer_block(8, "float32")
    inputs = fl.random_inputs(fusion, seed=0)
    (err,) = bounds(fusion, inputs, AGAINST_REFERENCE).errs
    assert np.all(np.isfinite(err.total))
    exact = err.total == 0
    assert 0 < exact.mean() < 0.05  # dropout_p = 0.1 twice: about 1%
    (y,) = fl.FusionExecutor(fusion, compute="numpy").run(inputs)
    np.testing.assert_array_equal(y[exact], inputs[0][exact])


def test_the_fus_example_is_the_model() -> None:
    """examples/transformer_block.fus builds the fusion models.transformer_block builds:
    the same values on the same inputs, the same four collectives."""
    from pathlib import Path

    text = fl.load(Path(__file__).resolve().parents[1] / "examples" / "transformer_block.fus")
    model = models.transformer_block(8, "bfloat16")
    inputs = fl.random_inputs(model, seed=3)
    np.testing.assert_array_equal(fl.evaluate(text, inputs)[0], fl.evaluate(model, inputs)[0])
    executor = fl.FusionExecutor(text, compute="numpy")
    fl.validate(text, inputs, executor.run(inputs))
    assert [c.kind.value for c in executor.communications] == MEGATRON_SP
