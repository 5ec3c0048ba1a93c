"""`fuserlite run`: lower, execute on a backend, print checksums and communications, validate."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
from rich import box
from rich.table import Table

import fuserlite
from fuserlite.cli.inputs import load_inputs
from fuserlite.cli.output import (
    EXIT_ERROR,
    EXIT_OK,
    Output,
    UsageError,
    add_command,
    add_grad_option,
    add_json_option,
    add_latency_option,
    add_mesh_options,
    add_streams_option,
    load_fusion,
    lowering_pass_names,
    note_left_whole,
    pipeline,
    source_name,
    training_step,
)
from fuserlite.cli.progress import ProgressDisplay
from fuserlite.cli.resized import resize_notes
from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError, FuserliteError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.amx import GEMMS
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.program.communication import Communication, Sizing
from fuserlite.reference.evaluator import INITS
from fuserlite.reference.numpy_ops import blocks
from fuserlite.reference.validate import Comparison
from fuserlite.runtime.backends import BACKENDS, make_backend, mpi_launch, silent_rank
from fuserlite.runtime.backends.mpi_watchdog import DEFAULT_TIMEOUT_S, check_timeout
from fuserlite.runtime.communicator import Communicator
from fuserlite.runtime.compute import COMPUTE
from fuserlite.runtime.executor import FusionExecutor
from fuserlite.runtime.validation import Validation
from fuserlite.timing.units import bytes_text

RANDOM_INPUTS = "random inputs"  # the phases of `run` around the passes and kernels
VALIDATION = "validation"


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
        _inputs_options(args)
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
    # (Not with --json: stdout is the document's alone.)
    display = ProgressDisplay(out.console if backend.is_host() and not args.json else None)
    with display as progress, np.errstate(all="ignore"):
        return _run(args, out, fusion, backend, progress, names)


def _inputs_options(args: argparse.Namespace) -> None:
    """--inputs gives the inputs; --seed and --init choose random ones (0, scaled)."""
    if args.inputs is not None:
        given = [f for f, v in (("--seed", args.seed), ("--init", args.init)) if v is not None]
        if given:
            raise UsageError(
                f"fuserlite run: error: --inputs {args.inputs} gives the inputs, and {given[0]} "
                "chooses random ones; give one of them"
            )
    args.seed = 0 if args.seed is None else args.seed
    args.init = "scaled" if args.init is None else args.init


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
        if args.inputs is not None:
            inputs = load_inputs(args.inputs, fusion)
        else:
            progress.phase(RANDOM_INPUTS)
            inputs = fuserlite.random_inputs(fusion, args.seed, args.init)
            progress.finish(RANDOM_INPUTS)
        executor = FusionExecutor(
            fusion,
            backend=backend,
            compute=compute_option(args),
            pipeline=passes,
            progress=progress,
            gemm=args.gemm,
        )
        if backend.is_host():
            note_left_whole(executor.program, args, "run")
        outputs = executor.run(inputs)
        executor.close()  # every rank: frees the mpi backend's team communicators
    except FuserliteError:
        if backend.is_host():
            raise
        return EXIT_ERROR  # under mpiexec every rank fails alike; rank 0 reports it
    if outputs is None:
        return EXIT_OK  # an MPI rank other than 0: rank 0 prints the report
    report = run_report(args, fusion, executor, outputs, names)
    progress.phase(VALIDATION)
    checked = executor.validate(inputs, outputs)
    report["validation"] = validation_report(checked)
    if args.json:
        out.json(report)
        return EXIT_OK
    print_report(out, report)
    out.text("validation: ok\n" + "".join(f"  {line}\n" for line in checked.lines()))
    return EXIT_OK


def _tensor(tv: TensorView) -> dict[str, Any]:
    """A tensor in --json: the name the report prints, its user name and T-number."""
    return {"name": tv.name, "user_name": tv.user_name, "tensor": tv.ir_name}


def listed(executor: FusionExecutor) -> list[Communication]:
    """The communications the report lists: a collective on a team of one device moves
    nothing (a program on one device has them where the file shards over one), so
    they are left out."""
    return [c for c in executor.communications if any(len(t) > 1 for t in c.teams)]


def run_report(
    args: argparse.Namespace,
    fusion: Fusion,
    executor: FusionExecutor,
    outputs: list[np.ndarray],
    names: list[str],
) -> dict[str, Any]:
    """What `run` reports before validation, as the --json document holds it."""
    comms = listed(executor)
    sent = {d: 0 for d in executor.devices}
    for c in comms:
        for d in {d for t in c.teams for d in t}:
            sent[d] = sent.get(d, 0) + c.bytes_per_device
    # Each device's own working set: the busiest device's is the memory a run needs.
    sets = {d: executor.working_set(d) for d in executor.devices}
    peak_device = max(sets, key=lambda d: (sets[d].total, -d))
    peak = sets[peak_device]
    resized = getattr(args, "devices", None) is not None or getattr(args, "mesh", None) is not None
    notes = []
    if resized:
        notes = resize_notes(
            fusion, executor.program, names[1:], f"{len(executor.devices)} devices"
        )
    return {
        "command": "run",
        "path": source_name(args.path),
        "devices": executor.devices,
        "backend": executor.backend.name,
        "inputs": {"file": args.inputs} if args.inputs else {"seed": args.seed, "init": args.init},
        "outputs": [
            {**_tensor(tv), **checksums(array)} for tv, array in zip(fusion.outputs, outputs)
        ],
        "communications": [communication_report(c) for c in comms],
        "totals": {
            "bytes_per_device": max(sent.values(), default=0),
            "bytes": sum(sent.values()),
            "peak_memory": {
                "bytes": peak.total,
                "device": peak_device,
                "inputs": peak.inputs,
                "outputs": peak.outputs,
                "intermediates": peak.intermediates,
            },
        },
        "notes": notes,
    }


def checksums(array: np.ndarray) -> dict[str, Any]:
    """Shape, dtype, sum and sum of |x| of one output (float64 sums, block by block:
    an output may be GiBs, so no float64 copy of it)."""
    flat, total, total_abs = np.asarray(array).reshape(-1), 0.0, 0.0
    for b in blocks(flat.size):
        total += float(flat[b].sum(dtype=np.float64))
        total_abs += float(np.abs(flat[b]).sum(dtype=np.float64))
    return {
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "sum": json_float(total),
        "sum_abs": json_float(total_abs),
    }


def json_float(x: float) -> float | str:
    """A float JSON can hold: inf and nan as the strings "inf", "-inf", "nan"."""
    return x if math.isfinite(x) else str(x)


def communication_report(c: Communication) -> dict[str, Any]:
    """One communication in --json (the text table's row, and its placements)."""
    return {
        "kind": c.kind.value,
        "sizing": c.sizing.value,
        "input": _tensor(c.input),
        "output": _tensor(c.output),
        "teams": [list(t) for t in c.teams],
        "axes": axis_labels(c),
        "root": c.root,
        "layout": None if c.layout is None else str(c.layout),
        "before": None if c.before is None else str(c.before),
        "after": None if c.after is None else str(c.after),
        "bytes_per_device": c.bytes_per_device,
    }


def axis_labels(c: Communication) -> list[str]:
    """The mesh axes of a communication's teams: `DIDx`, or `DIDx (tp)` where the mesh
    names its axes."""
    if c.mesh is not None and c.mesh.axis_names is not None:
        return [c.mesh.axis_label(a) for a in c.group]
    return list(c.group_names)


def comparison_report(c: Comparison) -> dict[str, Any]:
    """One comparison of the validation in --json: its counts, its max error and the
    element nearest its tolerance (allowed: the tolerance there)."""
    e = c.nearest
    nearest = None
    if e is not None:
        nearest = {
            "output": e.output,
            "index": list(e.index),
            "got": json_float(float(e.got)),
            "expected": json_float(float(e.expected)),
            "error": json_float(e.error),
            "allowed": json_float(e.allowed),
            "sources": dict(e.sources),
        }
    return {
        "against": c.against,
        "elements": c.size,
        "differing": c.differing,
        "max_error": json_float(max(c.max_errors, default=0.0)),
        "nearest": nearest,
        "unbounded": c.unbounded,
    }


def validation_report(v: Validation) -> dict[str, Any]:
    """The validation in --json (only a run that passed prints a report)."""
    return {
        "ok": True,
        "devices": v.devices,
        "compute": v.compute,
        "gemm": v.gemm,
        "unsharded": None if v.unsharded is None else comparison_report(v.unsharded),
        "no_unsharded": v.no_unsharded or None,
        "reference": comparison_report(v.reference),
    }


def print_report(out: Output, report: dict[str, Any]) -> None:
    """The text of `run`'s report (before validation's lines): the tables and totals."""
    where = devices_text(report["devices"], report["backend"])
    given = report["inputs"]
    how = f"inputs {given['file']}" if "file" in given else f"seed {given['seed']}"
    table = Table(title=f"{report['path']} on {where}, {how}", box=box.SIMPLE_HEAD)
    for column in ("output", "shape", "dtype", "sum", "sum |x|"):
        table.add_column(column, justify="right" if column.startswith("sum") else "left")
    for o in report["outputs"]:
        shape = "[" + ", ".join(str(s) for s in o["shape"]) + "]"
        table.add_row(o["name"], shape, o["dtype"], _g(o["sum"]), _g(o["sum_abs"]))
    out.table(table)
    out.table(communications_table(report["communications"]))
    totals, memory = report["totals"], report["totals"]["peak_memory"]
    out.text(
        f"sent: {totals['bytes_per_device']} B by the busiest device, {totals['bytes']} B "
        f"in all\npeak memory: {bytes_text(memory['bytes'])} on device {memory['device']} "
        f"(inputs {bytes_text(memory['inputs'])}, outputs {bytes_text(memory['outputs'])}, "
        f"intermediates {bytes_text(memory['intermediates'])} live at once)\n"
    )
    for note in report["notes"]:
        out.text(note + "\n")


def _g(x: float | str) -> str:
    return x if isinstance(x, str) else f"{x:.6g}"


def team_text(c: dict[str, Any]) -> str:
    """`0-3`, or for the teams of a group of mesh axes `DIDx: 0-3 | 4-7` (the first two
    teams and `| ...` where there are more)."""
    teams = c["teams"]
    if len(teams) == 1:
        return ranges(teams[0])
    # Two teams say the pattern; the table keeps 80 columns (--json lists every team).
    shown = " | ".join(ranges(t) for t in teams[:2]) + (" | ..." if len(teams) > 2 else "")
    return f"{'/'.join(c['axes'])}: {shown}"


def ranges(devices: list[int]) -> str:
    """`0-3 6 8-9`: runs of three or more consecutive devices as a range."""
    parts, i = [], 0
    while i < len(devices):
        j = i
        while j + 1 < len(devices) and devices[j + 1] == devices[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{devices[i]}-{devices[j]}")
        else:
            parts.extend(str(d) for d in devices[i : j + 1])
        i = j + 1
    return abbreviate(parts)


def communications_table(comms: list[dict[str, Any]]) -> Table:
    """Kind (with `(padded)` or `(variable)` where chunks are uneven), team, root (where
    some communication has one), layout and bytes per device of each communication."""
    table = Table(title="communications", box=box.SIMPLE_HEAD)
    rooted = any(c["root"] is not None for c in comms)
    columns = ["kind", "input", "output", "team", *(["root"] * rooted), "layout", "B/device"]
    for column in columns:
        table.add_column(
            column,
            justify="right" if column == "B/device" else "left",
            no_wrap=column in ("kind", "B/device"),
        )
    for c in comms:
        kind = c["kind"] if c["sizing"] == Sizing.even.value else f"{c['kind']} ({c['sizing']})"
        root = [""] if c["root"] is None else [str(c["root"])]
        table.add_row(
            kind,
            c["input"]["name"],
            c["output"]["name"],
            team_text(c),
            *(root * rooted),
            c["layout"] or "",
            str(c["bytes_per_device"]),
        )
    if not comms:
        table.add_row("(none)", *[""] * (len(columns) - 2), "0")
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
    r.add_argument("--seed", type=int, help="seed of the random inputs (default 0)")
    r.add_argument(
        "--inputs",
        metavar="FILE.npz",
        help="run on these arrays instead of random ones: an .npz of one array per fusion "
        "input, by its name in the file (np.savez(FILE, x=..., w1=...)); read without "
        "pickles, each checked against its input's shape and dtype",
    )
    add_grad_option(r)
    r.add_argument(
        "--init",
        choices=INITS,
        help="random inputs: scaled (the default: weights of matmul and linear "
        "N(0, 1/fan_in), as layers are initialised) or normal (every float N(0, 1))",
    )
    add_mesh_options(r)
    add_streams_option(r)
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
        "--gemm",
        choices=GEMMS,
        default="auto",
        help="how library kernels compute a linear or matmul of bfloat16 operands, on the "
        "compiled and interpreted paths alike: amx (Intel AMX bfloat16 tiles), blas "
        "(numpy's float32 GEMM) or auto (the default: amx where the CPU and a C++ compiler "
        "allow, else blas); the report names amx where it ran",
    )
    add_json_option(r)
    r.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="where compiled kernels are kept (default ~/.cache/fuserlite/kernels)",
    )
