"""`fuserlite passes`: the registered passes, their options and what each does."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rich import box
from rich.table import Table

from fuserlite.cli.output import EXIT_OK, Output, add_json_option, pass_order
from fuserlite.passes import REGISTRY
from fuserlite.pipeline import DEFAULT_PASSES


def cmd_passes(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite passes`: every registered pass with its description and options."""
    table = Table(title="passes (default pipeline order first)", box=box.SIMPLE_HEAD)
    table.add_column("pass", no_wrap=True)
    table.add_column("what it does (and its options, name=default)")
    rows = []
    for name in pass_order():
        cls = REGISTRY[name]
        options = {
            f.name: {"required": True}
            if f.default is dataclasses.MISSING
            else {"required": False, "default": f.default}
            for f in dataclasses.fields(cls)
        }
        rows.append(
            {
                "name": name,
                "default_pipeline": name in DEFAULT_PASSES,
                "options": options,
                "description": cls.description(),
            }
        )
    if args.json:
        out.json({"command": "passes", "passes": rows})
        return EXIT_OK
    for row in rows:
        options = ", ".join(
            f"{k}={o['default']}" if not o["required"] else f"{k} (required)"
            for k, o in row["options"].items()
        )
        table.add_row(
            row["name"], row["description"] + (f"\noptions: {options}" if options else "")
        )
    out.table(table)
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `passes` to the subcommands."""
    c = commands.add_parser(
        "passes", parents=[common], help="list the passes", description=cmd_passes.__doc__
    )
    c.set_defaults(handler=cmd_passes)
    add_json_option(c)
