"""The docs tell the truth: every snippet and command in README.md and docs/ runs as
written, and what they say it prints is what it prints.

Three conventions make the quoted numbers checkable (docs/design.md, section 10):

- A ```python block runs alone, as a newcomer would paste it into a file; a line's
  `# prints TEXT` comment says TEXT is in what the snippet prints. A block that is not
  meant to run alone (a fragment of a definition, another framework's code) is
  fenced ```python fragment.
- Every `fuserlite ...` line of a ```sh block runs (a pipe's stages in turn, `> FILE`
  written in a scratch folder) and exits 0.
- A block right after a line `<!-- output: COMMAND -->` is COMMAND's output: each of
  its lines is a line of what COMMAND prints, in that order (a `...` line skips any
  number of lines). COMMAND is a `fuserlite` command line or `python FILE [ARGS]`.
"""

from __future__ import annotations

import importlib.util
import io
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
OUTPUT = re.compile(r"<!-- output: (.+?) -->\s*$")
PRINTS = re.compile(r"#\s*prints\s+(.+?)\s*$", re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its info string, its text and the line above it."""

    path: Path
    line: int
    info: str
    text: str
    above: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for m in FENCE.finditer(text):
        head = text[: m.start()]
        above = head.rstrip("\n").rsplit("\n", 1)[-1]
        found.append(Block(path, head.count("\n") + 1, m.group(1).strip(), m.group(2), above))
    return found


BLOCKS = [b for path in DOCS for b in _blocks(path)]
SNIPPETS = [b for b in BLOCKS if b.info == "python"]
OUTPUTS = [(b, OUTPUT.search(b.above).group(1)) for b in BLOCKS if OUTPUT.search(b.above)]
COMMANDS = [
    (b, line)
    for b in BLOCKS
    if b.info == "sh"
    for line in (raw.split("  #", 1)[0].strip() for raw in b.text.splitlines())
    if line.startswith("fuserlite ") and not re.search(r"\b[A-Z]{3,}\b|\[", line)  # usage lines
]


def test_the_docs_have_snippets_commands_and_outputs():
    assert len(SNIPPETS) >= 8 and len(COMMANDS) >= 15 and len(OUTPUTS) >= 3


def test_the_docs_point_nowhere_outside_the_repository():
    for path in DOCS:
        text = path.read_text()
        assert "../shared" not in text and "DESIGN.md" not in text, path


def _run_python(argv: list[str], cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"python {' '.join(argv)} failed:\n{proc.stderr}"
    return proc.stdout


HAVE_TORCH = importlib.util.find_spec("torch") is not None
NO_TORCH = "the torch extra is not installed: pip install 'fuserlite[torch]'"


@pytest.mark.parametrize("block", SNIPPETS, ids=str)
def test_each_python_snippet_runs_alone_and_prints_what_it_says(block, tmp_path):
    if "import torch" in block.text and not HAVE_TORCH:
        pytest.skip(NO_TORCH)
    script = tmp_path / "snippet.py"
    script.write_text(block.text)
    out = _run_python([str(script)], ROOT)
    for claim in PRINTS.findall(block.text):
        assert claim in out, f"{block}: says it prints {claim!r}; it printed:\n{out}"


def _fuserlite(line: str, monkeypatch, capsys, scratch: Path) -> str:
    """A `fuserlite ...` command line run in this process: each stage of a pipe reads
    the one before as its stdin; `> FILE` writes FILE in `scratch`, where the command
    runs (examples/, benchmarks/ and tests/ are links to the repository's)."""
    from fuserlite import cli

    for name in ("examples", "benchmarks", "tests"):
        if not (scratch / name).exists():
            (scratch / name).symlink_to(ROOT / name)
    monkeypatch.chdir(scratch)
    line, _, target = line.partition(" > ")
    out = None
    for stage in line.split(" | "):
        argv = shlex.split(stage)  # as the shell splits it: a quoted --example is one
        assert argv[0] == "fuserlite", f"not a fuserlite command: {stage!r}"
        if out is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(out.encode())))
        code = cli.main(argv[1:])
        captured = capsys.readouterr()
        assert code == 0, f"{stage!r} exited {code}:\n{captured.err}"
        out = captured.out
    if target:
        (scratch / target.strip()).write_text(out)
    return out


@pytest.mark.parametrize("block, line", COMMANDS, ids=lambda x: x if isinstance(x, str) else "")
def test_each_command_runs(block, line, monkeypatch, capsys, tmp_path):
    scratch = tmp_path / block.path.stem  # a block's commands share files (> t.txt)
    scratch.mkdir(exist_ok=True)
    made = []  # the commands before it that write what it may read
    for earlier in (c for b, c in COMMANDS if b is block):
        if earlier == line:
            break
        if " > " in earlier:
            made.append(earlier)
    if any("fuserlite import " in c for c in [*made, line]) and not HAVE_TORCH:
        pytest.skip(NO_TORCH)  # it imports a PyTorch module, or reads what one made
    for earlier in made:
        _fuserlite(earlier, monkeypatch, capsys, scratch)
    _fuserlite(line, monkeypatch, capsys, scratch)


def _in_order(shown: list[str], printed: list[str]) -> str | None:
    """Why `shown` (with `...` lines skipping any) is not a run of `printed`'s lines in
    order; None when it is."""
    at = 0
    gap = False
    for want in shown:
        if want.strip() == "...":
            gap = True
            continue
        rest = printed[at:]
        if want not in rest:
            return f"line not printed: {want!r}"
        found = at + rest.index(want)
        if not gap and at and found != at:
            return f"line printed further on, not next: {want!r}"
        at, gap = found + 1, False
    return None


@pytest.mark.parametrize("block, command", OUTPUTS, ids=lambda x: x if isinstance(x, str) else "")
def test_each_quoted_output_is_what_the_command_prints(block, command, monkeypatch, capsys):
    if command.startswith("python "):
        out = _run_python(command.split()[1:], ROOT)
    else:
        out = _fuserlite(command, monkeypatch, capsys, ROOT)
    printed = [line.rstrip() for line in out.splitlines()]
    shown = [line.rstrip() for line in block.text.splitlines() if line.strip()]
    why = _in_order(shown, [line for line in printed if line])
    assert why is None, f"{block}: {why}\n{command} printed:\n{out}"


def test_the_order_check_fails_on_a_wrong_line_and_a_skipped_one():
    printed = ["a", "b", "c", "d"]
    assert _in_order(["a", "b"], printed) is None
    assert _in_order(["b", "...", "d"], printed) is None
    assert _in_order(["a", "c"], printed) is not None  # b is between them
    assert _in_order(["a", "x"], printed) is not None
    assert _in_order(["c", "a"], printed) is not None
