"""Bad inputs tried as a user would: malformed, huge or odd `.fus` files and flags.

Each case is a command line (`fuserlite ...`) over files it writes in a folder, and
what its error must be: every one ends with exit status 1 and one paragraph on stderr
(no traceback, no "internal error", no blank line, a few KB at most), located as
`error: FILE:LINE:COL: ` where it comes from a file's text. tests/test_bad_inputs.py
runs them in-process; `python tests/bad_inputs.py` runs each in a process of its
own under a 2 GiB address-space limit and prints its time, memory and stderr size.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TP_MLP = (EXAMPLES / "tp_mlp.fus").read_text()
SMALL = "mesh m = [0, 1]\ninput x: float32[4, 6] on m\ny = neg(x)\noutput y\n"
MAX_STDERR = 4096  # bytes of stderr a case may print: one paragraph


@dataclass(frozen=True)
class Case:
    """`fuserlite <argv>`, `{f}` in argv standing for the file `write(folder)` made;
    `located`: the error quotes a line of that file (`error: FILE:L:C: `)."""

    name: str
    argv: tuple[str, ...]
    write: Callable[[Path], Path | None] | None = None
    located: bool = False
    stdin: bytes | None = None


def text(content: str | bytes, suffix: str = ".fus") -> Callable[[Path], Path]:
    """A writer of one file holding `content`."""

    def write(folder: Path) -> Path:
        path = folder / f"input{suffix}"
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    return write


def _directory(folder: Path) -> Path:
    (folder / "dir.fus").mkdir()
    return folder / "dir.fus"


def _unreadable(folder: Path) -> Path:
    path = folder / "secret.fus"
    path.write_text(SMALL)
    path.chmod(0)
    return path


def _missing(folder: Path) -> Path:
    return folder / "missing.fus"


def _dev_zero(folder: Path) -> Path:
    link = folder / "zero.fus"
    link.symlink_to("/dev/zero")
    return link


def _printed(flags: list[str], edit: Callable[[str], str]) -> Callable[[Path], Path]:
    """A writer of `fuserlite print tp_mlp.fus <flags>` edited by `edit`."""

    def write(folder: Path) -> Path:
        from fuserlite.cli import main

        out = folder / "printed.txt"
        with open(out, "w") as f:
            old, sys.stdout = sys.stdout, f
            try:
                main(["print", str(EXAMPLES / "tp_mlp.fus"), *flags])
            finally:
                sys.stdout = old
        out.write_text(edit(out.read_text()))
        return out

    return write


NESTED = "y" + " = neg(" * 1 + "neg(" * 20000 + "x" + ")" * 20001
LONG_LINE = "input x: float32[4] " + "z" * 1_000_000 + "\n"
LONG_ERROR = "input x: float32[" + "4, " * 50_000 + "q]\n"

CASES = [
    # -- the text of the file ------------------------------------------------------------
    Case("empty file", ("run", "{f}"), text(""), located=True),
    Case("only comments", ("run", "{f}"), text("# nothing\n\n# here\n"), located=True),
    Case("truncated example", ("run", "{f}"), text(TP_MLP[: len(TP_MLP) // 2]), located=True),
    Case("truncated mid-token", ("run", "{f}"), text(SMALL[:-5]), located=True),
    Case("binary garbage", ("run", "{f}"), text(bytes(range(256)) * 4), located=True),
    Case("invalid utf-8", ("run", "{f}"), text(SMALL.encode() + b"\xff\xfe\n"), located=True),
    Case("utf-16", ("run", "{f}"), text(SMALL.encode("utf-16")), located=True),
    Case("a NUL byte", ("run", "{f}"), text(SMALL.replace("neg", "n\x00eg")), located=True),
    Case("deeply nested calls", ("run", "{f}"), text(SMALL + NESTED + "\n"), located=True),
    Case(
        "deeply nested lists",
        ("run", "{f}"),
        text("mesh m = " + "[" * 20_000 + "]" * 20_000 + "\n"),
        located=True,
    ),
    Case("a 4-D mesh", ("run", "{f}"), text("mesh m = [[[[0]]]]\n"), located=True),
    Case(
        "huge extent",
        ("run", "{f}"),
        text("input x: float32[99999999999999999999]\n"),
        located=True,
    ),
    Case(
        "huge tensor",
        ("run", "{f}"),
        text("input x: float32[100000, 100000, 100000]\ny = neg(x)\noutput y\n"),
    ),
    Case("negative extent", ("run", "{f}"), text("input x: float32[-1]\n"), located=True),
    Case(
        "zero extent",
        ("run", "{f}"),
        text("input x: float32[0]\ny = neg(x)\noutput y\n"),
        located=True,
    ),
    Case(
        "unknown op", ("run", "{f}"), text(SMALL.replace("neg(x)", "frobnicate(x)")), located=True
    ),
    Case("unknown dtype", ("run", "{f}"), text(SMALL.replace("float32", "float33")), located=True),
    Case("duplicate name", ("run", "{f}"), text(SMALL + "y = neg(x)\n"), located=True),
    Case("duplicate device", ("run", "{f}"), text(SMALL.replace("[0, 1]", "[0, 0]")), located=True),
    Case(
        "device beyond the limit",
        ("run", "{f}"),
        text(SMALL.replace("[0, 1]", "[0, 5000]")),
        located=True,
    ),
    Case("unicode name", ("run", "{f}"), text(SMALL.replace("y", "\u00fd")), located=True),
    Case("unicode digit", ("run", "{f}"), text(SMALL.replace("4, 6", "4, \u0663")), located=True),
    Case("undefined tensor", ("run", "{f}"), text(SMALL.replace("neg(x)", "neg(q)")), located=True),
    Case("no output", ("run", "{f}"), text(SMALL.replace("output y\n", "")), located=True),
    Case(
        "huge split factor",
        ("run", "{f}"),
        text(SMALL + "split y axis 0 by 99999999999999999999\n"),
        located=True,
    ),
    Case(
        "sharding that does not divide",
        ("run", "{f}"),
        text(SMALL + "parallelize x axis 0 DIDx\n"),
        located=True,
    ),
    Case("a 1 MB line", ("run", "{f}"), text(LONG_LINE), located=True),
    Case("an error far into a long line", ("run", "{f}"), text(LONG_ERROR), located=True),
    Case(
        "unterminated shard_map",
        ("run", "{f}"),
        text(SMALL + "shard_map m (x [DIDx]) -> (z [DIDx])\n    w = neg(x)\n"),
        located=True,
    ),
    Case(
        "printed program truncated",
        ("opt", "{f}"),
        _printed(["--lowered"], lambda t: t[: len(t) // 2]),
        located=True,
    ),
    Case(
        "printed program, a line deleted",
        ("opt", "{f}"),
        _printed(["--lowered"], lambda t: "\n".join(t.split("\n")[:6] + t.split("\n")[7:])),
        located=True,
    ),
    Case(
        "printed program, kernel on another mesh",
        ("explain", "{f}"),
        _printed(
            ["--lowered"],
            lambda t: t.replace("%kernel1 (DeviceMesh{0 1})", "%kernel1 (DeviceMesh{0 2})"),
        ),
        located=True,
    ),
    Case(
        "printed program, a 1 MB line",
        ("opt", "{f}"),
        _printed(
            ["--lowered"],
            lambda t: t.replace("bytes_per_device=", "x" * 1_000_000 + "bytes_per_device=", 1),
        ),
        located=True,
    ),
    Case("printed program to run", ("run", "{f}"), _printed(["--lowered"], lambda t: t)),
    Case("stdin garbage", ("run", "-"), stdin=b"\x00\x01 garbage ((\n", located=True),
    # -- the path -------------------------------------------------------------------
    Case("a directory", ("run", "{f}"), _directory),
    Case("a missing file", ("run", "{f}"), _missing),
    Case("/dev/zero", ("print", "{f}"), _dev_zero),
    *([Case("an unreadable file", ("run", "{f}"), _unreadable)] if os.geteuid() != 0 else []),
    # -- the flags -------------------------------------------------------------------
    Case("--devices and --mesh", ("run", "{f}", "--devices", "2", "--mesh", "1x2"), text(SMALL)),
    Case(
        "--lowered and --passes", ("print", "{f}", "--lowered", "--passes", "segment"), text(SMALL)
    ),
    Case(
        "--scheduled --format fus", ("print", "{f}", "--scheduled", "--format", "fus"), text(SMALL)
    ),
    Case(
        "--compute and --cache-dir",
        ("run", "{f}", "--compute", "numpy", "--cache-dir", "/tmp/x"),
        text(SMALL),
    ),
    Case("--devices huge", ("run", "{f}", "--devices", "99999999999999999999"), text(SMALL)),
    Case(
        "--devices 3, an axis of extent 2 on 2 devices",
        ("run", "{f}", "--devices", "3"),
        text(SMALL.replace("[4, 6]", "[2, 6]") + "parallelize x axis 0 DIDx\n"),
    ),
    Case("--mesh huge", ("run", "{f}", "--mesh", "100000x100000"), text(SMALL)),
    Case("--mesh empty", ("run", "{f}", "--mesh", ""), text(SMALL)),
    Case("--passes unknown", ("print", "{f}", "--passes", "segmnt"), text(SMALL)),
    Case(
        "--passes bad option",
        ("print", "{f}", "--passes", "lower-communications[latency_bytes=x]"),
        text(SMALL),
    ),
    Case("--print-after unknown", ("print", "{f}", "--print-after", "nothing"), text(SMALL)),
    Case("--target unknown", ("codegen", "{f}", "--target", "tpu"), text(SMALL)),
    Case("--tensor unknown", ("show", "{f}", "--tensor", "nobody"), text(SMALL)),
    Case("unknown flag", ("run", "{f}", "--frobnicate"), text(SMALL)),
    Case("unknown command", ("frobnicate", "{f}"), text(SMALL)),
    Case("no path", ("run",)),
]

# Flags on a good file: (command, flags...), each case named by its flags.
BAD_FLAGS = [
    ("run", "--devices", "0"),
    ("run", "--devices", "-1"),
    ("run", "--devices", "abc"),
    ("run", "--devices", "1e3"),
    ("run", "--mesh", "2x"),
    ("run", "--mesh", "0x2"),
    ("run", "--mesh", "axb"),
    ("run", "--mesh", "2x2x2x2"),
    ("run", "--seed", "-1"),
    ("run", "--seed", "abc"),
    ("run", "--latency-bytes", "-5"),
]
CASES += [Case(" ".join(f), (command, "{f}", *f), text(SMALL)) for command, *f in BAD_FLAGS]

LOCATED = re.compile(r"error: (?P<file>.+?):(?P<line>\d+):(?P<column>\d+): ")


def argv_of(case: Case, folder: Path) -> list[str]:
    """The command line of `case`, its file written into `folder`."""
    path = case.write(folder) if case.write is not None else None
    return [str(path) if a == "{f}" else a for a in case.argv]


def problems(case: Case, status: int, stderr: str, path: str | None) -> list[str]:
    """What is wrong with how `case` ended (nothing if it ended as it must)."""
    out = []
    if status != 1:
        out.append(f"exit status {status}, not 1")
    if not stderr.strip():
        out.append("nothing on stderr")
    if len(stderr.encode()) > MAX_STDERR:
        out.append(f"{len(stderr.encode())} bytes of stderr")
    if "Traceback" in stderr or "internal error" in stderr:
        out.append("a traceback or an internal error")
    if "\n\n" in stderr.strip().removesuffix("\n\n^"):  # an empty line quoted: fine
        out.append("more than one paragraph")
    if "Warning" in stderr:
        out.append("a warning")
    if case.located:
        m = LOCATED.match(stderr)
        if m is None or (path is not None and m["file"] != path):
            out.append("not located at file:line:col")
    return out


def _limit_memory() -> None:
    limit = 2 << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main() -> None:
    """Each case in a process of its own: its time, peak memory, stderr and verdict."""
    results = []
    print(f"{'case':48} {'rc':>3} {'s':>6} {'MiB':>6} {'stderr B':>8}  verdict")
    for case in CASES:
        with tempfile.TemporaryDirectory() as folder:
            argv = argv_of(case, Path(folder))
            path = argv[1] if len(argv) > 1 and case.write is not None else None
            start = time.perf_counter()
            code = "import sys, resource, fuserlite.cli as c; r = c.main(sys.argv[1:]); "
            code += "sys.stdout.flush(); print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,"
            code += " file=sys.__stderr__); sys.exit(r)"
            proc = subprocess.run(
                [sys.executable, "-c", code, *argv],
                input=case.stdin or b"",
                capture_output=True,
                preexec_fn=_limit_memory,
                timeout=120,
                cwd=ROOT,
            )
            seconds = time.perf_counter() - start
            *err_lines, rss = proc.stderr.decode(errors="replace").rstrip("\n").split("\n")
            stderr = "\n".join(err_lines) + "\n" if err_lines else ""
            found = problems(case, proc.returncode, stderr, path)
            mib = int(rss) / 1024 if rss.isdigit() else float("nan")
            verdict = "ok" if not found else "; ".join(found)
            print(
                f"{case.name:48} {proc.returncode:3} {seconds:6.2f} {mib:6.0f} {len(stderr):8}  {verdict}"
            )
            results.append(
                {
                    "case": case.name,
                    "rc": proc.returncode,
                    "seconds": round(seconds, 2),
                    "max_rss_mib": round(mib),
                    "stderr_bytes": len(stderr),
                    "problems": found,
                }
            )
    bad = sum(1 for r in results if r["problems"])
    slowest = max(results, key=lambda r: r["seconds"])
    largest = max(results, key=lambda r: r["max_rss_mib"])
    print(
        f"{len(results)} cases, {len(results) - bad} ok, {bad} with problems; slowest "
        f"{slowest['case']!r} {slowest['seconds']} s, largest {largest['case']!r} "
        f"{largest['max_rss_mib']} MiB"
    )


if __name__ == "__main__":
    main()
