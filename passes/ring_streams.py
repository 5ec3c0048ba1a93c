"""lower-streams' ring part: a swizzled Stream axis as a loop of CollectivePermutes.

nvFuser's ring-based pipeline (`y.swizzle1d(0, DIDx); y.axis(0).parallelize(Stream)`;
the host-IR ring tests, test_collective_permute): step i computes, on the device of
DIDx index t, chunk (i + t) mod D of y, from the block of x that device holds at that
step. Where the flat program gathers x (sharded over DIDx along the axis) and a kernel
computes y from it, the loop is

    FOR i in range(D) {
    SetCurrentStream to Stream i + 1
    Synchronize Stream 0
    ShardByStream Yr = Y axis 0 chunk (i + DIDx) % D of D    Yr: y's ring chunk, written
    PostOnStream Communication CollectivePermute (..., shift=i, input=X, output=Xr, ...)
    Wait Communication Xr                  block t of Xr: block (t + i) mod D of X
    PostOnStream %kernel: Yr = matmul(Xr, W)     on the block each device holds
    } // FOR i

(fuserlite.schedule.ring: a ring chunk is the whole, its axis over DIDx, block t the
chunk of device t). Step i's permute sends each device's own block to device t - i and
receives block t + i (step 0 moves nothing), on the team's communication stream, while
step i - 1's matmul computes. Where the gathered tensor is y itself (`y = set(x)`,
nvFuser's CollectivePermute test) the loop is the permutes alone. A tensor the kernel
reads whole (w) is read whole; a replicated one it reads cut is a view of its chunk.
"""

from __future__ import annotations

from fuserlite.ir.errors import LoweringError
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import logical_placement
from fuserlite.ir.streams import Chunking
from fuserlite.ir.tensor import TensorView
from fuserlite.program import host
from fuserlite.program.communication import CommKind, Communication
from fuserlite.program.program import Kernel, Program
from fuserlite.schedule.ring import ring_chunk_of, ring_placement
from fuserlite.schedule.streams import (
    ChunkMapping,
    chunk_problem,
    chunking_through,
    data_index,
)

INDEX = "i"


def _fail(target: TensorView, why: str) -> LoweringError:
    return LoweringError(f"Stream (ring): {target.name} cannot be computed by a ring: {why}")


def _gathers(step, t: TensorView, c: Chunking) -> bool:
    """`step` is an Allgather onto `t` of a tensor whose axis `c.axis` each device of
    the swizzle holds one block of: the communication a ring of permutes replaces."""
    if not isinstance(step, Communication) or step.kind is not CommKind.Allgather:
        return False
    inp = step.input
    return ring_placement(inp, c) == _own(inp) and step.output is t


def _own(t: TensorView) -> Placement:
    return logical_placement(t)


