"""Validation a block of rows at a time (fuserlite/reference/rows.py): which fusions are
row-wise, that their blocks evaluate to the whole's bits and bounds, that a failure names
the element's global index, and that validating a large one stays in bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import fuserlite as fl
import fuserlite.reference.rows as rows_module
from fuserlite.reference.rounding import AGAINST_REFERENCE, bounds
from fuserlite.reference.rows import row_blocks, rows_of


def chain(r: int = 37, c: int = 24) -> fl.Fusion:
    """Pointwise ops, a broadcast bias and a bf16 store: every tensor has rows but the bias."""
    with fl.Fusion() as f:
        x, bias = fl.tensor([r, c]), fl.tensor([c])
        f.add_input(x)
        f.add_input(bias)
        t = fl.tanh(x * 0.5) + fl.broadcast(bias, [True, False])
        t = fl.cast(fl.exp(fl.cast(t, "bfloat16")), "float32")
        f.add_output(t)
    return f


def normalized(r: int = 37, c: int = 24) -> fl.Fusion:
    """A layer norm (sums along the columns), a product with a weight and a dropout mask."""
    with fl.Fusion() as f:
        x, w = fl.tensor([r, 37, c]), fl.tensor([c, 16])
        f.add_input(x)
        f.add_input(w)
        y = fl.matmul(fl.layer_norm(x, [c]), w)
        keep = fl.lt(fl.rand_like(y, seed=3), 0.9)
        f.add_output(fl.where(keep, y, 0.0))
        f.add_output(fl.max(y, [2]))
    return f


def expanded(r: int = 37, c: int = 24) -> fl.Fusion:
    """A bias expanded to the rows' extent, then added to the rows."""
    with fl.Fusion() as f:
        x, bias = fl.tensor([r, 37, c]), fl.tensor([c])
        f.add_input(x)
        f.add_input(bias)
        b = fl.expand(fl.broadcast(bias, [True, True, False]), [r, 37, c])
        f.add_output(fl.sum(x * b, [2]))
    return f


def block(r: int = 5) -> fl.Fusion:
    """The GPT block (models.transformer_block): reshapes into heads, causal attention with
    dropout and the MLP, every batch row its own."""
    from fuserlite import models

    return models.transformer_block(2, "bfloat16", models.BlockShape(r, 8, 32, 4), 0.1)


ROW_WISE = {"chain": chain, "normalized": normalized, "expanded": expanded, "block": block}


def summed_over_rows() -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor([37, 24])
        f.add_input(x)
        f.add_output(fl.sum(x, [0]) + 0.0)
        f.add_output(x * 2.0)
    return f


def transposed() -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor([24, 24])
        f.add_input(x)
        f.add_output(fl.permute(x, [1, 0]) + x)
    return f


def contracted() -> fl.Fusion:
    """x is both the rows (as a) and the contraction (as b): its rows are mixed."""
    with fl.Fusion() as f:
        x = fl.tensor([24, 24])
        f.add_input(x)
        f.add_output(fl.matmul(x, x))
    return f


MIXED = {"summed over the rows": summed_over_rows, "transposed": transposed}
MIXED["contracted"] = contracted


@pytest.mark.parametrize("name", ROW_WISE)
def test_row_wise_fusions_have_rows(name):
    f = ROW_WISE[name]()
    rows = rows_of(f)
    assert rows is not None and rows.extent == f.outputs[0].shape[:1]
    assert all(t in rows.tensors for t in f.outputs)
    assert f.inputs[1] not in rows.tensors  # the bias or the weight stays whole


@pytest.mark.parametrize("name", MIXED)
def test_fusions_that_mix_rows_have_none(name):
    assert rows_of(MIXED[name]()) is None


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", ROW_WISE)
def test_blocks_evaluate_to_the_wholes_bits_and_bounds(name):
    f = ROW_WISE[name]()
    rows = rows_of(f)
    _blocks_match_the_whole(f, rows)


@pytest.mark.parametrize("name", ["normalized", "expanded"])
def test_two_axes_of_rows_evaluate_to_the_wholes_bits_and_bounds(name):
    f = ROW_WISE[name](r=4)
    rows = rows_of(f, depth=2)
    assert rows is not None and len(rows.extent) == 2
    _blocks_match_the_whole(f, rows)


