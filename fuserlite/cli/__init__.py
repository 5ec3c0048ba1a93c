"""The `fuserlite` command.

    fuserlite print PATH [--math | --transforms | --format {kernel,math,transforms,fus}]
                         [--lowered | --scheduled | --passes a,b,c]
                         [--print-after-all | --print-after NAME]
    fuserlite opt FILE [-p a,b,c | --lowered] [-o OUT] [--print-after-all]
    fuserlite codegen PATH [--target cuda|cpu]
    fuserlite run PATH [--devices N | --mesh AxB] [--seed N | --inputs FILE.npz]
                       [--compute compiled|interpret|numpy] [--cache-dir DIR]
                       [--grad NAMES] [--backend sim|mpi] [--timeout SECONDS] [--json]
    fuserlite passes [--json]
    fuserlite show PATH [--tensor NAME] [--after PASS | --as-written | --communications]
                        [--svg FILE | --json]
    fuserlite explain PATH [--machine NAME] [--json]
    fuserlite timeline PATH [--machine NAME] [--trace FILE.json] [--svg FILE] [--json]
    fuserlite import MODEL.py:NAME --example EXPR [-o OUT.fus] [--plan M=STYLE,... --mesh N]

(docs/cli.md has every flag.) Each subcommand is one module `fuserlite/cli/cmd_NAME.py`
with its `cmd_NAME`
function and a `register(commands, common)` that adds its subparser; adding a
command is one such module and one entry in COMMANDS. `main` is the single
place that turns errors into messages and exit codes: a
FuserliteError is a user error (one paragraph on stderr, exit 1), anything else
is an internal error (exit 1, asking for a report), Ctrl-C one line (exit 130).
`--debug` adds the traceback.
Output is coloured with rich on a terminal and plain text when piped; `--color
auto|always|never` and NO_COLOR choose (output.color_settings). `--json` on run,
explain, passes, show and timeline prints one JSON document instead (docs/cli.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

import fuserlite
from fuserlite.cli import (
    cmd_codegen,
    cmd_explain,
    cmd_import,
    cmd_opt,
    cmd_passes,
    cmd_print,
    cmd_run,
    cmd_show,
    cmd_timeline,
)
from fuserlite.cli.output import (
    COLORS,
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    ArgumentParser,
    Output,
    UsageError,
)
from fuserlite.ir.errors import FuserliteError
from fuserlite.runtime.backends import silent_rank

__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "build_parser",
    "main",
]

COLOR_HELP = (
    "colour the output: auto (the default: on a terminal, unless NO_COLOR is set), "
    "always (a pipe too) or never"
)

# In the order `fuserlite --help` lists them.
COMMANDS = (
    cmd_print,
    cmd_opt,
    cmd_codegen,
    cmd_passes,
    cmd_run,
    cmd_show,
    cmd_explain,
    cmd_timeline,
    cmd_import,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subparser's `handler` is its cmd_* function."""
    # --debug is accepted before or after the subcommand; SUPPRESS keeps the
    # subparser from resetting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    common.add_argument("--color", choices=COLORS, default=argparse.SUPPRESS, help=COLOR_HELP)
    parser = ArgumentParser(
        prog="fuserlite",
        description="A small multi-device fusion compiler modelled on nvFuser.",
    )
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks")
    parser.add_argument("--color", choices=COLORS, default="auto", help=COLOR_HELP)
    parser.add_argument("--version", action="version", version=f"fuserlite {fuserlite.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    for command in COMMANDS:
        command.register(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `fuserlite` console script; returns the exit status."""
    try:
        status = _main(argv)
        sys.stdout.flush()  # output that fit in the pipe's buffer meets a closed pipe here
        return status
    except BrokenPipeError:
        return _closed_pipe()
    except KeyboardInterrupt:  # Ctrl-C: one line, and the status a shell gives SIGINT
        print("fuserlite: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _closed_pipe() -> int:
    """The reader went away (`fuserlite print ... | head -1`): stop quietly, as cat does.

    Unix tools die of SIGPIPE, which a shell reports as status 141 (128 + 13); we
    return that status rather than restoring SIGPIPE's default action, which would
    also kill an MPI rank silently when one of its sockets closes."""
    try:  # Python flushes stdout again at exit: point it at /dev/null so that cannot fail
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # a stream without a file descriptor
        pass
    return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        if not silent_rank():  # under mpiexec every rank parses the same flags
            print(exc, file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    try:
        return args.handler(args, Output(color=args.color))
    except UsageError as exc:  # a combination of flags the parser alone cannot reject
        print(exc, file=sys.stderr)
    except BrokenPipeError:
        raise
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
