"""Random inputs have a total cap and no whole-input float64 temporary; validation
compares in chunks."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
import fuserlite.reference.evaluator as reference
from fuserlite.reference.validate import ValidationError


def test_random_inputs_cap_is_a_total(monkeypatch):
    monkeypatch.setattr(reference, "MAX_INPUT_BYTES", 1000)
    with fl.Fusion() as f:
        x = fl.tensor([100])  # 400 bytes each, 1200 in all
        f.add_input(x)
        w = fl.tensor([100])
        f.add_input(w)
        v = fl.tensor([100])
        f.add_input(v)
        f.add_output(x + w + v)
    with pytest.raises(fl.ExecutionError, match=r"need 1200 bytes in all .* limited to 1000"):
        fl.random_inputs(f)


def test_random_inputs_are_drawn_in_chunks_with_the_values_of_one_draw():
    n = 2**20 + 3  # more than one chunk
    with fl.Fusion() as f:
        for dtype in ("float32", "float16", "int32", "bool"):
            t = fl.tensor([n], dtype=dtype)
            f.add_input(t)
            f.add_output(t)
    rng = np.random.default_rng(5)
    expected = [
        rng.standard_normal(n).astype(np.float32),
        rng.standard_normal(n).astype(np.float16),
        rng.integers(-8, 8, n).astype(np.int32),
        rng.integers(0, 2, n).astype(bool),
    ]
    for got, want in zip(fl.random_inputs(f, seed=5), expected):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_validate_compares_every_chunk():
    with fl.Fusion() as f:
        x = fl.tensor([2**20 + 8])
        f.add_input(x)
        f.add_output(fl.neg(x))
    inputs = fl.random_inputs(f)
    wrong = -inputs[0]
    wrong[-1] += 1.0  # past the first chunk
    with pytest.raises(ValidationError, match="differs from the reference"):
        fl.validate(f, inputs, [wrong])
    assert fl.validate(f, inputs, [-inputs[0]]).max_errors == [0.0]
