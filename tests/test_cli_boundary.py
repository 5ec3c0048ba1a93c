"""The command at its edges (issue 8, items 9, 12 and 16): closed pipes, flag
combinations that were silently ignored, and inputs beyond the documented limits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuserlite import cli
from fuserlite.cli import main

REPO = Path(__file__).resolve().parents[1]
SOFTMAX = REPO / "examples" / "softmax.fus"
TP_MLP = REPO / "examples" / "tp_mlp.fus"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_text(capsys, path: Path, command: str, text: str) -> tuple[int, str, str]:
    """Write `text` to `path` and run `fuserlite command path`."""
    path.write_text(text)
    return run_cli(capsys, command, path)


# -- item 12: a closed pipe ends the command quietly -------------------------------------
# Large output meets the closed pipe while writing; small output at the final flush.
@pytest.mark.parametrize("argv", [["print", SOFTMAX, "--print-after-all"], ["print", SOFTMAX]])
def test_a_closed_pipe_is_quiet(argv: list[object]) -> None:
    """As `fuserlite print ... | head -1` once the reader has gone: no message, status 141."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fuserlite.cli", *map(str, argv)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )
    proc.stdout.close()  # no reader left: the first write fails with EPIPE
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert stderr == b""


class _ClosedPipe:
    """stdout whose reader went away."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def isatty(self) -> bool:
        return False


def test_a_closed_pipe_in_process(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main(["print", str(SOFTMAX)]) == cli.EXIT_BROKEN_PIPE == 141
    assert capsys.readouterr().err == ""


# -- item 16: flags that were silently ignored ------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--format", "fus", "--scheduled"], "--scheduled"),
        (["--format", "fus", "--print-after", "segment"], "--print-after"),
        (["--math", "--print-after-all"], "--print-after-all"),
        (["--transforms", "--scheduled"], "--scheduled"),
        (["--format", "math", "--print-after", "segment"], "--print-after"),
    ],
)
def test_a_form_with_a_fixed_form_flag_is_a_usage_error(capsys, flags, named: str) -> None:
    code, out, err = run_cli(capsys, "print", SOFTMAX, *flags)
    assert (code, out) == (1, "")
    assert f"{named} prints the program in nvFuser's kernel form" in err
    assert f"--format {flags[1] if flags[0] == '--format' else flags[0][2:]}" in err


def test_the_kernel_form_goes_with_scheduled(capsys) -> None:
    code, out, _ = run_cli(capsys, "print", SOFTMAX, "--format", "kernel", "--scheduled")
    assert code == 0 and out == run_cli(capsys, "print", SOFTMAX, "--scheduled")[1]


@pytest.mark.parametrize("passes", ["", ",", " , "])
def test_passes_naming_no_pass_is_a_usage_error(capsys, passes: str) -> None:
    code, out, err = run_cli(capsys, "print", SOFTMAX, "--passes", passes)
    assert (code, out) == (1, "")
    assert "names no pass" in err and "fuserlite passes" in err


def test_a_mesh_of_two_devices_is_two_devices(capsys, tmp_path: Path) -> None:
    path = tmp_path / "sparse.fus"
    text = "mesh m = [0, 5]\ninput x: float32[4, 6] on m\ny = neg(x)\noutput y\n"
    text += "outer_split x axis 0 by 2\nparallelize x axis 0 DIDx\n"
    code, out, _ = run_text(capsys, path, "run", text)
    assert code == 0
    assert out.startswith(f"{path} on 2 sim device(s) {{0 5}}, seed 0\n")
    assert "validation: ok" in out


# -- item 9: limits, up front; long lists abbreviated -----------------------------------------
@pytest.mark.parametrize("devices", ["1000000000", "10000000", "4097", "0"])
def test_device_counts_beyond_the_limit(capsys, devices: str) -> None:
    code, out, err = run_cli(capsys, "run", TP_MLP, "--devices", devices)
    assert (code, out) == (1, "")
    assert (
        err
        == f"error: --devices: the number of devices must be an integer in 1..4096, got {devices}\n"
    )


def test_errors_abbreviate_long_device_lists(capsys, tmp_path: Path) -> None:
    # DIDy on a 1-D mesh of 4000 devices: the error names the mesh
    text = (
        f"mesh a = [{', '.join(map(str, range(4000)))}]\n"
        "input x: float32[4000] on a\ny = neg(x)\noutput y\nparallelize x axis 0 DIDy\n"
    )
    code, _, err = run_text(capsys, tmp_path / "wide.fus", "run", text)
    assert code == 1 and "DeviceMesh{0 1 2 3 4 5 6 ... 3999}" in err
    assert " 7 8 " not in err and len(err) < 1500  # one short paragraph


def test_printed_ir_keeps_every_device(capsys, tmp_path: Path) -> None:
    text = "mesh m = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]\ninput x: float32[10] on m\ny = neg(x)\n"
    code, out, _ = run_text(capsys, tmp_path / "w.fus", "print", text + "output y\n")
    assert code == 0 and "(DeviceMesh{0 1 2 3 4 5 6 7 8 9})" in out


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_link_to_dev_zero_is_refused(capsys, tmp_path: Path) -> None:
    link = tmp_path / "zero.fus"
    link.symlink_to("/dev/zero")
    code, out, err = run_cli(capsys, "print", link)
    assert (code, out) == (1, "")
    assert err == (
        f"error: {link}: the file is larger than 16777216 bytes (16 MiB), "
        "the limit of a .fus file\n"
    )


def test_a_file_over_the_limit_is_refused_before_it_is_read(capsys, tmp_path: Path) -> None:
    path = tmp_path / "huge.fus"
    with path.open("wb") as f:  # sparse: 1 GiB of size, no data written
        f.truncate(2**30)
    code, _, err = run_cli(capsys, "print", path)
    assert code == 1 and "larger than 16777216 bytes" in err
