"""Host programs: streams, posts, waits, loops and buffers among a program's steps.

nvFuser's host IR (csrc/host_ir: HostIrContainer, ForLoop, Stream, SetCurrentStream,
PostOnStream, Wait, Synchronize, Allocate, Deallocate) in fuserlite's program: besides
kernels and communications, a Program's steps may be

    SetCurrentStream to Stream 1      later posts go on stream 1 (Stream 0: the main one)
    PostOnStream %kernel3 ... / PostOnStream Communication ...
                                      run a kernel or start a communication on the current
                                      stream; a posted communication's output is read only
                                      after a Wait for it
    Wait Communication T7             the current stream waits for the posted
                                      communication that computes T7
    Synchronize Stream 1              the current stream waits for everything stream 1
                                      holds so far
    FOR i in range(4) { ... } // FOR i
                                      the body once for each i (a stream may be `i % 2 + 1`)
    ShardByStream T9 = T3 axis 0 chunk i of 4
                                      T9 is chunk i of T3 (a view: read where the loop's
                                      steps read T9, written where they write it; the
                                      lower-streams pass writes them at the top of a loop)
    Allocate T5 / Deallocate T5       where a buffer's life begins and ends (the
                                      allocate-and-deallocate pass writes them)

A kernel or communication step that is not posted (what the pipeline makes) runs on the
current stream and completes before the next step: the flat program it has always
been. Every device runs the same host program (SPMD); a step acts on the devices of its
mesh or team. fuserlite.program.host_verify checks the rules above; fuserlite.timing
schedules the streams; the executor runs the steps in their order (`executed`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fuserlite.ir.errors import VerifyError
from fuserlite.ir.expr import Expr
from fuserlite.ir.streams import Chunking
from fuserlite.ir.tensor import TensorView
from fuserlite.schedule.ring import ring_chunk_problem

if TYPE_CHECKING:
    from fuserlite.program.communication import Communication
    from fuserlite.program.program import Kernel

MAX_ITERATIONS = 1 << 16  # host steps a program's loops unroll to, all together
MAX_EXTENT = 4096  # the iterations of one loop (stream chunks: a handful)
MAIN_STREAM = 0
SHARD_BY_STREAM = "ShardByStream "
SHARD_BY_STREAM_LINE = re.compile(
    r"ShardByStream T(?P<chunk>\d+) = T(?P<whole>\d+) axis (?P<axis>\d+) chunk "
    r"(?:(?P<index>[a-z]\w*)|\((?P<ring>[a-z]\w*) \+ (?P<swizzle>DID[xyz])\) % "
    r"(?P<modulo>\d+)) of (?P<chunks>\d+)(?: of (?P<blocks>\d+) blocks)?"
)

_STREAM = re.compile(
    r"(?:(?P<index>[a-z]\w*)(?: % (?P<mod>\d+))?(?: \+ (?P<plus>\d+))?|(?P<n>\d+))"
)


@dataclass(frozen=True)
class StreamIndex:
    """Which stream: a number (`Stream 1`), or a loop index modulo a count plus an
    offset (`Stream i % 2 + 1`: streams 1 and 2 in turn)."""

    offset: int = 0
    index: str | None = None  # a loop's index variable
    modulo: int | None = None

    def value(self, env: Mapping[str, int]) -> int:
        """The stream number, the loop indices bound as `env` says."""
        if self.index is None:
            return self.offset
        i = env[self.index]
        return (i % self.modulo if self.modulo else i) + self.offset

    def text(self) -> str:
        """'1', 'i', 'i % 2 + 1': as printed after `Stream `."""
        if self.index is None:
            return str(self.offset)
        mod = f" % {self.modulo}" if self.modulo else ""
        plus = f" + {self.offset}" if self.offset else ""
        return f"{self.index}{mod}{plus}"

    @classmethod
    def parse(cls, text: str) -> StreamIndex | None:
        """The stream index printed as `text`, or None."""
        m = _STREAM.fullmatch(text)
        if m is None:
            return None
        if m["n"] is not None:
            return cls(int(m["n"]))
        modulo = int(m["mod"]) if m["mod"] else None
        if modulo == 0:
            return None
        return cls(int(m["plus"] or 0), m["index"], modulo)


@dataclass(eq=False)
class SetCurrentStream:
    """Later kernels and communications go on `stream` (nvFuser's SetCurrentStream)."""

    stream: StreamIndex


@dataclass(eq=False)
class PostOnStream:
    """Run a kernel, or start a communication, on the current stream. A posted
    communication does not hold the stream up: its output is read after a Wait."""

    step: Kernel | Communication


@dataclass(eq=False)
class Wait:
    """The current stream waits for a posted communication to complete."""

    post: PostOnStream


@dataclass(eq=False)
class Synchronize:
    """The current stream waits for the work `stream` holds so far."""

    stream: StreamIndex


@dataclass(eq=False)
class ForLoop:
    """`body` once for each `index` in range(extent)."""

    index: str
    extent: int
    body: list = field(default_factory=list)


@dataclass(eq=False)
class ShardByStream:
    """`chunk` is chunk `index` (a loop index) of `whole` along its logical axis
    `chunking.axis` (fuserlite.ir.streams: the same rows of each of `chunking.blocks`
    blocks): nvFuser's ShardByStream. A view, read or written in place; it takes no
    time. `chunk` has the whole tensor's axes, placement and dtype, that axis 1/S as long."""

    whole: TensorView
    chunk: TensorView
    chunking: Chunking
    index: str

    @property
    def tensors(self) -> tuple[TensorView, TensorView]:
        return (self.whole, self.chunk)

    def problem(self) -> str | None:
        """Why `chunk` is not one chunk of `whole` (None: it is): the same axes, dtype
        and mesh, the chunked axis 1/S as long, S chunks of B blocks dividing it (a ring
        chunk: the whole's axes, that axis sharded over the S devices of the swizzle)."""
        c, whole, chunk = self.chunking, self.whole, self.chunk
        logical = whole.domain.logical
        if not 0 <= c.axis < len(logical) or logical[c.axis].is_reduction:
            return f"{whole.name} has no data axis {c.axis}"
        n = logical[c.axis].extent
        if c.chunks < 1 or c.blocks < 1 or n % (c.chunks * c.blocks):
            return f"{c.text()} do not divide {whole.name} axis {c.axis} of {n}"
        if c.swizzle is not None:
            return ring_chunk_problem(whole, chunk, c)
        want = [ax.extent // c.chunks if i == c.axis else ax.extent for i, ax in enumerate(logical)]
        have = [ax.extent for ax in chunk.domain.logical]
        if have != want or chunk.dtype != whole.dtype or chunk.mesh != whole.mesh:
            return (
                f"{chunk.name} is not a chunk of {whole.name} ({c.text()}): its extents "
                f"{have} should be {want}, on the same mesh, in the same dtype"
            )
        return None

    def text(self) -> str:
        """'ShardByStream T9 = T3 axis 0 chunk i of 4' (', 2 blocks' where it has them)."""
        c = self.chunking
        blocks = f" of {c.blocks} blocks" if c.blocks > 1 else ""
        return (
            f"{SHARD_BY_STREAM}{self.chunk.ir_name} = {self.whole.ir_name} axis {c.axis} "
            f"chunk {c.index_text(self.index)} of {c.chunks}{blocks}"
        )


@dataclass(eq=False)
class ChunkView:
    """A ShardByStream as the executor runs it, its loop index bound: `chunk` is made a
    view of `whole`'s chunk `number` (`writes` False: before the steps that read it), or
    its values are stored into that chunk of `whole` (`writes` True: after the loop
    body's steps wrote it). `inputs` and `outputs` are what liveness reads."""

    view: ShardByStream
    number: int
    writes: bool

    def number_on(self, device: int) -> int:
        """The chunk device `device` takes: `number`, or on a ring (a swizzled chunking)
        (number + the device's index along the swizzle's parallel type) mod chunks."""
        c = self.view.chunking
        if c.swizzle is None:
            return self.number
        mesh = self.view.whole.mesh
        index = mesh.coordinates(device)[mesh.axis_of(c.swizzle)]
        return (self.number + index) % c.chunks

    @property
    def inputs(self) -> list[TensorView]:
        return [self.view.chunk] if self.writes else [self.view.whole]

    @property
    def outputs(self) -> list[TensorView]:
        return [self.view.whole] if self.writes else [self.view.chunk]


def filled(steps: list) -> frozenset[int]:
    """The ids of the tensors loops write through views (a chunk of them at a time)."""
    out = set()
    for s in walk(steps):
        if isinstance(s, ForLoop):
            written = written_chunks(s.body)
            out |= {
                id(v.whole)
                for v in s.body
                if isinstance(v, ShardByStream) and id(v.chunk) in written
            }
    return frozenset(out)


def written_chunks(body: list) -> set[int]:
    """The ids of the chunk tensors a loop body's steps write (its ShardByStream views
    that are written, not read)."""
    return {id(t) for s in runs(body) for e in getattr(s, "exprs", [s]) for t in e.outputs}


@dataclass(eq=False)
class Allocate:
    """The buffer of `tensor` is allocated here (before the step that writes it)."""

    tensor: TensorView


@dataclass(eq=False)
class Deallocate:
    """The buffer of `tensor` is freed here (after the last step that reads it)."""

    tensor: TensorView


HOST_NODES = (
    SetCurrentStream,
    PostOnStream,
    Wait,
    Synchronize,
    ForLoop,
    ShardByStream,
    Allocate,
    Deallocate,
)


def is_host_node(step: object) -> bool:
    """True for a host construct (not a kernel, communication or resharding Set)."""
    return isinstance(step, HOST_NODES)


def executable(step: Any) -> Any:
    """The kernel or communication a step runs: a post's step, or the step itself
    (None for the other host nodes)."""
    if isinstance(step, PostOnStream):
        return step.step
    return None if is_host_node(step) else step


def walk(steps: list) -> Iterator[Any]:
    """Every step in printing order, loop bodies inside their loops (each once)."""
    for s in steps:
        yield s
        if isinstance(s, ForLoop):
            yield from walk(s.body)


def runs(steps: list) -> Iterator[Any]:
    """The kernels, communications and resharding Sets, in printing order (each once)."""
    for s in walk(steps):
        e = executable(s)
        if e is not None:
            yield e


def unrolled(steps: list, env: Mapping[str, int] | None = None) -> Iterator[tuple[Any, dict]]:
    """Every step but loops, in execution order, with the loop indices bound then."""
    env = dict(env or {})
    for s in steps:
        if isinstance(s, ForLoop):
            for i in range(s.extent):
                yield from unrolled(s.body, {**env, s.index: i})
        else:
            yield s, env


@dataclass(frozen=True)
class StreamEvent:
    """A host program's stream bookkeeping where the executor meets it (`executed`):
    `switch` to `stream` (a SetCurrentStream, its loop index bound), `wait` for the
    latest post of Communication `comm` (a Wait), `sync` with `stream` (a Synchronize).
    It runs nothing; it says when the executor must complete a posted communication
    (runtime.host_loops.pipelined)."""

    what: str  # "switch", "wait" or "sync"
    stream: int = MAIN_STREAM
    comm: Communication | None = None


def executed(
    steps: list, env: Mapping[str, int] | None = None, written: set[int] = frozenset()
) -> list:
    """The kernels and communications in the order they run, loops unrolled, with a
    ChunkView where a loop's ShardByStream makes a view (read ones at their place,
    written ones after the body's steps), and a StreamEvent where the program switches
    streams, waits for a posted communication or synchronizes with a stream (none in a
    flat program): what the executor runs, one after the other."""
    env = dict(env or {})
    out: list = []
    for s in steps:
        if isinstance(s, SetCurrentStream):
            out.append(StreamEvent("switch", s.stream.value(env)))
        elif isinstance(s, Synchronize):
            out.append(StreamEvent("sync", s.stream.value(env)))
        elif isinstance(s, Wait):
            if isinstance(s.post.step, Expr):  # a Communication (a posted kernel has run)
                out.append(StreamEvent("wait", comm=s.post.step))
        elif isinstance(s, ForLoop):
            views = [v for v in s.body if isinstance(v, ShardByStream)]
            mine = written_chunks(s.body)
            for i in range(s.extent):
                inner = {**env, s.index: i}
                out += executed(s.body, inner, mine)
                out += [ChunkView(v, inner[v.index], True) for v in views if id(v.chunk) in mine]
        elif isinstance(s, ShardByStream):
            if id(s.chunk) not in written:
                out.append(ChunkView(s, env[s.index], False))
        elif (e := executable(s)) is not None:
            out.append(bound(e, env))
    return out


def bound(step: Any, env: Mapping[str, int]) -> Any:
    """The step as it runs with the loop indices `env`: a ring's CollectivePermute
    (`shift=i`: block r from block (r + i) mod D) as the permutation of that step; any
    other step itself."""
    if getattr(step, "shift", None) is None:
        return step
    if step.shift not in env:
        raise VerifyError(
            f"Communication {step.output.name}: shift={step.shift} is the index of no loop "
            "around it"
        )
    return step.at_shift(env[step.shift])


def is_host_program(steps: list) -> bool:
    """True when a program has host constructs (else it is the flat one the pipeline makes)."""
    return any(is_host_node(s) for s in steps)


def check_loops(steps: list, where: str = "") -> None:
    """A VerifyError where a loop's extent is out of bounds, an index is bound twice,
    or the loops unroll to more than MAX_ITERATIONS steps."""
    total = _count(steps, set(), where)
    if total > MAX_ITERATIONS:
        raise VerifyError(
            f"{where}the host program's loops unroll to {total} steps; at most "
            f"{MAX_ITERATIONS} (a loop is over a handful of stream chunks)"
        )


def _count(steps: list, bound: set[str], where: str) -> int:
    n = 0
    for s in steps:
        if not isinstance(s, ForLoop):
            n += 1
            continue
        if not 1 <= s.extent <= MAX_EXTENT:
            raise VerifyError(
                f"{where}FOR {s.index}: its extent {s.extent} is not in 1..{MAX_EXTENT}"
            )
        if s.index in bound:
            raise VerifyError(f"{where}FOR {s.index} is inside a loop of the same index")
        n += 1 + s.extent * _count(s.body, bound | {s.index}, where)
        if n > MAX_ITERATIONS:
            return n
    return n
