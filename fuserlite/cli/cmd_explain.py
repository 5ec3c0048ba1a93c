"""`fuserlite explain`: why each communication of the lowered program is there, and its cost."""

from __future__ import annotations

import argparse
from typing import Any

from fuserlite.cli.output import EXIT_OK, Output, load_fusion
from fuserlite.pipeline import Pipeline, default_pass_names
from fuserlite.program.explain import explain


def cmd_explain(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite explain PATH`: for every communication the expression that needed it, the
    placements per mesh axis, the chosen steps with bytes per device and the cheapest
    rejected alternative."""
    fusion = load_fusion(args.path)
    program = Pipeline(default_pass_names()).run(fusion)
    out.text(explain(program))
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `explain` to the subcommands."""
    c = commands.add_parser(
        "explain",
        parents=[common],
        help="explain the communications of a lowered .fus fusion",
        description=cmd_explain.__doc__,
    )
    c.add_argument("path", metavar="PATH", help="a .fus file")
    c.set_defaults(handler=cmd_explain)
