"""The Communicator interface: collectives over teams, point-to-point messages, `fold`.

A backend moves numpy buffers between devices. Every method takes and returns
{device: array} for the devices this process hosts (all of them for `sim`,
one for `mpi`), and works on axis 0: its callers (runtime.dispatch, which runs a
program's Communications, runtime.redistribute, runtime.moves) first move the
axis a collective splits or joins to the front.

A collective runs over several teams at once (the teams of a group of mesh
axes, `plan.mesh_axes.teams`): each device is in at most one, and each team
runs the collective on its own. A team's member order is the concatenation
order of gathered blocks and the order in which partial results are combined
(`fold`: left to right, on every backend, so reductions agree bit for bit).
Point-to-point transfers (`exchange`) carry the boxes of a move between meshes.

Posting and waiting: each collective is an Operation (`iallgather`, `iallreduce`,
..., as MPI names its non-blocking calls), a generator that posts its non-blocking
calls, yields what it must wait for (mpi: a watchdog `Pending`) and returns its
buffers. `post(op)` runs it up to its first wait and returns a `Posted` handle;
`wait(handle)` completes it (`complete` each thing it yields, then resumes it) and
returns its result. The blocking `allgather`, `allreduce`, ... are `run(op)`, post
then wait: one implementation per collective. Callers compose operations with
`yield from` (runtime.dispatch, runtime.redistribute, runtime.moves), so a whole
Communication is one Operation the executor posts early and waits for at its first
reader (docs/time.md). `sim` yields nothing: its operations complete when posted.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.types import DType, ReductionOpType
from fuserlite.program.communication import Communication

Buffers = dict[int, np.ndarray]
Operation = Generator[Any, None, Any]
"""A communication in progress: posts non-blocking calls, yields what it waits for
(the backend's own handle), returns its result."""


def ready(value: Any) -> Operation:
    """An Operation that has completed already: it waits for nothing and returns `value`."""
    yield from ()
    return value


class Posted:
    """A posted Operation: `waiting` is what it waits for next, `done` once it returned
    `result` (Communicator.wait drives it there)."""

    __slots__ = ("operation", "waiting", "done", "result")

    def __init__(self, operation: Operation) -> None:
        self.operation: Operation | None = operation
        self.waiting: Any = None
        self.done = False
        self.result: Any = None
        self.advance()

    def advance(self) -> None:
        """Run the operation on to its next wait (or its end)."""
        try:
            self.waiting = next(self.operation)
        except StopIteration as stop:
            self.operation, self.waiting, self.done, self.result = None, None, True, stop.value


@dataclass(frozen=True)
class BufferSpec:
    """Shape and dtype of each sender's buffer, for receivers that hold none yet."""

    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class Team:
    """The devices of one collective, in order; rooted kinds name their root.

    `members` send (Allgather, Gather, Reduce, ...) or receive (Broadcast, Scatter)
    the data, in order; a root outside them takes part only as the root.
    """

    members: tuple[int, ...]
    root: int | None = None

    @property
    def devices(self) -> tuple[int, ...]:
        """Everyone taking part: the members, then a root that is not one of them."""
        if self.root is None or self.root in self.members:
            return self.members
        return (*self.members, self.root)


@dataclass(frozen=True)
class Message:
    """One point-to-point transfer: `src` sends a buffer of `spec` to `dst`."""

    src: int
    dst: int
    spec: BufferSpec


def check_teams(teams: Sequence[Team], what: str) -> tuple[Team, ...]:
    """`teams` as a tuple, or an ExecutionError where a device is in two of them."""
    seen: dict[int, Team] = {}
    for team in teams:
        if len(set(team.members)) != len(team.members) or not team.members:
            raise ExecutionError(f"{what}: team {list(team.members)} must list distinct devices")
        for d in team.devices:
            if d in seen:
                raise ExecutionError(
                    f"{what}: device {d} is in two teams, {list(seen[d].devices)} and "
                    f"{list(team.devices)}; the teams of one collective are disjoint"
                )
            seen[d] = team
    return tuple(teams)


class Communicator:
    """Collectives over teams of devices; subclasses implement the data movement."""

    name = "abstract"

    # -- multi-process hooks: the defaults suit a backend that hosts every device --
    def prepare(self, devices: Sequence[int], communications: Sequence[Communication]) -> None:
        """Called once per executor, before any communication, with the program's devices."""

    def prepare_teams(self, teams: Sequence[Team]) -> None:
        """Make whatever running collectives over `teams` needs (every process calls it)."""

    def release(self) -> None:
        """Frees what prepare() made (every process calls it, at the end)."""

    def begin_step(self, index: int, comm: Communication) -> None:
        """Program step `index`, the Communication `comm`, begins (mpi's watchdog names
        the step of an operation that stalls)."""

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Wraps one execution; a multi-process backend ends every process on an error."""
        yield

    def collect(self, local: dict[int, list]) -> dict[int, list] | None:
        """Every device's outputs in the host process; None in the other processes."""
        return local

    def is_host(self) -> bool:
        """Whether this process assembles global outputs and reports."""
        return True

    def hosted(self, devices) -> list[int]:
        """The devices among `devices` that this process holds data for."""
        raise NotImplementedError

    # -- posting and waiting (module docstring) ---------------------------------------
    def post(self, operation: Operation) -> Posted:
        """Start `operation`: its calls up to its first wait are posted; wait() ends it."""
        return Posted(operation)

    def wait(self, posted: Posted) -> Any:
        """Complete a posted operation (each thing it waits for, then the rest of it) and
        return its result."""
        while not posted.done:
            self.complete(posted.waiting)
            posted.advance()
        return posted.result

    def run(self, operation: Operation) -> Any:
        """Post `operation` and wait for it: the blocking form of every collective."""
        return self.wait(self.post(operation))

    def complete(self, waiting: Any) -> None:
        """Block until one thing an operation yielded has completed (mpi: its requests,
        under the watchdog); a backend whose operations complete when posted has none."""
        raise ExecutionError(f"the {self.name} backend cannot wait for {waiting!r}")

    # The blocking collectives: post and wait for their operation (the i-methods below).
    def allgather(self, teams: Sequence[Team], bufs: Buffers, rows=None) -> Buffers:
        """The blocking `iallgather`."""
        return self.run(self.iallgather(teams, bufs, rows))

    def alltoall(
        self, teams: Sequence[Team], bufs: Buffers, rows=None, shapes=None
    ) -> dict[int, list[np.ndarray]]:
        """The blocking `ialltoall`."""
        return self.run(self.ialltoall(teams, bufs, rows, shapes))

    def allreduce(self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType) -> Buffers:
        """The blocking `iallreduce`."""
        return self.run(self.iallreduce(teams, bufs, op))

    def reduce_scatter(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, rows=None
    ) -> Buffers:
        """The blocking `ireduce_scatter`."""
        return self.run(self.ireduce_scatter(teams, bufs, op, rows))

    def broadcast(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec) -> Buffers:
        """The blocking `ibroadcast`."""
        return self.run(self.ibroadcast(teams, bufs, spec))

    def scatter(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None) -> Buffers:
        """The blocking `iscatter`."""
        return self.run(self.iscatter(teams, bufs, spec, rows))

    def gather(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None) -> Buffers:
        """The blocking `igather`."""
        return self.run(self.igather(teams, bufs, spec, rows))

    def reduce(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Buffers:
        """The blocking `ireduce`."""
        return self.run(self.ireduce(teams, bufs, op, spec))

    def exchange(
        self, messages: Sequence[Message], payloads: dict[int, np.ndarray]
    ) -> dict[int, np.ndarray]:
        """The blocking `iexchange`."""
        return self.run(self.iexchange(messages, payloads))

    # Each collective's Operation (its result as said): every member of each team passes
    # its buffer in `bufs`. `rows`:
    # None for equal parts (the plain collective); else {device: rows of its own part on
    # axis 0}, every member's, for the variable-size one over uneven chunks.
    def iallgather(self, teams: Sequence[Team], bufs: Buffers, rows=None) -> Operation:
        """Each member gets its team's buffers concatenated on axis 0, in member order."""
        raise NotImplementedError

    def ialltoall(self, teams: Sequence[Team], bufs: Buffers, rows=None, shapes=None) -> Operation:
        """Member j gets part j (of len(team) on axis 0) of every member's buffer, in order;
        with `rows`, part j has member j's rows, and `shapes` gives every member's buffer
        shape (what each receives from it)."""
        raise NotImplementedError

    def iallreduce(self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType) -> Operation:
        """Each member gets the fold of its team's buffers."""
        raise NotImplementedError

    def ireduce_scatter(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, rows=None
    ) -> Operation:
        """Member j gets part j (on axis 0) of the fold of its team's buffers."""
        raise NotImplementedError

    def ibroadcast(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec) -> Operation:
        """Each member gets its team root's buffer."""
        raise NotImplementedError

    def iscatter(
        self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None
    ) -> Operation:
        """Member j gets part j (of len(members) on axis 0) of its root's buffer."""
        raise NotImplementedError

    def igather(
        self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None
    ) -> Operation:
        """Each root gets its members' buffers (of `spec`, or of `rows` rows on axis 0)
        concatenated on axis 0."""
        raise NotImplementedError

    def ireduce(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Operation:
        """Each root gets the fold of its members' buffers (of `spec`)."""
        raise NotImplementedError

    def iexchange(self, messages: Sequence[Message], payloads: dict[int, np.ndarray]) -> Operation:
        """Point to point: message i's payload (given where its src is hosted) arrives at its
        dst; returns {i: array} for the messages whose dst this process hosts."""
        raise NotImplementedError


def fold(arrays: Sequence[np.ndarray], op: ReductionOpType) -> np.ndarray:
    """arrays[0] op arrays[1] op ... left to right: the one combine order of every backend.

    Sums of float16 or bfloat16 are accumulated in float32 and rounded once at the end,
    as a kernel's sums are (partials insert-reshardings makes are float32 already)."""
    dtype = np.asarray(arrays[0]).dtype
    wide = op is ReductionOpType.sum and dtype in HALF_DTYPES
    within = np.float32 if wide else dtype
    if op is ReductionOpType.sum:
        # combine's sums, into one array in place (each operand widened inside the add):
        # a NaN stays a NaN through every later sum, so canonical once at the end gives
        # the bits of canonical after each.
        out = np.array(arrays[0], within)  # a new array (0-d stays an array)
        with np.errstate(all="ignore"):
            for a in arrays[1:]:
                np.add(out, a, out=out, dtype=within)
        out = canonical(out)
    else:
        out = canonical(np.array(arrays[0], within))
        for a in arrays[1:]:
            out = combine(op, out, np.asarray(a, within))
    if not wide:
        return out
    with np.errstate(over="ignore"):  # beyond float16's range: inf, as any store of it
        return out.astype(dtype)


HALVES = frozenset({DType.float16, DType.bfloat16})
HALF_DTYPES = frozenset(dt.numpy for dt in HALVES)


def combine(op: ReductionOpType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a op b element by element: how every backend combines partial results of devices.

    Commutative bit for bit, and for max, min, integers and bools associative too, so
    any reduction tree (MPI picks its own) gives the bits of the left-to-right one. max
    and min propagate NaN, as np.maximum does, max(-0.0, 0.0) is 0.0 and min(-0.0, 0.0)
    is -0.0 in either order;
    every NaN either op makes is the one quiet NaN (`canonical`). Float sums round at
    each step, so only their order decides the last bit.
    """
    with np.errstate(all="ignore"):
        if op is ReductionOpType.sum:
            out = np.add(a, b)
        elif op is ReductionOpType.min:
            out = np.minimum(a, b)
            if is_float(a.dtype):
                out = np.where(a == b, np.where(np.signbit(a), a, b), out)
        elif is_float(a.dtype):
            out = np.where(a == b, np.where(np.signbit(a), b, a), np.maximum(a, b))
        else:
            out = np.maximum(a, b)
    return canonical(np.asarray(out))


def canonical(a: np.ndarray) -> np.ndarray:
    """`a` with every NaN replaced by the quiet NaN np.nan (in place: a is a result)."""
    if is_float(a.dtype):
        a[np.isnan(a)] = np.nan
    return a


def is_float(dtype: np.dtype) -> bool:
    """True for float dtypes, bfloat16 included (an ml_dtypes type: numpy kind 'V')."""
    return dtype in FLOAT_DTYPES


# numpy's dtypes of the float DTypes (np.dtype equality, asked per combine: no name parsed)
FLOAT_DTYPES = frozenset(dt.numpy for dt in DType if dt.is_float)


def split_rows(a: np.ndarray, rows: Sequence[int]) -> list[np.ndarray]:
    """`a` cut on axis 0 into consecutive chunks of `rows` rows (views)."""
    return np.split(a, np.cumsum(rows)[:-1], axis=0)


def pad_rows(a: np.ndarray, rows: int, fill=0) -> np.ndarray:
    """`a` with axis 0 padded to `rows` rows of `fill` (a itself when it has them)."""
    if a.shape[0] == rows:
        return a
    out = np.full((rows, *a.shape[1:]), fill, a.dtype)
    out[: a.shape[0]] = a
    return out


def pad_to(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`a` in the leading corner of a zero array of `shape` (a itself when it has that
    shape): padding that is never read, dropped or excluded by predicates."""
    if a.shape == tuple(shape):
        return contiguous(a)
    out = np.zeros(shape, a.dtype)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


def unpad(whole: np.ndarray, size: int, rows: Sequence[int]) -> np.ndarray:
    """The rows of each chunk of a buffer made of len(rows) chunks of `size` padded rows."""
    return np.concatenate([whole[j * size : j * size + r] for j, r in enumerate(rows)])


def parts(a: np.ndarray, team: Team, rows: dict[int, int] | None, what: str) -> list[np.ndarray]:
    """`a` on axis 0 in one part per member of `team`: equal parts, or each member's
    `rows` (a variable-size collective over uneven chunks)."""
    if rows is None:
        return split_even(a, len(team.members), what)
    return split_rows(a, [rows[d] for d in team.members])


def split_even(a: np.ndarray, parts: int, what: str) -> list[np.ndarray]:
    """`a` in `parts` equal parts on axis 0 (views), or an ExecutionError naming `what`."""
    if a.ndim == 0 or a.shape[0] % parts:
        extent = "a 0-d buffer" if a.ndim == 0 else f"axis extent {a.shape[0]}"
        raise ExecutionError(f"{what}: {extent} is not divisible by {parts} devices")
    return np.split(a, parts, axis=0)


def contiguous(a: np.ndarray, dtype=None) -> np.ndarray:
    """A C-contiguous array with a's shape (np.ascontiguousarray turns 0-d into 1-d)."""
    return np.require(a, dtype=dtype, requirements="C")


def front(a: np.ndarray, axis: int | None) -> np.ndarray:
    """`a` with `axis` first, C-contiguous (a backend works on axis 0)."""
    return contiguous(a if axis is None else np.moveaxis(a, axis, 0))


def back(a: np.ndarray, axis: int | None) -> np.ndarray:
    """Undo `front`."""
    return a if axis is None else np.moveaxis(a, 0, axis)
