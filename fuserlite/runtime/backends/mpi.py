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

Faults: `guard()` wraps one execution. An exception on one rank would leave
the others blocked in their next collective, so the failing rank prints its
message once (prefixed with its rank) and calls `MPI.COMM_WORLD.Abort(1)`,
which ends every rank with a non-zero exit status. Pass
`MpiCommunicator(abort_on_error=False)` to get the exception instead (then
ending the other ranks is up to the caller). With one rank there is nothing to
hang on, and the exception is raised as usual.

For tests only, `MpiCommunicator(fail_rank=r)` makes rank r raise an
ExecutionError at the start of every guarded execution, so they can check that a
failing rank never hangs the job (tests/mpi_scripts/failing_rank.py). Nothing
reads the environment.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError, FuserliteError
from fuserlite.ir.types import ReductionOpType
from fuserlite.plan.blocks import chunk_bounds
from fuserlite.program.communication import Communication
from fuserlite.runtime.communicator import (
    Buffers,
    BufferSpec,
    Communicator,
    Message,
    Team,
    check_teams,
    contiguous,
    fold,
    split_even,
)
from fuserlite.runtime.dispatch import teams_of

ABORT_GRACE_S = 0.5


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ExecutionError(
            "the mpi backend needs mpi4py and an MPI library: pip install 'fuserlite[mpi]' "
            "(mpi4py and mpich), then launch with mpiexec -n D"
        ) from exc
    return MPI


def _wire(a: np.ndarray | None) -> np.ndarray | None:
    """`a` as MPI can describe it: a numpy extension dtype (ml_dtypes' bfloat16, which
    mpi4py has no datatype for) as a view of its bits, unsigned integers of its size."""
    if a is None or a.dtype.kind != "V":
        return a
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


