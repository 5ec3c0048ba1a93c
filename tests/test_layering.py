"""The dependency direction of DESIGN.md §1: the IR core never imports passes,
the pipeline, the runtime or the CLI, neither at module level nor inside functions."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fuserlite"
FORBIDDEN = ("fuserlite.passes", "fuserlite.pipeline", "fuserlite.runtime", "fuserlite.cli")
# `passes/` is installed as fuserlite.passes, but from the repository root it is also
# importable as a top-level package; that spelling is forbidden as well.
FORBIDDEN_TOP_LEVEL = ("passes",)

# Modules that only the layers above may import: the IR core, and the layer built
# directly on it (schedule, ops, printer, text).
IR_MODULES = sorted((PACKAGE / "ir").rglob("*.py"))
BUILDER_MODULES = sorted(
    [*(PACKAGE / "schedule").rglob("*.py"), *(PACKAGE / "text").rglob("*.py")]
    + [PACKAGE / "ops.py", PACKAGE / "printer.py"]
)


def module_name(path: Path, root: Path = ROOT) -> str:
    """fuserlite/ir/fusion.py -> fuserlite.ir.fusion; a package's __init__ -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every module an `import` statement anywhere in the file may load, with its line."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.append((node.lineno, base))
            out.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return out


def forbidden_imports(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line: module` for each import of a module the file's layer must not use."""
    bad = []
    for line, mod in imported_names(path, root):
        top = mod.split(".")[0]
        if top in FORBIDDEN_TOP_LEVEL or any(
            mod == f or mod.startswith(f + ".") for f in FORBIDDEN
        ):
            bad.append(f"{path.relative_to(root)}:{line}: imports {mod}")
    return bad


def test_the_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "fuserlite" / "ir"
    pkg.mkdir(parents=True)
    probe = pkg / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            import fuserlite.runtime.reference
            from fuserlite import pipeline
            from ..passes import propagate
            def f():
                from fuserlite.cli import main
                import passes.segment
            from fuserlite.ir import domain
            """
        )
    )
    names = {mod for _, mod in imported_names(probe, tmp_path)}
    assert "fuserlite.passes.propagate" in names
    flagged_lines = {int(hit.split(":")[1]) for hit in forbidden_imports(probe, tmp_path)}
    assert flagged_lines == {2, 3, 4, 6, 7}


def test_ir_modules_exist() -> None:
    assert PACKAGE / "ir" / "fusion.py" in IR_MODULES


@pytest.mark.parametrize("path", IR_MODULES, ids=lambda p: p.name)
def test_ir_core_imports_no_upper_layer(path: Path) -> None:
    assert forbidden_imports(path) == []


@pytest.mark.parametrize(
    "path", BUILDER_MODULES, ids=lambda p: str(p.relative_to(PACKAGE)).replace("/", ".")
)
def test_builders_import_no_pipeline_or_runtime(path: Path) -> None:
    assert forbidden_imports(path) == []


def test_importing_the_ir_loads_no_upper_layer() -> None:
    """Import fuserlite.ir (and build, schedule and print a fusion) in a fresh interpreter.

    The top-level package `fuserlite/__init__.py` re-exports everything, runtime
    included, so the probe installs a bare `fuserlite` package object first: what is
    measured is what the IR core itself pulls in.
    """
    probe = textwrap.dedent(
        f"""
        import sys, types
        pkg = types.ModuleType("fuserlite")
        pkg.__path__ = [{str(PACKAGE)!r}]
        sys.modules["fuserlite"] = pkg
        import fuserlite.ir as ir
        import fuserlite.ops as ops
        with ir.Fusion() as fusion:
            x = ops.tensor([4])
            fusion.add_input(x)
            y = ops.neg(x)
            fusion.add_output(y)
        y.split(0, 2)
        y.axis(1).parallelize(ir.ParallelType.TIDx)
        str(fusion); repr(y); str(y)
        bad = sorted(m for m in sys.modules
                     if m.split(".")[0] == "passes" or m.startswith({FORBIDDEN!r}))
        print(",".join(bad))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


NUMERICS_MODULES = sorted((PACKAGE / "numerics").rglob("*.py"))


@pytest.mark.parametrize("path", NUMERICS_MODULES, ids=lambda p: p.name)
def test_numerics_import_only_the_ir(path: Path) -> None:
    """fuserlite.numerics serves the runtime's evaluators and the code generator alike."""
    project = [
        f"{path.relative_to(ROOT)}:{line}: imports {mod}"
        for line, mod in imported_names(path)
        if mod.split(".")[0] in ("fuserlite", "passes")
        and not (mod.startswith(("fuserlite.ir.", "fuserlite.numerics")) or mod == "fuserlite.ir")
    ]
    assert project == []
