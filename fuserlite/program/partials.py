"""Partial values through a lowered program: the op they combine by, and the validator's
checks that every communication does the step it names and combines by that op.

A reduction sharded over fewer mesh axes than its input (insert-reshardings) is
completed in stages: an Allreduce over some of the partial mesh axes leaves values
still partial over the others, in the reduction's op, and a later collective reads
them. So the op of partial values is that of the last collective that combined them,
else that of the reduction that made them; a copy or a move keeps it. A collective
that combines them by another op (a max of partial sums), or whose kind and teams do
not take its input's placement to its output's (an Allreduce over every mesh axis
where its output is still partial over one: the next Allreduce would add up D copies),
gives wrong numbers without an error, so the validator rejects it.
"""

from __future__ import annotations

from fuserlite.ir.errors import LoweringError
from fuserlite.ir.expr import LoadStoreOp
from fuserlite.ir.sharding import is_partial, placement
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ReductionOpType
from fuserlite.ops.sharding import partial_op
from fuserlite.plan.steps import ONE_MESH_KINDS, Step
from fuserlite.program.communication import Communication, input_placement, reduces_problem


def partial_op_of(tv: TensorView) -> ReductionOpType:
    """How the partial values of `tv` combine: the op of the last collective that combined
    them, else that of the reduction that made them (ops.sharding.partial_op)."""
    t = tv
    while isinstance(t.definition, (Communication, LoadStoreOp)):
        d = t.definition
        if isinstance(d, Communication) and d.op is not None:
            return d.op
        t = d.input
    return partial_op(t)


def recorded_step(comm: Communication) -> Step | None:
    """The planner step a Communication on one mesh records (its kind over the teams of
    `group`, moving `axes`), or None for any other (a move between meshes, a permute)."""
    if comm.kind not in ONE_MESH_KINDS or not comm.group or comm.input.mesh != comm.output.mesh:
        return None
    return Step(comm.kind, comm.group, *comm.axes)


def communication_problems(comms: list[Communication]) -> list[str]:
    """Each step on one mesh takes its input's placement to its output's, and each
    collective of partial values combines them by their op (module doc)."""
    problems = []
    for c in comms:
        what = f"{c.kind.value} {c.input.name} -> {c.output.name}"
        why = reduces_problem(c.input, c.reduces)
        if why is not None:
            problems.append(f"{what} {why}")
            continue
        step = recorded_step(c)
        if step is not None and _axes_problem(c):
            problems.append(f"{what}: {_axes_problem(c)}")
        elif step is not None:
            before, after = input_placement(c.input, c.reduces), placement(c.output)
            done = step.apply(before)
            if done != after:
                does = f"takes {before} to {done}" if done else f"does not apply to {before}"
                problems.append(
                    f"{what}: {step.describe(c.input.mesh.rank)} {does}, but {c.output.name} "
                    f"is {after}; the step must make its output's placement (lower-"
                    "communications plans one)"
                )
        problems.extend(_op_problems(c, what))
    return problems


# The tensor axes each step on one mesh names, as its printed line shows them.
_AXES_SHOWN = {
    "LocalSlice": "in_axis=N (the axis it slices)",
    "Allgather": "in_axis=N (the axis it gathers)",
    "ReduceScatter": "in_axis=N (the axis it scatters onto)",
    "AllToAll": "in_axis=N and out_axis=M (the axes it moves from and to)",
    "Allreduce": "no tensor axis",
}


def _axes_problem(c: Communication) -> str | None:
    """What is wrong with the tensor axes a communication on one mesh names, if anything."""
    shown = _AXES_SHOWN[c.kind.value]
    rank = len(input_placement(c.input, c.reduces).shards)
    if len(c.axes) != shown.count("=N") + shown.count("=M"):
        return f"names {len(c.axes)} tensor axes; {c.kind.value} on one mesh shows {shown}"
    bad = [a for a in c.axes if not 0 <= a < rank]
    if bad:
        return f"axis {bad[0]} is not an axis of {c.input.name}, which has {rank}"
    return None


def _op_problems(c: Communication, what: str) -> list[str]:
    partial = is_partial(c.input)
    combines = c.kind.is_allreduce_class or c.input.mesh != c.output.mesh
    if c.reduces is not None:  # it makes the partial values and combines them: any op
        if c.op is None or not combines:
            return [
                f"{what} reduces axes {c.reduces} of {c.input.name} itself, so it combines "
                "one value per device: it is an Allreduce, a ReduceScatter or a Reduce, with an op"
            ]
        return []
    if not partial:
        if c.op is None:
            return []
        return [f"{what} has op={c.op.value}, but {c.input.name} holds complete values"]
    if c.op is None:
        if not combines:
            return []  # it moves the partial values as they are
        return [f"{what} combines the partial values of {c.input.name} but names no op"]
    try:
        want = partial_op_of(c.input)
    except LoweringError as exc:
        return [f"{what}: {exc}"]
    if c.op is want:
        return []
    return [
        f"{what} combines the partial values of {c.input.name} with op={c.op.value}, but they "
        f"are partial results of a {want.name}: combine them with op={want.value}"
    ]
