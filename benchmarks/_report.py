"""What every benchmark does with its numbers: print each row as it is measured, write JSON.

    with Table("title", ["case", "seconds"]) as table:
        for case in cases:
            table.row(case.name, measure(case))   # shown at once, not at the end

On a terminal the table is a rich table that grows row by row; piped or
redirected, each row is one plain line, written and flushed when it is added.
"""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table as RichTable

RESULTS = Path(__file__).resolve().parent / "results"


def cell(value: Any) -> str:
    """A value as table text: floats to 3 significant digits."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


class Table:
    """A table printed row by row; numbers right-aligned, plain text when piped."""

    def __init__(
        self,
        title: str,
        columns: Sequence[str],
        widths: Sequence[int] = (),
        console: Console | None = None,
    ) -> None:
        """`widths`: the least width of each plain-text column (default: its name's, 8 at least)."""
        self.title = title
        self.columns = list(columns)
        self.console = console or Console(soft_wrap=True)
        self.rows = 0
        given = list(widths) + [0] * len(self.columns)
        self._widths = [max(len(c), 8, w) for c, w in zip(self.columns, given)]
        self._numeric: list[bool] | None = None  # from the first row
        self._live: Live | None = None
        self._table: RichTable | None = None

    def __enter__(self) -> Table:
        if self.console.is_terminal:
            self._table = RichTable(title=self.title, title_justify="left", box=box.SIMPLE_HEAD)
            self._live = Live(self._table, console=self.console, auto_refresh=False)
            self._live.start()
        else:
            self._write(self.title)
        return self

    def row(self, *values: Any) -> None:
        """Add a row and show it now."""
        if self._numeric is None:
            self._numeric = [isinstance(v, (int, float)) for v in values]
            self._header()
        cells = [cell(v) for v in values]
        self.rows += 1
        if self._table is not None and self._live is not None:
            self._table.add_row(*cells)
            self._live.refresh()
            return
        self._write(self._line(cells))

    def note(self, text: str) -> None:
        """A line below the table (a target, a skipped case), shown now."""
        if self._table is not None and self._live is not None:
            self._table.caption = (
                text if self._table.caption is None else f"{self._table.caption}\n{text}"
            )
            self._table.caption_justify = "left"
            self._live.refresh()
        else:
            self._write(text)

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def _header(self) -> None:
        if self._table is not None:
            for name, numeric in zip(self.columns, self._numeric or []):
                self._table.add_column(name, justify="right" if numeric else "left")
            return
        self._write(self._line(self.columns))

    def _line(self, cells: Sequence[str]) -> str:
        numeric = self._numeric or [False] * len(cells)
        parts = [c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, self._widths, numeric)]
        return "  ".join(parts).rstrip()

    def _write(self, text: str) -> None:
        stream = self.console.file or sys.stdout
        stream.write(text + "\n")
        stream.flush()


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table of rows measured already (a summary after rows printed as they finished)."""
    with Table(title, columns) as table:
        for r in rows:
            table.row(*r)


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
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}", flush=True)
    return path
