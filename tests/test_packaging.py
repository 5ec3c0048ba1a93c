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


def test_a_non_editable_install_runs_from_the_checkout(tmp_path: Path) -> None:
    """`pip install .` (a wheel: passes/ copied in as fuserlite/passes) and a checkout
    whose fuserlite/ shadows it (`python -m fuserlite.cli` from the root) both find
    fuserlite.passes; the shadowing checkout finds its own passes/."""
    import shutil
    import subprocess
    import sys

    source, target = tmp_path / "src", tmp_path / "site"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert (target / "fuserlite" / "passes" / "segment.py").is_file()
    probe = "import fuserlite.passes as p, fuserlite.passes.segment; print(p.__file__)"
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    installed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert installed.returncode == 0, installed.stderr
    assert installed.stdout.startswith(str(target))
    shadowed = subprocess.run(
        [sys.executable, "-m", "fuserlite.cli", "passes"],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert shadowed.returncode == 0, shadowed.stderr
    assert "propagate-shardings" in shadowed.stdout
    checkout = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert checkout.stdout.startswith(str(ROOT / "passes")), checkout.stderr
