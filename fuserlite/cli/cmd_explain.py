"""`fuserlite explain`: why each communication of the lowered program is there, and its cost."""

from __future__ import annotations

import argparse
from typing import Any

from fuserlite.cli.output import (
    EXIT_OK,
    Output,
    add_latency_option,
    add_mesh_options,
    load_fusion,
    lowering_pass_names,
)
from fuserlite.pipeline import Pipeline
from fuserlite.program.explain import explain


def cmd_explain(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite explain PATH`: for every communication the expression that needed it, the
    placements per mesh axis, the chosen steps with bytes per device, their cost
    (launches x --latency-bytes + bytes) and the cheapest rejected alternative with its
    cost and why it lost."""
    names = lowering_pass_names(args)
    fusion = load_fusion(args.path)
    program = Pipeline(names).run(fusion)
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
    c.add_argument("path", metavar="PATH", help="a .fus file; - for stdin")
    add_mesh_options(c)
    add_latency_option(c)
    c.set_defaults(handler=cmd_explain)
