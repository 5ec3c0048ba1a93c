"""lower-streams: each Stream-parallel tensor's steps as a host loop over its chunks.

nvFuser's stream lowering (host_ir/lower_to_communication, the stream-parallel
loops of MultiDeviceStreamParallelTypeTest and AGMatmulTest.CollectiveBasedPipeline).

Before: a flat lowered Program (lower-communications ran).
After: for each tensor a step writes with a Stream axis (fuserlite.ir.streams: chunk i
of S along one logical axis), that step and the steps before it whose outputs only it
(or another of them) reads, their chunking carried back through each op's axis map
(schedule.streams.chunking_through), become one loop (but not the kernels before a
communication that is not the last step: they run whole before the loop, so that
each chunk's communication can start while the chunk before it computes)

    FOR i in range(S) {
    SetCurrentStream to Stream i + 1
    Synchronize Stream 0                  what the main stream computed before is ready
    ShardByStream T9 = T3 axis 0 chunk i of S     a chunk read (or written) in place
    PostOnStream Communication ... / Wait Communication ...   on chunks
    PostOnStream %kernel ...              on chunks
    } // FOR i
    SetCurrentStream to Stream 0
    Synchronize Stream 1 ... Synchronize Stream S

so chunk i + 1's communication runs while chunk i's kernels compute. A tensor read
whole (a weight; an axis the chunked one does not map to) is read whole in every
chunk. A chunk's kernel is scheduled as its whole one is (its tensors are new: the
whole's caches are dropped and the pointwise scheduler, at the whole's block size, or
the reduction scheduler, with the whole's threads, schedules the copy), so it runs as
the whole runs, compiled where that is, with the whole's bits; where the copy cannot be
scheduled it runs op by op and its note says why. Refused, with the reason, where the
chunks are not independent: an op whose rows depend on other rows (chunk_problem), a communication
that moves the chunked axis, a kernel that computes something whole beside its chunks.

With `chunks=S` (`fuserlite timeline --streams S`) the pass first gives Stream axes
itself, to nvFuser's two overlap patterns, without editing the fusion:

    Allgather -> kernels, one with a matmul or linear  each reader's outputs that can
      (q, k and v's projections of one)                be cut along the gathered axis
    a kernel with a matmul or linear -> ReduceScatter  the ReduceScatter's output, cut
                                                       along the scattered axis

each cut into S chunks of every device's block (chunk i: the i-th 1/S of each block,
which is what an Allgather or ReduceScatter of chunks moves). A communication read
by several kernels goes into the loop with each reader that has Stream axes (each
chunk's communication once, then every reader's chunk); its other readers run after
the loop on the whole, which the loop writes through views. A pair whose axis S D
does not divide is left whole; where no pair can be cut (and the fusion has no
Stream axis of its own) the pass says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.errors import LoweringError, ScheduleError
from fuserlite.ir.expr import Expr
from fuserlite.ir.streams import Chunking, chunking, stream_position
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.registry import operand_to_output
from fuserlite.passes.base import Level, Pass, register
from fuserlite.passes.ring_streams import ring_loop
from fuserlite.passes.schedule_pointwise import KernelSnapshot
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES
from fuserlite.program import host
from fuserlite.program.communication import CommKind, Communication
from fuserlite.program.program import Kernel, Program, unlowered_steps
from fuserlite.program.reshardings import derive_reshardings, plan_intermediates, plans_latency
from fuserlite.schedule.pointwise import (
    frozen_inputs,
    pointwise_options,
    schedule_supported,
    uncached,
)
from fuserlite.schedule.reduction import reduction_expr, reduction_threads, schedule_reduction
from fuserlite.schedule.streams import (
    ChunkMapping,
    chunk_of,
    chunk_problem,
    chunking_problem,
    chunking_through,
    data_index,
    stream_parallelize,
)

INDEX = "i"  # the loop index of every streamed loop (they are never nested)


def _logical_index(tv: TensorView, data: int) -> int:
    return [i for i, ax in enumerate(tv.domain.logical) if not ax.is_reduction][data]


class _Group:
    """The steps of one Stream loop and the chunking of each tensor they cut."""

    def __init__(self, steps: list, target: TensorView, c: Chunking) -> None:
        self.steps = steps
        self.cut: dict[int, tuple[TensorView, Chunking]] = {}
        self.writer = {id(t): k for k, s in enumerate(steps) for t in s.outputs}
        self.readers: dict[int, list[int]] = {}
        for k, s in enumerate(steps):
            for t in s.inputs:
                self.readers.setdefault(id(t), []).append(k)
        self.members: set[int] = set()
        self._set(target, c, required=True)
        self.producer = self.writer[id(target)]
        self._add(self.producer, required=True)

    def _set(self, t: TensorView, c: Chunking, required: bool) -> bool:
        why = chunking_problem(t, c)
        old = self.cut.get(id(t))
        if old is not None and old[1] != c:
            why = f"it is cut as {old[1].text()} and as {c.text()}"
        if why is not None:
            if required:
                raise LoweringError(f"Stream: {t.name} cannot be cut into chunks: {why}")
            return False
        self.cut[id(t)] = (t, c)
        return True

    def _inputs_cut(self, step, required: bool) -> dict[int, tuple[TensorView, Chunking]] | None:
        """What cutting `step`'s outputs as self.cut says cuts its inputs to, or None
        (with `required`, a LoweringError) where it cannot compute chunks."""
        found: dict[int, tuple[TensorView, Chunking]] = {}

        def fail(why: str) -> None:
            if required:
                raise LoweringError(f"Stream: {why}")

        cut = dict(self.cut)
        if isinstance(step, Communication):
            out, inp = step.output, step.input
            if id(out) not in cut:
                fail(f"{out.name} is not cut into chunks")
                return None
            c = cut[id(out)][1]
            j = data_index(out, c.axis)
            moved = j in (step.in_axis, step.out_axis) or j in step.axes
            if step.mesh is None or (moved and c.blocks == 1):
                # Chunk i of rows [i n/S, (i+1) n/S) is on some devices only: no
                # collective of chunks makes it. Chunk i of every device's block is.
                fail(
                    f"the {step.kind.value} of {out.name} moves its axis {c.axis}, which "
                    "its chunks cut whole; cut each device's block instead (outer_split "
                    "the axis by the devices, then the inner part by the chunks, Stream "
                    "on that), or give the chunks an axis of their own (nvFuser's "
                    "[S, DIDx(D), M/(S D), K])"
                )
                return None
            found[id(inp)] = (inp, Chunking(_logical_index(inp, j), c.chunks, c.blocks))
            return found
        for t in step.outputs:
            if id(t) not in cut:
                fail(
                    f"a kernel computes {t.name} whole beside the chunks of {step.outputs[0].name}"
                )
                return None
        for e in reversed(step.exprs):
            outs = [t for t in e.outputs if id(t) in cut]
            if not outs:
                continue  # computed whole in every chunk (a cast of a weight)
            why = chunk_problem(e)
            if why is not None:
                fail(why)
                return None
            out, c = cut[id(outs[0])]
            for pos, operand in enumerate(e.inputs):
                ci = chunking_through(e, pos, out, c)
                if ci is None:
                    continue
                if id(operand) in cut and cut[id(operand)][1] != ci:
                    fail(
                        f"{operand.name} is cut as {cut[id(operand)][1].text()} and as {ci.text()}"
                    )
                    return None
                cut[id(operand)] = (operand, ci)
                found[id(operand)] = (operand, ci)
        return found

    def _add(self, k: int, required: bool) -> None:
        found = self._inputs_cut(self.steps[k], required)
        if found is None:
            return
        for t, c in found.values():
            if not self._set(t, c, required):
                return
        self.members.add(k)
        if isinstance(self.steps[k], Communication) and k != self.producer:
            # Compute before a communication whose output the loop computes on stays
            # out (made whole before the loop): inside, chunk i + 1's kernels would
            # queue behind chunk i's and its communication could not start early.
            return
        for t, _ in found.values():
            q = self.writer.get(id(t))
            if q is None or q in self.members or q >= k:
                continue
            if isinstance(self.steps[q], Communication):
                self._take_siblings(t)
                if q not in self.members:
                    self._try(q)  # its readers outside the loop read the whole after it
            elif all(r in self.members for r in self.readers.get(id(t), [])):
                self._try(q)

    def _take_siblings(self, t: TensorView) -> None:
        """Take in each other reader of `t` (a communication's output) whose outputs all
        have Stream axes (q, k and v's projections of one Allgather): one loop computes
        every reader's chunk after each chunk's communication."""
        for r in self.readers.get(id(t), []):
            step = self.steps[r]
            if r in self.members or not isinstance(step, Kernel):
                continue
            cuts = [chunking(o.domain) for o in step.outputs]
            if None in cuts:
                continue  # computed from the whole after the loop
            saved = dict(self.cut)
            if all(self._set(o, c, required=False) for o, c in zip(step.outputs, cuts)):
                self._try(r)
            if r not in self.members:
                self.cut = saved

    def _try(self, q: int) -> None:
        """Take step q into the loop if it can compute chunks; else it computes its
        output whole before the loop, which reads chunks of it."""
        saved = dict(self.cut)
        try:
            self._add(q, required=False)
        except LoweringError:
            self.cut = saved
        if q not in self.members:
            self.cut = saved


def _stream_target(steps: list) -> tuple[int, TensorView, Chunking] | None:
    for k, s in enumerate(steps):
        if not isinstance(s, (Kernel, Communication)):
            continue
        for t in s.outputs:
            c = chunking(t.domain)
            if c is not None:
                return k, t, c
    return None


def _loop(program: Program, group: _Group, renamed: dict[int, TensorView]) -> tuple[list, int]:
    """The loop over `group`'s chunks and the steps after it; the position it takes.
    `renamed` gains each tensor's chunk (by the id of the tensor)."""
    members = sorted(group.members)
    written = {id(t) for k in members for t in group.steps[k].outputs}
    read = {id(t) for k in members for t in group.steps[k].inputs}
    inside = {id(t) for k in members for t in _tensors(group.steps[k])}
    after = {id(t) for k, s in enumerate(group.steps) if k not in group.members for t in s.inputs}
    outputs = {id(t) for t in program.outputs}
    chunks: dict[int, TensorView] = {}
    views = []
    for key, (t, c) in group.cut.items():
        if key not in inside:
            continue
        chunks[key] = chunk_of(t, c)
        if key not in written and key not in read:
            continue  # inside a kernel
        outside = key not in written or key in after or key in outputs
        if outside:
            views.append(host.ShardByStream(t, chunks[key], c, INDEX))
    body: list = [
        host.SetCurrentStream(host.StreamIndex(1, INDEX)),
        host.Synchronize(host.StreamIndex(host.MAIN_STREAM)),
        *views,
    ]
    c = group.cut[id(group.steps[group.producer].outputs[0])][1]
    for k in members:
        s = group.steps[k]
        mapping = ChunkMapping(chunks)
        if isinstance(s, Communication):
            comm = s.copy_between(mapping)
            comm.bytes_per_device = s.bytes_per_device // c.chunks
            post = host.PostOnStream(comm)
            body += [post, host.Wait(post)]
            continue
        kernel = Kernel(
            exprs=[e.copy_between(mapping) for e in s.exprs],
            inputs=[mapping[t] for t in s.inputs],
            outputs=[mapping[t] for t in s.outputs],
            mesh=s.mesh,
            notes=list(s.notes),
        )
        if s.scheduled:
            _schedule_like(kernel, s, c.chunks)
        body.append(host.PostOnStream(kernel))
    renamed.update(chunks)
    tail = [host.SetCurrentStream(host.StreamIndex(host.MAIN_STREAM))]
    tail += [host.Synchronize(host.StreamIndex(s + 1)) for s in range(c.chunks)]
    return [host.ForLoop(INDEX, c.chunks, body), *tail], members[-1]


def _schedule_like(chunk: Kernel, whole: Kernel, chunks: int) -> None:
    """Schedule a chunk's kernel as its whole one is (the reduction scheduler with the
    whole's threads, else the pointwise one with its block size), so that it runs as
    the whole does (compiled, where the whole is) with the whole's bits; where that
    cannot be done, it runs op by op and says so."""
    threads = reduction_threads(whole.reference) if whole.reference is not None else None
    snapshot = KernelSnapshot(chunk)
    try:
        if reduction_expr(whole) is not None and threads is not None:
            schedule_reduction(chunk, threads)
        else:
            block, vectorize = pointwise_options(whole.reference)
            # A chunk read through a view keeps its schedule where its whole does.
            kept = frozen_inputs(whole)
            frozen = {id(c) for c, t in zip(chunk.inputs, whole.inputs) if id(t) in kept}
            uncached(chunk)  # the whole's caches, copied: the scheduler makes the chunk's
            schedule_supported(chunk, block, vectorize, frozen)
    except ScheduleError as exc:
        snapshot.restore()
        chunk.scheduled, chunk.reference = False, None
        chunk.notes.append(f"lower-streams: chunk {INDEX} of {chunks}, run op by op: {exc}")


def _around(steps: list, members: set[int]) -> tuple[list, list]:
    """The steps among `steps` not in the loop: those that read nothing the loop writes
    (run before it) and those that do (after it, reading the whole: the readers of an
    Allgather that cannot compute chunks), each in program order. A LoweringError where
    a step of the loop reads one that must run after it."""
    written: set[int] = set()  # tensors the loop writes
    late: dict[int, TensorView] = {}  # tensors computed after the loop, from what it writes
    after = []
    for k, s in enumerate(steps):
        reads = [t for t in s.inputs if id(t) in written or id(t) in late]
        if k in members:
            for t in reads:
                if id(t) in late:
                    raise LoweringError(
                        f"Stream: a chunk of the loop reads {t.name}, which is computed "
                        "from the loop's whole outputs after it; give it no Stream axis"
                    )
            written |= {id(t) for t in s.outputs}
        elif reads:
            after.append(k)
            late |= {id(t): t for t in s.outputs}
    before = [s for k, s in enumerate(steps) if k not in members and k not in after]
    return before, [steps[k] for k in after]


def _tensors(step: Kernel | Communication) -> list[TensorView]:
    return step.tensors if isinstance(step, Kernel) else [step.input, step.output]


def lower_streams(program: Program) -> None:
    """Every Stream-parallel tensor's steps as a loop over its chunks (module doc)."""
    flat = [s for s in program.steps if not host.is_host_node(s)]
    found = _stream_target(flat)
    if found is None:
        return
    if len(flat) != len(program.steps):
        raise LoweringError("Stream: lower-streams takes a flat program (no host steps yet)")
    latency = plans_latency(program) or DEFAULT_LATENCY_BYTES
    marks = plan_intermediates(program)
    steps: list = list(program.steps)
    done: list = []
    renamed: dict[int, TensorView] = {}
    while (found := _stream_target(steps)) is not None:
        k, target, c = found
        if c.swizzle is not None:  # the ring pipeline (passes/ring_streams.py)
            loop, members, last = ring_loop(program, steps, target, c, renamed)
        else:
            group = _Group(steps, target, c)
            loop, last = _loop(program, group, renamed)
            members = group.members
        before, after = _around(steps[: last + 1], members)
        done += before + loop
        steps = after + steps[last + 1 :]
    program.steps = done + steps
    # fl.explain's records: of the chunks' communications where a loop runs them (each
    # chunk's plan is the whole's on a chunk), as the printed program reads them back.
    marked = {}
    for key, r in marks.items():
        ends = (renamed.get(id(r.source), r.source), renamed.get(id(r.target), r.target))
        new = renamed.get(key)
        marked[key if new is None else id(new)] = (ends[0].ir_name, ends[1].ir_name)
    program.reshardings = derive_reshardings(program, latency, marked)


_CONTRACTIONS = ("matmul", "linear")


def _contracts(kernel: Kernel) -> bool:
    return any(e.op_name in _CONTRACTIONS for e in kernel.exprs)


def _forward(kernel: Kernel, source: TensorView, c: Chunking) -> dict[int, Chunking] | None:
    """The chunking of each output of `kernel` that cutting its input `source` as `c`
    gives, carried forward through the axis maps; None where an output is not cut."""
    cut: dict[int, Chunking] = {id(source): c}
    for e in kernel.exprs:
        for out in e.outputs:
            found = _mapped(e, out, cut)
            if found is not None:
                cut[id(out)] = found
    outs = {id(t): cut.get(id(t)) for t in kernel.outputs}
    return None if None in outs.values() else outs


def _mapped(e: Expr, out: TensorView, cut: dict[int, Chunking]) -> Chunking | None:
    for pos, operand in enumerate(e.inputs):
        ci = cut.get(id(operand))
        if ci is None:
            continue
        target = operand_to_output(e, pos, out).get(ci.axis)
        if target is not None:
            return Chunking(target, ci.chunks, ci.blocks)
    return None


def _gathered(comm: Communication, t: TensorView, chunks: int) -> Chunking:
    axis = comm.in_axis if comm.in_axis is not None else comm.out_axis
    return Chunking(_logical_index(t, axis), chunks, len(comm.team))


def _args(e: Expr) -> str:
    return f"{e.op_name}({', '.join(t.name for t in e.inputs)})"


def _pair(comm: Communication, kernel: Kernel) -> str:
    """An Allgather + matmul/linear or matmul/linear + ReduceScatter pair, as
    `T5 = linear(T3, w (T1)) after Allgather x (T0) -> T3`."""
    e = next(e for e in kernel.exprs if e.op_name in _CONTRACTIONS)
    where = "after" if comm.kind is CommKind.Allgather else "before"
    moved = f"{comm.kind.value} {comm.input.name} -> {comm.output.name}"
    return f"{e.output.name} = {_args(e)} {where} {moved}"


def _give(t: TensorView, c: Chunking, why: list[str]) -> bool:
    """Give `t` the Stream axis of `c` where it has none and can be cut so; else say
    why not in `why`."""
    if stream_position(t.domain) is not None:
        return False
    problem = chunking_problem(t, c)
    if problem is None:
        try:
            stream_parallelize(t, c)
        except LoweringError as e:
            problem = str(e)
    if problem is not None:
        why.append(f"{t.name}: {problem}")
        return False
    return True


def give_streams(
    program: Program, chunks: int
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """Give nvFuser's Allgather + matmul and matmul + ReduceScatter pairs Stream axes
    of `chunks` chunks (module doc). Returns each pair left whole (`_pair`) with why:
    those whose chunks are not of equal rows, then those the chunked axis does not reach
    (an Allgather along what a matmul contracts)."""
    left: list[tuple[str, list[str]]] = []
    unmapped: list[tuple[str, list[str]]] = []
    steps = [s for s in program.steps if not host.is_host_node(s)]
    for k, step in enumerate(steps):
        if not isinstance(step, Communication) or step.mesh is None:
            continue
        if step.kind is CommKind.Allgather:
            # Every kernel that reads the gathered tensor and can compute chunks of it
            # (q, k and v's projections of one): one loop takes them all in, each chunk's
            # Allgather first; the others compute from the whole after the loop.
            readers = [
                s for s in steps[k + 1 :] if isinstance(s, Kernel) and step.output in s.inputs
            ]
            if not any(_contracts(r) for r in readers):
                continue
            c = _gathered(step, step.output, chunks)
            for reader in readers:
                why: list[str] = []
                outs = _forward(reader, step.output, c)
                if outs is None:  # not a reason "cuts into S chunks" covers: kept apart
                    if _contracts(reader):
                        unmapped.append((_pair(step, reader), ["no output axis is gathered"]))
                else:
                    problems = [(t, chunking_problem(t, outs[id(t)])) for t in reader.outputs]
                    if all(p is None for _, p in problems):
                        for t in reader.outputs:
                            _give(t, outs[id(t)], why)
                    else:
                        why = [f"{t.name}: {p}" for t, p in problems if p is not None]
                if why and _contracts(reader):
                    left.append((_pair(step, reader), why))
        if step.kind is CommKind.ReduceScatter and k > 0:
            before = steps[k - 1]
            if isinstance(before, Kernel) and _contracts(before) and step.input in before.outputs:
                why = []
                _give(step.output, _gathered(step, step.output, chunks), why)
                if why:
                    left.append((_pair(step, before), why))
    return left, unmapped


@register
@dataclass(frozen=True)
class LowerStreams(Pass):
    """Run each Stream-parallel tensor's chunks in a host loop, one stream a chunk."""

    name: ClassVar[str] = "lower-streams"
    level: ClassVar[Level] = Level.program
    # 0: only the Stream axes the fusion has; S > 1: Stream axes of S chunks given
    # first to the Allgather + matmul and matmul + ReduceScatter pairs.
    chunks: int = 0

    def requires(self, program: Program) -> list[str]:
        return [f"{p}; run lower-communications first" for p in unlowered_steps(program)]

    def ensures(self, program: Program) -> list[str]:
        left = _stream_target([s for s in program.steps if not host.is_host_node(s)])
        return [] if left is None else [f"{left[1].name} has a Stream axis outside a loop"]

    def run(self, program: Program) -> None:
        if self.chunks < 0 or self.chunks == 1 or self.chunks > host.MAX_EXTENT:
            raise LoweringError(
                f"lower-streams: chunks={self.chunks}; give 0 (the fusion's Stream axes) "
                f"or a number of chunks in 2..{host.MAX_EXTENT}"
            )
        if self.chunks:
            left, unmapped = give_streams(program, self.chunks)
            why = [w for _, reasons in left for w in reasons]
            if _stream_target([s for s in program.steps if not host.is_host_node(s)]) is None:
                pairs = "no Allgather + matmul/linear or matmul/linear + ReduceScatter pair"
                if not why:
                    raise LoweringError(f"lower-streams: chunks={self.chunks}: {pairs} to stream")
                shown = list(dict.fromkeys(why))
                more = f"; and {len(shown) - 2} more" if len(shown) > 2 else ""
                raise LoweringError(
                    f"lower-streams: chunks={self.chunks}: {pairs} cuts into {self.chunks} "
                    f"chunks of every device's block ({'; '.join(shown[:2])}{more}); give a "
                    "number of chunks that divides a device's rows"
                )
            program.left_whole = [
                f"left whole: {p}: {'; '.join(dict.fromkeys(r))}" for p, r in left + unmapped
            ]
        lower_streams(program)
