"""The `mpi` backend: one process per device, collectives through mpi4py.

Launch with `mpiexec -n N`; rank r is device r, and N may exceed the devices
the program uses: ranks in no mesh stay idle (they still call every collective
set-up, as all ranks must). Every method moves numpy buffers with mpi4py's
buffer (upper-case) calls; bfloat16, which MPI has no datatype for, moves as
its bits (uint16) and reduces as bfloat16.

Teams: `prepare` makes the communicators of every team once, before running:
one `COMM_WORLD.Split` per communication whose teams are new (every team of a
group of mesh axes at once: the color is the team), which every rank calls in
program order, so no rank waits on a split the others skip; `release` frees
them. Point-to-point transfers (SendRecv, the boxes of a move) use the world
communicator.

Reductions fold partial results with `communicator.fold`, in member order, as
sim does, so both agree bit for bit for every op and dtype (float sums too):
Allreduce is an AllToAll of flat chunks, a fold per chunk and an Allgather (the
bytes of a ring), ReduceScatter an AllToAll and a fold, Reduce a Gather and a
fold at the root. MPI's own ops would pick their own order (and MAX drops NaN).

Uneven chunks (docs/design.md §5) move padded through the same calls, or each
member's own rows through MPI's vector calls (`backends.mpi_vector`: Allgatherv,
Alltoallv, Scatterv, Gatherv).

Waiting: every operation is posted non-blocking (MPI_Iallgather, MPI_Ialltoallv,
MPI_Ibcast, MPI_Isend/MPI_Irecv, ...): each collective is an Operation
(`communicator`'s docstring) that yields its Pending requests, so the executor
posts a Communication, computes, and waits for it at its first reader. Each wait
is the watchdog's
(`backends.mpi_watchdog`): when one has not completed within `timeout` seconds
(default 300; math.inf waits for ever, with MPI_Waitall) the rank asks every
rank where it is, and a rank that does not answer (a stopped process, a stuck
node) ends the job: each live rank prints once which ranks did not answer, the
step it waits at and the operation and its team, and calls MPI_Abort. The
executor says which step runs (`begin_step`). Team splits are blocking in MPI:
a watched MPI_Ibarrier comes first.

Faults: `guard()` wraps one execution. An exception on one rank would leave
the others blocked in their next collective, so the failing rank prints its
message once (prefixed with its rank) and calls `MPI.COMM_WORLD.Abort(1)`,
which ends every rank with a non-zero exit status. Pass
`MpiCommunicator(abort_on_error=False)` to get the exception instead (then
ending the other ranks is up to the caller; a stall is an ExecutionError too). With one rank there is nothing to
hang on, and the exception is raised as usual.

For tests only, `MpiCommunicator(fail_rank=r)` makes rank r raise an
ExecutionError at the start of every guarded execution, so they can check that a
failing rank never hangs the job (tests/mpi_scripts/failing_rank.py). Nothing
reads the environment.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError, FuserliteError
from fuserlite.ir.types import ReductionOpType
from fuserlite.plan.blocks import chunk_bounds
from fuserlite.program.communication import Communication
from fuserlite.runtime.backends.mpi_vector import (
    allgatherv,
    alltoallv,
    layout,
    offsets,
    received,
    row_counts,
    vector,
    wire,
)
from fuserlite.runtime.backends.mpi_watchdog import (
    COLLECTING,
    DEFAULT_TIMEOUT_S,
    PREPARING,
    Pending,
    Watchdog,
    abort,
    check_timeout,
)
from fuserlite.runtime.communicator import (
    Buffers,
    BufferSpec,
    Communicator,
    Message,
    Operation,
    Team,
    check_teams,
    contiguous,
    fold,
    split_even,
    split_rows,
)
from fuserlite.runtime.dispatch import teams_of


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ExecutionError(
            "the mpi backend needs mpi4py and an MPI library: pip install 'fuserlite[mpi]' "
            "(mpi4py and mpich), then launch with mpiexec -n D"
        ) from exc
    return MPI


class MpiCommunicator(Communicator):
    """Rank r of COMM_WORLD is device r; each process hosts exactly one device."""

    name = "mpi"

    def __init__(
        self,
        comm=None,
        *,
        timeout: float | None = None,
        abort_on_error: bool = True,
        fail_rank: int | None = None,
    ) -> None:
        """`timeout`: seconds one operation may wait before the watchdog asks who stalled
        (None: DEFAULT_TIMEOUT_S); `fail_rank` is for tests: that rank fails every guarded
        execution on purpose."""
        self.MPI = _mpi()
        self.world = comm if comm is not None else self.MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()
        self.abort_on_error = abort_on_error
        self.fail_rank = fail_rank
        seconds = (
            DEFAULT_TIMEOUT_S if timeout is None else check_timeout(timeout, "MpiCommunicator")
        )
        self.watchdog = Watchdog(self.MPI, self.world, seconds, abort_on_error)
        # Bytes of this rank's own data handed to MPI for other ranks (not wire bytes:
        # MPI's algorithms may forward data several times); the benchmark reads it.
        self.bytes_sent = 0
        # team -> its communicator (None where this rank is not a member)
        self._teams: dict[tuple[int, ...], object] = {tuple(range(self.size)): self.world}

    # -- set-up -----------------------------------------------------------------------
    def prepare(self, devices: Sequence[int], communications: Sequence[Communication]) -> None:
        """Check the world size against the program's devices and split off every team.

        Collective over COMM_WORLD: every rank must call it with the same program, idle
        ranks (in no mesh) too.
        """
        self.watchdog.at(PREPARING)
        devices = sorted(devices)
        if devices and devices[-1] >= self.size:
            raise ExecutionError(
                f"rank {self.rank}: the program runs on devices {{{abbreviate(devices)}}} but "
                f"MPI started {self.size} rank(s); rank r is device r, so launch it with "
                f"mpiexec -n {devices[-1] + 1} or more (ranks in no mesh stay idle)"
            )
        for comm in communications:
            self.prepare_teams(teams_of(comm))

    def prepare_teams(self, teams: Sequence[Team]) -> None:
        """Make the communicators of `teams` that do not exist yet: one Split for them all.

        Collective over COMM_WORLD (every rank, members or not, with the same teams).
        """
        check_teams(teams, f"rank {self.rank}: prepare_teams")
        new = list(dict.fromkeys(t.devices for t in teams if t.devices not in self._teams))
        if not new:
            return
        color, key = self.MPI.UNDEFINED, 0
        for i, devices in enumerate(new):
            if self.rank in devices:
                color, key = i, devices.index(self.rank)
        # MPI has no non-blocking split: a stalled rank is caught at the barrier before it.
        self._wait(self.world.Ibarrier(), "MPI_Ibarrier (before MPI_Comm_split)")
        sub = self.world.Split(color, key)
        for i, devices in enumerate(new):
            self._teams[devices] = sub if i == color else None

    def release(self) -> None:
        """Free every team communicator (collective: every rank calls it)."""
        for comm in self._teams.values():
            if comm is not None and comm is not self.world:
                comm.Free()
        self._teams = {tuple(range(self.size)): self.world}

    def _pending(self, request, call: str, *keep, team: Sequence[int] | None = None) -> Pending:
        """One posted MPI request (`call` over `team`, world ranks; None: all of them) as
        the watchdog waits for it; `keep`: its buffers."""
        members = range(self.size) if team is None else team
        return Pending([request], call, members, keep)

    def _wait(self, request, call: str, *keep, team: Sequence[int] | None = None) -> None:
        """Wait for one posted request at once (the set-up and the collection of outputs)."""
        self.complete(self._pending(request, call, *keep, team=team))

    def complete(self, waiting: Pending) -> None:
        """What an operation yields, its requests, completed under the watchdog."""
        self.watchdog.wait(waiting)

    def _mine(self, teams: Sequence[Team]):
        """This rank's team among `teams` and its communicator, or None if it is in none."""
        for team in teams:
            if self.rank in team.devices:
                if team.devices not in self._teams:
                    raise ExecutionError(
                        f"rank {self.rank}: no communicator for team {list(team.devices)}; "
                        "prepare() (or prepare_teams()) creates them, collectively on every rank, "
                        "before running"
                    )
                return team, self._teams[team.devices]
        return None

    # -- faults and results -----------------------------------------------------------
    @contextmanager
    def guard(self) -> Iterator[None]:
        """Turn an exception on this rank into one message and an abort of every rank."""
        try:
            if self.fail_rank == self.rank:
                raise ExecutionError(f"rank {self.rank}: injected failure (fail_rank)")
            yield
        except Exception as exc:
            if not self.abort_on_error or self.size == 1:
                raise
            text = str(exc)
            prefix = "" if text.startswith(f"rank {self.rank}:") else f"rank {self.rank}: "
            what = (
                "error"
                if isinstance(exc, FuserliteError)
                else f"internal error: {type(exc).__name__}"
            )
            abort(self.world, f"{what}: {prefix}{text}")

    def begin_step(self, index: int, comm: Communication) -> None:
        """The watchdog names the step a stalled operation belongs to."""
        self.watchdog.at(index, f"{comm.kind.value} {comm.input.name} -> {comm.output.name}")

    def collect(self, local: dict[int, list]) -> dict[int, list] | None:
        """Every rank's per-device outputs, on rank 0; None on the other ranks (pickled,
        then an MPI_Igather of the sizes and an MPI_Igatherv of the bytes)."""
        self.watchdog.at(COLLECTING)
        data = np.frombuffer(pickle.dumps(local, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
        root = self.rank == 0
        size = np.array([data.size], np.int64)
        sizes = np.empty(self.size, np.int64) if root else None
        self._wait(self.world.Igather(size, sizes, root=0), "MPI_Igather (output sizes)", size)
        whole = np.empty(int(sizes.sum()), np.uint8) if root else None
        recv = None
        if root:
            counts = [int(n) for n in sizes]
            recv = vector(self.MPI, whole, counts, offsets(counts))
        self._wait(self.world.Igatherv(data, recv, root=0), "MPI_Igatherv (outputs)", data)
        if not root:
            return None
        out: dict[int, list] = {}
        for part in np.split(whole, np.cumsum(sizes)[:-1]):
            # Bytes this job's own ranks pickled a moment ago (as mpi4py's gather does).
            out.update(pickle.loads(part.data))
        return out

    def is_host(self) -> bool:
        return self.rank == 0

    def hosted(self, devices) -> list[int]:
        return [self.rank] if self.rank in devices else []

    # -- collectives ------------------------------------------------------------------
    def iallgather(self, teams: Sequence[Team], bufs: Buffers, rows=None) -> Operation:
        """Every member's buffer joined along axis 0 (with `rows`, each member's own rows:
        an Allgatherv)."""
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        send = contiguous(bufs[self.rank])
        self.bytes_sent += send.nbytes
        if rows is not None:
            request, recv = allgatherv(self.MPI, comm, send, [rows[d] for d in team.members])
            yield self._pending(request, "MPI_Iallgatherv", send, recv, team=team.devices)
            return {self.rank: recv}
        recv = np.empty((len(team.members) * send.shape[0], *send.shape[1:]), send.dtype)
        request = comm.Iallgather(wire(send), wire(recv))
        yield self._pending(request, "MPI_Iallgather", send, recv, team=team.devices)
        return {self.rank: recv}

    def ialltoall(self, teams: Sequence[Team], bufs: Buffers, rows=None, shapes=None) -> Operation:
        return (yield from self._iparts(teams, bufs, "AllToAll", rows, shapes))

    def _iparts(
        self, teams: Sequence[Team], bufs: Buffers, what: str, rows=None, shapes=None
    ) -> Operation:
        """The AllToAll of axis-0 parts: {this rank: part j of every member, in order};
        with `rows`, an Alltoallv of each member's own rows, from buffers of `shapes`
        (None: every member's shaped like this rank's, as a ReduceScatter's are)."""
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        d, send = len(team.members), contiguous(bufs[self.rank])
        if rows is not None:
            shapes_of = [send.shape if shapes is None else shapes[s] for s in team.members]
            request, recv, shapes_in, sent = alltoallv(
                self.MPI,
                comm,
                send,
                [rows[m] for m in team.members],
                shapes_of,
                team.members.index(self.rank),
            )
            yield self._pending(request, "MPI_Ialltoallv", send, recv, team=team.devices)
            self.bytes_sent += sent * send.itemsize
            return {self.rank: received(recv, shapes_in)}
        split_even(send, d, f"rank {self.rank}: {what} over team {list(team.members)}")
        recv = np.empty_like(send)
        self.bytes_sent += send.nbytes * (d - 1) // d
        request = comm.Ialltoall(wire(send), wire(recv))
        yield self._pending(request, "MPI_Ialltoall", send, recv, team=team.devices)
        return {self.rank: np.split(recv, d, axis=0)}

    def iallreduce(self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType) -> Operation:
        """Each member folds one flat chunk of every member's buffer, in member order (an
        AllToAll), then the chunks are all-gathered: sim's bits, a ring's bytes."""
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        send = contiguous(bufs[self.rank])
        flat, d = send.reshape(-1), len(team.members)
        bounds = [chunk_bounds(flat.size, d, j) for j in range(d)]
        counts, displs = [hi - lo for lo, hi in bounds], [lo for lo, _ in bounds]
        m = counts[team.members.index(self.rank)]
        got = np.empty(d * m, send.dtype)
        request = comm.Ialltoallv(
            vector(self.MPI, flat, counts, displs),
            vector(self.MPI, got, [m] * d, [i * m for i in range(d)]),
        )
        yield self._pending(request, "MPI_Ialltoallv", flat, got, team=team.devices)
        part = fold([got[i * m : (i + 1) * m] for i in range(d)], op)
        whole = np.empty(flat.size, send.dtype)
        request = comm.Iallgatherv(wire(part), vector(self.MPI, whole, counts, displs))
        yield self._pending(request, "MPI_Iallgatherv", part, whole, team=team.devices)
        self.bytes_sent += (flat.size - m + (d - 1) * m) * send.itemsize
        return {self.rank: whole.reshape(send.shape)}

    def ireduce_scatter(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, rows=None
    ) -> Operation:
        """Member j folds part j of every member's buffer, in member order (an AllToAll;
        with `rows`, an Alltoallv of each member's own rows)."""
        parts = yield from self._iparts(teams, bufs, "ReduceScatter", rows)
        return {d: fold(p, op) for d, p in parts.items()}

    def ibroadcast(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec) -> Operation:
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        if self.rank == team.root:
            buf = contiguous(bufs[team.root], dtype=spec.dtype)
            self.bytes_sent += buf.nbytes
        else:
            buf = np.empty(spec.shape, spec.dtype)
        request = comm.Ibcast(wire(buf), root=team.devices.index(team.root))
        yield self._pending(request, "MPI_Ibcast", buf, team=team.devices)
        return {self.rank: buf} if self.rank in team.members else {}

    def iscatter(
        self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None
    ) -> Operation:
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        d = len(team.members)
        what = f"rank {self.rank}: Scatter over team {list(team.devices)}"
        if rows is None:
            part = split_even(np.empty(spec.shape, spec.dtype), d, what)[0].shape
            counts, displs = layout(team, int(np.prod(part, dtype=np.int64)))
        else:  # Scatterv of each member's own rows
            part = (rows.get(self.rank, 0), *spec.shape[1:])
            counts, displs = layout(
                team, row_counts([rows[m] for m in team.members], spec.shape[1:])
            )
        send = None
        if self.rank == team.root:
            whole = contiguous(bufs[team.root], dtype=spec.dtype)
            send = vector(self.MPI, whole, counts, displs)
            kept = counts[team.devices.index(team.root)] * whole.itemsize
            self.bytes_sent += whole.nbytes - kept
        mine_shape = part if self.rank in team.members else (0, *part[1:])
        recv = np.empty(mine_shape, spec.dtype)
        request = comm.Iscatterv(send, wire(recv), root=team.devices.index(team.root))
        yield self._pending(request, "MPI_Iscatterv", send, recv, team=team.devices)
        return {self.rank: recv} if self.rank in team.members else {}

    def _ito_root(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None):
        """(team, the members' buffers of `spec` (or of their `rows`) in member order) at
        each root; None elsewhere."""
        mine = self._mine(teams)
        if mine is None:
            return None
        team, comm = mine
        shape = spec.shape or (1,)  # a 0-d buffer travels as one row
        rest = shape[1:]
        sizes = [shape[0]] * len(team.members) if rows is None else [rows[m] for m in team.members]
        counts, displs = layout(team, row_counts(sizes, rest))
        if self.rank in team.members:
            send = contiguous(bufs[self.rank], dtype=spec.dtype)
        else:
            send = np.empty((0,), spec.dtype)
        whole = recv = None
        if self.rank == team.root:
            whole = np.empty((sum(sizes), *rest), spec.dtype)
            recv = vector(self.MPI, whole, counts, displs)
        else:
            self.bytes_sent += send.nbytes
        request = comm.Igatherv(wire(send), recv, root=team.devices.index(team.root))
        yield self._pending(request, "MPI_Igatherv", send, whole, team=team.devices)
        if whole is None:
            return None
        got = split_rows(whole, sizes)
        return team, got if spec.shape else [g.reshape(()) for g in got]

    def igather(
        self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None
    ) -> Operation:
        got = yield from self._ito_root(teams, bufs, spec, rows)
        if got is None:
            return {}
        team, parts = got
        return {team.root: np.concatenate(parts, axis=0)}

    def ireduce(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Operation:
        """The root folds its members' buffers in member order (gathered first), as sim does."""
        got = yield from self._ito_root(teams, bufs, spec)
        if got is None:
            return {}
        team, parts = got
        return {team.root: fold(parts, op)}

    def iexchange(self, messages: Sequence[Message], payloads: dict[int, np.ndarray]) -> Operation:
        """Non-blocking sends and receives on the world communicator, one tag: MPI keeps
        the order of messages between two ranks, and both sides walk `messages` in order."""
        out: dict[int, np.ndarray] = {}
        requests, sent = [], []  # `sent` keeps send buffers alive until they complete
        peers = {self.rank}
        for i, m in enumerate(messages):
            if m.src == self.rank and m.dst == self.rank:
                out[i] = payloads[i]
            elif m.src == self.rank:
                sent.append(contiguous(payloads[i], dtype=m.spec.dtype))
                if sent[-1].shape != m.spec.shape:
                    raise ExecutionError(
                        f"rank {self.rank}: message {i} to {m.dst} is a buffer of shape "
                        f"{list(sent[-1].shape)}, expected {list(m.spec.shape)}"
                    )
                self.bytes_sent += sent[-1].nbytes
                peers.add(m.dst)
                requests.append(self.world.Isend(wire(sent[-1]), dest=m.dst, tag=_SENDRECV_TAG))
            elif m.dst == self.rank:
                out[i] = np.empty(m.spec.shape, m.spec.dtype)
                peers.add(m.src)
                requests.append(self.world.Irecv(wire(out[i]), source=m.src, tag=_SENDRECV_TAG))
        call = "MPI_Isend/MPI_Irecv"
        yield Pending(requests, call, sorted(peers), (sent, out))
        return out


_SENDRECV_TAG = 7301
