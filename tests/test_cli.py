"""The `fuserlite` command: print in every form, run, and user/internal errors."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from three_way import HAVE_COMPILER

import fuserlite as fl
from fuserlite.cli import cmd_run, main
from fuserlite.program import parser

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.fus"))
SEED_EXAMPLES = ("add_broadcast_parallelized.fus", "add_broadcast_not_parallelized.fus")

ADD_BROADCAST = """\
# seed 004, first variant: only the broadcast input is sharded
mesh m = [0, 1]
input x: float[2] on m
input y: float[1] on m
z = add(x, y)
output z
parallelize y axis 0 DIDx
"""


@pytest.fixture(autouse=True)
def _plain_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """Golden text is plain: make sure no colour is forced from the environment."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)


@pytest.fixture
def add_fus(tmp_path: Path) -> Path:
    path = tmp_path / "add.fus"
    path.write_text(ADD_BROADCAST)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) -> (exit status, stdout, stderr)."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- print ----------------------------------------------------------------------------
def test_print_default_is_the_kernel(capsys, add_fus: Path) -> None:
    code, out, err = run_cli(capsys, "print", add_fus)
    assert (code, err) == (0, "")
    assert out == str(fl.load(add_fus))
    assert out.startswith("%kernel {\n") and "bdeviceIdx.x1{1}" in out


@pytest.mark.parametrize(
    ("flags", "render"),
    [
        (["--math"], fl.Fusion.print_math),
        (["--transforms"], fl.Fusion.print_transforms),
        (["--format", "math"], fl.Fusion.print_math),
        (["--format", "kernel"], str),
    ],
)
def test_print_forms(capsys, add_fus: Path, flags: list[str], render) -> None:
    code, out, _ = run_cli(capsys, "print", add_fus, *flags)
    assert code == 0
    assert out == render(fl.load(add_fus))


def test_print_fus_round_trips(capsys, add_fus: Path, tmp_path: Path) -> None:
    code, out, _ = run_cli(capsys, "print", add_fus, "--format", "fus")
    assert code == 0
    again = tmp_path / "again.fus"
    again.write_text(out)
    assert str(fl.load(again)) == str(fl.load(add_fus))


def test_debug_flag_after_or_before_the_command(capsys, add_fus: Path) -> None:
    assert run_cli(capsys, "print", add_fus, "--debug")[0] == 0
    assert run_cli(capsys, "--debug", "print", add_fus)[0] == 0


def test_plain_when_piped_and_coloured_on_a_terminal(capsys, add_fus, monkeypatch) -> None:
    _, plain, _ = run_cli(capsys, "print", add_fus)
    assert "\x1b[" not in plain
    monkeypatch.setenv("FORCE_COLOR", "1")
    _, coloured, _ = run_cli(capsys, "print", add_fus)
    assert "\x1b[" in coloured
    _, table, _ = run_cli(capsys, "run", add_fus)
    assert "\x1b[" in table


# -- run -------------------------------------------------------------------------------
def _checksums(path: Path, seed: int) -> tuple[str, str]:
    fusion = fl.load(path)
    (out,) = fl.evaluate(fusion, fl.random_inputs(fusion, seed))
    values = out.astype(np.float64)
    return f"{values.sum():.6g}", f"{np.abs(values).sum():.6g}"


def test_run_prints_shape_dtype_and_checksums(capsys, add_fus: Path) -> None:
    code, out, err = run_cli(capsys, "run", add_fus, "--seed", "5")
    assert (code, err) == (0, "")
    # The output is the file's z: the report names it as the user wrote it.
    (row,) = [line.split() for line in out.splitlines() if line.startswith("z (T2)")]
    assert row == ["z", "(T2)", "[2]", "float32", *_checksums(add_fus, 5)]
    assert "seed 5" in out


def test_run_is_deterministic_per_seed(capsys, add_fus: Path) -> None:
    first = run_cli(capsys, "run", add_fus)[1]
    assert run_cli(capsys, "run", add_fus, "--seed", "0")[1] == first
    assert run_cli(capsys, "run", add_fus, "--seed", "1")[1] != first


