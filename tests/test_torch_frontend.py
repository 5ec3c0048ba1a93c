"""fl.from_torch: every row of the ATen table against torch's own result, in every dtype
torch's CPU computes it in; inputs, names, constants, messages; the docs' table."""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the torch extra is not installed: pip install 'fuserlite[torch]'"
)

import ml_dtypes  # noqa: E402
from aten_cases import CASES, Case  # noqa: E402

import fuserlite as fl  # noqa: E402
from fuserlite.frontends.aten import TABLE  # noqa: E402

# Error allowed against torch, relative to the largest |value| of torch's result (at
# least 1): fuserlite rounds where a kernel stores, torch after every op; half and
# bfloat16 normalizations compute in float32 on both sides.
TOLERANCE = {"float64": 1e-14, "float32": 3e-6, "float16": 4e-3, "bfloat16": 3.2e-2}
ERRORS: dict[str, float] = {}  # dtype -> the largest relative error seen (see __main__)


def _exported_ops(fn, args) -> set[str]:
    class Wrapped(torch.nn.Module):
        def forward(self, *xs):
            return fn(*xs)

    graph = torch.export.export(Wrapped(), args).graph
    return {str(n.target) for n in graph.nodes if n.op == "call_function"}


def _values(t) -> np.ndarray:
    return t.detach().to(torch.float64).numpy()


def _close(case: Case, dtype: str, got: np.ndarray, want: np.ndarray) -> None:
    got, want = got.astype(np.float64), want.astype(np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), "NaNs differ"
    finite = ~np.isnan(want)
    assert np.array_equal(got[~np.isfinite(want)], want[~np.isfinite(want)], equal_nan=True)
    ok = np.isfinite(want)
    scale = max(1.0, float(np.max(np.abs(want[ok]), initial=0.0)))
    err = float(np.max(np.abs(got[ok] - want[ok]), initial=0.0)) / scale
    ERRORS[dtype] = max(ERRORS.get(dtype, 0.0), err)
    assert err <= TOLERANCE[dtype], f"{case.id} {dtype}: relative error {err:.3g}"
    assert finite.any() or not want.size


PARAMS = [pytest.param(c, d, id=f"{c.id}-{d}") for c in CASES for d in c.dtypes]


@pytest.mark.parametrize(("case", "dtype"), PARAMS)
def test_row_against_torch(case: Case, dtype: str) -> None:
    torch.manual_seed(0)
    args = case.make(getattr(torch, dtype))
    want = case.fn(*args)  # a case lists only the dtypes torch's CPU computes it in
    assert case.op in _exported_ops(case.fn, args)
    fusion, inputs = fl.from_torch(case.fn, *args)
    (got,) = fl.evaluate(fusion, inputs)
    _close(case, dtype, got, _values(want))


def test_every_row_has_a_case() -> None:
    assert sorted(TABLE) == sorted({c.op for c in CASES})


# -- inputs, names, constants ----------------------------------------------------------
class Inner(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 6)
        self.register_buffer("scale", torch.full((6,), 0.5))

    def forward(self, x):
        return self.fc1(x) * self.scale


class Outer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList([Inner(), Inner()])
        self.head = torch.nn.Linear(6, 3, dtype=torch.bfloat16)

    def forward(self, x, y):
        h = self.layers[0](x) + self.layers[1](y)
        return self.head(h.to(torch.bfloat16)), h


