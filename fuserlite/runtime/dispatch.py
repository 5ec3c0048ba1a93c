"""How each Communication of a program runs on a Communicator.

Same-mesh kinds are planner steps (`runtime.plan_steps`) over the teams of the
Communication's group of mesh axes (a 1-D Communication without one is a step on
mesh axis 0); a move between meshes with box transfers runs them (`runtime.moves`);
the rooted kinds of the 1-D table run over their one team; SendRecv pairs are
point-to-point messages.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.sharding import local_shape
from fuserlite.plan.cross_mesh import Move, holdings, needs
from fuserlite.plan.steps import Step, StepKind
from fuserlite.program.communication import CommKind, Communication
from fuserlite.runtime.communicator import (
    Buffers,
    BufferSpec,
    Communicator,
    Message,
    Team,
    back,
    front,
)
from fuserlite.runtime.moves import run_move
from fuserlite.runtime.plan_steps import run_step

# Kinds that run on one mesh: the planner's steps (fuserlite.runtime.plan_steps)
ONE_MESH = (
    CommKind.LocalSlice,
    CommKind.Allgather,
    CommKind.AllToAll,
    CommKind.Allreduce,
    CommKind.ReduceScatter,
)


def teams_of(comm: Communication) -> tuple[Team, ...]:
    """The teams a Communication runs over (its whole team today: meshes are 1-D)."""
    k = comm.kind
    if k in (CommKind.Broadcast, CommKind.Scatter):
        return (Team(comm.output.mesh.devices, comm.root),)
    if k in (CommKind.Gather, CommKind.Reduce):
        return (Team(comm.input.mesh.devices, comm.root),)
    return (Team(comm.team),)


def _spec(comm: Communication, axis: int | None) -> BufferSpec:
    """A sender's buffer as the backend sees it (sharded axis `axis` moved to the front)."""
    shape = local_shape(comm.input)
    if axis is not None:
        shape = (shape[axis], *shape[:axis], *shape[axis + 1 :])
    return BufferSpec(tuple(shape), comm.input.dtype.numpy)


def _check_buffers(comm: Communication, bufs: Buffers, devices) -> None:
    want = local_shape(comm.input)
    for d in devices:
        if d not in bufs:
            raise ExecutionError(
                f"{comm.kind.value} of {comm.input.name}: device {d} has no buffer"
            )
        if bufs[d].shape != want:
            raise ExecutionError(
                f"{comm.kind.value} {comm.input.name} -> {comm.output.name}: device {d} holds a "
                f"buffer of shape {list(bufs[d].shape)}, expected {list(want)}"
            )


def run_communication(comm: Communication, backend: Communicator, bufs: Buffers) -> Buffers:
    """Execute one Communication; returns the output shards of hosted output devices."""
    k, teams = comm.kind, teams_of(comm)
    in_mesh, out_mesh = comm.input.mesh.devices, comm.output.mesh.devices
    senders = backend.hosted(in_mesh)
    _check_buffers(comm, bufs, senders)
    a_in, a_out = comm.in_axis, comm.out_axis
    if comm.transfers is not None:
        return _move(comm, backend, bufs)
    if k in ONE_MESH and comm.group:  # a step of the planner's plan, on a mesh of any rank
        step = Step(StepKind(k.value), comm.group, *comm.axes)
        return run_step(step, comm.mesh, backend, bufs, comm.op)
    if k in ONE_MESH:  # a step of the planner on the one mesh axis of a 1-D mesh
        axis = a_in if k in (CommKind.Allgather, CommKind.AllToAll) else a_out
        step = Step(StepKind(k.value), (0,), axis, a_out if k is CommKind.AllToAll else None)
        return run_step(step, comm.input.mesh, backend, bufs, comm.op)
    if k is CommKind.Broadcast:
        return backend.broadcast(teams, {d: bufs[d] for d in senders}, _spec(comm, None))
    if k is CommKind.Scatter:
        moved = {d: front(bufs[d], a_out) for d in senders}
        got = backend.scatter(teams, moved, _spec(comm, a_out))
        return {d: back(v, a_out) for d, v in got.items()}
    if k is CommKind.Gather:
        moved = {d: front(bufs[d], a_in) for d in senders}
        got = backend.gather(teams, moved, _spec(comm, a_in))
        return {d: back(v, a_in) for d, v in got.items()}
    if k is CommKind.Reduce:
        held = {d: bufs[d] for d in senders}
        return backend.reduce(teams, held, comm.op, _spec(comm, None))
    if k is CommKind.SendRecv:
        return send_pairs(backend, list(zip(in_mesh, out_mesh)), bufs, _spec(comm, None))
    raise ExecutionError(f"no implementation for communication kind {k.value}")


def _move(comm: Communication, backend: Communicator, bufs: Buffers) -> Buffers:
    """A move between meshes by its box transfers (plan.cross_mesh, runtime.moves)."""
    inp, out = comm.input, comm.output
    mi, mo, shape = inp.mesh, out.mesh, inp.shape
    kind = None if not comm.transfers else StepKind(comm.kind.value)
    move = Move(kind, (), comm.transfers, inp.dtype.itemsize)
    sources = holdings(shape, mi.shape, mi.devices, comm.before)
    destinations = needs(shape, mo.shape, mo.devices, comm.after)
    return run_move(move, sources, destinations, backend, bufs, inp.dtype.numpy, comm.op)


def send_pairs(
    backend: Communicator, pairs: Sequence[tuple[int, int]], bufs: Buffers, spec: BufferSpec
) -> Buffers:
    """Each (src, dst) pair: dst gets src's whole buffer (a device paired with itself keeps it)."""
    out = {d: bufs[s] for s, d in pairs if s == d and d in bufs}
    moving = [(s, d) for s, d in pairs if s != d]
    messages = [Message(s, d, spec) for s, d in moving]
    payloads = {i: bufs[s] for i, (s, _) in enumerate(moving) if s in bufs}
    for i, array in backend.exchange(messages, payloads).items():
        out[moving[i][1]] = array
    return out
