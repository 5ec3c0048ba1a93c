"""fl.validate: element by element within the rounding possible there (LAMBDA sigma,
fuserlite.reference.rounding), bit-identical where none is, NaN only equal to NaN."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
import fuserlite.reference.validate as validate_module
from fuserlite import models
from fuserlite.reference.rounding import LAMBDA
from fuserlite.schedule.shard import shard_axis


def negation(n: int = 4, dtype: str = "float32") -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor([n], dtype)
        f.add_input(x)
        f.add_output(fl.neg(x))
    return f


X = np.array([1e6, -50, 60, -80], np.float32)  # neg(X) = [-1e6, 50, -60, 80]


def summed(n: int = 1024, dtype: str = "float32") -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor([8, n], dtype)
        f.add_input(x)
        f.add_output(fl.sum(x, [1]))
    return f


def test_an_exact_result_must_be_bit_identical_and_the_worst_element_is_named():
    got = np.array([-1e6, -1, -2, -3], np.float32)
    with pytest.raises(fl.ValidationError) as info:
        fl.validate(negation(), [X], [got])
    text = str(info.value)
    assert "output T1 differs from the reference at [3]: got -3.0, expected 80.0" in text
    assert "3 of 4 elements differ" in text
    assert "must be bit-identical" in text  # -x of an exact x: no rounding anywhere
    one_ulp = np.nextafter(-X, np.float32(np.inf))
    with pytest.raises(fl.ValidationError, match="must be bit-identical"):
        fl.validate(negation(), [X], [one_ulp])


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
    found = fl.validate(negation(), [x], [-x])
    assert found.max_errors == [0.0] and found.differing == 0
    assert found.summary() == ["bit-identical (4 elements)"]


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
    f = summed()
    (x,) = fl.random_inputs(f, 3)
    got = fl.evaluate(f, [x])[0].copy()
    k = int(np.argmax(np.abs(x[5])))
    got[5] += x[5, k]
    with pytest.raises(fl.ValidationError, match=r"at \[5\].*1 of 8 elements differ"):
        fl.validate(f, [x], [got])


def test_a_sum_in_another_order_passes_and_says_where_its_error_comes_from():
    f = summed()
    (x,) = fl.random_inputs(f, 3)
    pairs = x.reshape(8, 512, 2).sum(axis=2, dtype=np.float32)  # another order of the terms
    found = fl.validate(f, [x], [pairs.sum(axis=1, dtype=np.float32)])
    assert found.differing > 0 and found.nearest.origin() == "float32 sum order"
    assert 0 < found.nearest.used < 1 and found.nearest.allowed > found.nearest.error


def test_rounding_in_sums_that_cancel_passes():
    # Elements near 0 made of terms in the thousands: the per-device partial sums round
    # differently from the reference's single sum by far more than |expected| allows.
    f = models.tensor_parallel_mlp(2, batch=2, seq=64, hidden=64)
    inputs = fl.random_inputs(f, 1, "normal")
    (out,) = fl.FusionExecutor(f).run(inputs)
    found = fl.validate(f, inputs, [out])
    assert found.differing > 0 and found.nearest.used < 1


def test_outputs_computed_from_half_allow_its_rounding_at_stores():
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
    inputs = fl.random_inputs(f, 1196)
    outputs = fl.FusionExecutor(f).run(inputs)
    found = fl.validate(f, inputs, outputs)
    assert found.nearest.origin() == "float16 rounding of intermediates at kernel stores"
    assert found.max_errors[1] == 0.0  # a * 2 rounds alike everywhere: bit-identical


def test_a_half_output_read_again_allows_its_rounding_at_stores():
    # As above, but h is itself an output: the reference rounds it only as it gives it
    # back, its reader y reads the float value (regression: y was allowed 0 and its
    # elements one bfloat16 ulp of h apart failed as "must be bit-identical").
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        a, b = fl.tensor([4, 6]), fl.tensor([4, 6], "bfloat16")
        for t in (a, b):
            f.add_input(t)
            shard_axis(t, 0, mesh)
        h = fl.sub(3.0, b)
        y = fl.maximum(h, a)
        shard_axis(y, 1, mesh)
        f.add_output(y)
        f.add_output(h)
    inputs = fl.random_inputs(f, 139)
    outputs = fl.FusionExecutor(f).run(inputs)
    found = fl.validate(f, inputs, outputs)
    assert found.max_errors[0] > 0.0  # the case needs y to differ
    assert found.nearest.origin() == "bfloat16 rounding of intermediates at kernel stores"
    assert found.max_errors[1] == 0.0  # h itself both sides round alike: bit-identical


def test_the_worst_element_is_found_across_blocks(monkeypatch):
    monkeypatch.setattr(validate_module, "BLOCK", 7)  # 50 elements: 8 blocks
    f = negation(50)
    x = np.arange(50, dtype=np.float32)
    out = -x
    out[[3, 40]] += [1, 5]
    with pytest.raises(fl.ValidationError, match=r"at \[40\]: got -35.0.*2 of 50 elements"):
        fl.validate(f, [x], [out])


def many_outputs(n: int, dtype: str = "float32", shape=(4, 8)) -> fl.Fusion:
    """`x + k` for k < n: outputs of one shape and dtype, compared stacked."""
    with fl.Fusion() as f:
        x = fl.tensor(list(shape), dtype)
        f.add_input(x)
        for k in range(n):
            f.add_output(x + k)
    return f


def test_outputs_alike_are_compared_stacked_and_the_first_worst_is_reported(monkeypatch):
    f = many_outputs(50)
    inputs = fl.random_inputs(f, 2)
    ref = fl.evaluate(f, inputs)
    calls: list[int] = []
    bounds = validate_module.bounds
    monkeypatch.setattr(validate_module, "bounds", lambda *a: calls.append(1) or bounds(*a))
    assert fl.validate(f, inputs, ref).max_errors == [0.0] * 50
    assert calls == []  # every output identical: no bounds evaluated
    got = [r.copy() for r in ref]
    got[37][2, 5] += 1.0
    got[20][1, 1] = np.nan
    with pytest.raises(fl.ValidationError) as info:
        fl.validate(f, inputs, got)
    assert str(info.value).startswith(f"output {f.outputs[20].name} differs from the reference")
    assert "at [1, 1]: got nan" in str(info.value)
    assert calls == [1]  # once for all outputs
    got[20] = ref[20]
    with pytest.raises(fl.ValidationError, match=rf"output {f.outputs[37].name} .* at \[2, 5\]"):
        fl.validate(f, inputs, got)


def test_stacked_outputs_keep_their_own_max_errors_nans_and_exact_integers():
    f = many_outputs(6, "float64")
    inputs = fl.random_inputs(f, 2)
    got = [r.copy() for r in fl.evaluate(f, inputs)]
    got[4][3, 3] = np.inf  # an infinity only where expected: must fail
    with pytest.raises(fl.ValidationError, match=rf"{f.outputs[4].name} .* at \[3, 3\]: got inf"):
        fl.validate(f, inputs, got)
    ints = many_outputs(5, "int64")
    x = np.full((4, 8), 2**62, np.int64)
    wrong = fl.evaluate(ints, [x])
    wrong[3][1, 2] -= 1  # equal once converted to float64
    with pytest.raises(fl.ValidationError, match=rf"{ints.outputs[3].name} .* at \[1, 2\]"):
        fl.validate(ints, [x], wrong)
    scalars = many_outputs(4, shape=())  # 0-d outputs: one element each
    inputs = fl.random_inputs(scalars)
    assert fl.validate(scalars, inputs, fl.evaluate(scalars, inputs)).max_errors == [0.0] * 4


def test_the_allowance_is_lambda_sigma_and_the_report_says_so():
    f = summed(64)
    (x,) = fl.random_inputs(f, 0)
    (ref,) = fl.evaluate(f, [x])
    got = ref.copy()
    got[2] = np.nextafter(ref[2], np.float32(np.inf))  # one ulp: well within
    found = fl.validate(f, [x], [got])
    e = found.nearest
    assert e.index == (2,) and e.error == pytest.approx(abs(float(got[2]) - float(ref[2])))
    assert e.relative == pytest.approx(e.error / abs(float(ref[2])))
    assert f"= {LAMBDA:g} sigma of float32 sum order" in found.summary()[1]
    got[2] = ref[2] + 2 * e.allowed  # twice its allowance
    with pytest.raises(fl.ValidationError, match=rf"allowed {e.allowed:.3g} = {LAMBDA:g} sigma"):
        fl.validate(f, [x], [got])


def test_the_element_most_over_its_allowance_is_lexsorts_last():
    """_most: the largest (used, error) among the mask, NaN used the largest, the last of
    equals: what sorting every element would give, without the sort."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        used = rng.choice([0.0, 0.5, 1.0, np.inf, np.nan], n) if trial % 2 else rng.random(n)
        error = rng.choice([0.0, 1.0, 2.0], n)
        mask = rng.random(n) < 0.7
        order = np.lexsort((np.where(mask, error, -1.0), np.where(mask, used, -1.0)))
        expected = int(order[-1]) if mask.any() else None
        assert validate_module._most(mask, used, error) == expected
