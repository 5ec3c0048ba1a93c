"""`fuserlite timeline`: the modelled time of one step, as a Gantt chart per device."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fuserlite.cli.documents import timeline_document
from fuserlite.cli.output import (
    EXIT_OK,
    PAGE_WIDTH,
    Output,
    add_command,
    add_json_option,
    add_program_arguments,
    lowered_program,
    machine_option,
    write_file,
)
from fuserlite.timing import timeline
from fuserlite.timing.chart import WIDTH, coloured, plain, rows
from fuserlite.timing.svg import svg
from fuserlite.timing.timeline import Timeline


def chart_width(tl: Timeline) -> int:
    """Columns of the chart's time axis that keep its lines within 80 (at least 24)."""
    label = max((len(r.label) for r in rows(tl)), default=0)
    return max(24, min(WIDTH, PAGE_WIDTH - 3 - label))


def cmd_timeline(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite timeline PATH`: the lowered program's kernels and communications
    scheduled on each device's streams of --machine (a roofline per kernel from its
    ops' FLOPs and bytes, an alpha-beta time per communication on its team's link):
    a Gantt chart per device and stream, each step's times, and the totals: compute,
    communication and communication exposed (no compute beside it). --trace writes the
    Chrome trace (Perfetto, chrome://tracing), --svg the chart."""
    model = machine_option(args)
    tl = timeline(lowered_program(args, "timeline"), model)
    if args.trace:
        write_file(
            args.trace, json.dumps(tl.to_chrome_trace(), indent=1) + "\n", "timeline", "--trace"
        )
    if args.svg:
        write_file(args.svg, svg(tl), "timeline", "--svg")
    if args.json:
        out.json(timeline_document(tl))
        return EXIT_OK
    width = chart_width(tl)
    if out.is_terminal:
        out.console.print(coloured(tl, width), end="", highlight=False)
    else:
        out.text(plain(tl, width))
    for flag, path in (("trace", args.trace), ("svg", args.svg)):
        if path:
            out.text(f"wrote {path} ({flag})\n")
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `timeline` to the subcommands."""
    c = add_command(
        commands,
        common,
        cmd_timeline,
        "timeline",
        "the modelled step time of a lowered program, as a Gantt chart per device",
        path_help=None,
    )
    add_program_arguments(c)
    c.add_argument("--trace", metavar="FILE", help="write the Chrome trace (JSON) to FILE")
    c.add_argument("--svg", metavar="FILE", help="write the chart to FILE as SVG")
    add_json_option(c)