def _blocks_match_the_whole(f: fl.Fusion, rows) -> None:
    """Every output and its bounds, evaluated a block at a time (blocks of a few rows, the
    last one short), equal the whole's, bit for bit."""
    inputs = fl.random_inputs(f, seed=1)
    depth = len(rows.extent)
    width = max(int(np.prod(t.shape[depth:])) for t in rows.tensors)
    per = 2 if rows.extent[-1] < 10 else 5  # rows a block
    spans = rows.spans(block=per * width)
    assert len(spans) >= 3 and spans[-1][-1].stop - spans[-1][-1].start < per
    whole = fl.evaluate(f, inputs)
    all_of = bounds(f, inputs, AGAINST_REFERENCE)
    for span in spans:
        block = fl.evaluate(f, inputs, block=(rows, span))
        found = bounds(f, inputs, AGAINST_REFERENCE, (rows, span))
        for k, out in enumerate(whole):
            assert _same_bits(out[span], block[k])
            err, part = all_of.errs[k], found.errs[k]
            full = np.broadcast_to(err.parts, (3, *out.shape))[(slice(None), *span)]
            assert _same_bits(full, np.broadcast_to(part.parts, full.shape))
            assert part.coherent == err.coherent


def test_a_failure_in_a_later_block_names_its_global_index(monkeypatch):
    monkeypatch.setattr(rows_module, "BLOCK", 4 * 24)
    f = chain()
    inputs = fl.random_inputs(f, seed=2)
    outputs = fl.evaluate(f, inputs)
    assert len(rows_of(f).spans()) > 5
    fl.validate(f, inputs, outputs)  # the reference itself passes
    outputs[0][30, 7] += 1.0
    with pytest.raises(fl.ValidationError, match=r"at \[30, 7\]"):
        fl.validate(f, inputs, outputs)


def test_a_failure_in_a_block_of_two_axes_names_its_global_index(monkeypatch):
    monkeypatch.setattr(rows_module, "BLOCK", 100)  # one row (37 x 24) is wider
    f = normalized(r=4)
    assert len(row_blocks(f).extent) == 2
    inputs = fl.random_inputs(f, seed=2)
    outputs = fl.evaluate(f, inputs)
    outputs[0][2, 30, 5] += 1.0
    with pytest.raises(fl.ValidationError, match=r"at \[2, 30, 5\]"):
        fl.validate(f, inputs, outputs)


def test_comparing_a_large_row_wise_fusion_takes_bounded_memory(monkeypatch):
    """Blocks of 4096 elements: the reference and its float64 bounds take a few blocks'
    memory, not the outputs' (whole, the reference alone is their size, the bounds 6x)."""
    monkeypatch.setattr(rows_module, "BLOCK", 4096)
    f = chain(r=4096, c=256)
    inputs = fl.random_inputs(f, seed=3)
    outputs = fl.evaluate(f, inputs)
    outputs[0] = np.nextafter(outputs[0], np.float32(np.inf))  # every element differs a little
    size = outputs[0].nbytes  # 4 MiB
    tracemalloc.start()
    try:
        found = fl.validate(f, inputs, outputs)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found.differing == outputs[0].size and found.ok
    assert peak < size / 4, f"validation peaked at {peak} bytes for outputs of {size}"


