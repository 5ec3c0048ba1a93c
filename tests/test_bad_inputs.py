"""Bad inputs tried as a user would (tests/bad_inputs.py): each ends with exit status 1
and one paragraph on stderr, located at file:line:col where it comes from a file."""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from bad_inputs import CASES, ROOT, Case, argv_of, problems

from fuserlite.cli import main


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_input_is_one_located_paragraph(
    case: Case, tmp_path: Path, capsys, monkeypatch
) -> None:
    argv = argv_of(case, tmp_path)
    if case.stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(case.stdin)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning would reach stderr
        status = main(argv)
    err = capsys.readouterr().err
    path = argv[1] if len(argv) > 1 and case.write is not None else None
    if case.stdin is not None:
        path = "<stdin>"
    assert not problems(case, status, err, path), err[:2000]


def _wait_in_read_of_stdin(pid: int, timeout: float = 30.0) -> None:
    """Until process `pid` sleeps in read(2) of fd 0 (Linux's /proc/PID/syscall says
    "0 0x0 ..."); where /proc cannot say, half a second, as before."""
    path = Path(f"/proc/{pid}/syscall")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fields = path.read_text().split()
        except OSError:
            time.sleep(0.5)
            return
        if fields[:2] == ["0", "0x0"]:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never read its stdin in {timeout} s")


def test_ctrl_c_is_one_line_and_status_130() -> None:
    """SIGINT while the command waits for its input: no traceback, the shell's 130.

    The child takes SIGINT as a terminal's foreground job does: a suite run from a
    background job of a script inherits SIGINT ignored (POSIX), and Python then keeps
    ignoring it, so the child sets Python's handler itself before it says ready."""
    code = (
        "import signal, sys, fuserlite.cli; "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.stderr.write('ready\\n'); sys.stderr.flush(); "
        "sys.exit(fuserlite.cli.main(['run', '-']))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,  # never written: `run -` waits in its read
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stderr.readline() == "ready\n"
    _wait_in_read_of_stdin(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (130, "", "fuserlite: interrupted\n")
