"""Executing one planner step (`plan.Step`) on the local arrays of a mesh's devices.

A step is one collective over the teams of a group of mesh axes (`plan.mesh_axes.teams`,
each team in team-rank order: the group's coordinates, outer first), or a local slice.
Local arrays are the devices' boxes of the global tensor in logical axis order (the
block model, `plan.blocks`), so a step's tensor axes index them directly:

| step | each member r of a team of D devices |
|---|---|
| LocalSlice(G, t) | keeps its own box along t (chunk r of D where the chunks are equal) |
| Allgather(G, t) | gets the members' arrays concatenated along t, in team order |
| AllToAll(G, t -> u) | gets chunk r along u of every member's array, concatenated along t |
| Allreduce(G) | gets the fold of the members' arrays (`communicator.fold`, team order) |
| ReduceScatter(G, t) | gets chunk r along t of that fold |

A 1-D Communication is a step on the group (0,), so the executor runs both through
here. Where an axis is chunked unevenly, the members' boxes come from the block model
(`Chunks`): a tensor axis cut by several mesh axes is chunked outer first, so member r
of a team over two of them does not hold torch.chunk's chunk r of D (8 rows over 3 x 2
devices: 2 1 2 1 2 0, not 2 2 2 2 0 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.types import ReductionOpType
from fuserlite.numerics.casts import identity
from fuserlite.plan.blocks import Box, chunk_bounds
from fuserlite.plan.mesh_axes import Group, teams
from fuserlite.plan.steps import Step, StepKind
from fuserlite.runtime.communicator import (
    Buffers,
    Communicator,
    Operation,
    Team,
    back,
    contiguous,
    front,
    pad_rows,
    pad_to,
    split_rows,
    unpad,
)


def mesh_teams(mesh: DeviceMesh, group: Group) -> tuple[Team, ...]:
    """The teams of `group` (mesh axes, outer -> inner) as device ids, in team-rank order."""
    return tuple(Team(tuple(mesh.devices[i] for i in t)) for t in teams(mesh.shape, group))


def local_chunk(a: np.ndarray, axis: int, index: int, parts: int) -> np.ndarray:
    """Chunk `index` of `parts` of `a` along `axis` with torch.chunk's bounds (a view)."""
    return _take(a, axis, slice(*chunk_bounds(a.shape[axis], parts, index)))


@dataclass(frozen=True)
class Chunks:
    """A step's chunks: every device's box of the global tensor before and after it
    (plan.blocks), and how a collective moves them where they are uneven: each padded to
    the largest (the plain collective, `padded` True), as it is (the variable-size one,
    False), or None where every chunk is equal."""

    before: dict[int, Box]
    after: dict[int, Box]
    padded: bool | None = None

    def rows(self, boxes: dict[int, Box], axis: int) -> dict[int, int]:
        """Each device's rows of `axis` in `boxes` (self.before or self.after)."""
        return {d: box[axis][1] - box[axis][0] for d, box in boxes.items()}

    def shapes(self, boxes: dict[int, Box]) -> dict[int, tuple[int, ...]]:
        """Each device's local shape in `boxes`."""
        return {d: tuple(hi - lo for lo, hi in box) for d, box in boxes.items()}

    def own_rows(self, device: int, axis: int) -> slice:
        """Where the device's box after the step lies in its array before it, on `axis`."""
        start = self.before[device][axis][0]
        lo, hi = self.after[device][axis]
        return slice(lo - start, hi - start)


def run_step(
    step: Step,
    mesh: DeviceMesh,
    backend: Communicator,
    bufs: Buffers,
    op: ReductionOpType | None = None,
    chunks: Chunks | None = None,
) -> Buffers:
    """Each hosted device's local array after `step` (bufs: every hosted device's before);
    `chunks`: the devices' boxes (None: every chunk equal, torch.chunk's)."""
    return backend.run(step_operation(step, mesh, backend, bufs, op, chunks))


