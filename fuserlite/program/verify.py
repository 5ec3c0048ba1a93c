"""The validator of the program level: the fusion's invariants, and those of its steps.

`verify_program(program)` raises VerifyError listing every broken invariant: the
fusion's (fuserlite.verify, every tensor with a mesh), every kernel computing from
local shards, collectives that agree on their layouts (seed 000), and outputs that
are complete values. The pipeline runs it after every program pass.
"""

from __future__ import annotations

from fuserlite.ir import args
from fuserlite.ir.errors import VerifyError
from fuserlite.ir.readonly import reading_only
from fuserlite.ir.sharding import describe_sharding, is_resharding, non_local_inputs, shardings
from fuserlite.printer import Namer
from fuserlite.program.communication import Communication
from fuserlite.program.program import Program
from fuserlite.verify import LazyNamer, fusion_problems, problems_text


def verify_program(program: Program) -> None:
    """Raise VerifyError if any invariant of the program is broken."""
    args.instance(program, Program, "verify_program", "program", "a Program")
    with reading_only():
        namer = LazyNamer(program.fusion)
        problems = fusion_problems(program.fusion, namer, require_mesh=True)
        problems.extend(layout_problems(program.communications, namer))
        problems.extend(locality_problems(program))
        problems.extend(partial_output_problems(program, namer))
    if problems:
        raise VerifyError(problems_text("invalid program", problems))


def layout_problems(comms: list[Communication], namer: Namer) -> list[str]:
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


def partial_output_problems(program: Program, namer: Namer) -> list[str]:
    """A program's output is a complete value, never partial sums."""
    problems = []
    for out in program.outputs:
        for s in shardings(out).values():
            if s.is_partial:
                ax = out.device_axes()[s.parallel_type]
                problems.append(
                    f"output {out.name} reduction axis {s.logical_index} ({namer.id(ax)}) holds "
                    "partial results, one per device; a fusion output must be complete: "
                    "run insert-reshardings, which completes it with a communication"
                )
    return problems


def locality_problems(program: Program) -> list[str]:
    """Every expression of a kernel computes from local shards."""
    problems = []
    for kernel in program.kernels:
        for e in kernel.exprs:
            if is_resharding(e):
                problems.append(
                    f"kernel expression {e.output.name} = Set({e.input.name}) moves data "
                    f"between shardings ({describe_sharding(e.input)} -> "
                    f"{describe_sharding(e.output)}); run insert-reshardings before segment"
                )
            for p in non_local_inputs(e):
                problems.append(
                    f"{e.output.name} = {e.op_name}(...) reads {describe_sharding(p)} but computes "
                    f"{describe_sharding(e.output)}: not local; run insert-reshardings before segment"
                )
    return problems
