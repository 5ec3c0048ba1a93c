"""A host loop's chunk views as the executor runs them (program.host.ChunkView).

`ShardByStream C = W axis a chunk i of S [of B blocks]` makes C the i-th of S chunks
of W along its data axis a (fuserlite.ir.streams): on each device, the local part of
that axis is B/d blocks (d: the devices sharding it) of equal rows, and the chunk is
the i-th 1/S of every block. A read view is a numpy view of W's local array; a written
one is stored into W's local array (allocated at the first chunk) after the loop's
steps of chunk i computed C. A ring's view (`chunk (i + DIDx) % D of D`) takes, on the
device of DIDx index t, chunk (i + t) mod D: C is a ring chunk (fuserlite.schedule.ring),
whose local block is that chunk.

`pipelined` orders the unrolled steps for overlap: each Communication is a Post
and an Await, chunk i+1's posted before chunk i's kernels (docs/time.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.tensor import TensorView
from fuserlite.program.communication import Communication
from fuserlite.program.host import MAIN_STREAM, ChunkView, StreamEvent
from fuserlite.program.program import Kernel
from fuserlite.program.shards import device_shape
from fuserlite.schedule.streams import data_index, device_count


def _rows(whole: TensorView, view: ChunkView, shape: tuple[int, ...]) -> tuple[int, tuple]:
    """(data axis, index) of chunk `view.number` in a local array of `shape`."""
    c = view.view.chunking
    axis = data_index(whole, c.axis)
    local_blocks = c.blocks // device_count(whole, c.axis)
    return axis, (local_blocks, c.chunks, shape[axis] // (local_blocks * c.chunks))


def _chunk(array: np.ndarray, axis: int, split: tuple, i: int) -> np.ndarray:
    """Chunk i of `array` along `axis`, cut as `split` (blocks, chunks, rows): a view
    where the blocks are one, else a copy."""
    blocks, chunks, rows = split
    if blocks == 1:
        index = [slice(None)] * array.ndim
        index[axis] = slice(i * rows, (i + 1) * rows)
        return array[tuple(index)]
    shape = array.shape
    cut = array.reshape(shape[:axis] + (blocks, chunks, rows) + shape[axis + 1 :])
    part = np.take(cut, i, axis=axis + 1)
    return part.reshape(shape[:axis] + (blocks * rows,) + shape[axis + 1 :])


def run_view(view: ChunkView, values: dict[int, dict[TensorView, np.ndarray]]) -> None:
    """Make or store the chunk of `view` on every hosted device that holds its tensors."""
    whole, chunk = view.view.whole, view.view.chunk
    for d, local in values.items():
        i = view.number_on(d)  # a ring's chunk is the device's own (i + index) mod D
        if not view.writes:
            if whole not in local:
                continue
            axis, split = _rows(whole, view, local[whole].shape)
            local[chunk] = _chunk(local[whole], axis, split, i)
            continue
        if chunk not in local:
            if whole.mesh is None or d in whole.mesh.devices:  # never a whole missing a chunk
                raise ExecutionError(
                    f"device {d}: chunk {i} of {whole.name} ({chunk.name}) was not computed"
                )
            continue
        part = local[chunk]
        if whole not in local:
            local[whole] = np.empty(device_shape(whole, d), part.dtype)
        target = local[whole]
        axis, split = _rows(whole, view, target.shape)
        blocks, chunks, rows = split
        if part.shape[axis] != blocks * rows:
            raise ExecutionError(
                f"device {d}: chunk {i} of {whole.name} has {part.shape[axis]} rows, not "
                f"{blocks * rows}"
            )
        shape = target.shape
        cut = target.reshape(shape[:axis] + (blocks, chunks, rows) + shape[axis + 1 :])
        index = [slice(None)] * cut.ndim
        index[axis + 1] = i
        cut[tuple(index)] = part.reshape(shape[:axis] + (blocks, rows) + shape[axis + 1 :])


# -- overlap: posting communications ahead of the kernels they do not feed ---------------
@dataclass(eq=False)
class Post:
    """Start Communication `comm`, step `index` of the unrolled program (its inputs are
    read now: the backend posts its non-blocking calls)."""

    index: int
    comm: Communication

    @property
    def input(self) -> TensorView:
        return self.comm.input


@dataclass(eq=False)
class Await:
    """Complete the Communication posted as step `index`: its output is written now (and
    its input, which MPI may still read until then, lives until here)."""

    index: int
    comm: Communication

    @property
    def input(self) -> TensorView:
        return self.comm.input


def action_reads(step) -> list[TensorView]:
    """What a step of `pipelined`'s order reads (an Await: its input, kept alive)."""
    if isinstance(step, (Communication, Post, Await)):
        return [step.input]
    return list(step.inputs)


