"""The layers of docs/design.md §1 and their arrows, enforced for every module.

The table is read from docs/design.md itself, so the document and the code cannot
drift apart: every module of fuserlite/ and passes/ is in exactly one layer, and
each of its imports (module level, inside functions, under TYPE_CHECKING) goes to
its own layer or to one its row names. No exceptions list."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fuserlite"
DESIGN = ROOT / "docs" / "design.md"
SOURCES = sorted([*PACKAGE.rglob("*.py"), *(ROOT / "passes").rglob("*.py")])


@cache
def layers() -> dict[str, tuple[tuple[str, ...], frozenset[str]]]:
    """layer -> (its paths, relative to the root; the layers it may import)."""
    text = DESIGN.read_text()
    table = text.split("<!-- layers: begin -->")[1].split("<!-- layers: end -->")[0]
    out = {}
    for row in table.strip().splitlines()[2:]:  # past the header and the |---| line
        name, paths, may = (cell.strip() for cell in row.strip("|").split("|"))
        allowed = frozenset() if may == "nothing" else frozenset(m.strip() for m in may.split(","))
        out[name] = (tuple(re.findall(r"`([^`]+)`", paths)), allowed)
    return out


def layer_of(path: Path) -> str:
    """The one layer whose paths hold `path`."""
    rel = path.relative_to(ROOT).as_posix()
    hits = [
        name
        for name, (paths, _) in layers().items()
        if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in paths)
    ]
    assert len(hits) == 1, f"{rel} is in layers {hits}; docs/design.md §1 must place it once"
    return hits[0]


def module_name(path: Path, root: Path = ROOT) -> str:
    """fuserlite/ir/fusion.py -> fuserlite.ir.fusion; passes/segment.py -> fuserlite.passes.segment."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] == "passes":
        parts.insert(0, "fuserlite")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_file(name: str, root: Path = ROOT) -> Path | None:
    """The file of a fuserlite module (None for a name that is not a module)."""
    parts = name.split(".")
    if parts[:2] == ["fuserlite", "passes"]:
        parts = parts[1:]
    elif parts[0] == "fuserlite":
        parts = ["fuserlite", *parts[1:]]
    else:  # `passes` imported as a top-level package from the repository root
        parts = ["passes", *parts[1:]] if parts[0] == "passes" else []
    if not parts:
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """Every project module an import statement anywhere in the file loads, with its line.

    `from pkg import name` depends on pkg.name when that is a module, else on pkg;
    `import pkg.mod` on pkg.mod."""
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
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((node.lineno, sub if module_file(sub, root) else base))
    return [(line, m) for line, m in out if module_file(m, root) is not None]


def layer_violations(path: Path, root: Path = ROOT) -> list[str]:
    """`file:line: <layer> imports <module> (<layer>)` for each import the table forbids."""
    own = layer_of(path)
    allowed = layers()[own][1] | {own}
    bad = []
    for line, mod in imported_modules(path, root):
        target = layer_of(module_file(mod, root))
        if target not in allowed:
            bad.append(f"{path.relative_to(root)}:{line}: {own} imports {mod} ({target})")
    return bad


def test_the_table_names_known_layers_and_has_no_cycle() -> None:
    table = layers()
    assert {"ir", "ops", "printer", "schedule", "program", "kernel", "passes"} <= set(table)
    for name, (paths, allowed) in table.items():
        assert any((ROOT / p).exists() for p in paths), f"layer {name} has no module"
        assert allowed <= set(table), f"{name} may import unknown layers {allowed - set(table)}"
    assert table["ir"][1] == frozenset()  # the IR core is a leaf
    order: list[str] = []  # a topological order exists only without cycles
    todo = dict(table)
    while todo:
        ready = [n for n, (_, allowed) in todo.items() if allowed <= set(order)]
        assert ready, f"the arrows between {sorted(todo)} form a cycle"
        order.extend(sorted(ready))
        for n in ready:
            del todo[n]


def test_every_module_is_in_exactly_one_layer() -> None:
    assert PACKAGE / "ir" / "fusion.py" in SOURCES
    for path in SOURCES:
        layer_of(path)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_imports_follow_the_arrows(path: Path) -> None:
    assert layer_violations(path) == []


def test_the_scan_sees_every_kind_of_import(tmp_path: Path) -> None:
    for rel in (
        "fuserlite/ir/__init__.py",
        "fuserlite/reference/evaluator.py",
        "fuserlite/cli/__init__.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    (tmp_path / "fuserlite" / "__init__.py").write_text("")
    (tmp_path / "fuserlite" / "pipeline.py").write_text("")
    (tmp_path / "passes").mkdir()
    (tmp_path / "passes" / "__init__.py").write_text("")
    (tmp_path / "passes" / "segment.py").write_text("")
    probe = tmp_path / "fuserlite" / "ir" / "probe.py"
    probe.write_text(
        textwrap.dedent(
            """
            import fuserlite.reference.evaluator
            from fuserlite import pipeline
            from ..passes import segment
            def f():
                from fuserlite.cli import main
                import passes.segment
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from fuserlite.reference import evaluator as reference
            from fuserlite.ir import probe
            import numpy
            """
        )
    )
    found = dict(imported_modules(probe, tmp_path))
    assert found == {
        2: "fuserlite.reference.evaluator",
        3: "fuserlite.pipeline",
        4: "fuserlite.passes.segment",
        6: "fuserlite.cli",
        7: "passes.segment",
        10: "fuserlite.reference.evaluator",
        11: "fuserlite.ir.probe",
    }


def test_importing_the_ir_loads_nothing_else() -> None:
    """Import fuserlite.ir, build a fusion and schedule it in a fresh interpreter: no module
    of the project outside fuserlite.ir is loaded. The top-level package re-exports
    everything, so the probe installs a bare `fuserlite` package object first."""
    probe = textwrap.dedent(
        f"""
        import sys, types
        pkg = types.ModuleType("fuserlite")
        pkg.__path__ = [{str(PACKAGE)!r}]
        sys.modules["fuserlite"] = pkg
        import fuserlite.ir as ir
        with ir.Fusion() as fusion:
            x = ir.TensorView(fusion, [ir.IterDomain(4)])
            y = ir.TensorView(fusion, [ir.IterDomain(4)])
            ir.LoadStoreOp(y, x)
            fusion.add_input(x)
            fusion.add_output(y)
        y.split(0, 2).merge(0).split(0, 2)
        y.axis(1).parallelize(ir.ParallelType.TIDx)
        repr(fusion); repr(y); fusion.clone()
        others = sorted(m for m in sys.modules if m.split(".")[0] in ("fuserlite", "passes")
                        and m != "fuserlite" and not m.startswith("fuserlite.ir"))
        print(",".join(others))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_owners_install_the_sugar() -> None:
    """Operators come from fuserlite.ops, the printed form from fuserlite.printer."""
    import fuserlite as fl
    from fuserlite.ir.tensor import TensorView

    assert TensorView.__add__.__module__ == "fuserlite.ops.pointwise"
    assert TensorView.__str__.__module__ == "fuserlite.printer"
    assert fl.Fusion.print_math.__module__ == "fuserlite.printer"
    with fl.Fusion() as fusion:
        x = fl.tensor([2])
        fusion.add_input(x)
        fusion.add_output(-(2.0 * x + x / 3.0 - 1.0))
    assert str(x) == "T0_g_float[ iS0{2} ]"
    assert "   = -T" in fusion.print_math() and str(fusion).startswith("%kernel {")
