"""What every benchmark does with its numbers: print a table, write JSON under results/."""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parent / "results"


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A rich table; numbers right-aligned, plain text when piped."""
    table = Table(title=title, title_justify="left")
    for i, name in enumerate(columns):
        numeric = all(isinstance(r[i], (int, float)) for r in rows)
        table.add_column(name, justify="right" if numeric else "left")
    for r in rows:
        table.add_row(*(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r))
    console = Console(soft_wrap=True)
    if not console.is_terminal:
        console.width = 200  # a file or a pipe: never wrap a row
    console.print(table)


def write_json(name: str, data: dict[str, Any]) -> Path:
    """Write `data` (plus the machine it ran on) to results/<name>.json; returns the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    data = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.machine(),
        },
        **data,
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")
    return path
