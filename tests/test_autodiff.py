"""fl.grad and fl.vjp: every vjp rule against float64 central differences, in every
float dtype, and the derived fusions' errors and shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from finite_differences import gradient
from vjp_cases import CASES, Case

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.ops.registry import all_ops, no_gradient

# Error allowed against float64 central differences, relative to the largest gradient:
# the reference keeps float between ops and rounds the outputs and every cast.
TOLERANCE = {"float32": 1e-5, "float16": 4e-3, "bfloat16": 2e-2}


def vjp_against_differences(case: Case, dtype: str) -> float:
    """The largest error of fl.vjp's gradients of `case` built in `dtype`, against central
    differences of the float64 fusion at the same (rounded) inputs, relative to the
    largest gradient."""
    exact, fusion = case.build("float64"), case.build(dtype)
    derived = fl.vjp(fusion, [t.user_name for t in fusion.inputs])
    rounded = [x.astype(fusion.inputs[0].dtype.numpy) for x in case.inputs()]
    values = [x.astype(np.float64) for x in rounded]
    rng = np.random.default_rng(1)
    cotangents = [rng.standard_normal(t.shape) for t in exact.outputs]
    outputs = fl.evaluate(
        derived, [*rounded, *(c.astype(t.dtype.numpy) for c, t in zip(cotangents, fusion.outputs))]
    )
    grads = outputs[len(fusion.outputs) :]
    worst, scale = 0.0, 0.0
    for k, (x, got) in enumerate(zip(values, grads)):

        def loss(v: np.ndarray, k: int = k) -> float:
            args = list(values)
            args[k] = v
            ys = fl.evaluate(exact, args)
            return float(sum(np.sum(c * y) for c, y in zip(cotangents, ys)))

        want = gradient(loss, x, case.step)
        assert got.shape == x.shape and got.dtype == rounded[k].dtype
        worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want))))
        scale = max(scale, float(np.max(np.abs(want))))
    return worst / max(scale, 1.0)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vjp_rule_matches_central_differences_in_float64(case: Case) -> None:
    assert vjp_against_differences(case, "float64") <= case.tol


@pytest.mark.parametrize("dtype", sorted(TOLERANCE))
def test_vjp_rules_in_every_float_dtype(dtype: str) -> None:
    """Gradients computed in float32, float16 and bfloat16 (accumulated in float) stay
    within the dtype's rounding of the float64 differences (the largest errors are
    docs/autodiff.md's table)."""
    cases = [c for c in CASES if not c.float64_only and c.name != "cast"]
    errors = {c.name: vjp_against_differences(c, dtype) for c in cases}
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOLERANCE[dtype], f"{worst}: {errors[worst]:.3g}"


def test_the_cases_read_every_op_with_a_vjp_rule() -> None:
    read = {e.op_name for c in CASES for e in c.build().exprs()}
    with_rule = {d.name for d in all_ops() if d.vjp is not None}
    assert with_rule - read == set()
    # the one op without a rule: the backward of attention (no second derivatives)
    assert sorted(d.name for d in all_ops() if d.vjp is None) == ["sdpa_bwd"]
    assert {d.name for d in all_ops() if d.vjp is no_gradient} == {
        "lt",
        "rand_like",
        "rand",
        "iota",
    }


# -- fl.grad -------------------------------------------------------------------------
def mlp_loss(dtype: str = "float32") -> fl.Fusion:
    """mean((gelu(x w1^T) w2^T)^2) of x [4, 8], w1 [16, 8], w2 [8, 16]."""
    with fl.Fusion() as fusion:
        x = fl.tensor([4, 8], dtype, name="x")
        w1 = fl.tensor([16, 8], dtype, name="w1")
        w2 = fl.tensor([8, 16], dtype, name="w2")
        for t in (x, w1, w2):
            fusion.add_input(t)
        y = fl.linear(fl.gelu(fl.linear(x, w1)), w2)
        fusion.add_output(fl.mul(fl.sum(fl.mul(y, y)), 1.0 / 32))
        fusion.add_output(y)  # another output: grad keeps the loss only
    return fusion


