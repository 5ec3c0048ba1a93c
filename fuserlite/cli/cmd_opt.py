"""`fuserlite opt`: text in, passes, text out (in the style of xdsl-opt).

    fuserlite opt FILE [-p pass1,pass2[option=value]]

FILE (`-` for stdin) is a `.fus` file or anything `fuserlite print` prints in the
kernel dialect (a fusion's `%kernel { ... }` or a lowered program), told apart by
its first line. The passes run with their contracts and the validator between
them; the result is printed in the kernel dialect. With no `-p` it prints what it
read, so `fuserlite print X --passes a,b | fuserlite opt -` reproduces its input.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fuserlite.cli.output import EXIT_OK, STDIN, Output, pass_list
from fuserlite.pipeline import Pipeline
from fuserlite.program.parser import load_any
from fuserlite.program.program import Program


def cmd_opt(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite opt`: read a .fus file or printed IR, run the passes, print the result."""
    names = []
    if args.passes is not None:
        names = pass_list(args.passes, "opt: error: -p", "print what was read")
    ir = load_any(sys.stdin.buffer, STDIN) if args.path == "-" else load_any(args.path)
    if names:
        level = "program" if isinstance(ir, Program) else "fusion"
        ir = Pipeline(names, input_level=level).run(ir)
    out.text(str(ir))
    return EXIT_OK


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `opt` to the subcommands."""
    p = commands.add_parser(
        "opt",
        parents=[common],
        help="run passes on a .fus file or printed IR, print the result",
        description=cmd_opt.__doc__,
    )
    p.add_argument("path", metavar="FILE", help="a .fus file or printed IR; - for stdin")
    p.add_argument(
        "-p",
        "--passes",
        metavar="A,B,C",
        help="the passes to run, in order (name or name[option=value])",
    )
    p.set_defaults(handler=cmd_opt)
