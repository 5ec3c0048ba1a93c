"""How each Communication of a program runs on a Communicator, on meshes of any rank.

A same-mesh kind is a planner step (`runtime.redistribute`) over the teams of its
group of mesh axes: the step the lowering recorded (group, axes), or for a 1-D
Communication without one the one step of its kind between its tensors'
placements (`ir.sharding.placement`); either way checked against them. A move
between meshes runs as point-to-point transfers of boxes (`runtime.moves`): those
the lowering recorded, or plan.cross_mesh's plan between the placements (a
SendRecv of the 1-D table); a Broadcast, Scatter, Gather or Reduce of the 1-D
table runs as that collective over its one team. MPI makes the teams of every
Communication once, in prepare() (`teams_of`).
"""

from __future__ import annotations

import numpy as np

from fuserlite.ir.errors import ExecutionError, FuserliteError
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import local_shape, placement
from fuserlite.ir.values import fact
from fuserlite.plan.blocks import Box
from fuserlite.plan.cross_mesh import Holding, Move, holdings, needs, plan_move
from fuserlite.plan.steps import ONE_MESH_KINDS, Step, StepKind, moves
from fuserlite.program.communication import (
    CommKind,
    Communication,
    Sizing,
    as_reduced,
    input_placement,
    permuted,
    reduces_problem,
)
from fuserlite.program.partials import recorded_step
from fuserlite.program.shards import device_box, device_shape
from fuserlite.runtime.communicator import (
    Buffers,
    BufferSpec,
    Communicator,
    Operation,
    Posted,
    Team,
    back,
    front,
    pad_rows,
    unpad,
)
from fuserlite.runtime.moves import move_operation
from fuserlite.runtime.redistribute import Chunks, mesh_teams, step_operation

# Kinds that run on one mesh: the planner's steps (fuserlite.runtime.redistribute)
ONE_MESH = ONE_MESH_KINDS


def step_of(comm: Communication) -> Step:
    """The planner step a same-mesh Communication performs: the one its lowering recorded
    (group, axes), else the one step of its kind between its tensors' placements; either
    way it must take its input's placement to its output's."""
    inp, out = comm.input, comm.output
    if inp.mesh != out.mesh:
        raise ExecutionError(
            f"{comm.kind.value} {inp.name} -> {out.name} runs on one mesh, but {inp.name} is "
            f"on {inp.mesh} and {out.name} on {out.mesh}"
        )
    kind, before, after = comm.kind, collective_placement(comm), placement(out)
    step = recorded_step(comm)
    if step is None:
        return _step(before, after, kind, inp, out)
    if step.apply(before) != after:
        raise ExecutionError(
            f"{step.describe(inp.mesh.rank)} of {inp.name} -> {out.name} does not take "
            f"{before} to {after}: the Communication contradicts its tensors"
        )
    return step


def collective_placement(comm: Communication) -> Placement:
    """The placement of comm's input as its collective reads it (the axes it reduces
    itself partial: program.communication.input_placement), checked: a device holding
    more than one row of such an axis is an ExecutionError, not a wrong sum."""
    why = reduces_problem(comm.input, comm.reduces)
    if why is not None:
        raise ExecutionError(f"{comm.kind.value} {comm.input.name} -> {comm.output.name} {why}")
    return input_placement(comm.input, comm.reduces)


def collective_buffers(comm: Communication, bufs: Buffers) -> Buffers:
    """Each device's buffer of comm's input as its collective reads it: the one row of
    each axis it reduces itself dropped (a view: as the partial values a kernel would
    have copied)."""
    if comm.reduces is None:
        return bufs
    return {d: a.reshape(as_reduced(comm.input, comm.reduces, a.shape)) for d, a in bufs.items()}