def step_operation(
    step: Step,
    mesh: DeviceMesh,
    backend: Communicator,
    bufs: Buffers,
    op: ReductionOpType | None = None,
    chunks: Chunks | None = None,
) -> Operation:
    """`run_step` as an Operation (communicator's docstring): post it, wait for it later."""
    ts = mesh_teams(mesh, step.group)
    k, t, u = step.kind, step.axis, step.to_axis
    hosted = backend.hosted(mesh.devices)
    missing = [d for d in hosted if d not in bufs]
    if missing:
        raise ExecutionError(f"{step.describe(mesh.rank)}: device {missing[0]} has no buffer")
    if k in (StepKind.Allreduce, StepKind.ReduceScatter) and op is None:
        raise ExecutionError(f"{step.describe(mesh.rank)} needs a reduction op")
    if k is StepKind.LocalSlice:
        if chunks is not None:
            return {d: _take(bufs[d], t, chunks.own_rows(d, t)) for d in hosted}
        where = {d: (r, len(team.members)) for team in ts for r, d in enumerate(team.members)}
        return {d: local_chunk(bufs[d], t, *where[d]) for d in hosted}
    if chunks is not None and chunks.padded is None:
        chunks = None  # equal chunks: the plain collective
    if k is StepKind.Allgather:
        moved = {d: front(bufs[d], t) for d in hosted}
        if chunks is None:
            got = yield from backend.iallgather(ts, moved)
        elif chunks.padded:  # every chunk padded to the largest, the padding dropped
            rows = chunks.rows(chunks.before, t)
            size = max(rows.values())
            got = yield from backend.iallgather(
                ts, {d: pad_rows(v, size) for d, v in moved.items()}
            )
            members = {d: team.members for team in ts for d in team.members}
            got = {d: unpad(v, size, [rows[m] for m in members[d]]) for d, v in got.items()}
        else:
            got = yield from backend.iallgather(ts, moved, chunks.rows(chunks.before, t))
        return {d: back(v, t) for d, v in got.items()}
    if k is StepKind.AllToAll:
        got = yield from _alltoall(
            ts, backend, {d: front(bufs[d], u) for d in hosted}, t, u, chunks
        )
        concat_at = t + 1 if t < u else t  # where t is once u is in front
        return {d: back(np.concatenate(parts, axis=concat_at), u) for d, parts in got.items()}
    if k is StepKind.Allreduce:
        return (yield from backend.iallreduce(ts, {d: contiguous(bufs[d]) for d in hosted}, op))
    if k is StepKind.ReduceScatter:
        moved = {d: front(bufs[d], t) for d in hosted}
        if chunks is None:
            got = yield from backend.ireduce_scatter(ts, moved, op)
        elif chunks.padded:  # each member's rows padded with the identity (it folds
            rows = chunks.rows(chunks.after, t)  # among itself), the padding then dropped
            size = max(rows.values())
            members = {d: team.members for team in ts for d in team.members}
            fill = identity(next(iter(moved.values())).dtype, op) if moved else 0
            padded = {
                d: np.concatenate(
                    [pad_rows(p, size, fill) for p in split_rows(v, [rows[m] for m in members[d]])]
                )
                for d, v in moved.items()
            }
            got = yield from backend.ireduce_scatter(ts, padded, op)
            got = {d: v[: rows[d]] for d, v in got.items()}
        else:
            got = yield from backend.ireduce_scatter(ts, moved, op, chunks.rows(chunks.after, t))
        return {d: back(v, t) for d, v in got.items()}
    raise ExecutionError(f"{k.value} is not a step on one mesh; a move between meshes is")


def _alltoall(ts, backend: Communicator, moved: Buffers, t: int, u: int, chunks: Chunks | None):
    """Member j gets part j along u (in front) of every member's array: equal parts, each
    padded to the largest chunks of u and t, or each its own rows (Alltoallv)."""
    if chunks is None:
        return (yield from backend.ialltoall(ts, moved))
    at = t + 1 if t < u else t  # where t is once u is in front
    rows = chunks.rows(chunks.after, u)  # u rows device d receives
    fronts = {d: _front_shape(shape, u) for d, shape in chunks.shapes(chunks.before).items()}
    if not chunks.padded:
        return (yield from backend.ialltoall(ts, moved, rows, fronts))
    members = {d: team.members for team in ts for d in team.members}
    size_u, size_t = max(rows.values()), max(s[at] for s in fronts.values())
    padded = {}
    for d, v in moved.items():
        pieces = split_rows(v, [rows[m] for m in members[d]])
        full = [(size_u, *p.shape[1:at], size_t, *p.shape[at + 1 :]) for p in pieces]
        padded[d] = np.concatenate([pad_to(p, f) for p, f in zip(pieces, full)])
    got = yield from backend.ialltoall(ts, padded)
    return {
        d: [
            p[tuple(slice(0, n) for n in (rows[d], *fronts[s][1:]))] for s, p in zip(members[d], ps)
        ]
        for d, ps in got.items()
    }


def _take(a: np.ndarray, axis: int, rows: slice) -> np.ndarray:
    """`a`'s `rows` along `axis` (a view)."""
    where = [slice(None)] * a.ndim
    where[axis] = rows
    return a[tuple(where)]


def _front_shape(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    """`shape` with `axis` first, as `front` lays an array out."""
    return (shape[axis], *shape[:axis], *shape[axis + 1 :])