def test_an_exact_weight_adds_no_term_to_a_products_bounds():
    """sqrt(a**2 @ sigma_w**2 + sigma_a**2 @ w**2) with w exact: the first term is left
    out, not computed from float64 zeros of w's size (three of them, one per source)."""
    with fl.Fusion() as f:
        x, w = fl.tensor([4, 1024]), fl.tensor([1024, 1024])
        f.add_input(x)
        f.add_input(w)
        f.add_output(fl.matmul(fl.tanh(x), w))
    inputs = fl.random_inputs(f, seed=4)
    tracemalloc.start()
    try:
        found = bounds(f, inputs, AGAINST_REFERENCE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    weight = w.shape[0] * w.shape[1] * 8  # float64 bytes of w
    assert peak < 2.5 * weight, f"bounds peaked at {peak / weight:.1f}x w in float64"
    a = np.tanh(inputs[0].astype(np.float64))
    sigma_a = np.sqrt(np.sum(found.errs[0].parts ** 2, axis=0))
    assert np.all(sigma_a > 0) and np.all(np.isfinite(sigma_a))
    assert sigma_a.shape == (4, 1024) and a.shape == (4, 1024)


def test_rounding_again_grows_each_source_by_its_share():
    """_rounded: sqrt(var_k + var_k / total * sigma**2) per source, as one factor; parts
    where the total is 0 or unbounded stay as they are."""
    from fuserlite.reference.rounding import Err, _rounded

    rng = np.random.default_rng(1)
    parts = rng.random((3, 64)) * rng.choice([0.0, 1e-8, 1.0], (3, 64))
    parts[:, 5] = [np.inf, 1.0, 0.0]
    sigma = rng.random(64) * 1e-7
    got = _rounded(Err(parts), sigma).parts
    var = parts**2
    total = var.sum(0)
    held = (total > 0) & (total < np.inf)
    share = np.divide(var, total, out=np.zeros(var.shape), where=held)
    np.testing.assert_allclose(got, np.sqrt(var + share * sigma**2), rtol=4e-16, atol=0)
    assert np.array_equal(got[:, ~held], parts[:, ~held])


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """The same values, NaN equal to NaN (the random fusions' values in their dtypes)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def test_every_random_row_wise_fusion_evaluates_to_the_wholes_values_and_bounds():
    """The differential test's random fusions (every op of the registry): wherever rows_of
    finds rows, at depth 1 or 2, each row's outputs and bounds alone equal the whole's."""
    from random_sharded import build_case

    checked = set()
    for seed in range(600):
        f = build_case(seed).fusion
        for depth in (1, 2):
            rows = rows_of(f, depth)
            if rows is None:
                continue
            checked.update(e.op_name for e in f.exprs())
            inputs = fl.random_inputs(f, seed)
            whole = fl.evaluate(f, inputs)
            all_of = bounds(f, inputs, AGAINST_REFERENCE)
            width = max(int(np.prod(t.shape[depth:])) for t in rows.tensors)
            for span in rows.spans(block=width):  # a row a block
                block = fl.evaluate(f, inputs, block=(rows, span))
                found = bounds(f, inputs, AGAINST_REFERENCE, (rows, span))
                for k, out in enumerate(whole):
                    assert _equal(out[span], block[k]), (seed, depth, k, span)
                    err, part = all_of.errs[k], found.errs[k]
                    assert (err is None) == (part is None), (seed, depth, k, span)
                    if err is not None:
                        full = np.broadcast_to(err.parts, (3, *out.shape))[(slice(None), *span)]
                        assert _equal(full, np.broadcast_to(part.parts, full.shape))
    # the carriers besides pointwise ops, each met at least once
    assert {"sdpa", "matmul", "linear", "reshape", "expand", "rand_like", "iota"} <= checked


@pytest.mark.parametrize(
    "make",
    [
        lambda rows: "rows",
        lambda rows: (rows, slice(0, 2)),  # a slice, not a span of them
        lambda rows: (rows, (slice(0, 2), slice(0, 2))),  # one axis too many
        lambda rows: (rows, (slice(0, 99),)),  # past the rows
        lambda rows: (rows, (slice(3, 3),)),  # empty
    ],
)
def test_a_bad_block_is_a_clear_error(make):
    f = chain()
    with pytest.raises(fl.ExecutionError, match="block must be"):
        fl.evaluate(f, fl.random_inputs(f), block=make(rows_of(f)))


def test_an_output_equal_throughout_is_not_compared_again_block_by_block(monkeypatch):
    import fuserlite.reference.validate as validate_module
    from fuserlite.reference.rounding import SAME_PATH

    monkeypatch.setattr(rows_module, "BLOCK", 4 * 24)
    with fl.Fusion() as f:
        x = fl.tensor([37, 24])
        f.add_input(x)
        f.add_output(x * 2.0)
        f.add_output(fl.tanh(x))
    inputs = fl.random_inputs(f, seed=5)
    expected = fl.evaluate(f, inputs)
    outputs = [expected[0].copy(), np.nextafter(expected[1], np.float32(np.inf))]
    compared: list[int] = []
    original = validate_module._identical

    def counting(outs, refs):
        compared.append(len(outs))
        return original(outs, refs)

    monkeypatch.setattr(validate_module, "_identical", counting)
    found = validate_module.compare(f, inputs, outputs, expected, SAME_PATH, "the other run")
    assert found.differing == outputs[1].size
    assert compared[0] == 2 and len(compared) > 3  # both whole, then blocks
    assert set(compared[1:]) == {1}  # each block: the differing output alone
