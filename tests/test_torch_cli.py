"""`fuserlite import MODEL.py:NAME --example EXPR -o OUT.fus`: the module as .fus text
under its parameters' names, which every other command reads."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip(
    "torch", reason="the torch extra is not installed: pip install 'fuserlite[torch]'"
)

import fuserlite as fl  # noqa: E402
from fuserlite.cli import main  # noqa: E402

MODEL = """\
import torch
from torch import nn

WIDTH = 16


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 64), nn.Linear(64, WIDTH)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


def make_mlp():
    torch.manual_seed(0)
    return MLP().eval()


def scaled(x, y):
    return x * y.sum()
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.py"
    path.write_text(MODEL)
    return path


def test_import_writes_fus_that_runs(model: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "mlp.fus"
    example = "torch.randn(2, 8, WIDTH)"  # the file's names are in scope
    assert main(["import", f"{model}:make_mlp", "--example", example, "-o", str(out)]) == 0
    assert f"wrote {out}: 7 inputs (6 parameters and buffers)" in capsys.readouterr().out
    text = out.read_text()
    assert "input fc1.weight: float32[64, 16]" in text and "input x: float32[2, 8, 16]" in text
    fusion = fl.load(out)
    assert fusion.inputs[2].name == "fc1.weight (T2)"
    assert main(["run", str(out)]) == 0
    assert "validation: ok" in capsys.readouterr().out


def test_import_with_a_plan_places_it(model: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "tp.fus"
    argv = ["import", f"{model}:MLP", "--example", "torch.randn(2, 8, 16)", "-o", str(out)]
    assert main([*argv, "--plan", "fc1=colwise,fc2=rowwise", "--mesh", "4"]) == 0
    assert "place fc1.weight on m0 (S0)" in out.read_text()
    capsys.readouterr()
    assert main(["run", str(out)]) == 0
    report = capsys.readouterr().out
    assert "Allreduce" in report and "validation: ok" in report


def test_a_function_of_several_inputs_prints_to_stdout(model: Path, capsys) -> None:
    argv = ["import", f"{model}:scaled", "--example", "torch.ones(3), torch.ones(2, 3)"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("# imported from") and "input y: float32[2, 3]" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["MODEL:nothing"], "defines no 'nothing'"),
        (["MODEL"], "is not MODEL.py:NAME"),
        (["missing.py:f"], "missing.py is not a file"),
        (["MODEL:make_mlp", "--example", "torch.randn(2, WIDTH, 7)"], "torch.export could not"),
        (["MODEL:make_mlp", "--example", "1 / 0"], "raised ZeroDivisionError"),
        (["MODEL:MLP", "--plan", "fc1=colwise"], "--plan needs --mesh"),
    ],
)
def test_mistakes_are_one_line_errors(model: Path, argv, message, capsys) -> None:
    argv = [a.replace("MODEL", str(model)) for a in argv]
    if "--example" not in argv:
        argv += ["--example", "torch.randn(2, 8, 16)"]
    assert main(["import", *argv]) == 1
    assert message in capsys.readouterr().err