def action_writes(step) -> list[TensorView]:
    """What a step of `pipelined`'s order writes (a Post nothing: its Await does)."""
    if isinstance(step, Post):
        return []
    if isinstance(step, (Communication, Await)):
        return [step.comm.output if isinstance(step, Await) else step.output]
    return list(step.outputs)


def pipelined(steps: list) -> list:
    """The unrolled program's steps (`Program.executed()`) in the order the executor runs
    them, each Communication split into a Post and an Await: a software-pipelined loop.

    A Communication is posted at its place, or earlier: before each kernel, the next
    Communication (the first after it, if not posted yet) is posted with the chunk views
    it reads, where none of them depends on or clobbers the steps they pass (the kernel
    and the views between). It is awaited at its first reader (or writer) of its output,
    at the first chunk store into a buffer it reads (a store writes in place), or at
    the end. In a Stream loop `[view x_i, Allgather_i, matmul_i, store y_i]` that
    posts chunk i+1's Allgather before chunk i's matmul and waits for it after: chunk i
    computes while chunk i+1 moves. A Communication that reads its chunk's kernel
    (`[view x_i, matmul_i, ReduceScatter_i, store y_i]`) is posted after it, and the
    store that reads it waits until the next kernel (with its views) has run: chunk i+1
    computes while chunk i moves. Every step still reads the values it reads in the
    unrolled order (a tensor a loop reuses for each chunk included; a posted one holds
    its input buffers, and kernels write fresh arrays): the order changes, the values
    do not.

    A host program's Waits are points in time on their stream (its StreamEvents): a
    `Wait` on stream s completes the communication before the next step on s, and
    before the next step of a stream that synchronizes with s after it; no step is
    moved ahead of a Wait (or such a Synchronize) on its own stream. Steps of other
    streams still run while it is in flight."""
    n = len(steps)
    event = [isinstance(s, StreamEvent) for s in steps]
    reads = [set() if event[p] else set(action_reads(s)) for p, s in enumerate(steps)]
    writes = [set() if event[p] else set(action_writes(s)) for p, s in enumerate(steps)]
    comm = [isinstance(s, Communication) for s in steps]
    stream, waited = _streams(steps)
    done = [False] * n
    out: list = []
    outstanding: list[int] = []  # posted, not awaited, in post order
    pending: dict[int, set[int]] = {}  # per stream: posts its Waits say to complete next

    def place(p: int, action, read: set, written: set) -> None:
        # Await what this step reads or overwrites of communications before it, those
        # still reading a buffer it writes in place (a chunk store writes into its
        # whole's array; a kernel writes a fresh one, the posted one keeps the old), and
        # those its stream waits for.
        touched = read | written
        in_place = written if isinstance(steps[p], ChunkView) and steps[p].writes else set()
        due = pending.pop(stream[p], set())
        for j in [
            j
            for j in outstanding
            if j in due or (j < p and (writes[j] & touched or reads[j] & in_place))
        ]:
            out.append(Await(j, steps[j]))
            outstanding.remove(j)
        out.append(action)
        done[p] = True

    def post(p: int) -> None:
        place(p, Post(p, steps[p]), reads[p], set())
        outstanding.append(p)

    def note(p: int) -> None:
        """A Wait makes its post due on its stream; a Synchronize, what the other
        stream's Waits made due there."""
        e, s = steps[p], stream[p]
        if e.what == "wait" and waited[p] in outstanding:
            pending.setdefault(s, set()).add(waited[p])
        elif e.what == "sync" and e.stream in pending:
            pending.setdefault(s, set()).update(pending[e.stream])
        done[p] = True

    def held(k: int, p: int) -> bool:
        """Whether step k must stay after a Wait or Synchronize between p and it on its
        stream (a Synchronize only where the other stream has a Wait to pass on)."""
        for m in range(p + 1, k):
            if not event[m] or done[m] or stream[m] != stream[k]:
                continue
            e = steps[m]
            if e.what == "wait":
                return True
            if e.what == "sync" and (
                pending.get(e.stream)
                or any(event[w] and steps[w].what == "wait" for w in range(p, m))
            ):
                return True
        return False

    def prefix(p: int, q: int) -> list[int] | None:
        """Step q with the chunk views between p and q it reads, if they can all move
        before step p: none reads what a step they pass writes, or writes what it reads
        or writes (a Post's output is written at its Await), or waits on its stream
        for a step it passes. None where they cannot."""
        need, needed = [q], set(reads[q])
        for k in range(q - 1, p, -1):  # the steps between that q depends on
            if not done[k] and writes[k] & needed:
                if not isinstance(steps[k], ChunkView):
                    return None  # it reads a kernel's output: it cannot pass that kernel
                need.append(k)
                needed |= reads[k]
        need.reverse()
        passed = [b for b in range(p, q) if not done[b] and b not in need]
        for k in need:
            if held(k, p):
                return None
            w = set() if comm[k] else writes[k]
            for b in passed:
                if b < k and (reads[k] & writes[b] or w & (reads[b] | writes[b])):
                    return None
        return need

    def hoist(p: int) -> None:
        """Post the next Communication before kernel p, with the views it reads."""
        q = next((k for k in range(p + 1, n) if comm[k]), None)
        if q is None or done[q] or (need := prefix(p, q)) is None:
            return
        for k in need:
            if k == q:
                post(q)
            else:
                place(k, steps[k], reads[k], writes[k])

    def defer(p: int) -> None:
        """Before store p waits for a communication in flight, run the next kernel (with
        the views it reads) where it needs neither: chunk i+1's matmul computes while
        chunk i's ReduceScatter moves."""
        q = next((k for k in range(p + 1, n) if comm[k] or isinstance(steps[k], Kernel)), None)
        if q is None or done[q] or comm[q] or (need := prefix(p, q)) is None:
            return
        for k in need:
            place(k, steps[k], reads[k], writes[k])

    for p, step in enumerate(steps):
        if done[p]:
            continue
        if event[p]:
            note(p)
            continue
        if comm[p]:
            post(p)
            continue
        if isinstance(step, Kernel):
            hoist(p)
        elif isinstance(step, ChunkView) and any(writes[j] & reads[p] for j in outstanding):
            defer(p)
        place(p, step, reads[p], writes[p])
    out += [Await(j, steps[j]) for j in outstanding]
    return out


def _streams(steps: list) -> tuple[list[int], dict[int, int | None]]:
    """Each step's stream (the last `switch` before it; the main one at first), and for
    each `wait` the index of the latest step of its Communication before it."""
    stream, waited, latest = [], {}, {}
    current = MAIN_STREAM
    for p, s in enumerate(steps):
        if isinstance(s, StreamEvent):
            if s.what == "switch":
                current = s.stream
            elif s.what == "wait":
                waited[p] = latest.get(id(s.comm))
        elif isinstance(s, Communication):
            latest[id(s)] = p
        stream.append(current)
    return stream, waited
