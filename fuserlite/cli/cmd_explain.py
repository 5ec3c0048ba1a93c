"""`fuserlite explain`: why each communication of the lowered program is there, and its cost."""

from __future__ import annotations

import argparse
from typing import Any

from fuserlite.cli.documents import explain_document
from fuserlite.cli.output import (
    EXIT_OK,
    Output,
    add_command,
    add_json_option,
    add_program_arguments,
    lowered_program,
    machine_option,
)
from fuserlite.timing import timeline
from fuserlite.timing.explain import explain


def cmd_explain(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite explain PATH`: for every communication the expression that needed it, the
    placements per mesh axis, the chosen steps with bytes per device, their cost
    (launches x --latency-bytes + bytes) and the cheapest rejected alternative with its
    cost and why it lost. PATH is a .fus file or printed IR (`fuserlite print`, `opt`):
    a fusion is lowered first, a lowered program explained as it is."""
    program, model = lowered_program(args, "explain"), machine_option(args)
    text = explain(program, model)
    if args.json:
        tl = timeline(program, model) if program.communications else None
        out.json(explain_document(program, tl, text))
    else:
        out.text(text)
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `explain` to the subcommands."""
    c = add_command(
        commands,
        common,
        cmd_explain,
        "explain",
        "explain the communications of a lowered .fus fusion or printed program",
        path_help=None,
    )
    add_program_arguments(c)
    add_json_option(c)
