"""Text in, text out, per pass and per diagnostic (xDSL's filecheck tests, as goldens).

    tests/golden/passes/<pass>/<case>.in    a .fus file or printed IR
    tests/golden/passes/<pass>/<case>.out   `fuserlite opt <case>.in -p <pass>`'s output
    tests/golden/diagnostics/<case>.in      a mistake
    tests/golden/diagnostics/<case>.err     the exact error `fuserlite opt <case>.in` gives

A line `// opt ARGS` (`# opt ARGS` in a .fus file) gives the arguments instead
(`-p resize-mesh[devices=8]`). The .in of a pass case made by
tests/pass_golden_inputs.py must still be what that recipe prints; `pytest
--update-golden` rewrites those and every .out and .err.
"""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import GOLDEN_DIR, check_golden
from pass_golden_inputs import CASES, input_text

from fuserlite.cli import main
from fuserlite.passes import REGISTRY

PASSES = GOLDEN_DIR / "passes"
DIAGNOSTICS = GOLDEN_DIR / "diagnostics"
RECIPES = {f"passes/{c.pass_name}/{c.name}.in": c for c in CASES}
_OPT_LINE = re.compile(r"^(?://|#) opt (?P<args>.*)$", re.MULTILINE)


def cases() -> list[str]:
    """Every .in under passes/ and diagnostics/, relative to tests/golden."""
    found = [*PASSES.glob("*/*.in"), *DIAGNOSTICS.glob("*.in"), *map(GOLDEN_DIR.joinpath, RECIPES)]
    return sorted({p.relative_to(GOLDEN_DIR).as_posix() for p in found})


def opt_args(name: str, text: str) -> list[str]:
    """The `opt` arguments of a case: its `opt` line, or `-p <folder>` for a pass case."""
    m = _OPT_LINE.search(text)
    if m is not None:
        return shlex.split(m["args"])
    return ["-p", name.split("/")[1]] if name.startswith("passes/") else []


@pytest.mark.parametrize("name", cases())
def test_golden_case(name: str, request, capsys, monkeypatch) -> None:
    update = bool(request.config.getoption("--update-golden"))
    if name in RECIPES:  # the input is still what its recipe prints
        check_golden(name, input_text(RECIPES[name]), update)
    text = (GOLDEN_DIR / name).read_text()
    monkeypatch.chdir(GOLDEN_DIR)  # messages name the file as `diagnostics/<case>.in`
    code = main(["opt", name, *opt_args(name, text)])
    out, err = capsys.readouterr()
    stem = name.removesuffix(".in")
    if name.startswith("passes/"):
        assert (code, err) == (0, ""), err
        check_golden(f"{stem}.out", out, update)
    else:
        assert (code, out) == (1, ""), out
        check_golden(f"{stem}.err", err, update)


def test_every_pass_has_three_cases() -> None:
    counts = {n: len(list((PASSES / n).glob("*.in"))) for n in REGISTRY}
    assert all(c >= 3 for c in counts.values()), counts
    assert {p.name for p in PASSES.iterdir() if p.is_dir()} <= set(REGISTRY)
