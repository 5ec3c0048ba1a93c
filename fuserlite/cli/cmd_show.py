"""`fuserlite show`: pictures of which device holds which block of each tensor."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuserlite.cli.output import (
    EXIT_OK,
    Output,
    UsageError,
    add_command,
    add_latency_option,
    load_fusion,
    lowering_pass_names,
    pipeline,
)
from fuserlite.ir.errors import FuserliteError
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
            f"fuserlite show: error: --after {name!r} is not a pass of the default pipeline; "
            f"choose one of {', '.join(bare)}"
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
    if args.after:
        ir = _after(args, fusion, args.after, lowering_pass_names(args))
        fusion = ir.fusion if isinstance(ir, Program) else ir
    tensors = [find_tensor(fusion, args.tensor)] if args.tensor else fusion.tensors()
    return [("", [sheet(t) for t in tensors])]


def cmd_show(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite show`: draw each tensor's blocks on its mesh (or each communication's)."""
    sections = _sections(args)
    if args.svg:
        sheets = [s for _, group in sections for s in group]
        try:
            Path(args.svg).write_text(svg(sheets))
        except OSError as exc:
            raise FuserliteError(
                f"fuserlite show: cannot write --svg {args.svg}: {exc.strerror}"
            ) from None
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
    which.add_argument("--after", metavar="PASS", help="after this pass of the default pipeline")
    which.add_argument(
        "--communications",
        action="store_true",
        help="each communication of the lowered program: its input and output",
    )
    p.add_argument("--svg", metavar="FILE", help="write the pictures to FILE as one SVG")
    add_latency_option(p)
