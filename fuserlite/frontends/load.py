"""What `fuserlite import MODEL.py:NAME --example EXPR` loads: the user's model file,
the module (or function) NAME gives, and the example inputs EXPR evaluates to.

This runs the user's own code, as `python MODEL.py` would: the file is executed (as
a module named after it, its directory first on sys.path so that its own imports
resolve) and each --example is a Python expression evaluated with `torch` and the
file's names in scope. That is the command's purpose: point it only at files you
would run.

NAME may be an nn.Module instance, an nn.Module class or a function of no required
arguments (a factory: it is called and must give a module or a function), or a
function of its inputs, traced as it is.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

from fuserlite.frontends.torch import import_torch
from fuserlite.ir.errors import FusionError


def load_model(spec: str) -> tuple[Any, dict[str, Any]]:
    """(the module or function to import, the file's namespace) of `MODEL.py:NAME`."""
    torch = import_torch()
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name:
        raise FusionError(
            f"import: {spec!r} is not MODEL.py:NAME (a Python file and the module, class, "
            "factory or function in it to import)"
        )
    path = Path(path_text)
    if not path.is_file():
        raise FusionError(f"import: {path} is not a file")
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # the file's own imports, at load and in its factory
    try:
        namespace = _run_file(path)
        if name not in namespace:
            names = ", ".join(k for k in namespace if not k.startswith("_"))[:300]
            raise FusionError(f"import: {path} defines no {name!r}; it defines {names}")
        return _target(torch, namespace[name], f"{path}:{name}"), namespace
    finally:
        sys.path.remove(folder)


def _run_file(path: Path) -> dict[str, Any]:
    """Execute the model file as a module of its own; its names."""
    module_name = f"fuserlite_import_{path.stem}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise FusionError(f"import: {path} cannot be loaded as a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's file failed: say so, briefly
        raise FusionError(f"import: running {path} raised {type(exc).__name__}: {exc}") from exc
    return vars(module)


def _target(torch: Any, value: Any, where: str) -> Any:
    """The module or function NAME gives: a module, a class or factory called with no
    arguments, or a function to trace."""
    if isinstance(value, torch.nn.Module):
        return value
    if not callable(value):
        raise FusionError(f"import: {where} is a {type(value).__name__}, not a module or function")
    if isinstance(value, type) or _takes_nothing(value):
        try:
            made = value()
        except Exception as exc:  # noqa: BLE001 - the user's factory failed
            raise FusionError(f"import: {where}() raised {type(exc).__name__}: {exc}") from exc
        if not (isinstance(made, torch.nn.Module) or callable(made)):
            raise FusionError(
                f"import: {where}() gave a {type(made).__name__}; a factory gives an nn.Module "
                "or a function"
            )
        return made
    return value


def _takes_nothing(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return all(
        p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params
    )


def examples(expressions: list[str], namespace: dict[str, Any]) -> list[Any]:
    """The example inputs: each expression's value (a tuple or list gives several),
    evaluated with torch and the model file's names in scope."""
    torch = import_torch()
    scope = {**namespace, "torch": torch}
    values: list[Any] = []
    for text in expressions:
        try:
            value = eval(text, scope)  # noqa: S307 - the user's own expression, by design
        except Exception as exc:  # noqa: BLE001 - the user's expression failed: say so
            raise FusionError(
                f"import: --example {text!r} raised {type(exc).__name__}: {exc}"
            ) from exc
        values += list(value) if isinstance(value, (tuple, list)) else [value]
    return values