class MpiCommunicator(Communicator):
    """Rank r of COMM_WORLD is device r; each process hosts exactly one device."""

    name = "mpi"

    def __init__(
        self, comm=None, *, abort_on_error: bool = True, fail_rank: int | None = None
    ) -> None:
        """`fail_rank` is for tests: that rank fails every guarded execution on purpose."""
        self.MPI = _mpi()
        self.world = comm if comm is not None else self.MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.size = self.world.Get_size()
        self.abort_on_error = abort_on_error
        self.fail_rank = fail_rank
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
        sub = self.world.Split(color, key)
        for i, devices in enumerate(new):
            self._teams[devices] = sub if i == color else None

    def release(self) -> None:
        """Free every team communicator (collective: every rank calls it)."""
        for comm in self._teams.values():
            if comm is not None and comm is not self.world:
                comm.Free()
        self._teams = {tuple(range(self.size)): self.world}

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
            what = (
                "error"
                if isinstance(exc, FuserliteError)
                else f"internal error: {type(exc).__name__}"
            )
            text = str(exc)
            prefix = "" if text.startswith(f"rank {self.rank}:") else f"rank {self.rank}: "
            print(f"{what}: {prefix}{text}", file=sys.stderr, flush=True)
            # mpiexec forwards our stderr through its proxy, which an abort tears down:
            # give it a moment to pass the message on (this path ends the job anyway).
            time.sleep(ABORT_GRACE_S)
            self.world.Abort(1)
            os._exit(1)  # MPICH's Abort can return before the process manager kills us

    def collect(self, local: dict[int, list]) -> dict[int, list] | None:
        """Every rank's per-device outputs, on rank 0; None on the other ranks."""
        parts = self.world.gather(local, root=0)
        if parts is None:
            return None
        return {d: outs for part in parts for d, outs in part.items()}

    def is_host(self) -> bool:
        return self.rank == 0

    def hosted(self, devices) -> list[int]:
        return [self.rank] if self.rank in devices else []

    # -- collectives ------------------------------------------------------------------
    def allgather(self, teams: Sequence[Team], bufs: Buffers) -> Buffers:
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        send = contiguous(bufs[self.rank])
        recv = np.empty((len(team.members) * send.shape[0], *send.shape[1:]), send.dtype)
        self.bytes_sent += send.nbytes
        comm.Allgather(_wire(send), _wire(recv))
        return {self.rank: recv}

    def alltoall(self, teams: Sequence[Team], bufs: Buffers) -> dict[int, list[np.ndarray]]:
        return self._parts(teams, bufs, "AllToAll")

    def _parts(
        self, teams: Sequence[Team], bufs: Buffers, what: str
    ) -> dict[int, list[np.ndarray]]:
        """The AllToAll of axis-0 parts: {this rank: part j of every member, in order}."""
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        d, send = len(team.members), contiguous(bufs[self.rank])
        split_even(send, d, f"rank {self.rank}: {what} over team {list(team.members)}")
        recv = np.empty_like(send)
        self.bytes_sent += send.nbytes * (d - 1) // d
        comm.Alltoall(_wire(send), _wire(recv))
        return {self.rank: np.split(recv, d, axis=0)}

    def allreduce(self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType) -> Buffers:
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
        comm.Alltoallv(
            self._v(flat, counts, displs), self._v(got, [m] * d, [i * m for i in range(d)])
        )
        part = fold([got[i * m : (i + 1) * m] for i in range(d)], op)
        whole = np.empty(flat.size, send.dtype)
        comm.Allgatherv(_wire(part), self._v(whole, counts, displs))
        self.bytes_sent += (flat.size - m + (d - 1) * m) * send.itemsize
        return {self.rank: whole.reshape(send.shape)}

    def reduce_scatter(self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType) -> Buffers:
        """Member j folds part j of every member's buffer, in member order (an AllToAll)."""
        return {
            d: fold(parts, op) for d, parts in self._parts(teams, bufs, "ReduceScatter").items()
        }

    def broadcast(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec) -> Buffers:
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        if self.rank == team.root:
            buf = contiguous(bufs[team.root], dtype=spec.dtype)
            self.bytes_sent += buf.nbytes
        else:
            buf = np.empty(spec.shape, spec.dtype)
        comm.Bcast(_wire(buf), root=team.devices.index(team.root))
        return {self.rank: buf} if self.rank in team.members else {}

    def _v(self, array: np.ndarray, counts: list[int], displs: list[int]) -> list:
        """A vector buffer for MPI's *v calls: the array's wire form, counts, displacements."""
        wire = _wire(array)
        return [wire, (counts, displs), self.MPI.Datatype.fromcode(wire.dtype.char)]

    @staticmethod
    def _layout(team: Team, per: int) -> tuple[list[int], list[int]]:
        """Counts and displacements (elements) of one part of `per` per member, in member
        order, for each device of the team's communicator (a root outside gets none)."""
        where = {d: j for j, d in enumerate(team.members)}
        counts = [per if d in where else 0 for d in team.devices]
        return counts, [where.get(d, 0) * per for d in team.devices]

    def scatter(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec) -> Buffers:
        mine = self._mine(teams)
        if mine is None:
            return {}
        team, comm = mine
        d = len(team.members)
        what = f"rank {self.rank}: Scatter over team {list(team.devices)}"
        part = split_even(np.empty(spec.shape, spec.dtype), d, what)[0].shape
        counts, displs = self._layout(team, int(np.prod(part, dtype=np.int64)))
        send = None
        if self.rank == team.root:
            whole = contiguous(bufs[team.root], dtype=spec.dtype)
            send = self._v(whole, counts, displs)
            kept = counts[team.devices.index(team.root)] * whole.itemsize
            self.bytes_sent += whole.nbytes - kept
        mine_shape = part if self.rank in team.members else (0, *part[1:])
        recv = np.empty(mine_shape, spec.dtype)
        comm.Scatterv(send, _wire(recv), root=team.devices.index(team.root))
        return {self.rank: recv} if self.rank in team.members else {}

    def _to_root(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec):
        """(team, the members' buffers of `spec` in member order) at each root; None elsewhere."""
        mine = self._mine(teams)
        if mine is None:
            return None
        team, comm = mine
        per = int(np.prod(spec.shape, dtype=np.int64))
        counts, displs = self._layout(team, per)
        if self.rank in team.members:
            send = contiguous(bufs[self.rank], dtype=spec.dtype)
        else:
            send = np.empty((0,), spec.dtype)
        whole = recv = None
        if self.rank == team.root:
            whole = np.empty((len(team.members), *spec.shape), spec.dtype)
            recv = self._v(whole, counts, displs)
        else:
            self.bytes_sent += send.nbytes
        comm.Gatherv(_wire(send), recv, root=team.devices.index(team.root))
        if whole is None:
            return None
        return team, [whole[j : j + 1].reshape(spec.shape) for j in range(len(team.members))]

    def gather(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec) -> Buffers:
        got = self._to_root(teams, bufs, spec)
        if got is None:
            return {}
        team, parts = got
        return {team.root: np.concatenate(parts, axis=0)}

    def reduce(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Buffers:
        """The root folds its members' buffers in member order (gathered first), as sim does."""
        got = self._to_root(teams, bufs, spec)
        if got is None:
            return {}
        team, parts = got
        return {team.root: fold(parts, op)}

    def exchange(
        self, messages: Sequence[Message], payloads: dict[int, np.ndarray]
    ) -> dict[int, np.ndarray]:
        """Non-blocking sends and receives on the world communicator, one tag: MPI keeps
        the order of messages between two ranks, and both sides walk `messages` in order."""
        out: dict[int, np.ndarray] = {}
        requests, sent = [], []  # `sent` keeps send buffers alive until Waitall
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
                requests.append(self.world.Isend(_wire(sent[-1]), dest=m.dst, tag=_SENDRECV_TAG))
            elif m.dst == self.rank:
                out[i] = np.empty(m.spec.shape, m.spec.dtype)
                requests.append(self.world.Irecv(_wire(out[i]), source=m.src, tag=_SENDRECV_TAG))
        self.MPI.Request.Waitall(requests)
        return out


_SENDRECV_TAG = 7301
