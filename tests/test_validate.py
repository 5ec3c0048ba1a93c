"""fl.validate: element by element within the dtype's tolerance, NaN only equal to NaN."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
import fuserlite.reference.validate as validate_module
from fuserlite import models
from fuserlite.reference.validate import TOLERANCES, mismatch, output_tolerances
from fuserlite.schedule.shard import shard_axis


def negation(n: int = 4, dtype: str = "float32") -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor([n], dtype)
        f.add_input(x)
        f.add_output(fl.neg(x))
    return f


X = np.array([1e6, -50, 60, -80], np.float32)  # neg(X) = [-1e6, 50, -60, 80]


def test_small_wrong_elements_next_to_a_large_one_fail_with_the_worst_element():
    got = np.array([-1e6, -1, -2, -3], np.float32)
    with pytest.raises(fl.ValidationError) as info:
        fl.validate(negation(), [X], [got])
    text = str(info.value)
    assert "output T1 differs from the reference at [3]: got -3.0, expected 80.0" in text
    assert "3 of 4 elements differ" in text
    assert "atol 1e-05 + rtol 1e-05" in text


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_where_the_reference_is_finite_fails(bad):
    got = np.array([-1e6, 50, bad, 80], np.float32)
    with pytest.raises(fl.ValidationError, match=rf"at \[2\]: got {bad}, expected -60.0 \(a NaN"):
        fl.validate(negation(), [X], [got])


def test_a_finite_value_where_the_reference_is_inf_fails():
    x = np.array([np.inf, 1, 2, 3], np.float32)
    with pytest.raises(fl.ValidationError, match=r"at \[0\]: got 3e\+38, expected -inf"):
        fl.validate(negation(), [x], [np.array([3e38, -1, -2, -3], np.float32)])


def test_nan_matches_nan_and_an_infinity_itself():
    x = np.array([np.nan, np.inf, -np.inf, 0.0], np.float32)
    assert fl.validate(negation(), [x], [-x]) == [0.0]


def test_integers_are_exact_beyond_float64():
    x = np.array([2**62, 1, 2, 3], np.int64)
    got = -x
    got[0] -= 1  # equal once converted to float64
    with pytest.raises(fl.ValidationError, match="integers and bools must be equal"):
        fl.validate(negation(dtype="int64"), [x], [got])


def test_an_output_of_another_dtype_is_rejected():
    with pytest.raises(
        fl.ValidationError, match=r"output T1: float64\[4\], the reference is float32"
    ):
        fl.validate(negation(), [X], [-X.astype(np.float64)])


def test_a_term_counted_twice_in_a_long_sum_fails():
    with fl.Fusion() as f:
        x = fl.tensor([8, 1024])
        f.add_input(x)
        f.add_output(fl.sum(x, [1]))
    (x,) = fl.random_inputs(f, 3)
    got = fl.evaluate(f, [x])[0].copy()
    got[5] += x[5, 7]
    with pytest.raises(fl.ValidationError, match=r"at \[5\].*1 of 8 elements differ"):
        fl.validate(f, [x], [got])


def test_rounding_in_sums_that_cancel_passes():
    # Elements near 0 made of terms in the thousands: the per-device partial sums round
    # differently from the reference's single sum by more than rtol * |expected|.
    f = models.tensor_parallel_mlp(2, batch=2, seq=64, hidden=64)
    inputs = fl.random_inputs(f, 1)
    (out,) = fl.FusionExecutor(f).run(inputs)
    (ref,) = fl.evaluate(f, inputs)
    assert mismatch(out, ref, TOLERANCES[fl.DType.float32]) is not None  # |ref| alone: too strict
    fl.validate(f, inputs, [out])


def test_outputs_computed_from_half_get_halfs_tolerance():
    # y (float32) reads h (float16), which the executor stores as half between two
    # kernels (h is resharded) while the reference keeps it in float.
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        a, b = fl.tensor([4, 6]), fl.tensor([4, 6], "float16")
        for t in (a, b):
            f.add_input(t)
            shard_axis(t, 0, mesh)
        h = fl.add(b, 3.0)
        y = fl.sub(a, h)
        shard_axis(y, 1, mesh)
        f.add_output(y)
        f.add_output(fl.mul(a, 2.0))
    assert output_tolerances(f) == [TOLERANCES[fl.DType.float16], TOLERANCES[fl.DType.float32]]
    inputs = fl.random_inputs(f, 1196)
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))


def test_the_worst_element_is_found_across_blocks(monkeypatch):
    monkeypatch.setattr(validate_module, "BLOCK", 7)  # 50 elements: 8 blocks
    ref = np.arange(50, dtype=np.float32)
    out = ref.copy()
    out[[3, 40]] += [1, 5]
    worst = mismatch(out, ref, TOLERANCES[fl.DType.float32])
    assert (worst.index, worst.got, worst.count) == ((40,), "45.0", 2)


def many_outputs(n: int, dtype: str = "float32", shape=(4, 8)) -> fl.Fusion:
    """`x + k` for k < n: outputs of one shape, dtype and tolerance, compared stacked."""
    with fl.Fusion() as f:
        x = fl.tensor(list(shape), dtype)
        f.add_input(x)
        for k in range(n):
            f.add_output(x + k)
    return f


def test_outputs_alike_are_compared_stacked_and_the_first_that_differs_is_reported(
    monkeypatch,
):
    f = many_outputs(50)
    inputs = fl.random_inputs(f, 2)
    ref = fl.evaluate(f, inputs)
    calls: list[int] = []
    compare = validate_module.mismatch
    monkeypatch.setattr(validate_module, "mismatch", lambda *a: calls.append(1) or compare(*a))
    assert fl.validate(f, inputs, ref) == [0.0] * 50
    assert calls == []  # one stacked comparison, no per-output one
    got = [r.copy() for r in ref]
    got[37][2, 5] += 1.0
    got[20][1, 1] = np.nan
    with pytest.raises(fl.ValidationError) as info:
        fl.validate(f, inputs, got)
    assert str(info.value).startswith(f"output {f.outputs[20].name} differs from the reference")
    assert "at [1, 1]: got nan" in str(info.value)
    got[20] = ref[20]
    with pytest.raises(fl.ValidationError, match=rf"output {f.outputs[37].name} .* at \[2, 5\]"):
        fl.validate(f, inputs, got)


def test_stacked_outputs_keep_their_own_max_errors_nans_and_exact_integers():
    f = many_outputs(6)
    inputs = fl.random_inputs(f, 2)
    got = [r.copy() for r in fl.evaluate(f, inputs)]
    for k, g in enumerate(got):
        g[0, k] += 1e-6 * k  # within float32's tolerance, one error per output
    got[4][3, 3] = np.inf  # an infinity only where expected: must fail
    with pytest.raises(fl.ValidationError, match=rf"{f.outputs[4].name} .* at \[3, 3\]: got inf"):
        fl.validate(f, inputs, got)
    got[4] = fl.evaluate(f, inputs)[4]
    got[4][0, 4] += 4e-6
    errors = fl.validate(f, inputs, got)
    assert errors == validate_module.max_errors(got, fl.evaluate(f, inputs))
    assert errors[0] == 0.0 and all(e > 0 for e in errors[1:])
    ints = many_outputs(5, "int64")
    x = np.full((4, 8), 2**62, np.int64)
    wrong = fl.evaluate(ints, [x])
    wrong[3][1, 2] -= 1  # equal once converted to float64
    with pytest.raises(fl.ValidationError, match=rf"{ints.outputs[3].name} .* at \[1, 2\]"):
        fl.validate(ints, [x], wrong)
    scalars = many_outputs(4, shape=())  # 0-d outputs: one element each
    inputs = fl.random_inputs(scalars)
    assert fl.validate(scalars, inputs, fl.evaluate(scalars, inputs)) == [0.0] * 4
