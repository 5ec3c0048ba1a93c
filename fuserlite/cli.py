"""The `fuserlite` command.

    fuserlite print PATH [--math | --transforms | --format {kernel,math,transforms,fus}]
                         [--lowered | --scheduled | --passes a,b,c]
                         [--print-after-all | --print-after NAME]
    fuserlite codegen PATH [--target cuda|cpu]
    fuserlite run PATH [--devices N] [--seed N] [--compute compiled|interpret|numpy]
                       [--cache-dir DIR]
    fuserlite passes

Each subcommand is one `cmd_*` function registered in `build_parser`; `main` is
the single place that turns errors into messages and exit codes: a
FuserliteError is a user error (one paragraph on stderr, exit 1), anything else
is an internal error (exit 1, asking for a report). `--debug` adds the traceback.
Output is coloured with rich on a terminal and plain text when piped.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
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
from fuserlite.cli_progress import ProgressDisplay
from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError, FuserliteError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import check_device_count
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.kernel.cpu import cpu_source
from fuserlite.kernel.cuda import cuda_source
from fuserlite.passes import REGISTRY
from fuserlite.pipeline import DEFAULT_PASSES, Pipeline, default_pass_names
from fuserlite.program.printer import print_scheduled
from fuserlite.program.program import Program
from fuserlite.runtime.backends import BACKENDS, make_backend
from fuserlite.runtime.communicator import Communicator
from fuserlite.runtime.compute import COMPUTE
from fuserlite.runtime.executor import FusionExecutor
from fuserlite.runtime.numpy_ops import blocks

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE (13): what a shell reports for `cat big | head -1`
RANDOM_INPUTS = "random inputs"  # the phases of `run` around the passes and kernels
VALIDATION = "validation"


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
    flat, total, total_abs = np.asarray(array).reshape(-1), 0.0, 0.0
    for b in blocks(flat.size):  # an output may be GiBs: no float64 copy of it
        total += float(flat[b].sum(dtype=np.float64))
        total_abs += float(np.abs(flat[b]).sum(dtype=np.float64))
    shape = "[" + ", ".join(str(s) for s in array.shape) + "]"
    return [name, shape, str(array.dtype), f"{total:.6g}", f"{total_abs:.6g}"]


# -- subcommands --------------------------------------------------------------------
PRINTERS: dict[str, Callable[[Fusion], str]] = {
    "kernel": str,
    "math": Fusion.print_math,
    "transforms": Fusion.print_transforms,
    "fus": lambda fusion: fuserlite.to_fus(fusion),
}


def _pass_names(args: argparse.Namespace) -> list[str] | None:
    """The passes `print` runs: --lowered means the default pipeline."""
    if args.lowered or args.scheduled:
        return default_pass_names()
    if args.passes is not None:
        names = _split_passes(args.passes)
        if not names:
            raise UsageError(
                f"fuserlite print: error: --passes {args.passes!r} names no pass; give at least "
                "one (`fuserlite passes` lists them), or leave --passes out to print the fusion"
            )
        return names
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


def _split_passes(text: str) -> list[str]:
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


def cmd_print(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite print`: load, verify, optionally run passes, print in the chosen form."""
    _check_print_form(args)
    names = _pass_names(args)
    fusion = load_fusion(args.path)
    if names is not None or args.print_after or args.print_after_all:
        pipeline = Pipeline(
            names if names is not None else default_pass_names(),
            print_after=args.print_after or (),
            print_after_all=args.print_after_all,
            dump=lambda name, ir: out.text(f"// ----- after {name} -----\n{ir}"),
        )
        ir = pipeline.run(fusion)
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


def devices_text(devices: list[int], backend: str) -> str:
    """`2 sim device(s)`, naming them unless they are 0..n-1: `2 sim device(s) {0 5}`."""
    n = len(devices)
    text = f"{n} {backend} device(s)"
    return text if devices == list(range(n)) else f"{text} {{{abbreviate(devices)}}}"