def test_grad_gives_the_loss_and_one_named_gradient_per_input_in_order() -> None:
    fusion = mlp_loss()
    derived = fl.grad(fusion, ["w2", "w1"])
    assert [t.user_name for t in derived.inputs] == ["x", "w1", "w2"]
    assert [t.user_name for t in derived.outputs][1:] == ["grad_w2", "grad_w1"]
    assert [t.shape for t in derived.outputs] == [(), (8, 16), (16, 8)]
    inputs = fl.random_inputs(fusion, seed=2)
    loss, gw2, gw1 = fl.evaluate(derived, inputs)
    assert loss == fl.evaluate(fusion, inputs)[0]
    exact = mlp_loss("float64")
    wide = [x.astype(np.float64) for x in inputs]
    for k, got in ((2, gw2), (1, gw1)):

        def f(v: np.ndarray, k: int = k) -> float:
            return float(fl.evaluate(exact, [v if j == k else x for j, x in enumerate(wide)])[0])

        np.testing.assert_allclose(got, gradient(f, wide[k]), rtol=1e-4, atol=1e-6)
    assert fl.to_fus(fl.parse(fl.to_fus(derived))) == fl.to_fus(derived)  # writes and reads


def test_the_derived_fusion_leaves_the_forward_alone() -> None:
    fusion = mlp_loss()
    before = str(fusion)
    fl.grad(fusion, ["x"])
    fl.vjp(fusion, ["w1"])
    assert str(fusion) == before


def test_an_input_the_loss_does_not_read_gets_zeros() -> None:
    with fl.Fusion() as fusion:
        x, unused = fl.tensor([3], name="x"), fl.tensor([2], name="unused")
        fusion.add_input(x)
        fusion.add_input(unused)
        fusion.add_output(fl.sum(fl.exp(x)))
    zero = [np.zeros(3, np.float32), np.zeros(2, np.float32)]
    _, gx, gu = fl.evaluate(fl.grad(fusion, ["x", "unused"]), zero)
    assert gx.tolist() == [1.0, 1.0, 1.0] and gu.shape == (2,) and not gu.any()


