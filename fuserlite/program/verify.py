"""The validator of the program level: the fusion's invariants, and those of its steps.

`verify_program(program)` raises VerifyError listing every broken invariant: the
fusion's (fuserlite.verify, every tensor with a mesh), every kernel computing from
local shards, collectives that agree on their layouts (seed 000), say how they
move uneven chunks, do the step they name and combine partial values by their op
(program.partials), and outputs that are complete values; a host program's streams,
waits and buffers (program.host_verify). The pipeline runs it after every program pass.
"""

from __future__ import annotations

from fuserlite.ir import args
from fuserlite.ir.changes import ChangeLog
from fuserlite.ir.errors import VerifyError
from fuserlite.ir.expr import Expr
from fuserlite.ir.sharding import describe_sharding
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.sharding import movement_text, moves_data, non_local_inputs
from fuserlite.program import host
from fuserlite.program.communication import Communication, Sizing, chunks_unevenly
from fuserlite.program.host_verify import host_problems
from fuserlite.program.partials import communication_problems
from fuserlite.program.program import Kernel, Program
from fuserlite.verify.fusion import (
    LazyNamer,
    fusion_problems,
    near_changes,
    non_local_text,
    partial_output_problems,
    problems_text,
    touched_exprs,
    touched_outputs,
)


def verify_program(program: Program) -> None:
    """Raise VerifyError if any invariant of the program is broken."""
    args.instance(program, Program, "verify_program", "program", "a Program")
    verify_program_changes(program, None)


def verify_program_changes(program: Program, log: ChangeLog | None) -> None:
    """verify_program of what `log` holds (None: of everything): the fusion's checks and
    the locality of kernel expressions on the nodes it holds and next to them; the
    checks of the steps' order when it says a list of the graph was edited; the
    communications' and the outputs' always (a program has few of them)."""
    namer = LazyNamer(program.fusion)
    # The expressions next to the changes: worked out once, read by the fusion's checks
    # and the kernels' locality alike.
    near = None if log is None else near_changes(log)
    filled = host.filled(program.steps)
    problems = fusion_problems(program.fusion, namer, True, log, filled, near)
    problems.extend(layout_problems(program.communications))
    problems.extend(sizing_problems(program.communications))
    problems.extend(communication_problems(program.communications))
    if log is None or log.structure:
        problems.extend(step_problems(program))
        problems.extend(host_problems(program))
    problems.extend(locality_problems(program, log, near))
    problems.extend(partial_output_problems(touched_outputs(program.outputs, log), namer))
    if problems:
        raise VerifyError(problems_text("invalid program", problems))


def sizing_problems(comms: list[Communication]) -> list[str]:
    """A collective over uneven chunks must say how it moves them: a backend running the
    plain collective would read every chunk as ceil(n/d) rows."""
    return [
        f"{c.kind.value} {c.input.name} -> {c.output.name} moves chunks of an axis its mesh "
        "does not divide but its sizing is even; give it padded or variable chunks "
        "(lower-communications chooses one)"
        for c in comms
        # a move of box transfers (plan.cross_mesh) sends every box as it is
        if c.sizing is Sizing.even
        and c.transfers is None
        and chunks_unevenly(c.kind, c.input, c.output)
    ]


def layout_problems(comms: list[Communication]) -> list[str]:
    """Seed 000: collectives must not mix pinned and free layouts."""

    def name(c: Communication) -> str:
        layout = "no layout" if c.layout is None else ("pinned" if c.layout.pinned else "free")
        return f"{c.kind.value} {c.input.name} -> {c.output.name} ({layout})"

    collectives = [c for c in comms if c.kind.is_collective]
    assigned = [c for c in collectives if c.layout is not None]
    problems = []
    if assigned and len(assigned) != len(collectives):
        missing = ", ".join(name(c) for c in collectives if c.layout is None)
        problems.append(f"some collectives have a layout and others do not: {missing}")
    reducing = [c for c in assigned if c.kind.is_allreduce_class]
    if len({c.layout.pinned for c in reducing}) > 1:
        problems.append(
            "a mix of layout-pinned and free all-reduce-class collectives: "
            + ", ".join(name(c) for c in reducing)
            + "; run assign-layouts so that all are pinned or all are free"
        )
    return problems