def _step(before: Placement, after: Placement, kind: StepKind, inp, out) -> Step:
    found = _steps_between(before, after, kind)
    if len(found) != 1:
        raise ExecutionError(
            f"{kind.value} {inp.name} -> {out.name}: {len(found) or 'no'} {kind.value} steps "
            f"take {before} to {after} on {inp.mesh}; a Communication is one step"
        )
    return found[0]


@fact
def _steps_between(before: Placement, after: Placement, kind: StepKind) -> tuple[Step, ...]:
    return tuple(s for s in moves(before) if s.kind is kind and s.apply(before) == after)


def move_of(comm: Communication) -> tuple[Move, list[Holding], list[tuple[int, Box]]]:
    """The move between meshes (or block permutation) a Communication performs, with the
    sources' and the destinations' boxes (from its tensors' placements, and a
    CollectivePermute's sources): the transfers its lowering recorded (and printed), else
    plan.cross_mesh's plan between the placements (plan.permute's for its sources)."""
    inp, out = comm.input, comm.output
    before, after = collective_placement(comm), placement(out)
    for recorded, actual, tv in ((comm.before, before, inp), (comm.after, after, out)):
        if recorded is not None and recorded != actual:
            raise ExecutionError(
                f"{comm.kind.value} {inp.name} -> {out.name} records {tv.name} as {recorded}, "
                f"but {tv.name} is {actual}: the Communication contradicts its tensors"
            )
    if comm.kind is CommKind.CollectivePermute:
        if comm.sources is None or inp.mesh != out.mesh or before != after:
            raise ExecutionError(
                f"CollectivePermute {inp.name} -> {out.name} permutes the blocks of one "
                f"placement on one mesh, by its sources; {inp.name} is {before} on {inp.mesh}, "
                f"{out.name} {after} on {out.mesh}, sources {comm.sources}"
            )
        move, sources, destinations = _permute(inp, comm.in_axis or 0, comm.sources)
    else:
        shape = as_reduced(inp, comm.reduces, inp.shape)
        move, sources, destinations = _move(
            shape, inp.mesh, before, out.mesh, after, inp.dtype.itemsize
        )
    if comm.transfers is not None:
        move = Move(move.kind, move.roots, comm.transfers, move.itemsize)
    return move, sources, destinations


@fact
def _move(shape, src_mesh, src: Placement, dst_mesh, dst: Placement, itemsize: int):
    sources = holdings(shape, src_mesh.shape, src_mesh.devices, src)
    destinations = needs(shape, dst_mesh.shape, dst_mesh.devices, dst)
    return plan_move(sources, destinations, itemsize), sources, destinations


def _permute(inp, axis: int, sources: tuple[int, ...]):
    """plan.permute's move for a CollectivePermute, its errors the executor's."""
    try:
        return permuted(inp, axis, sources)
    except FuserliteError as exc:
        raise ExecutionError(f"CollectivePermute of {inp.name}: {exc}") from None


def _rooted_collective(comm: Communication) -> bool:
    """A Broadcast, Scatter, Gather or Reduce of the 1-D table (no transfers recorded)
    runs as that collective over one team; every other move between meshes runs as its
    point-to-point transfers."""
    one_d = comm.input.mesh.rank == comm.output.mesh.rank == 1
    return comm.kind.has_root and comm.root is not None and comm.transfers is None and one_d


def teams_of(comm: Communication) -> tuple[Team, ...]:
    """The teams a Communication's collective runs over (none for a local slice or the
    point-to-point transfers of a move)."""
    k = comm.kind
    if k in ONE_MESH:
        step = step_of(comm)
        return mesh_teams(comm.input.mesh, step.group) if k.is_collective else ()
    if not _rooted_collective(comm):
        return ()
    if k in (CommKind.Broadcast, CommKind.Scatter):
        return (Team(comm.output.mesh.devices, comm.root),)
    return (Team(comm.input.mesh.devices, comm.root),)


