"""What every subcommand shares: its parser's skeleton, usage errors, the output stream,
loading a file, the pipeline it runs."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.highlighter import RegexHighlighter
from rich.table import Table
from rich.theme import Theme

from fuserlite.autodiff import grad
from fuserlite.ir.args import did_you_mean
from fuserlite.ir.errors import FuserliteError, ParseError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import check_device_count
from fuserlite.passes import REGISTRY
from fuserlite.pipeline import DEFAULT_PASSES, Pipeline, default_pass_names, latency_options
from fuserlite.program.parser import load_any
from fuserlite.program.program import Program, unlowered_steps
from fuserlite.program.reshardings import plans_latency
from fuserlite.timing.machine import DEFAULT_MACHINE, Machine, built_in_names, machine

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT (2): what a shell reports for a Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE (13): what a shell reports for `cat big | head -1`
PAGE_WIDTH = 80  # columns of tables and charts written to a file or a pipe
COLORS = ("auto", "always", "never")
JSON_SCHEMA = 1  # the "schema" of every --json document; docs/cli.md (raise it on a change)


class UsageError(Exception):
    """The command line itself is wrong (unknown flag, missing PATH)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors to `main` instead of exiting with status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.format_usage()}{self.prog}: error: {message}")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value outside `choices` (a command, --compute): the closest one in the message."""
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            self.error(
                f"argument {argparse._get_action_name(action)}: invalid choice: {value!r}"
                f"{did_you_mean(str(value), choices)} (choose from {', '.join(map(repr, choices))})"
            )

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """argparse's, with "did you mean" for each misspelled flag."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._suggest(parsed, extras)}")
        return parsed

    def _suggest(self, parsed: argparse.Namespace, extras: list[str]) -> str:
        """`; did you mean '--seed'?` for the first unknown flag close to one of the
        command's (or of the top level, before a command)."""
        flags = list(self._option_string_actions)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(parsed, "command", None))
                if sub is not None:
                    flags += list(sub._option_string_actions)
        for extra in extras:
            if extra.startswith("--"):
                hint = did_you_mean(extra.split("=")[0], flags)
                if hint:
                    return hint
        return ""


class IRHighlighter(RegexHighlighter):
    """Colours tensors, IterDomains and transform keywords of printed IR."""

    base_style = "ir."
    highlights = [
        r"(?P<tensor>\bT\d+_[gls]_\w+)",
        r"(?P<axis>\b[ibr](?:S|US|UR|V|deviceIdx\.[xyz]|blockIdx\.[xyz]|threadIdx\.[xyz])\d+\{\d+\})",
        r"(?P<keyword>\b(?:Split|Outer split|Merge|TransformPrinter|logical domain|loop domain"
        r"|allocation domain|contiguity)\b)",
        r"(?P<mesh>DeviceMesh(?:\[[\dx]+\])?\{[\d {}.]*\})",
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


def color_settings(color: str = "auto") -> dict[str, Any]:
    """rich Console settings of `--color`: auto colours a terminal, and rich itself
    honours NO_COLOR (no-color.org: any non-empty value turns colours off, bold
    stays); always colours a pipe too, NO_COLOR or not; never styles nothing (a
    terminal still gets its table lines)."""
    if color == "always":  # a flag beats the environment (no-color.org)
        return {"force_terminal": True, "no_color": False}
    if color == "never":
        return {"color_system": None}
    return {}


class Output:
    """Writes results: through rich on a terminal, verbatim otherwise (golden files)."""

    def __init__(self, stream: TextIO | None = None, color: str = "auto") -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.console = Console(
            file=self.stream,
            theme=THEME,
            highlighter=IRHighlighter(),
            soft_wrap=True,
            **color_settings(color),
        )
        if not self.console.is_terminal:
            # A file or a pipe has no width: tables fit 80 columns, wrapping a long
            # cell (never a header: table() keeps them whole).
            self.console.width = PAGE_WIDTH

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
        """Print a table (no box characters when piped) in 80 columns or the terminal's:
        a long cell wraps, a header never (rich would cut it: "ReduceScatt…")."""
        if not self.is_terminal:
            table.box = None
            table.pad_edge = False
        for column in table.columns:
            column.min_width = max(column.min_width or 0, len(str(column.header)))
        if self.is_terminal:
            self.console.print(table)
            return
        with self.console.capture() as captured:  # piped: no padding at the line ends
            self.console.print(table)
        self.stream.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))

    def json(self, document: dict[str, Any]) -> None:
        """Print one --json document (docs/cli.md): `command` and `schema` first."""
        head = {"command": document.pop("command"), "schema": JSON_SCHEMA}
        self.stream.write(json.dumps({**head, **document}, indent=2) + "\n")


