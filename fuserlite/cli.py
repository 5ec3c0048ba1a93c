"""The `fuserlite` command.

    fuserlite print PATH [--math | --transforms | --format {kernel,math,transforms,fus}]
    fuserlite run PATH [--seed N]

Each subcommand is one `cmd_*` function registered in `build_parser`; `main` is
the single place that turns errors into messages and exit codes: a
FuserliteError is a user error (one paragraph on stderr, exit 1), anything else
is an internal error (exit 1, asking for a report). `--debug` adds the traceback.
Output is coloured with rich on a terminal and plain text when piped.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TextIO

import numpy as np
from rich import box
from rich.console import Console
from rich.highlighter import RegexHighlighter
from rich.table import Table
from rich.theme import Theme

import fuserlite
from fuserlite.ir.errors import FuserliteError
from fuserlite.ir.fusion import Fusion

EXIT_OK = 0
EXIT_ERROR = 1


class UsageError(Exception):
    """The command line itself is wrong (unknown flag, missing PATH)."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors to `main` instead of exiting with status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.format_usage()}{self.prog}: error: {message}")


# -- output -------------------------------------------------------------------------
class IRHighlighter(RegexHighlighter):
    """Colours tensors, IterDomains and transform keywords of printed IR."""

    base_style = "ir."
    highlights = [
        r"(?P<tensor>\bT\d+_[gls]_\w+)",
        r"(?P<axis>\b[ibr](?:S|US|UR|V|deviceIdx\.[xyz]|blockIdx\.[xyz]|threadIdx\.[xyz])\d+\{\d+\})",
        r"(?P<keyword>\b(?:Split|Outer split|Merge|TransformPrinter|logical domain|loop domain"
        r"|allocation domain|contiguity)\b)",
        r"(?P<mesh>DeviceMesh\{[\d ]*\})",
        r"(?P<kernel>%kernel(?:_math)?)",
    ]


THEME = Theme(
    {
        "ir.tensor": "bold cyan",
        "ir.axis": "green",
        "ir.keyword": "bold magenta",
        "ir.mesh": "yellow",
        "ir.kernel": "bold",
    }
)


class Output:
    """Writes results: through rich on a terminal, verbatim otherwise (golden files)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.console = Console(
            file=self.stream, theme=THEME, highlighter=IRHighlighter(), soft_wrap=True
        )

    @property
    def is_terminal(self) -> bool:
        return self.console.is_terminal

    def text(self, text: str) -> None:
        """Print IR text exactly; on a terminal with colours."""
        if self.is_terminal:
            self.console.print(text, markup=False, emoji=False, end="")
        else:
            self.stream.write(text)

    def table(self, table: Table) -> None:
        """Print a table (no box characters when piped)."""
        if not self.is_terminal:
            table.box = None
            table.pad_edge = False
        self.console.print(table)


# -- shared steps -------------------------------------------------------------------
def load_fusion(path: str) -> Fusion:
    """Read a .fus file (unreadable files are ParseErrors) and validate it."""
    fusion = fuserlite.load(path)
    fuserlite.verify(fusion)
    return fusion


def checksum_row(name: str, array: np.ndarray) -> list[str]:
    """Name, shape, dtype, sum and sum of |x| of one output, as table cells."""
    values = np.asarray(array).astype(np.float64)
    total = float(values.sum())
    total_abs = float(np.abs(values).sum())
    shape = "[" + ", ".join(str(s) for s in array.shape) + "]"
    return [name, shape, str(array.dtype), f"{total:.6g}", f"{total_abs:.6g}"]


# -- subcommands --------------------------------------------------------------------
PRINTERS: dict[str, Callable[[Fusion], str]] = {
    "kernel": str,
    "math": Fusion.print_math,
    "transforms": Fusion.print_transforms,
    "fus": lambda fusion: fuserlite.to_fus(fusion),
}


def cmd_print(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite print`: load, verify, print in the chosen form."""
    fusion = load_fusion(args.path)
    text = PRINTERS[args.format](fusion)
    out.text(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_run(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite run`: reference evaluation on seeded random inputs, with checksums."""
    fusion = load_fusion(args.path)
    inputs = fuserlite.random_inputs(fusion, args.seed)
    outputs = fuserlite.evaluate(fusion, inputs)
    table = Table(title=f"{args.path} (reference, seed {args.seed})", box=box.SIMPLE_HEAD)
    for column in ("output", "shape", "dtype", "sum", "sum |x|"):
        table.add_column(column, justify="right" if column.startswith("sum") else "left")
    for tv, array in zip(fusion.outputs, outputs):
        table.add_row(*checksum_row(tv.name, array))
    out.table(table)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subparser's `handler` is its cmd_* function."""
    # --debug is accepted before or after the subcommand; SUPPRESS keeps the
    # subparser from resetting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    parser = _ArgumentParser(
        prog="fuserlite",
        description="A small multi-device fusion compiler modelled on nvFuser.",
    )
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks")
    parser.add_argument("--version", action="version", version=f"fuserlite {fuserlite.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = commands.add_parser(
        "print", parents=[common], help="print a .fus fusion", description=cmd_print.__doc__
    )
    p.add_argument("path", metavar="PATH", help="a .fus file")
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
    p.set_defaults(handler=cmd_print)

    r = commands.add_parser(
        "run", parents=[common], help="evaluate a .fus fusion", description=cmd_run.__doc__
    )
    r.add_argument("path", metavar="PATH", help="a .fus file")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    r.set_defaults(handler=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `fuserlite` console script; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    try:
        return args.handler(args, Output())
    except FuserliteError as exc:
        _report(f"error: {exc}", args.debug)
    except Exception as exc:  # noqa: BLE001 - the one place internal errors are reported
        _report(
            f"internal error, please report: {type(exc).__name__}: {exc}"
            + ("" if args.debug else "\n(run again with --debug for the traceback)"),
            args.debug,
        )
    return EXIT_ERROR


def _report(message: str, debug: bool) -> None:
    """Write an error message to stderr, after the traceback when debugging."""
    if debug:
        traceback.print_exc(file=sys.stderr)
    print(message, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