def test_inputs_are_parameters_and_buffers_then_examples_by_name() -> None:
    torch.manual_seed(0)
    module, x, y = Outer(), torch.randn(2, 4), torch.randn(2, 4)
    fusion, inputs = fl.from_torch(module, x, y)
    names = [t.user_name for t in fusion.inputs]
    params = [n for n, _ in module.named_parameters()]
    assert names[: len(params)] == params and names[-2:] == ["x", "y"]
    assert set(names) == {*params, *(n for n, _ in module.named_buffers()), "x", "y"}
    assert fusion.inputs[names.index("head.weight")].dtype is fl.DType.bfloat16
    assert inputs[names.index("head.weight")].dtype == ml_dtypes.bfloat16
    assert fusion.inputs[0].name == "layers.0.fc1.weight (T0)"
    assert [t.user_name for t in fusion.outputs] == ["out.0", "out.1"]
    got = fl.FusionExecutor(fusion).run(inputs)
    want = module(x, y)
    np.testing.assert_allclose(got[1], _values(want[1]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[0].astype(np.float64), _values(want[0]), rtol=1e-2, atol=1e-2)
    # every tensor remembers the module and the line that made it
    linear = next(t for t in fusion.tensors_created if t.user_name == "linear_1")
    assert re.fullmatch(r"layers\.1\.fc1 \(test_torch_frontend\.py:\d+\)", linear.origin)


def test_constants_the_module_computes_are_folded_into_inputs() -> None:
    """A causal mask (tril of ones) and a rotary table (arange, outer, cos): torch
    evaluates them at import; each becomes an input named by its node."""

    def attend(q):
        t = q.shape[-2]
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        pos = torch.arange(t, dtype=torch.float32)
        freq = 1.0 / (10000 ** (torch.arange(0, 4, 2, dtype=torch.float32) / 4))
        angle = torch.outer(pos, freq).repeat_interleave(2, -1)
        rotated = q * torch.cos(angle)
        return torch.nn.functional.scaled_dot_product_attention(rotated, q, q, attn_mask=mask)

    q = torch.randn(2, 5, 4)
    fusion, inputs = fl.from_torch(attend, q)
    names = [t.user_name for t in fusion.inputs]
    assert names[0] == "q" and len(names) == 3  # then the cosines and the mask
    assert all("folded at import" in t.origin for t in fusion.inputs[1:])
    (got,) = fl.FusionExecutor(fusion).run(inputs)
    np.testing.assert_allclose(got, _values(attend(q)), rtol=1e-5, atol=1e-6)


def test_an_op_outside_the_table_names_it_its_module_and_the_table() -> None:
    class Scan(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 0)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scan = Scan()

        def forward(self, x):
            return self.scan(x + 1)

    with pytest.raises(fl.FuserliteError) as info:
        fl.from_torch(Model(), torch.randn(3))
    message = str(info.value)
    assert re.search(r"scan \(test_torch_frontend\.py:\d+\): aten\.cumsum\.default is not", message)
    assert "linear.default" in message and "docs/torch.md" in message


def test_a_rows_refusal_names_the_module() -> None:
    class Floor(torch.nn.Module):
        def forward(self, x, y):
            return torch.div(x, y, rounding_mode="floor")

    with pytest.raises(fl.FuserliteError, match=r"aten.div.Tensor_mode: div with rounding_mode"):
        fl.from_torch(Floor(), torch.randn(3), torch.randn(3))


def test_outputs_that_are_inputs_are_copies_and_bad_inputs_are_refused() -> None:
    fusion, inputs = fl.from_torch(lambda x: (x, x * 2), torch.randn(3))
    assert [e.op_name for e in fusion.exprs()][0] in ("mul", "set")
    assert fusion.outputs[0] not in fusion.inputs
    with pytest.raises(fl.FuserliteError, match="example input 0 is int 3, not a tensor"):
        fl.from_torch(lambda x: x, 3)
    with pytest.raises(fl.FuserliteError, match="fuserlite's dtypes are"):
        fl.from_torch(lambda x: x + 1, torch.ones(2, dtype=torch.complex64))


def test_dropout_in_train_mode_draws_fuserlites_philox() -> None:
    drop = torch.nn.Dropout(0.5).train()
    x = torch.ones(64, 64)
    fusion, inputs = fl.from_torch(drop, x, seed=3)
    (got,) = fl.FusionExecutor(fusion).run(inputs)
    kept = got != 0
    assert set(np.unique(got)) == {0.0, 2.0} and 0.4 < kept.mean() < 0.6
    want = fl.evaluate(_dropout_fusion(64, 0.5, seed=3), [inputs[0]])[0]
    np.testing.assert_array_equal(got, want)


def _dropout_fusion(n: int, p: float, seed: int) -> fl.Fusion:
    with fl.Fusion() as fusion:
        x = fl.tensor([n, n], name="x")
        fusion.add_input(x)
        fusion.add_output(fl.dropout(x, p, seed=seed, offset=0))
    return fusion


if __name__ == "__main__":
    # python tests/test_torch_frontend.py: every row in every dtype, and the largest
    # error against torch per dtype (relative to the result's scale)
    for case, dtype in (p.values for p in PARAMS):
        test_row_against_torch(case, dtype)
    print(f"{len(TABLE)} rows, {len(PARAMS)} cases; largest error against torch:")
    for dtype, err in ERRORS.items():
        print(f"  {dtype:9} {err:.2g} (allowed {TOLERANCE[dtype]:g})")


def test_attention_dropout_is_fuserlites_philox_one_offset_per_random_op() -> None:
    """sdpa's dropout_p and a dropout after it: fl.sdpa and fl.dropout with the import's
    seed, offsets 0 and 1 in graph order (each random op draws its own numbers)."""

    def attend(q, k, v):
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.25)
        return torch.nn.functional.dropout(y, 0.5, training=True)

    q, k, v = (torch.randn(2, 2, 6, 4) for _ in range(3))
    fusion, inputs = fl.from_torch(attend, q, k, v, seed=7)
    (got,) = fl.evaluate(fusion, inputs)
    with fl.Fusion() as mine:
        tq, tk, tv = (fl.tensor([2, 2, 6, 4], name=n) for n in "qkv")
        for t in (tq, tk, tv):
            mine.add_input(t)
        y, _ = fl.sdpa(tq, tk, tv, dropout_p=0.25, seed=7, offset=0)
        mine.add_output(fl.dropout(y, 0.5, seed=7, offset=1))
    (want,) = fl.evaluate(mine, inputs)
    np.testing.assert_array_equal(got, want)
    assert 0.3 < float(np.mean(got == 0)) < 0.7  # the second dropout drew its own mask
