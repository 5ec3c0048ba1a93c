"""`fuserlite explain`: why each communication of the lowered program is there, and its cost."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fuserlite.cli.output import (
    EXIT_OK,
    STDIN,
    Output,
    UsageError,
    add_latency_option,
    add_mesh_options,
    lowering_pass_names,
    source_name,
)
from fuserlite.passes.lower_communications import unlowered_steps
from fuserlite.pipeline import Pipeline
from fuserlite.program.explain import explain
from fuserlite.program.parser import load_any
from fuserlite.program.program import Program
from fuserlite.program.reshardings import plans_latency


def _check_lowered(program: Program, args: argparse.Namespace) -> None:
    """A printed program is explained as it is: lowered, at the latency it was planned at."""
    name = source_name(args.path)
    moved = "--devices" if args.devices is not None else "--mesh" if args.mesh else None
    if moved:
        raise UsageError(
            f"fuserlite explain: error: {moved} re-shards a fusion before lowering it, and "
            f"{name} is a lowered program; give the .fus file (or a printed fusion)"
        )
    unlowered = unlowered_steps(program)
    if unlowered:
        raise UsageError(
            f"fuserlite explain: error: {name} is a program before lower-communications "
            f"({unlowered[0]}); lower it first: fuserlite opt {args.path} -p "
            "lower-communications,assign-layouts | fuserlite explain -"
        )
    latency = plans_latency(program)
    if args.latency_bytes is not None and latency not in (None, args.latency_bytes):
        raise UsageError(
            f"fuserlite explain: error: {name} was planned at latency_bytes={latency} (its "
            f"`Planner:` line); --latency-bytes {args.latency_bytes} cannot re-plan a lowered "
            "program: explain the .fus file with it"
        )


def cmd_explain(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite explain PATH`: for every communication the expression that needed it, the
    placements per mesh axis, the chosen steps with bytes per device, their cost
    (launches x --latency-bytes + bytes) and the cheapest rejected alternative with its
    cost and why it lost. PATH is a .fus file or printed IR (`fuserlite print`, `opt`):
    a fusion is lowered first, a lowered program explained as it is."""
    names = lowering_pass_names(args)
    ir = load_any(sys.stdin.buffer, STDIN) if args.path == "-" else load_any(args.path)
    if isinstance(ir, Program):
        _check_lowered(ir, args)
        program = ir
    else:
        program = Pipeline(names).run(ir)
    out.text(explain(program))
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `explain` to the subcommands."""
    c = commands.add_parser(
        "explain",
        parents=[common],
        help="explain the communications of a lowered .fus fusion or printed program",
        description=cmd_explain.__doc__,
    )
    c.add_argument(
        "path", metavar="PATH", help="a .fus file or printed IR (fuserlite print); - for stdin"
    )
    add_mesh_options(c)
    add_latency_option(c)
    c.set_defaults(handler=cmd_explain)
