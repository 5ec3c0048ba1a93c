"""`fuserlite run`: lower, execute on a backend, print checksums and communications, validate."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from rich import box
from rich.table import Table

import fuserlite
from fuserlite.cli.output import (
    EXIT_ERROR,
    EXIT_OK,
    Output,
    UsageError,
    add_command,
    add_grad_option,
    add_latency_option,
    add_mesh_options,
    load_fusion,
    lowering_pass_names,
    pipeline,
    source_name,
    training_step,
)
from fuserlite.cli.progress import ProgressDisplay
from fuserlite.cli.resized import resize_notes
from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError, FuserliteError
from fuserlite.ir.fusion import Fusion
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.program.communication import Communication, Sizing
from fuserlite.reference.evaluator import INITS
from fuserlite.reference.numpy_ops import blocks
from fuserlite.runtime.backends import BACKENDS, make_backend, mpi_launch, silent_rank
from fuserlite.runtime.backends.mpi_watchdog import DEFAULT_TIMEOUT_S, check_timeout
from fuserlite.runtime.communicator import Communicator
from fuserlite.runtime.compute import COMPUTE
from fuserlite.runtime.executor import FusionExecutor

RANDOM_INPUTS = "random inputs"  # the phases of `run` around the passes and kernels
VALIDATION = "validation"


def checksum_row(name: str, array: np.ndarray) -> list[str]:
    """Name, shape, dtype, sum and sum of |x| of one output, as table cells."""
    flat, total, total_abs = np.asarray(array).reshape(-1), 0.0, 0.0
    for b in blocks(flat.size):  # an output may be GiBs: no float64 copy of it
        total += float(flat[b].sum(dtype=np.float64))
        total_abs += float(np.abs(flat[b]).sum(dtype=np.float64))
    shape = "[" + ", ".join(str(s) for s in array.shape) + "]"
    return [name, shape, str(array.dtype), f"{total:.6g}", f"{total_abs:.6g}"]


def devices_text(devices: list[int], backend: str) -> str:
    """`2 sim device(s)`, naming them unless they are 0..n-1: `2 sim device(s) {0 5}`."""
    n = len(devices)
    text = f"{n} {backend} device(s)"
    return text if devices == list(range(n)) else f"{text} {{{abbreviate(devices)}}}"


def cmd_run(args: argparse.Namespace, out: Output) -> int:
    """`fuserlite run`: lower, execute on the chosen backend (sim by default), validate."""
    launch = mpi_launch()
    try:
        if launch is not None and launch[1] > 1 and args.backend is None:
            raise UsageError(
                f"fuserlite run: error: started by an MPI launcher as {launch[1]} processes, "
                "each of which would run the whole program on the sim backend and print its "
                f"own report: add --backend mpi (mpiexec -n {launch[1]} fuserlite run "
                f"{args.path} --backend mpi), or run it without mpiexec"
            )
        names = lowering_pass_names(args)  # checks --devices before anything is built
        fusion = load_fusion(args.path)
        fusion = training_step(fusion, args)
    except (FuserliteError, UsageError):
        if silent_rank():
            return EXIT_ERROR  # every process reads the same flags and file: rank 0 says it
        raise
    backend = make_backend(args.backend or "sim", timeout=args.timeout)
    # Long work shows progress on a terminal (only in the process that reports). An
    # overflow (inf, nan) is a value this command checks against the reference and
    # reports: numpy's RuntimeWarnings about it are noise here (and only here).
    display = ProgressDisplay(out.console if backend.is_host() else None)
    with display as progress, np.errstate(all="ignore"):
        return _run(args, out, fusion, backend, progress, names)


def _run(
    args: argparse.Namespace,
    out: Output,
    fusion: Fusion,
    backend: Communicator,
    progress: ProgressDisplay,
    names: list[str],
) -> int:
    """The body of `run`, observed by `progress`; `names`: its passes (--devices N and
    --mesh AxB are a pass: resize-mesh moves the file's meshes first)."""
    try:
        passes = pipeline(args, names, progress=progress)
        progress.phase(RANDOM_INPUTS)
        inputs = fuserlite.random_inputs(fusion, args.seed, args.init)
        progress.finish(RANDOM_INPUTS)
        executor = FusionExecutor(
            fusion,
            backend=backend,
            compute=compute_option(args),
            pipeline=passes,
            progress=progress,
        )
        outputs = executor.run(inputs)
        executor.close()  # every rank: frees the mpi backend's team communicators
    except FuserliteError:
        if backend.is_host():
            raise
        return EXIT_ERROR  # under mpiexec every rank fails alike; rank 0 reports it
    if outputs is None:
        return EXIT_OK  # an MPI rank other than 0: rank 0 prints the report
    table = Table(
        title=f"{source_name(args.path)} on {devices_text(executor.devices, backend.name)}, seed {args.seed}",
        box=box.SIMPLE_HEAD,
    )
    for column in ("output", "shape", "dtype", "sum", "sum |x|"):
        table.add_column(column, justify="right" if column.startswith("sum") else "left")
    for tv, array in zip(fusion.outputs, outputs):
        table.add_row(*checksum_row(tv.name, array))
    out.table(table)
    out.table(communications_table(executor))
    if getattr(args, "devices", None) is not None or getattr(args, "mesh", None) is not None:
        where = f"{len(executor.devices)} devices"
        for note in resize_notes(fusion, executor.program, names[1:], where):
            out.text(note + "\n")
    progress.phase(VALIDATION)
    checked = executor.validate(inputs, outputs)
    out.text("validation: ok\n" + "".join(f"  {line}\n" for line in checked.lines()))
    return EXIT_OK


def team_text(comm: Communication) -> str:
    """`0 1 2 3`, or for the teams of a group of mesh axes `DIDx: 0 1 2 3 | 4 5 6 7`."""
    teams = comm.teams
    if len(teams) == 1:
        return abbreviate(comm.team)
    shown = " | ".join(abbreviate(t) for t in teams[:4]) + (" | ..." if len(teams) > 4 else "")
    if comm.mesh is not None and comm.mesh.axis_names is not None:  # DIDx (tp): 0 1 2 3 | ...
        return f"{'/'.join(comm.mesh.axis_label(a) for a in comm.group)}: {shown}"
    return f"{'/'.join(comm.group_names)}: {shown}"


def communications_table(executor: FusionExecutor) -> Table:
    """Kind (with `(padded)` or `(variable)` where chunks are uneven), team, root, layout
    and bytes per device of each communication."""
    table = Table(title="communications", box=box.SIMPLE_HEAD)
    for column in ("kind", "input", "output", "team", "root", "layout", "bytes/device"):
        table.add_column(column, justify="right" if column == "bytes/device" else "left")
    for c in executor.communications:
        table.add_row(
            c.kind.value if c.sizing is Sizing.even else f"{c.kind.value} ({c.sizing.value})",
            c.input.name,
            c.output.name,
            team_text(c),
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


def timeout_seconds(text: str) -> float:
    """--timeout's value: a positive number of seconds, or inf."""
    try:
        return check_timeout(float(text), "--timeout")
    except (ValueError, ExecutionError):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive number of seconds (inf waits for ever)"
        ) from None


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `run` to the subcommands."""
    r = add_command(commands, common, cmd_run, "run", "lower, execute and validate a .fus fusion")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    add_grad_option(r)
    r.add_argument(
        "--init",
        choices=INITS,
        default="scaled",
        help="random inputs: scaled (the default: weights of matmul and linear "
        "N(0, 1/fan_in), as layers are initialised) or normal (every float N(0, 1))",
    )
    add_mesh_options(r)
    add_latency_option(r)
    r.add_argument("--backend", choices=BACKENDS, help="sim (default, in-process) or mpi")
    r.add_argument(
        "--timeout",
        type=timeout_seconds,
        metavar="SECONDS",
        help="mpi: how long one communication may wait before the watchdog looks for a "
        f"stalled rank and ends the job (default {DEFAULT_TIMEOUT_S:g}; inf waits for ever)",
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