def _spec(comm: Communication, axis: int | None) -> BufferSpec:
    """A sender's buffer as the backend sees it (sharded axis `axis` moved to the front),
    as every device allocates it: ceil(n/d) rows of an uneven axis."""
    shape = as_reduced(comm.input, comm.reduces, local_shape(comm.input))
    if axis is not None:
        shape = (shape[axis], *shape[:axis], *shape[axis + 1 :])
    return BufferSpec(tuple(shape), comm.input.dtype.numpy)


def _check_buffers(comm: Communication, bufs: Buffers, devices) -> None:
    for d in devices:
        if d not in bufs:
            raise ExecutionError(
                f"{comm.kind.value} of {comm.input.name}: device {d} has no buffer"
            )
        want = device_shape(comm.input, d)
        if bufs[d].shape != want:
            raise ExecutionError(
                f"{comm.kind.value} {comm.input.name} -> {comm.output.name}: device {d} holds a "
                f"buffer of shape {list(bufs[d].shape)}, expected {list(want)}"
            )


def chunks_of(comm: Communication) -> Chunks:
    """A same-mesh Communication's chunks: every device's box before and after it, and
    whether uneven ones move padded or variable-size (None: they are equal)."""
    devices = comm.input.mesh.devices
    inp, reduces = comm.input, comm.reduces
    return Chunks(
        {d: as_reduced(inp, reduces, device_box(inp, d)) for d in devices},
        {d: device_box(comm.output, d) for d in devices},
        None if comm.sizing is Sizing.even else comm.sizing is Sizing.padded,
    )