def ring_loop(
    program: Program, steps: list, target: TensorView, c: Chunking, renamed: dict
) -> tuple[list, set[int], int]:
    """The loop of the ring pipeline computing `target` (module doc), the positions in
    `steps` of the steps it takes in, and the last of them; `renamed` gains each
    tensor's ring chunk."""
    why = ring_placement(target, c)
    if isinstance(why, str):
        raise _fail(target, why)
    writer = {id(t): k for k, s in enumerate(steps) for t in s.outputs}
    k = writer[id(target)]
    producer = steps[k]
    cut: dict[int, tuple[TensorView, Chunking]] = {id(target): (target, c)}
    members = {k}
    permutes: list[Communication] = []
    if isinstance(producer, Communication):
        if not _gathers(producer, target, c):
            raise _fail(
                target,
                f"it is made by {producer.kind.value}; a ring replaces an Allgather of a "
                f"tensor each device of {c.swizzle.name} holds one block of (along axis "
                f"{c.axis}) by one CollectivePermute a step",
            )
        permutes.append(producer)
    else:
        for t in producer.outputs:
            if id(t) not in cut and t is not target:
                cut[id(t)] = None  # filled below, or refused
        for e in reversed(producer.exprs):
            outs = [t for t in e.outputs if id(t) in cut and cut[id(t)] is not None]
            if not outs:
                continue
            problem = chunk_problem(e)
            if problem is not None:
                raise _fail(target, problem)
            out, oc = cut[id(outs[0])]
            for pos, operand in enumerate(e.inputs):
                ci = chunking_through(e, pos, out, oc)
                if ci is None:
                    continue
                ci = Chunking(ci.axis, ci.chunks, 1, c.swizzle)
                if id(operand) in cut and cut[id(operand)] not in (None, (operand, ci)):
                    raise _fail(target, f"{operand.name} is cut along two axes")
                cut[id(operand)] = (operand, ci)
        missing = [t for t in producer.outputs if cut.get(id(t)) is None]
        if missing:
            raise _fail(target, f"its kernel computes {missing[0].name} whole beside it")
        for t in producer.inputs:
            entry = cut.get(id(t))
            if entry is None:
                continue
            q = writer.get(id(t))
            readers = [s for s in steps if t in s.inputs]
            if q is not None and _gathers(steps[q], t, entry[1]) and readers == [producer]:
                members.add(q)
                permutes.append(steps[q])
            else:
                why = ring_placement(t, entry[1])
                if isinstance(why, str):
                    raise _fail(target, why)
                if why != _own(t) and any(a for a in _own(t).shards[entry[1].axis]):
                    raise _fail(target, f"{t.name} is sharded along the ring's axis")
    chunks: dict[int, TensorView] = {}
    for key, (t, tc) in cut.items():
        chunks[key] = ring_chunk_of(t, tc)
    mapping = ChunkMapping(chunks)
    body: list = [
        host.SetCurrentStream(host.StreamIndex(1, INDEX)),
        host.Synchronize(host.StreamIndex(host.MAIN_STREAM)),
    ]
    inside = {id(t) for s in [producer, *permutes] for t in (*s.inputs, *s.outputs)}
    written = {id(t) for t in producer.outputs}
    gathered = {id(p.output) for p in permutes}
    outputs = {id(t) for t in program.outputs}
    after = {id(t) for j, s in enumerate(steps) if j > max(members) for t in s.inputs}
    for key, (t, tc) in cut.items():
        if key not in inside or (key in gathered and key not in written):
            continue  # a permute's output, read inside only
        if key in written and key not in after and key not in outputs:
            continue
        body.append(host.ShardByStream(t, chunks[key], tc, INDEX))
    for p in permutes:
        out = chunks[id(p.output)]
        comm = Communication(
            CommKind.CollectivePermute,
            out,
            p.input,
            p.team,
            in_axis=data_index(p.input, c.axis),
            mesh=p.mesh,
            group=p.group,
            before=p.before,
            after=p.before,
            axes=(data_index(p.input, c.axis),),
            layout=p.layout,
            shift=INDEX,
        )
        comm.bytes_per_device = comm.at_shift(1).bytes_per_device
        post = host.PostOnStream(comm)
        body += [post, host.Wait(post)]
    if isinstance(producer, Kernel):
        body.append(
            host.PostOnStream(
                Kernel(
                    exprs=[e.copy_between(mapping) for e in producer.exprs],
                    inputs=[mapping[t] for t in producer.inputs],
                    outputs=[mapping[t] for t in producer.outputs],
                    mesh=producer.mesh,
                    notes=[
                        *producer.notes,
                        f"lower-streams: ring step {INDEX} of {c.chunks}: chunk "
                        f"{c.index_text(INDEX)}, run op by op",
                    ],
                )
            )
        )
    renamed.update(chunks)
    tail = [host.SetCurrentStream(host.StreamIndex(host.MAIN_STREAM))]
    tail += [host.Synchronize(host.StreamIndex(s + 1)) for s in range(c.chunks)]
    return [host.ForLoop(INDEX, c.chunks, body), *tail], members, max(members)
