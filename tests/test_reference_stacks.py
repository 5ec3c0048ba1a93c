"""The reference evaluator evaluates like expressions (one op, the same operand tensors,
dtypes and shape; only their scalars differ) as one numpy step: every output keeps
the value it has when evaluated alone, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.reference import evaluator as reference
from fuserlite.reference.rounding import AGAINST_REFERENCE, bounds


def fusion_of(body, dtypes=("float32",), shape=(4, 8)) -> fl.Fusion:
    """Inputs of `shape`, one per dtype, and the outputs `body` makes of them."""
    with fl.Fusion() as fusion:
        inputs = [fl.tensor(list(shape), d) for d in dtypes]
        for t in inputs:
            fusion.add_input(t)
        for out in body(*inputs):
            fusion.add_output(out)
    return fusion


def alone(monkeypatch, fusion: fl.Fusion, inputs) -> list[np.ndarray]:
    """The reference's outputs with every expression evaluated on its own."""
    with monkeypatch.context() as m:
        m.setattr(reference, "stacks", lambda exprs: [slice(i, i + 1) for i in range(len(exprs))])
        return fl.evaluate(fusion, inputs)


def assert_same_as_alone(monkeypatch, fusion: fl.Fusion, inputs) -> list[np.ndarray]:
    got = fl.evaluate(fusion, inputs)
    want = alone(monkeypatch, fusion, inputs)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and (g.dtype, g.shape) == (w.dtype, w.shape)
        np.testing.assert_array_equal(g, w, strict=True)
        assert g.tobytes() == w.tobytes()  # bit for bit: -0.0 and NaN payloads too
    return got


def run_lengths(fusion: fl.Fusion) -> list[int]:
    return [r.stop - r.start for r in reference.stacks(fusion.exprs())]


def test_outputs_that_differ_in_their_constants_are_one_step_with_their_own_values(
    monkeypatch,
) -> None:
    scalars = [0.0, 1.0, -2.5, 1e30, float("inf"), float("nan"), -0.0, 3]
    fusion = fusion_of(lambda x: [x + k for k in scalars])
    assert run_lengths(fusion) == [len(scalars)]
    inputs = fl.random_inputs(fusion, seed=1)
    got = assert_same_as_alone(monkeypatch, fusion, inputs)
    for g, k in zip(got, scalars):
        np.testing.assert_array_equal(g, inputs[0] + np.float32(k))


@pytest.mark.parametrize(
    "name, body, dtypes",
    [
        # each neighbour shares everything but one detail the grouping rule must hold
        ("op", lambda x: [x + 2.0, x - 2.0, x * 2.0, x / 2.0], ("float32",)),
        ("scalar position", lambda x: [x - 2.0, fl.sub(2.0, x), x - 3.0], ("float32",)),
        ("operand tensor", lambda x, y: [x + 1.0, y + 1.0, x + 2.0], ("float32",) * 2),
        ("operand dtype", lambda x, h: [x + 1.0, h + 1.0, x + 2.0], ("float32", "float16")),
        ("output dtype", lambda i: [i + 1, i + 1.5, i + 2], ("int32",)),
        # lt of an int tensor: bool either way, computed in int64 or in float
        ("compute dtype", lambda i: [fl.lt(i, 1), fl.lt(i, 1.5), fl.lt(i, 2)], ("int64",)),
    ],
)
def test_expressions_that_differ_in_one_detail_are_not_stacked(
    monkeypatch, name, body, dtypes
) -> None:
    fusion = fusion_of(body, dtypes)
    assert run_lengths(fusion) == [1] * len(fusion.exprs())
    inputs = fl.random_inputs(fusion, seed=2)
    inputs = [np.arange(a.size).reshape(a.shape).astype(a.dtype) for a in inputs]
    assert_same_as_alone(monkeypatch, fusion, inputs)


