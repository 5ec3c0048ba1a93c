"""pyproject.toml installs every package of the source tree (an editable install finds
them anyway; a wheel holds only the listed ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(module.parent.relative_to(ROOT).parts)
        for module in (ROOT / "fuserlite").rglob("*.py")  # runtime/ has no __init__.py
    }
    found.add("fuserlite.passes")  # passes/, mapped by package-dir
    assert config["package-dir"] == {"fuserlite.passes": "passes"}
    assert found - listed == set(), "add them to [tool.setuptools] packages"
    assert listed - found == set()