def _strided_allgather(comm: Communication, backend: Communicator, bufs: Buffers) -> Operation:
    """A cyclic shard (device r: rows r, r + d, ... of axis t; in blocks of b, rows
    (k d + r) b + j) gathered whole: the padded Allgather of every member's ceil(n/d)
    rows, in member order, then interleaved (row k b + j of member r is row
    (k d + r) b + j) and the padding dropped."""
    before, after = placement(comm.input), placement(comm.output)
    t = before.cyclic_axis()
    group = before.shards[t][-1:]
    if after != before.gathered():
        raise ExecutionError(
            f"Allgather {comm.input.name} -> {comm.output.name}: a cyclic shard {before} "
            f"gathers only to {before.gathered()}, not {after}"
        )
    mesh = comm.input.mesh
    d, b = mesh.shape[group[0]], before.block_of(group[0])
    n = local_shape(comm.output)[t]
    rows = -(-n // d)
    hosted = backend.hosted(mesh.devices)
    moved = {dev: pad_rows(front(bufs[dev], t), rows) for dev in hosted}
    got = yield from backend.iallgather(mesh_teams(mesh, group), moved)
    out = {}
    for dev, v in got.items():
        rest = v.shape[1:]
        whole = v.reshape(d, rows // b, b, *rest).swapaxes(0, 1).reshape(d * rows, *rest)[:n]
        out[dev] = back(np.ascontiguousarray(whole), t)
    return out


def run_communication(comm: Communication, backend: Communicator, bufs: Buffers) -> Buffers:
    """Execute one Communication; returns the output shards of hosted output devices.

    On an axis its mesh does not divide, a `padded` one pads every chunk to ceil(n/d)
    rows and trims what it receives; a `variable` one hands the backend each chunk's
    rows (docs/design.md §5); a move between meshes sends each device's own box.
    Partial sums of a half tensor travel and are combined in float32 (insert-reshardings'
    partial_dtype); the complete value is rounded to its tensor's dtype once, here."""
    return backend.run(communication_operation(comm, backend, bufs))


def post_communication(comm: Communication, backend: Communicator, bufs: Buffers) -> Posted:
    """Start one Communication: its non-blocking calls are posted, `backend.wait(handle)`
    completes it and returns what run_communication returns."""
    return backend.post(communication_operation(comm, backend, bufs))


def communication_operation(comm: Communication, backend: Communicator, bufs: Buffers) -> Operation:
    """`run_communication` as an Operation (communicator's docstring)."""
    got = yield from _run(comm, backend, bufs)
    dtype = comm.output.dtype.numpy
    if comm.input.dtype is comm.output.dtype:
        return got
    with np.errstate(over="ignore"):  # beyond float16's range: inf, as any store of it
        return {d: a.astype(dtype) for d, a in got.items()}


def _run(comm: Communication, backend: Communicator, bufs: Buffers) -> Operation:
    k = comm.kind
    senders = backend.hosted(comm.input.mesh.devices)
    _check_buffers(comm, bufs, senders)
    bufs = collective_buffers(comm, bufs)
    if k is CommKind.Allgather and placement(comm.input).cyclic:
        return (yield from _strided_allgather(comm, backend, bufs))
    if k in ONE_MESH:
        step = step_of(comm)
        return (
            yield from step_operation(
                step, comm.input.mesh, backend, bufs, comm.op, chunks_of(comm)
            )
        )
    if not _rooted_collective(comm):
        move, sources, destinations = move_of(comm)
        dtype = comm.input.dtype.numpy
        return (
            yield from move_operation(move, sources, destinations, backend, bufs, dtype, comm.op)
        )
    teams, a_in, a_out = teams_of(comm), comm.in_axis, comm.out_axis
    if k is CommKind.Broadcast:
        return (
            yield from backend.ibroadcast(teams, {d: bufs[d] for d in senders}, _spec(comm, None))
        )
    if k is CommKind.Scatter:
        moved = {d: front(bufs[d], a_out) for d in senders}
        return (yield from _scatter(comm, backend, teams, moved))
    if k is CommKind.Gather:
        moved = {d: front(bufs[d], a_in) for d in senders}
        return (yield from _gather(comm, backend, teams, moved))
    if k is CommKind.Reduce:
        held = {d: bufs[d] for d in senders}
        return (yield from backend.ireduce(teams, held, comm.op, _spec(comm, None)))
    raise ExecutionError(f"no implementation for communication kind {k.value}")


def _scatter(comm: Communication, backend: Communicator, teams, moved: Buffers) -> Operation:
    """The root's buffer (sharded axis in front) in one chunk per receiver."""
    a_out, out_mesh = comm.out_axis, comm.output.mesh.devices
    spec = _spec(comm, a_out)
    rows = {d: device_shape(comm.output, d)[a_out] for d in out_mesh}
    if comm.sizing is Sizing.padded:  # chunks of the largest size, the padding dropped
        size = max(rows.values())
        moved = {d: pad_rows(v, size * len(out_mesh)) for d, v in moved.items()}
        spec = BufferSpec((size * len(out_mesh), *spec.shape[1:]), spec.dtype)
        got = yield from backend.iscatter(teams, moved, spec)
        got = {d: v[: rows[d]] for d, v in got.items()}
    else:
        got = yield from backend.iscatter(
            teams, moved, spec, rows if comm.sizing is Sizing.variable else None
        )
    return {d: back(v, a_out) for d, v in got.items()}


def _gather(comm: Communication, backend: Communicator, teams, moved: Buffers) -> Operation:
    """Every sender's chunk (sharded axis in front), joined at the root."""
    a_in, in_mesh = comm.in_axis, comm.input.mesh.devices
    spec = _spec(comm, a_in)  # ceil(n/d) rows: what the largest chunk holds
    rows = {d: device_shape(comm.input, d)[a_in] for d in in_mesh}
    if comm.sizing is Sizing.padded:
        moved = {d: pad_rows(v, spec.shape[0]) for d, v in moved.items()}
        got = yield from backend.igather(teams, moved, spec)
        got = {d: unpad(v, spec.shape[0], [rows[m] for m in in_mesh]) for d, v in got.items()}
    else:
        got = yield from backend.igather(
            teams, moved, spec, rows if comm.sizing is Sizing.variable else None
        )
    return {d: back(v, a_in) for d, v in got.items()}
