"""Shared pytest fixtures: golden-file comparison with a `--update-golden` switch."""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).parent / "golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register `--update-golden`: rewrite tests/golden/* instead of comparing."""
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite the expected text under tests/golden/ (review the diff in git)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Where PYTHONDONTWRITEBYTECODE is set, the suite's child processes (MPI ranks, CLI
    runs, about a thousand) would each compile the project's ~260 modules from source
    (0.5 s); they keep their bytecode under a temporary PYTHONPYCACHEPREFIX instead,
    so the checkout gets no __pycache__ folders and each module compiles once."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and "PYTHONPYCACHEPREFIX" not in os.environ:
        prefix = Path(tempfile.gettempdir()) / f"fuserlite-tests-pycache-{os.getuid()}"
        os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
        del os.environ["PYTHONDONTWRITEBYTECODE"]


def check_golden(name: str, text: str, update: bool, golden_dir: Path = GOLDEN_DIR) -> None:
    """Compare `text` with golden_dir/name, or write it there when `update` is set."""
    path = golden_dir / name
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(
            f"golden file {path} does not exist; run `pytest --update-golden` to create it "
            "and review it with `git diff`",
            pytrace=False,
        )
    expected = path.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"golden/{name}",
                tofile="actual",
            )
        )
        pytest.fail(
            f"text differs from golden file {path}:\n{diff}\n"
            "If the change is intended, run `pytest --update-golden` and review `git diff`.",
            pytrace=False,
        )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """`golden(name, text)`: assert text equals tests/golden/<name> (or rewrite it)."""
    update = bool(request.config.getoption("--update-golden"))

    def _check(name: str, text: str) -> None:
        check_golden(name, text, update)

    return _check
