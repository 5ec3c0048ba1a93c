"""What the PyTorch frontend promises without torch installed: its table in the docs is
the code's, and fl.from_torch says how to install torch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import fuserlite as fl
from fuserlite.frontends.aten import markdown_table

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_show_the_table() -> None:
    doc = (ROOT / "docs" / "torch.md").read_text()
    table = doc.split("<!-- aten table: begin -->\n")[1].split("\n<!-- aten table: end -->")[0]
    assert table == markdown_table(), (
        "docs/torch.md's table differs from fuserlite.frontends.aten; paste "
        "`python -c 'from fuserlite.frontends.aten import markdown_table as t; print(t())'`"
    )


def test_without_torch_from_torch_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(fl.FusionError, match=r"pip install 'fuserlite\[torch\]'"):
        fl.from_torch(lambda x: x, None)


def test_the_test_extra_brings_the_cpu_torch_so_ci_runs_the_frontends_tests() -> None:
    """.ci/run installs '.[test,mpi]': the torch tests run there, not skip. The pin is
    the one version whose CPU wheel lies in pip's local folder (a looser pin could pull
    the CUDA build from the index)."""
    text = (ROOT / "pyproject.toml").read_text()
    extras = text.split("[project.optional-dependencies]")[1].split("\n[")[0]
    lines = {line.split("=")[0].strip(): line for line in extras.splitlines() if "=" in line}
    assert '"fuserlite[torch]"' in lines["test"]
    assert lines["torch"].strip() == 'torch = ["torch==2.13.0"]'
