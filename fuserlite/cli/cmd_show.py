"""`fuserlite show`: pictures of which device holds which block of each tensor.

By default each tensor of the file as the default pipeline leaves it (a sharding
the file leaves to propagation shows as propagated); `--after PASS` stops after
that pass, `--as-written` shows the file before any pass."""

from __future__ import annotations

import argparse
from typing import Any

from fuserlite.cli.documents import show_document
from fuserlite.cli.output import (
    EXIT_OK,
    Output,
    UsageError,
    add_command,
    add_json_option,
    add_latency_option,
    load_fusion,
    lowering_pass_names,
    pipeline,
    write_file,
)
from fuserlite.ir.args import did_you_mean
from fuserlite.ir.fusion import Fusion
from fuserlite.program.program import Program
from fuserlite.show import Sheet, find_tensor, plain, sheet, svg
from fuserlite.show.text import coloured


def _after(
    args: argparse.Namespace, fusion: Fusion, name: str, names: list[str]
) -> Fusion | Program:
    """The program after the pipeline `names`' pass `name` (and those before it)."""
    bare = [n.split("[")[0] for n in names]
    if name not in bare:
        raise UsageError(
            f"fuserlite show: error: --after {name!r} is not a pass of the default pipeline"
            f"{did_you_mean(name, bare)} (choose one of {', '.join(bare)})"
        )
    return pipeline(args, names[: bare.index(name) + 1]).run(fusion)


def _sections(args: argparse.Namespace) -> list[tuple[str, list[Sheet]]]:
    """(heading, pictures) to show, in order."""
    if args.tensor and args.communications:
        raise UsageError(
            "fuserlite show: error: --communications shows every communication's tensors; "
            "it cannot be combined with --tensor"
        )
    fusion = load_fusion(args.path)
    if args.communications:
        program = pipeline(args, lowering_pass_names(args)).run(fusion)
        return [
            (
                f"{c.kind.value}{f' ({c.permutation})' if c.sources else ''}: before, after",
                [sheet(c.input), sheet(c.output)],
            )
            for c in program.communications
        ] or [("no communication: every tensor stays where it is", [])]
    known = len(fusion.tensors_created)
    if not args.as_written:  # by default as the pipeline leaves them: shardings propagated
        names = lowering_pass_names(args)
        ir = _after(args, fusion, args.after or names[-1].split("[")[0], names)
        fusion = ir.fusion if isinstance(ir, Program) else ir
    if args.tensor:
        return [("", [sheet(find_tensor(fusion, args.tensor))])]
    # The file's tensors; the passes' own (a Set's output, a kernel's split) are the
    # communications' (--communications) or print's business.
    return [("", [sheet(t) for t in fusion.tensors() if t.number < known])]


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite show`: draw each tensor's blocks on its mesh (or each communication's)."""
    sections = _sections(args)
    if args.json:
        out.json(show_document(sections))
        return EXIT_OK
    if args.svg:
        sheets = [s for _, group in sections for s in group]
        write_file(args.svg, svg(sheets), "show", "--svg")
        out.text(f"wrote {args.svg}: {len(sheets)} picture{'s' if len(sheets) != 1 else ''}\n")
        return EXIT_OK
    first = True
    for heading, group in sections:
        if heading:
            out.text(("" if first else "\n") + f"== {heading}\n")
        for s in group:
            if not first or heading:
                out.text("\n")
            first = False
            if out.is_terminal:
                out.console.print(coloured(s), end="")
            else:
                out.text(plain(s))
        first = False
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `show` to the subcommands."""
    p = add_command(
        commands, common, cmd_show, "show", "draw which device holds which block of each tensor"
    )
    p.add_argument("--tensor", metavar="NAME", help="only this tensor (its name or T-number)")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--after",
        metavar="PASS",
        help="after this pass of the default pipeline (default: after all of them)",
    )
    which.add_argument(
        "--as-written",
        action="store_true",
        help="the tensors as the file writes them, before any pass",
    )
    which.add_argument(
        "--communications",
        action="store_true",
        help="each communication of the lowered program: its input and output",
    )
    output = p.add_mutually_exclusive_group()
    output.add_argument("--svg", metavar="FILE", help="write the pictures to FILE as one SVG")
    add_json_option(output)
    add_latency_option(p)