# -- the examples ----------------------------------------------------------------------
def test_the_seed_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert [n for n in SEED_EXAMPLES if n not in names] == []


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("flags", [[], ["--math"], ["--transforms"], ["--format", "fus"]])
def test_print_every_example(capsys, example: Path, flags: list[str]) -> None:
    code, out, err = run_cli(capsys, "print", example, *flags)
    assert (code, err) == (0, "")
    assert out.strip()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_run_every_example(capsys, golden, example: Path, monkeypatch) -> None:
    """The golden text comes from the interpreted kernels with numpy's GEMM: the compiled
    ones call the C library's tanh and exp, and AMX's GEMM (the default where the CPU
    has it) rounds as its hardware does, so their last bits (and the validation's
    numbers) vary by machine. The default run's report is the interpreted one's on the
    same gemm."""
    monkeypatch.chdir(REPO)
    run = ["run", f"examples/{example.name}"]
    code, out, err = run_cli(capsys, *run, "--compute", "interpret", "--gemm", "blas")
    assert (code, err) == (0, "")
    golden(f"cli/run_{example.stem}.txt", out)
    if not HAVE_COMPILER:
        return
    code, compiled, err = run_cli(capsys, *run)
    assert (code, err) == (0, "")
    if "gemm=amx" in compiled:  # this CPU's AMX ran some GEMM: compare with it interpreted
        code, out, err = run_cli(capsys, *run, "--compute", "interpret")
        assert (code, err) == (0, "")
    report, validation = compiled.split("validation: ", 1)  # its numbers vary by machine
    assert report == out.split("validation: ", 1)[0] and validation.startswith("ok\n")
    assert "sharded" in validation and "vs the float reference" in validation


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_print_every_example_golden(capsys, golden, example: Path) -> None:
    golden(f"cli/print_{example.stem}.txt", run_cli(capsys, "print", example)[1])


# -- errors ----------------------------------------------------------------------------
def _assert_user_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == 1
    assert out == ""
    assert err.startswith("error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err


def test_missing_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "nope.fus"
    for command in ("print", "run"):
        code, out, err = run_cli(capsys, command, path)
        _assert_user_error(code, out, err, str(path), "cannot read")


def test_directory_instead_of_file(capsys, tmp_path: Path) -> None:
    _assert_user_error(*run_cli(capsys, "print", tmp_path), str(tmp_path))


def test_malformed_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "bad.fus"
    path.write_text("mesh m = [0, 1]\ninput x: float[2] on m\nz = add(x, \n")
    code, out, err = run_cli(capsys, "print", path)
    _assert_user_error(code, out, err, f"{path}:3:")


def test_unknown_op(capsys, tmp_path: Path) -> None:
    path = tmp_path / "op.fus"
    path.write_text("input x: float[2]\ny = frobnicate(x)\noutput y\n")
    _assert_user_error(*run_cli(capsys, "run", path), "frobnicate")


def test_invalid_sharding_in_the_file(capsys, tmp_path: Path) -> None:
    path = tmp_path / "indivisible.fus"
    path.write_text(
        "mesh m = [0, 1]\ninput x: float[3] on m\ny = neg(x)\noutput y\nparallelize x axis 0 DIDx\n"
    )
    _assert_user_error(*run_cli(capsys, "print", path), f"{path}:5:", "x (T0) axis 0")


def test_the_validator_runs_before_printing(capsys, add_fus, monkeypatch) -> None:
    """A fusion the parser accepts but the validator rejects (built here in Python)."""
    with fl.Fusion() as fusion:
        x = fl.tensor([4])
        fusion.add_input(x)
        fusion.add_output(fl.neg(x))
        x.axis(0).parallelize(fl.ParallelType.DIDx)
    monkeypatch.setattr(parser, "parse_fus", lambda text, name: fusion)
    for command in ("print", "run"):
        code, out, err = run_cli(capsys, command, add_fus)
        _assert_user_error(code, out, err, "invalid fusion", "no device mesh")
        assert err.startswith(f"error: {add_fus}:")  # located in the file


def test_debug_shows_the_traceback(capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "print", tmp_path / "nope.fus", "--debug")
    assert code == 1
    assert "Traceback" in err and "cannot read" in err


def test_internal_error(capsys, add_fus: Path, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(cmd_run, "FusionExecutor", broken)
    code, out, err = run_cli(capsys, "run", add_fus)
    assert (code, out) == (1, "")
    assert err.startswith("internal error, please report: RuntimeError: boom")
    assert "Traceback" not in err
    code, _, err = run_cli(capsys, "run", add_fus, "--debug")
    assert code == 1 and "Traceback" in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["print"],
        ["frobnicate"],
        ["run", "x.fus", "--seed", "many"],
        ["print", "x.fus", "--math", "--transforms"],
        ["print", "x.fus", "--format", "yaml"],
    ],
)
def test_usage_errors(capsys, argv: list[str]) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (1, "")
    assert "usage: fuserlite" in err and "error:" in err