def test_vjp_takes_a_cotangent_per_float_output() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([3], name="x")
        fusion.add_input(x)
        y = fl.mul(x, x)
        fusion.add_output(y)
        fusion.add_output(fl.lt(x, 0.0))  # bool: no cotangent
    derived = fl.vjp(fusion, ["x"])
    assert [t.user_name for t in derived.inputs] == ["x", "cotangent_T1"]
    x, ct = np.array([1, 2, 3], np.float32), np.array([1, 10, 100], np.float32)
    y, below, gx = fl.evaluate(derived, [x, ct])
    assert gx.tolist() == [2.0, 40.0, 600.0] and not below.any()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda f: fl.grad(f, ["nope"]), "'nope' is not an input of the fusion (its inputs: x"),
        (lambda f: fl.grad(f, "x"), "wrt"),
        (lambda f: fl.grad(f, ["x", "x"]), "'x' is named twice"),
        (lambda f: fl.grad(f, ["n"]), "input n (T1) is int64; only float inputs"),
    ],
)
def test_grad_names_what_is_wrong_with_wrt(call, message: str) -> None:
    with fl.Fusion() as fusion:
        x, n = fl.tensor([3], name="x"), fl.tensor([3], "int64", name="n")
        fusion.add_input(x)
        fusion.add_input(n)
        fusion.add_output(fl.sum(fl.mul(x, n)))
    with pytest.raises(fl.FuserliteError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call(fusion)


def test_grad_needs_a_scalar_float_loss_first() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([3], name="x")
        fusion.add_input(x)
        fusion.add_output(fl.exp(x))
    with pytest.raises(fl.FuserliteError, match=r"the loss must be a float scalar.*fl\.vjp"):
        fl.grad(fusion, ["x"])


def _through_sdpa_bwd(q: fl.TensorView) -> fl.TensorView:
    o, lse = fl.sdpa(q, q, q)
    return fl.sum(fl.sdpa_bwd(o, q, q, q, o, lse)[0])


@pytest.mark.parametrize(
    ("loss", "message"),
    [
        (_through_sdpa_bwd, r"sdpa_bwd \(T\d+, T\d+, T\d+\) has no vjp rule"),
        (lambda q: fl.sum(fl.sdpa(q, q, q)[1]), "reaches its logsumexp output"),
    ],
    ids=["an op without a rule", "a loss of sdpa's logsumexp"],
)
def test_what_cannot_be_differentiated_is_named(loss, message: str) -> None:
    with fl.Fusion() as fusion:
        q = fl.tensor([1, 2, 3, 4], name="q")
        fusion.add_input(q)
        fusion.add_output(loss(q))
    with pytest.raises(fl.FuserliteError, match=message):
        fl.grad(fusion, ["q"])


def test_half_gradients_are_summed_in_float_and_kept_in_the_input_dtype() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([4], "bfloat16", name="x")
        fusion.add_input(x)
        wide = fl.cast(x, "float32")
        fusion.add_output(fl.sum(fl.add(fl.mul(wide, 3.0), fl.mul(x, x))))
    derived = fl.grad(fusion, ["x"])
    (g,) = derived.outputs[1:]
    assert g.dtype is fl.DType.bfloat16
    adds = [e for e in derived.exprs() if e.op_name == "add" and e.output.dtype.name == "float32"]
    assert adds, "the two addends of x's cotangent are added in float32"
    x = np.array([1.0, 2.0, -3.0, 0.5], np.float32)
    _, got = fl.evaluate(derived, [x.astype(fl.DType.bfloat16.numpy)])
    assert got.astype(np.float32).tolist() == (3 + 2 * x).tolist()


# -- fuserlite run --grad -----------------------------------------------------------
LOSS_FUS = Path(__file__).resolve().parents[1] / "examples" / "tp_mlp_loss.fus"


@pytest.mark.parametrize("devices", [[], ["--devices", "4"]])
def test_run_grad_runs_the_training_step_of_a_fus_file(capsys, devices: list[str]) -> None:
    code = main(["run", str(LOSS_FUS), "--grad", "w1, b1,w2,b2,x", *devices])
    out = capsys.readouterr().out
    assert code == 0
    rows = [line.split()[0] for line in out.splitlines() if line.startswith(("loss", "grad_"))]
    assert rows == ["loss", "grad_w1", "grad_b1", "grad_w2", "grad_b2", "grad_x"]
    # Megatron's two: the forward's after the row-parallel linear, the backward's of x's
    # gradient at the column-parallel one
    assert [line.split()[0] for line in out.splitlines()].count("Allreduce") == 2
    assert "validation: ok" in out


def test_run_grad_of_an_unknown_input_is_one_paragraph(capsys) -> None:
    code = main(["run", str(LOSS_FUS), "--grad", "w3"])
    err = capsys.readouterr().err
    assert code == 1
    assert "grad: 'w3' is not an input of the fusion (its inputs: x, w1, b1, w2, b2)" in err


def _allreduces(out: str) -> int:
    return sum(line.split()[:1] == ["Allreduce"] for line in out.splitlines())


def test_timeline_and_explain_grad_show_the_training_step(capsys) -> None:
    """The step's time and its reshardings: Megatron's two Allreduces, as run shows."""
    assert main(["timeline", str(LOSS_FUS), "--grad", "w1,b1,w2,b2,x"]) == 0
    timeline = capsys.readouterr().out
    assert _allreduces(timeline) == 2 and "step time" in timeline
    assert main(["timeline", str(LOSS_FUS)]) == 0  # the forward alone: one
    assert _allreduces(capsys.readouterr().out) == 1
    assert main(["explain", str(LOSS_FUS), "--grad", "x"]) == 0
    assert capsys.readouterr().out.count("Allreduce on DIDx teams") == 2


def test_grad_of_a_lowered_program_is_a_usage_error(capsys, tmp_path) -> None:
    printed = tmp_path / "step.txt"
    assert main(["print", str(LOSS_FUS), "--lowered"]) == 0
    printed.write_text(capsys.readouterr().out)
    assert main(["timeline", str(printed), "--grad", "x"]) == 1
    assert "--grad derives a training step from a fusion" in capsys.readouterr().err
