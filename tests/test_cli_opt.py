"""`fuserlite opt`: a .fus file or printed IR in, passes, printed IR out.

For every example and every pass boundary: `print --passes PREFIX | opt -` gives
its input back, and `opt - -p NEXT` on that text prints what `print --passes
PREFIX,NEXT` prints."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.pipeline import DEFAULT_PASSES

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.fus"))
PREFIXES = [",".join(DEFAULT_PASSES[:k]) for k in range(len(DEFAULT_PASSES) + 1)]


def cli(capsys, monkeypatch, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def printed(capsys, monkeypatch, path: Path, prefix: str) -> str:
    """`fuserlite print PATH [--passes PREFIX]`'s output."""
    code, out, err = cli(capsys, monkeypatch, "print", path, *(["--passes", prefix] * bool(prefix)))
    assert (code, err) == (0, ""), err
    return out


@pytest.fixture(scope="module")
def nameless_examples(tmp_path_factory) -> list[Path]:
    """The examples written back without the user's names, which the printed dialect
    does not show: a note a pass writes then reads the same after a round trip."""
    folder = tmp_path_factory.mktemp("nameless")
    out = []
    for path in EXAMPLES:
        fusion = fl.load(path).clone()[0]
        for tv in fusion.tensors_created:
            tv.user_name = None
        (folder / path.name).write_text(fl.to_fus(fusion))
        out.append(folder / path.name)
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_opt_without_passes_reproduces_every_stage(capsys, monkeypatch, path: Path) -> None:
    for prefix in PREFIXES:
        text = printed(capsys, monkeypatch, path, prefix)
        code, out, err = cli(capsys, monkeypatch, "opt", "-", stdin=text)
        assert (code, out, err) == (0, text, ""), prefix


@pytest.mark.parametrize("k", range(len(EXAMPLES)), ids=[p.stem for p in EXAMPLES])
def test_opt_next_pass_equals_printing_after_it(capsys, monkeypatch, nameless_examples, k) -> None:
    path = nameless_examples[k]
    for before, after, name in zip(PREFIXES, PREFIXES[1:], DEFAULT_PASSES):
        text = printed(capsys, monkeypatch, path, before)
        want = printed(capsys, monkeypatch, path, after)
        assert cli(capsys, monkeypatch, "opt", "-", "-p", name, stdin=text) == (0, want, ""), name


def test_opt_reads_a_fus_file_and_runs_passes(capsys, monkeypatch) -> None:
    path = REPO / "examples/tp_mlp.fus"
    assert cli(capsys, monkeypatch, "opt", path) == (0, str(fl.load(path)), "")
    code, out, err = cli(capsys, monkeypatch, "opt", path, "-p", ",".join(DEFAULT_PASSES))
    assert (code, out, err) == (0, printed(capsys, monkeypatch, path, PREFIXES[-1]), "")


def test_opt_in_a_shell_pipe() -> None:
    # This interpreter's fuserlite: a `fuserlite` found on the PATH may be another install.
    exe = [sys.executable, "-m", "fuserlite.cli"]
    path = REPO / "examples/sp_mlp.fus"
    lowered = subprocess.run(
        [*exe, "print", str(path), "--lowered"], capture_output=True, text=True, check=True
    ).stdout
    again = subprocess.run(
        [*exe, "opt", "-"], input=lowered, capture_output=True, text=True, check=True
    ).stdout
    assert again == lowered


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (["-p", ""], "", "-p '' names no pass"),
        (["-p", "segment,propagate-shardings"], None, "pass propagate-shardings works on a fusion"),
        (["-p", "nope"], None, "unknown pass 'nope'"),
        ([], "%kernel_math {\n} // %kernel_math\n", "this is the math-only form"),
        ([], "%kernel {\nhello\n", "<stdin>:2:1: expected a tensor computed by"),
    ],
)
def test_opt_errors(capsys, monkeypatch, argv: list[str], stdin: str | None, message: str) -> None:
    source = "-" if stdin is not None else REPO / "examples/softmax.fus"
    code, out, err = cli(capsys, monkeypatch, "opt", source, *argv, stdin=stdin)
    assert (code, out) == (1, "") and message in err, err


@pytest.mark.parametrize("command", ["print", "run", "explain", "show", "codegen"])
def test_every_command_reads_a_fus_file_from_stdin(capsys, monkeypatch, command: str) -> None:
    """`-` is stdin for every command that reads a .fus file, as for opt (was: "-: cannot
    read the file"); the output is the file's, and errors name <stdin>."""
    path = REPO / "examples/tp_mlp.fus"
    want = cli(capsys, monkeypatch, command, path)
    assert want[0] == 0, want[2]
    got = cli(capsys, monkeypatch, command, "-", stdin=path.read_text())
    assert got == (0, want[1].replace(str(path), "<stdin>"), want[2])
    bad = "mesh m = [0, 1]\ninput x: float32[4] on m\ny = bogus(x)\n"
    code, out, err = cli(capsys, monkeypatch, command, "-", stdin=bad)
    assert (code, out) == (1, "") and "<stdin>:3:5: unknown op 'bogus'" in err
