"""The classic planner: one mesh axis at a time, through replicated.

The baseline the byte-optimal search is measured against (benchmarks/
redistribute.py) and the "via replicate" alternative `Plan.describe` names.
Like DTensor's default planner it first undoes, innermost mesh axis first,
every mesh axis that is not already placed as in the target (an Allreduce of
a partial axis, an Allgather of a sharding one), then slices each replicated
axis into its target sharding, outer nesting first. It uses only single-axis
Allgather, Allreduce and LocalSlice: never an AllToAll, a ReduceScatter or a
flattened team.
"""

from __future__ import annotations

from fuserlite.plan.placement import Partial, Placement, Shard
from fuserlite.plan.steps import Step, StepKind


def _settled(state: Placement, target: Placement, axis: int) -> bool:
    """True when mesh axis `axis` already does what the target wants, nested the same way."""
    here, there = state.of_mesh_axis(axis), target.of_mesh_axis(axis)
    if here != there:
        return False
    if isinstance(here, Shard):
        mine, theirs = state.shards[here.dim], target.shards[here.dim]
        return mine[: mine.index(axis)] == theirs[: theirs.index(axis)]
    return True


def _undo(state: Placement, target: Placement) -> Step | None:
    """The next axis to replicate (innermost first), or None when every axis is settled."""
    for axis in reversed(range(state.mesh_rank)):
        if _settled(state, target, axis) or axis in state.replicated_axes():
            continue
        p = state.of_mesh_axis(axis)
        if isinstance(p, Partial):
            return Step(StepKind.Allreduce, (axis,))
        if state.shards[p.dim][-1] == axis:
            return Step(StepKind.Allgather, (axis,), p.dim)
    return None  # an unsettled sharding axis always has an unsettled innermost one


def _redo(state: Placement, target: Placement) -> Step | None:
    """The next replicated axis to slice into its target sharding, or None when done."""
    for axis in range(state.mesh_rank):
        p = target.of_mesh_axis(axis)
        if isinstance(p, Shard) and axis in state.replicated_axes():
            nesting = target.shards[p.dim]
            if state.shards[p.dim] == nesting[: nesting.index(axis)]:
                return Step(StepKind.LocalSlice, (axis,), p.dim)
    return None


def classic_steps(source: Placement, target: Placement) -> list[Step]:
    """The classic plan from `source` to `target`, step by step (a mesh axis partial in
    both stays so)."""
    steps, state = [], source
    for choose in (_undo, _redo):
        while (step := choose(state, target)) is not None:
            steps.append(step)
            state = step.apply(state)
    return steps