STDIN = "<stdin>"  # what messages call the file `-`


def source_name(path: str) -> str:
    """What messages and titles call the file the command reads."""
    return STDIN if path == "-" else path


def add_command(
    commands: Any,
    common: argparse.ArgumentParser,
    handler: Callable[[argparse.Namespace, Output], int],
    name: str,
    summary: str,
    path_help: str | None = "a .fus file; - for stdin",
    epilog: str | None = None,
) -> argparse.ArgumentParser:
    """The subcommand `name` that `handler` runs (its docstring the description): its
    parser, with the PATH it reads (None: the caller adds it, add_program_arguments)
    and --verify-all for the passes it runs; `epilog` ends its --help."""
    parser = commands.add_parser(
        name,
        parents=[common],
        help=summary,
        description=handler.__doc__,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter if epilog else argparse.HelpFormatter,
    )
    parser.set_defaults(handler=handler)
    if path_help is not None:
        parser.add_argument("path", metavar="PATH", help=path_help)
    parser.add_argument(
        "--verify-all",
        action="store_true",
        help="after every pass check the whole IR, not only what the pass changed",
    )
    return parser


def write_file(path: str, text: str, command: str, flag: str) -> None:
    """Write a command's `flag` output (opt -o, --svg, --trace) to `path`, or a
    FuserliteError naming the command, the flag and why."""
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise FuserliteError(
            f"fuserlite {command}: cannot write {flag} {path}: {exc.strerror}"
        ) from None


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """`--json`: one JSON document on stdout instead of the text (docs/cli.md)."""
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document instead of the text (its schema: docs/cli.md)",
    )


def pass_order() -> list[str]:
    """Every registered pass: the default pipeline's in its order, then the rest."""
    return [n for n in DEFAULT_PASSES if n in REGISTRY] + sorted(
        set(REGISTRY) - set(DEFAULT_PASSES)
    )


def pipeline(args: argparse.Namespace, names: list[str], **options: Any) -> Pipeline:
    """The pipeline of `names` a command runs (--verify-all: the whole IR after each pass)."""
    return Pipeline(names, verify_all=args.verify_all, **options)


def load_ir(path: str) -> Fusion | Program:
    """A .fus file or printed IR (a fusion or a program), or stdin for `-`."""
    if path == "-":
        return load_any(sys.stdin.buffer, STDIN)
    check_exists(path)
    return load_any(path)


def check_exists(path: str) -> None:
    """A ParseError for a file that is not there, with the closest name in its folder
    (`examples/tp_mlp.fs`: did you mean 'examples/tp_mlp.fus'?)."""
    if os.path.exists(path):
        return
    folder, name = os.path.split(path)
    try:
        near = [n for n in os.listdir(folder or ".") if not n.startswith(".")]
    except OSError:
        near = []
    hint = did_you_mean(name, near)
    if hint:
        close = hint.split("'")[1]
        hint = f"; did you mean {os.path.join(folder, close)!r}?"
    raise ParseError(f"{path}: cannot read the file: no such file{hint}")


def load_fusion(path: str) -> Fusion:
    """Read a .fus file or a printed fusion, or stdin for `-` (unreadable files are
    ParseErrors), and validate it; a printed program is a UsageError."""
    fusion = load_ir(path)
    if not isinstance(fusion, Fusion):  # a printed program: segment ran already
        raise UsageError(
            f"fuserlite: error: {source_name(path)} is a printed program (after segment); this "
            "command takes a fusion (a .fus file, or `fuserlite print` of one without passes); "
            "`fuserlite opt` and `fuserlite explain` read programs"
        )
    return fusion


