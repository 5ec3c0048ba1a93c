"""`fuserlite print`: a fusion or the program after some passes, in a chosen form."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import fuserlite
from fuserlite.cli.output import (
    EXIT_OK,
    Output,
    UsageError,
    add_command,
    add_latency_option,
    add_streams_option,
    check_latency_with_passes,
    load_fusion,
    lowering_pass_names,
    note_left_whole,
    pass_list,
    pipeline,
)
from fuserlite.ir.fusion import Fusion
from fuserlite.program.printer import print_scheduled
from fuserlite.program.program import Program

PRINTERS: dict[str, Callable[[Fusion], str]] = {
    "kernel": str,
    "math": Fusion.print_math,
    "transforms": Fusion.print_transforms,
    "fus": lambda fusion: fuserlite.to_fus(fusion, user_names=True),  # the names read
}


def _pass_names(args: argparse.Namespace) -> list[str] | None:
    """The passes `print` runs: --lowered means the default pipeline."""
    if args.passes is not None:
        check_latency_with_passes(args, "print: error")
        if args.streams is not None:
            raise UsageError(
                "fuserlite print: error: --streams sets the default pipeline's "
                f"lower-streams[chunks={args.streams}]; with --passes write that pass instead"
            )
        return pass_list(args.passes, "print: error: --passes", "print the fusion")
    # --latency-bytes alone lowers too: the fusion as read has no plan it could change.
    lowers = args.latency_bytes is not None or args.streams is not None
    if args.lowered or args.scheduled or lowers:
        return lowering_pass_names(args)
    return None


def _check_print_form(args: argparse.Namespace) -> None:
    """--scheduled and the per-pass dumps have one form of their own: no other --format."""
    fixed = [
        flag
        for flag, given in (
            ("--scheduled", args.scheduled),
            ("--print-after", args.print_after),
            ("--print-after-all", args.print_after_all),
        )
        if given
    ]
    if fixed and args.format != "kernel":
        form = f"--format {args.format}"
        if args.format in ("math", "transforms"):
            form += f" (--{args.format})"
        raise UsageError(
            f"fuserlite print: error: {fixed[0]} prints the program in nvFuser's kernel form; "
            f"it cannot be combined with {form}; drop one of them"
        )


def cmd_print(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite print`: load, verify, optionally run passes, print in the chosen form."""
    _check_print_form(args)
    names = _pass_names(args)
    fusion = load_fusion(args.path)
    if names is not None or args.print_after or args.print_after_all:
        ir = pipeline(
            args,
            names if names is not None else lowering_pass_names(args),
            print_after=args.print_after or (),
            print_after_all=args.print_after_all,
            dump=lambda name, ir: out.text(f"// ----- after {name} -----\n{ir}"),
        ).run(fusion)
        note_left_whole(ir, args, "print")
        if args.print_after or args.print_after_all:
            return EXIT_OK
        if args.scheduled:
            text = print_scheduled(ir)
            out.text(text or "(no pointwise kernel to schedule)\n")
            return EXIT_OK
        if args.format == "kernel":
            out.text(str(ir))
            return EXIT_OK
        # The other forms print the tensor graph, which a program keeps in its fusion.
        fusion = ir.fusion if isinstance(ir, Program) else ir
    text = PRINTERS[args.format](fusion)
    out.text(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `print` to the subcommands."""
    p = add_command(commands, common, cmd_print, "print", "print a .fus fusion")
    form = p.add_mutually_exclusive_group()
    form.add_argument(
        "--format",
        choices=sorted(PRINTERS),
        default="kernel",
        help="kernel (default): %%kernel with TransformPrinter; fus: .fus text",
    )
    form.add_argument("--math", dest="format", action="store_const", const="math", help="math only")
    form.add_argument(
        "--transforms",
        dest="format",
        action="store_const",
        const="transforms",
        help="TransformPrinter only",
    )
    passes = p.add_mutually_exclusive_group()
    passes.add_argument(
        "--lowered", action="store_true", help="run the default pipeline and print the program"
    )
    passes.add_argument(
        "--passes", metavar="A,B,C", help="run these passes (name or name[option=value])"
    )
    passes.add_argument(
        "--scheduled",
        action="store_true",
        help="run the default pipeline and print each scheduled kernel (nvFuser's format)",
    )
    add_latency_option(p, "; implies --lowered")
    add_streams_option(p, "; implies --lowered (the host program with its loops)")
    dumps = p.add_mutually_exclusive_group()
    dumps.add_argument(
        "--print-after-all", action="store_true", help="print the program after every pass"
    )
    dumps.add_argument(
        "--print-after", metavar="NAME", action="append", help="print the program after NAME"
    )
