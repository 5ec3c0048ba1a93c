"""`fuserlite passes`: the registered passes, their options and what each does."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rich import box
from rich.table import Table

from fuserlite.cli.output import EXIT_OK, Output
from fuserlite.passes import REGISTRY
from fuserlite.pipeline import DEFAULT_PASSES


def cmd_passes(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite passes`: every registered pass with its description and options."""
    table = Table(title="passes (default pipeline order first)", box=box.SIMPLE_HEAD)
    for column in ("pass", "options", "description"):
        table.add_column(column)
    order = [n for n in DEFAULT_PASSES if n in REGISTRY] + sorted(
        set(REGISTRY) - set(DEFAULT_PASSES)
    )
    for name in order:
        cls = REGISTRY[name]
        options = ", ".join(
            f"{f.name} (required)" if f.default is dataclasses.MISSING else f"{f.name}={f.default}"
            for f in dataclasses.fields(cls)
        )
        table.add_row(name, options, cls.description())
    out.table(table)
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `passes` to the subcommands."""
    c = commands.add_parser("passes", parents=[common], help="list the passes")
    c.set_defaults(handler=cmd_passes)