def split_passes(text: str) -> list[str]:
    """Split `a,b[x=1,y=2],c` at the commas outside brackets."""
    names, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            names.append(current)
            current = ""
        else:
            current += ch
    return [n.strip() for n in [*names, current] if n.strip()]


def pass_list(text: str, usage: str, otherwise: str) -> list[str]:
    """The pass specs of a `--passes`/`-p` value (`usage`: the command and flag, for the
    message); a UsageError if it names none (`otherwise`: what leaving it out does)."""
    names = split_passes(text)
    if not names:
        raise UsageError(
            f"fuserlite {usage} {text!r} names no pass; give at least one (`fuserlite "
            f"passes` lists them), or leave it out to {otherwise}"
        )
    return names


def add_mesh_options(parser: argparse.ArgumentParser) -> None:
    """`--devices N | --mesh AxB`: resize-mesh before the default pipeline."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--devices",
        type=int,
        metavar="N",
        help="run on devices 0..N-1 (re-shards the file's meshes)",
    )
    where.add_argument(
        "--mesh",
        metavar="AxB",
        help="run on a mesh of that shape, e.g. 2x4 (re-shards the file's meshes; DIDx is "
        "the last axis)",
    )


def add_latency_option(parser: argparse.ArgumentParser, note: str = "") -> None:
    """`--latency-bytes N`: lower-communications' latency_bytes (plan.cost); `note` ends
    its help."""
    parser.add_argument(
        "--latency-bytes",
        type=int,
        metavar="N",
        help="what one collective launch costs the redistribution planner, in bytes a "
        f"device could send meanwhile (default 131072; 0 plans by bytes alone){note}",
    )


def check_latency_with_passes(args: argparse.Namespace, usage: str) -> None:
    """--latency-bytes sets lower-communications' option in the default pipeline: with
    the passes given (`usage`: `print: error`, the command), a UsageError saying where it goes."""
    if args.latency_bytes is not None:
        raise UsageError(
            f"fuserlite {usage}: --latency-bytes sets lower-communications' option in the "
            "default pipeline; with the passes given write lower-communications"
            f"[latency_bytes={args.latency_bytes}] instead"
        )


def lowering_pass_names(args: argparse.Namespace) -> list[str]:
    """The default pipeline with the command's --latency-bytes, after resize-mesh where
    the command has --devices or --mesh and they are given."""
    devices, mesh = getattr(args, "devices", None), getattr(args, "mesh", None)
    resize = []
    if devices is not None:
        check_device_count(devices, "--devices")  # before anything is built for that many
        resize = [f"resize-mesh[devices={devices}]"]
    if mesh is not None:
        resize = [f"resize-mesh[mesh={mesh}]"]
    options = latency_options(getattr(args, "latency_bytes", None))
    streams = getattr(args, "streams", None)
    if streams is not None:  # lower-streams says what is wrong with a bad count
        options["lower-streams"] = f"chunks={streams}"
    return resize + default_pass_names(**options)


def _check_lowered(program: Program, args: argparse.Namespace, command: str) -> None:
    """A printed program is taken as it is: lowered, at the latency it was planned at."""
    name = source_name(args.path)
    moved = "--devices" if args.devices is not None else "--mesh" if args.mesh else None
    if moved:
        raise UsageError(
            f"fuserlite {command}: error: {moved} re-shards a fusion before lowering it, and "
            f"{name} is a lowered program; give the .fus file (or a printed fusion)"
        )
    if getattr(args, "streams", None) is not None:
        raise UsageError(
            f"fuserlite {command}: error: --streams gives Stream axes while a fusion is "
            f"lowered, and {name} is a lowered program; give the .fus file (or a printed "
            "fusion)"
        )
    unlowered = unlowered_steps(program)
    if unlowered:
        raise UsageError(
            f"fuserlite {command}: error: {name} is a program before lower-communications "
            f"({unlowered[0]}); lower it first: fuserlite opt {args.path} -p "
            f"lower-communications,assign-layouts | fuserlite {command} -"
        )
    latency = plans_latency(program)
    if args.latency_bytes is not None and latency not in (None, args.latency_bytes):
        raise UsageError(
            f"fuserlite {command}: error: {name} was planned at latency_bytes={latency} (its "
            f"`Planner:` line); --latency-bytes {args.latency_bytes} cannot re-plan a lowered "
            f"program: give the .fus file with it"
        )


def note_left_whole(program: object, args: argparse.Namespace, command: str) -> None:
    """With --streams S, one line on stderr per Allgather + matmul/linear or
    matmul/linear + ReduceScatter pair lower-streams left unstreamed, and why (stdout
    keeps the command's output alone)."""
    streams = getattr(args, "streams", None)
    if streams is None or not isinstance(program, Program):
        return
    for line in program.left_whole:
        print(f"fuserlite {command}: --streams {streams}: {line}", file=sys.stderr)


def lowered_program(args: argparse.Namespace, command: str) -> Program:
    """PATH (`-`: stdin) as a lowered program: a fusion (a .fus file or a printed one)
    lowered by the default pipeline with the command's --devices, --mesh and
    --latency-bytes; a printed program as it is, which must be lowered."""
    names = lowering_pass_names(args)
    ir = load_ir(args.path)
    if isinstance(ir, Program):
        if args.grad is not None:
            raise UsageError(
                f"fuserlite {command}: error: --grad derives a training step from a fusion, "
                f"but {source_name(args.path)} is a lowered program; give the .fus file"
            )
        _check_lowered(ir, args, command)
        return ir
    program = pipeline(args, names).run(training_step(ir, args))
    note_left_whole(program, args, command)
    return program


def add_grad_option(parser: argparse.ArgumentParser) -> None:
    """`--grad NAMES`: the derived training step instead of the fusion (fl.grad)."""
    parser.add_argument(
        "--grad",
        metavar="NAMES",
        help="the derived training step instead: the first output (a scalar loss) and "
        "its gradients with respect to these inputs (comma-separated), sharded as they are",
    )


def training_step(fusion: Fusion, args: argparse.Namespace) -> Fusion:
    """The fusion, or with --grad its training step: the loss and the named gradients."""
    if args.grad is None:
        return fusion
    return grad(fusion, [n.strip() for n in args.grad.split(",")])


def add_program_arguments(parser: argparse.ArgumentParser) -> None:
    """PATH (a fusion, lowered by the default pipeline, or a lowered program: what
    `lowered_program` reads), --devices / --mesh, --latency-bytes, --machine and
    --grad."""
    parser.add_argument(
        "path", metavar="PATH", help="a .fus file or printed IR (fuserlite print); - for stdin"
    )
    add_mesh_options(parser)
    add_latency_option(parser)
    add_machine_option(parser)
    add_grad_option(parser)
    add_streams_option(parser)


def add_streams_option(parser: argparse.ArgumentParser, suffix: str = "") -> None:
    """`--streams S`: Stream axes of S chunks on the Allgather + matmul and matmul +
    ReduceScatter pairs (the lower-streams pass's chunks option)."""
    parser.add_argument(
        "--streams",
        metavar="S",
        type=int,
        help="pipeline each Allgather + matmul and matmul + ReduceScatter pair in S "
        "chunks, one stream a chunk, without editing the file" + suffix,
    )


def add_machine_option(parser: argparse.ArgumentParser) -> None:
    """`--machine NAME|FILE.json`: the step-time model's machine (fuserlite.timing)."""
    parser.add_argument(
        "--machine",
        metavar="NAME",
        help=f"the machine model of the step time: {', '.join(built_in_names())} or a .json "
        f"file of one (default {DEFAULT_MACHINE}, or h100-multinode beyond 8 devices)",
    )


def machine_option(args: argparse.Namespace) -> Machine | None:
    """The --machine given (checked now, before anything is lowered), or None."""
    return None if args.machine is None else machine(args.machine)
