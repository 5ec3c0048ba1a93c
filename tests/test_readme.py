"""Every Python snippet of README.md runs on its own, as a newcomer would paste it into a file."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_has_python_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs_alone(index, tmp_path):
    script = tmp_path / f"snippet_{index}.py"
    script.write_text(SNIPPETS[index])
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"README snippet {index} failed:\n{proc.stderr}"


def test_readme_points_nowhere_outside_the_repository():
    text = (ROOT / "README.md").read_text()
    assert "../shared" not in text and "DESIGN.md" not in text


def _stages(line: str) -> list[list[str]]:
    """A README command line's pipeline: each `fuserlite ...` stage's arguments."""
    return [stage.split()[1:] for stage in line.split("#", 1)[0].split(" | ")]


COMMANDS = [
    _stages(line)
    for block in re.findall(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    for line in block.splitlines()
    if line.startswith("fuserlite ")
]


def test_readme_has_commands():
    assert len(COMMANDS) >= 10


@pytest.mark.parametrize("stages", COMMANDS, ids=lambda st: " | ".join(map(" ".join, st)))
def test_readme_command_succeeds(stages, monkeypatch, capsys):
    """Each command, a pipe's stages in turn, each reading the one before as its stdin."""
    from fuserlite import cli

    monkeypatch.chdir(ROOT)
    out = None
    for argv in stages:
        if out is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(out.encode())))
        code = cli.main(argv)
        captured = capsys.readouterr()
        assert code == 0, captured.err
        out = captured.out
