"""Executing one planner step (`plan.Step`) on the local arrays of a mesh's devices.

A step is one collective over the teams of a group of mesh axes (`plan.mesh_axes.teams`,
each team in team-rank order: the group's coordinates, outer first), or a local slice.
Local arrays are the devices' boxes of the global tensor in logical axis order (the
block model, `plan.blocks`), so a step's tensor axes index them directly:

| step | each member r of a team of D devices |
|---|---|
| LocalSlice(G, t) | keeps chunk r of D along t (torch.chunk bounds) |
| Allgather(G, t) | gets the members' arrays concatenated along t, in team order |
| AllToAll(G, t -> u) | gets chunk r along u of every member's array, concatenated along t |
| Allreduce(G) | gets the fold of the members' arrays (`communicator.fold`, team order) |
| ReduceScatter(G, t) | gets chunk r along t of that fold |

A 1-D Communication is a step on the group (0,), so the executor runs both through
here.
"""

from __future__ import annotations

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.types import ReductionOpType
from fuserlite.plan.blocks import chunk_bounds
from fuserlite.plan.mesh_axes import Group, teams
from fuserlite.plan.steps import Step, StepKind
from fuserlite.runtime.communicator import Buffers, Communicator, Team, back, contiguous, front


def mesh_teams(mesh: DeviceMesh, group: Group) -> tuple[Team, ...]:
    """The teams of `group` (mesh axes, outer -> inner) as device ids, in team-rank order."""
    return tuple(Team(tuple(mesh.devices[i] for i in t)) for t in teams(mesh.shape, group))


def local_chunk(a: np.ndarray, axis: int, index: int, parts: int) -> np.ndarray:
    """Chunk `index` of `parts` of `a` along `axis` with torch.chunk's bounds (a view)."""
    lo, hi = chunk_bounds(a.shape[axis], parts, index)
    where = [slice(None)] * a.ndim
    where[axis] = slice(lo, hi)
    return a[tuple(where)]


def run_step(
    step: Step,
    mesh: DeviceMesh,
    backend: Communicator,
    bufs: Buffers,
    op: ReductionOpType | None = None,
) -> Buffers:
    """Each hosted device's local array after `step` (bufs: every hosted device's before)."""
    ts = mesh_teams(mesh, step.group)
    k, t, u = step.kind, step.axis, step.to_axis
    hosted = backend.hosted(mesh.devices)
    missing = [d for d in hosted if d not in bufs]
    if missing:
        raise ExecutionError(f"{step.describe(mesh.rank)}: device {missing[0]} has no buffer")
    if k in (StepKind.Allreduce, StepKind.ReduceScatter) and op is None:
        raise ExecutionError(f"{step.describe(mesh.rank)} needs a reduction op")
    if k is StepKind.LocalSlice:
        where = {d: (r, len(team.members)) for team in ts for r, d in enumerate(team.members)}
        return {d: local_chunk(bufs[d], t, *where[d]) for d in hosted}
    if k is StepKind.Allgather:
        got = backend.allgather(ts, {d: front(bufs[d], t) for d in hosted})
        return {d: back(v, t) for d, v in got.items()}
    if k is StepKind.AllToAll:
        got = backend.alltoall(ts, {d: front(bufs[d], u) for d in hosted})
        concat_at = t + 1 if t < u else t  # where t is once u is in front
        return {d: back(np.concatenate(parts, axis=concat_at), u) for d, parts in got.items()}
    if k is StepKind.Allreduce:
        return backend.allreduce(ts, {d: contiguous(bufs[d]) for d in hosted}, op)
    if k is StepKind.ReduceScatter:
        got = backend.reduce_scatter(ts, {d: front(bufs[d], t) for d in hosted}, op)
        return {d: back(v, t) for d, v in got.items()}
    raise ExecutionError(f"{k.value} is not a step on one mesh; a move between meshes is")