def test_a_stacked_rule_that_missed_a_detail_would_give_other_values(monkeypatch) -> None:
    """The check above is a real one: grouping two ops (or two compute dtypes) as one
    changes the numbers, which the comparison with evaluation alone sees."""
    x = np.arange(32, dtype=np.int64).reshape(4, 8)
    for body in (lambda i: [i + 2, i - 2], lambda i: [fl.lt(i, 1), fl.lt(i, 1.5)]):
        fusion = fusion_of(body, ("int64",))
        with monkeypatch.context() as m:
            m.setattr(reference, "stacks", lambda exprs: [slice(0, len(exprs))])
            merged = fl.evaluate(fusion, [x])
        want = alone(monkeypatch, fusion, [x])
        assert any(not np.array_equal(g, w) for g, w in zip(merged, want))


@pytest.mark.parametrize(
    "body, dtype",
    [
        (lambda x: [x - k for k in (1.0, -2.0, 0.5)], "float32"),
        (lambda x: [fl.sub(k, x) for k in (1.0, -2.0, 0.5)], "float32"),
        (lambda x: [x * k for k in (3.0, -0.0, 1e-40)], "float32"),
        (lambda x: [x / k for k in (3.0, 0.0, -7.0)], "float32"),
        (lambda x: [fl.maximum(x, k) for k in (0.0, 0.5, float("nan"))], "float32"),
        (lambda x: [fl.minimum(x, k) for k in (0.0, -0.5)], "float32"),
        (lambda c: [fl.where(c, k, -k) for k in (1.0, 2.0)], "bool"),
        (lambda x: [x + k for k in (1.0, 1e-3, 6e4)], "float16"),
        (lambda x: [x * k for k in (0.1, 3.0)], "bfloat16"),
        (lambda x: [x + k for k in (1, 2**40, -3)], "int64"),
        (lambda x: [fl.lt(x, k) for k in (0, 1, 5)], "int32"),
        (lambda x: [x + k for k in (1, 2)], "bool"),
    ],
)
def test_every_stackable_op_and_dtype_equals_evaluation_alone(monkeypatch, body, dtype) -> None:
    fusion = fusion_of(body, (dtype,), shape=(3, 5))
    assert run_lengths(fusion) == [len(fusion.exprs())]
    inputs = fl.random_inputs(fusion, seed=4)
    assert_same_as_alone(monkeypatch, fusion, inputs)


def test_runs_are_bounded_in_elements_and_0d_outputs_stay_arrays(monkeypatch) -> None:
    fusion = fusion_of(lambda x: [x + float(k) for k in range(10)])
    monkeypatch.setattr(reference, "BLOCK", 3 * 32)  # three [4, 8] outputs a run
    assert run_lengths(fusion) == [3, 3, 3, 1]
    assert_same_as_alone(monkeypatch, fusion, fl.random_inputs(fusion))
    monkeypatch.undo()
    scalars = fusion_of(lambda x: [x + 1.0, x + 2.0], shape=())
    got = assert_same_as_alone(monkeypatch, scalars, [np.asarray(0.5, np.float32)])
    assert [g.shape for g in got] == [(), ()] and [float(g) for g in got] == [1.5, 2.5]


def test_intermediates_of_a_run_and_their_readers(monkeypatch) -> None:
    """Stacked intermediates feed later expressions, are freed after their last reader
    and are seen one by one by a visitor (the rounding bounds)."""

    def body(x):
        parts = [x * float(k) for k in range(1, 5)]  # one run
        return [fl.tanh(p) - 1.0 for p in parts] + [parts[0] + parts[3]]

    fusion = fusion_of(body)
    inputs = fl.random_inputs(fusion, seed=5)
    assert_same_as_alone(monkeypatch, fusion, inputs)
    seen: list[str] = []
    fl.evaluate(fusion, inputs, lambda e, args, values: seen.append(e.output.name))
    assert seen == [e.output.name for e in fusion.exprs()]
    got = bounds(fusion, inputs, AGAINST_REFERENCE).errs
    with monkeypatch.context() as m:
        m.setattr(reference, "stacks", lambda exprs: [slice(i, i + 1) for i in range(len(exprs))])
        want = bounds(fusion, inputs, AGAINST_REFERENCE).errs
    assert [g is None for g in got] == [w is None for w in want] == [False] * 4 + [True]
    for g, w in zip(got[:4], want):  # x + 4x of an exact x: exact
        np.testing.assert_array_equal(g.parts, w.parts)