def test_help_and_version(capsys) -> None:
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "print" in out and "run" in out
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and fl.__version__ in out


@pytest.mark.parametrize(
    "argv",
    [
        ["print", "--lowered"],
        ["opt", "--lowered"],
        ["explain"],
        ["show", "--communications"],
        ["codegen", "--target", "cpu"],
        ["run", "--compute", "numpy"],
        ["timeline"],
    ],
    ids=lambda a: a[0],
)
def test_every_command_that_runs_passes_takes_verify_all(capsys, add_fus: Path, argv) -> None:
    """--verify-all checks the whole IR after every pass (not only what each changed):
    the same output, with every check made."""
    command, *flags = argv
    code, plain, _ = run_cli(capsys, command, add_fus, *flags)
    assert code == 0
    code, checked, _ = run_cli(capsys, command, add_fus, *flags, "--verify-all")
    assert code == 0 and checked == plain


def test_run_says_which_tensors_an_uneven_mesh_moves(capsys) -> None:
    """8 heads on 3 devices: the reshape into heads needs q/k/v whole, so they are
    all-gathered, which the file's 8 devices do not do; the report says so and why."""
    block = str(REPO / "examples" / "transformer_block.fus")
    code, out, _ = run_cli(capsys, "run", block, "--devices", "3", "--compute", "numpy")
    assert code == 0 and "validation: ok" in out
    (note,) = [line for line in out.splitlines() if line.startswith("note:")]
    assert note == (
        "note: on 3 devices, q2 (T33), k2 (T34) and v2 (T35) are moved (Allgather) "
        "before reshape; on the file's mesh (8 devices) they stay sharded. Their axis 2 (64) "
        "splits unevenly over 3 devices (22 per device), which reshape cannot keep split; to "
        "keep them sharded, run on a device count that divides 64 (as 8 does)."
    )
    code, out, _ = run_cli(capsys, "run", block, "--devices", "4", "--compute", "numpy")
    assert code == 0 and "note:" not in out


def test_a_float16_overflow_is_reported_without_numpy_warnings(capsys, tmp_path: Path) -> None:
    """inf and nan are values `run` checks and reports: numpy's RuntimeWarnings about them
    (`overflow encountered in cast`, `invalid value encountered in reduce`) stay out."""
    path = tmp_path / "f16.fus"
    path.write_text(
        "mesh m = [0, 1]\ninput x: float16[4, 8] on m\ny = mul(x, 60000.0)\nz = sum(y, [1])\n"
        "output z\noutput y\nouter_split x axis 1 by 2\nparallelize x axis 1 DIDx\n"
    )
    for compute in ("numpy", "interpret"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            code, out, err = run_cli(capsys, "run", str(path), "--compute", compute)
        assert (code, err) == (0, "") and "validation: ok" in out
        assert "inf" in out  # the overflow shows in the checksums
    assert np.geterr()["over"] == "warn"  # the user's numpy settings are untouched
