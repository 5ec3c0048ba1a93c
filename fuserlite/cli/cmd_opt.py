"""`fuserlite opt`: text in, passes, text out (in the style of xdsl-opt).

    fuserlite opt FILE [-p pass1,pass2[option=value] | --lowered] [--latency-bytes N]
                       [-o OUT] [--print-after-all]

FILE (`-` for stdin) is a `.fus` file or anything `fuserlite print` prints in the
kernel dialect (a fusion's `%kernel { ... }` or a lowered program), told apart by
its first line. The passes run with their contracts and the validator between
them; the result is printed in the kernel dialect. With no `-p` it prints what it
read, so `fuserlite print X --passes a,b | fuserlite opt -` reproduces its input;
`--lowered` (or `--latency-bytes N` alone) runs the default pipeline on a fusion.
`-o OUT` writes the result to OUT instead of stdout; `--print-after-all` prints
the IR after every pass first (mlir-opt's flag), on stdout.
"""

from __future__ import annotations

import argparse
from typing import Any

from fuserlite.cli.output import (
    EXIT_OK,
    Output,
    UsageError,
    add_command,
    add_latency_option,
    check_latency_with_passes,
    load_ir,
    lowering_pass_names,
    pass_list,
    pass_order,
    pipeline,
    source_name,
    write_file,
)
from fuserlite.program.program import Program


def _pass_names(args: argparse.Namespace) -> list[str] | None:
    """The passes opt runs: -p's, none, or None for the default pipeline (--lowered)."""
    if args.passes is not None:
        check_latency_with_passes(args, "opt: error")
        return pass_list(args.passes, "opt: error: -p", "print what was read")
    return None if args.lowered or args.latency_bytes is not None else []


def cmd_opt(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite opt`: read a .fus file or printed IR, run the passes, print the result."""
    names = _pass_names(args)
    ir = load_ir(args.path)
    if names is None:  # the default pipeline, which starts from a fusion
        if isinstance(ir, Program):
            flag = "--lowered" if args.lowered else "--latency-bytes"
            raise UsageError(
                f"fuserlite opt: error: {flag} runs the default pipeline on a fusion, and "
                f"{source_name(args.path)} is a program already (segment ran); give the "
                "passes left with -p"
            )
        names = lowering_pass_names(args)
    if names:
        level = "program" if isinstance(ir, Program) else "fusion"
        ir = pipeline(
            args,
            names,
            input_level=level,
            print_after_all=args.print_after_all,
            dump=lambda name, ir: out.text(f"// ----- after {name} -----\n{ir}"),
        ).run(ir)
    if args.output is None:
        out.text(str(ir))
        return EXIT_OK
    write_file(args.output, str(ir), "opt", "-o")
    return EXIT_OK


def passes_epilog() -> str:
    """`opt --help`'s list of the passes -p takes, default pipeline first."""
    lines = ["passes (-p; `fuserlite passes` says what each does and its options):"]
    lines += [f"  {name}" for name in pass_order()]
    return "\n".join(lines)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `opt` to the subcommands."""
    p = add_command(
        commands,
        common,
        cmd_opt,
        "opt",
        "run passes on a .fus file or printed IR, print the result",
        "a .fus file or printed IR; - for stdin",
        epilog=passes_epilog(),
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "-p",
        "--passes",
        metavar="A,B,C",
        help="the passes to run, in order (name or name[option=value])",
    )
    which.add_argument(
        "--lowered", action="store_true", help="run the default pipeline (on a fusion)"
    )
    add_latency_option(p, "; implies --lowered")
    p.add_argument("-o", "--output", metavar="OUT", help="write the result to OUT, not stdout")
    p.add_argument(
        "--print-after-all", action="store_true", help="print the IR after every pass first"
    )