def cmd_run(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite run`: lower, execute on the chosen backend (sim by default), validate."""
    if args.devices is not None:  # before anything is built for that many devices
        check_device_count(args.devices, "--devices")
    fusion = load_fusion(args.path)
    backend = make_backend(args.backend)
    # Long work shows progress on a terminal (only in the process that reports).
    with ProgressDisplay(out.console if backend.is_host() else None) as progress:
        return _run(args, out, fusion, backend, progress)


def _run(
    args: argparse.Namespace,
    out: Output,
    fusion: Fusion,
    backend: Communicator,
    progress: ProgressDisplay,
) -> int:
    """The body of `run`, observed by `progress`."""
    # --devices N is a pass: resize-mesh moves the file's devices 0..k-1 to 0..N-1 first.
    resize = [] if args.devices is None else [f"resize-mesh[devices={args.devices}]"]
    try:
        pipeline = Pipeline(resize + default_pass_names(), progress=progress)
        progress.phase(RANDOM_INPUTS)
        inputs = fuserlite.random_inputs(fusion, args.seed)
        progress.finish(RANDOM_INPUTS)
        executor = FusionExecutor(
            fusion,
            backend=backend,
            compute=compute_option(args),
            pipeline=pipeline,
            progress=progress,
        )
        outputs = executor.run(inputs)
    except FuserliteError:
        if backend.is_host():
            raise
        return EXIT_ERROR  # under mpiexec every rank fails alike; rank 0 reports it
    if outputs is None:
        return EXIT_OK  # an MPI rank other than 0: rank 0 prints the report
    table = Table(
        title=f"{args.path} on {devices_text(executor.devices, args.backend)}, seed {args.seed}",
        box=box.SIMPLE_HEAD,
    )
    for column in ("output", "shape", "dtype", "sum", "sum |x|"):
        table.add_column(column, justify="right" if column.startswith("sum") else "left")
    for tv, array in zip(fusion.outputs, outputs):
        table.add_row(*checksum_row(tv.name, array))
    out.table(table)
    out.table(communications_table(executor))
    progress.phase(VALIDATION)
    errors = fuserlite.validate(fusion, inputs, outputs)
    worst = max(errors, default=0.0)
    out.text(f"validation: ok, outputs match the reference (max abs error {worst:.3g})\n")
    return EXIT_OK


def communications_table(executor: FusionExecutor) -> Table:
    """Kind, team, root, layout and bytes per device of each communication."""
    table = Table(title="communications", box=box.SIMPLE_HEAD)
    for column in ("kind", "input", "output", "team", "root", "layout", "bytes/device"):
        table.add_column(column, justify="right" if column == "bytes/device" else "left")
    for c in executor.communications:
        table.add_row(
            c.kind.value,
            c.input.name,
            c.output.name,
            abbreviate(c.team),
            "" if c.root is None else str(c.root),
            "" if c.layout is None else str(c.layout),
            str(c.bytes_per_device),
        )
    if not executor.communications:
        table.add_row("(none)", "", "", "", "", "", "0")
    return table


def compute_option(args: argparse.Namespace) -> str | KernelCompiler | None:
    """FusionExecutor's `compute` from --compute / --no-schedule and --cache-dir."""
    if args.cache_dir is None:
        return args.compute
    if args.compute not in (None, "compiled"):
        raise ExecutionError(
            f"--cache-dir is where compiled kernels are kept; it contradicts --compute "
            f"{args.compute} (give one of them)"
        )
    return KernelCompiler(cache_dir=args.cache_dir)


def cmd_codegen(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite codegen`: CUDA source, one __global__ kernel per scheduled kernel; with
    --target cpu the C++ that `run --compute compiled` builds (the same kernel bodies)."""
    program = Pipeline(default_pass_names()).run(load_fusion(args.path))
    kernels = [k for k in program.kernels if k.scheduled]
    out.text(cpu_source(kernels) if args.target == "cpu" else cuda_source(kernels))
    return EXIT_OK


def cmd_passes(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite passes`: every registered pass with its description and options."""
    table = Table(title="passes (default pipeline order first)", box=box.SIMPLE_HEAD)
    for column in ("pass", "options", "description"):
        table.add_column(column)
    order = [n for n in DEFAULT_PASSES if n in REGISTRY] + sorted(
        set(REGISTRY) - set(DEFAULT_PASSES)
    )
    for name in order:
        cls = REGISTRY[name]
        options = ", ".join(
            f"{f.name} (required)" if f.default is dataclasses.MISSING else f"{f.name}={f.default}"
            for f in dataclasses.fields(cls)
        )
        table.add_row(name, options, cls.description())
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
    dumps = p.add_mutually_exclusive_group()
    dumps.add_argument(
        "--print-after-all", action="store_true", help="print the program after every pass"
    )
    dumps.add_argument(
        "--print-after", metavar="NAME", action="append", help="print the program after NAME"
    )
    p.set_defaults(handler=cmd_print)

    g = commands.add_parser(
        "codegen",
        parents=[common],
        help="print CUDA for the scheduled kernels",
        description=cmd_codegen.__doc__,
    )
    g.add_argument("path", metavar="PATH", help="a .fus file")
    g.add_argument(
        "--target", choices=("cuda", "cpu"), default="cuda", help="cuda (default) or cpu"
    )
    g.set_defaults(handler=cmd_codegen)

    c = commands.add_parser("passes", parents=[common], help="list the passes")
    c.set_defaults(handler=cmd_passes)

    r = commands.add_parser(
        "run",
        parents=[common],
        help="lower, execute and validate a .fus fusion",
        description=cmd_run.__doc__,
    )
    r.add_argument("path", metavar="PATH", help="a .fus file")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    r.add_argument(
        "--devices",
        type=int,
        metavar="N",
        help="run on devices 0..N-1 (re-shards the file's meshes)",
    )
    r.add_argument(
        "--backend", choices=BACKENDS, default="sim", help="sim (default, in-process) or mpi"
    )
    how = r.add_mutually_exclusive_group()
    how.add_argument(
        "--compute",
        choices=COMPUTE,
        help="how scheduled kernels run: compiled C++ (the default where a C++ compiler "
        "is on the PATH), interpret (the numpy kernel runner) or numpy (op by op)",
    )
    how.add_argument(
        "--no-schedule",
        dest="compute",
        action="store_const",
        const="numpy",
        help="the same as --compute numpy",
    )
    r.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="where compiled kernels are kept (default ~/.cache/fuserlite/kernels)",
    )
    r.set_defaults(handler=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `fuserlite` console script; returns the exit status."""
    try:
        status = _main(argv)
        sys.stdout.flush()  # output that fit in the pipe's buffer meets a closed pipe here
        return status
    except BrokenPipeError:
        return _closed_pipe()


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
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    try:
        return args.handler(args, Output())
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


if __name__ == "__main__":
    sys.exit(main())