def locality_problems(
    program: Program, log: ChangeLog | None = None, near: set[int] | None = None
) -> list[str]:
    """Every expression of a kernel computes from local shards and moves no data (those
    `log` holds or reads or writes a tensor of; None: every one). `near`:
    near_changes(log), where the caller has it."""
    problems: list[str] = []
    fix = "run insert-reshardings before segment"
    if log is not None and near is None:
        near = near_changes(log)
    for kernel in program.kernels:
        for e in touched_exprs(kernel.exprs, log, near):
            # Each question asked once; the messages made only for what fails.
            if moves_data(e):
                problems += movement_problems(e, fix)
            if non_local_inputs(e):
                problems += non_local_text(e, fix)
    return problems


def movement_problems(e: Expr, fix: str) -> list[str]:
    """A line if `e`, in a kernel, moves data between devices."""
    if not moves_data(e):
        return []
    return [
        f"kernel expression {movement_text(e)} moves data between devices "
        f"({describe_sharding(e.inputs[0])} -> {describe_sharding(e.output)}); {fix}"
    ]


def step_problems(program: Program) -> list[str]:
    """Each step reads what the fusion's inputs or earlier steps hold, each expression
    is in one step and defines its outputs, and every output is computed (so the steps
    hold every expression the outputs need, in an order they can run in)."""
    problems = []
    available = {id(t) for t in program.inputs}
    placed: set[int] = set()
    views: dict[int, TensorView] = {}  # a written chunk -> the whole it is a view of
    for k, step in enumerate(host.walk(program.steps)):
        if isinstance(step, host.ShardByStream):
            why = step.problem()
            if why is not None:
                problems.append(f"step {k}: {step.text()}: {why}")
            if id(step.whole) in available:  # a chunk read
                available.add(id(step.chunk))
            else:  # a chunk written: that writes the whole
                views[id(step.chunk)] = step.whole
        step = host.executable(step)
        if step is None:  # a stream, wait or buffer construct: host_problems' business
            continue
        exprs = step.exprs if isinstance(step, Kernel) else [step]
        for t in step.inputs:
            if id(t) not in available:
                problems.append(f"step {k} reads {t.name} before any step computes it")
        if isinstance(step, Kernel):
            problems.extend(kernel_problems(k, step))
        for e in exprs:
            if id(e) in placed:
                problems.append(f"{e.output.name} = {e.op_name}(...) is in two steps")
            placed.add(id(e))
            for t in e.outputs:
                if t.definition is not e:
                    problems.append(f"step {k} computes {t.name}, which another expression defines")
                available.add(id(t))
                if id(t) in views:
                    available.add(id(views[id(t)]))
    for t in program.outputs:
        if id(t) not in available:
            problems.append(f"output {t.name} is computed by no step of the program")
    return problems


def kernel_problems(k: int, kernel: Kernel) -> list[str]:
    """Kernel `k` runs on every device of its mesh, which holds a shard of each tensor
    it reads or writes (every one on that mesh), and computes each tensor before it
    reads it."""
    mesh = kernel.mesh
    elsewhere: dict[int, TensorView] = {}  # tensors on another mesh, in order of first sight
    order = []
    ready = {id(t) for t in kernel.inputs}
    if mesh is not None:
        for t in kernel.inputs:
            if t.mesh is not mesh and t.mesh != mesh:
                elsewhere.setdefault(id(t), t)
    # One pass: each tensor is first seen as a kernel input, an output, or an input read
    # before anything computes it (the one-mesh check reads every tensor once).
    for e in kernel.exprs:
        for t in e.inputs:
            if id(t) not in ready:
                order.append(
                    f"kernel {k}: {e.output.name} = {e.op_name}(...) reads {t.name}, which the "
                    "kernel computes after it"
                )
                ready.add(id(t))  # said once
                if mesh is not None and t.mesh is not mesh and t.mesh != mesh:
                    elsewhere.setdefault(id(t), t)
        for t in e.outputs:
            if mesh is not None and t.mesh is not mesh and t.mesh != mesh:
                elsewhere.setdefault(id(t), t)
            ready.add(id(t))
    problems = [
        f"kernel {k} runs on {kernel.mesh}, but {tv.name} is on {tv.mesh}; a kernel's "
        "tensors are on its mesh (a communication moves a tensor to another)"
        for tv in elsewhere.values()
    ]
    return problems + order
