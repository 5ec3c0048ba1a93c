"""The `mpi` backend: one process per device, collectives through mpi4py.

Launch with `mpiexec -n D`; rank r is device r. Every method moves numpy
buffers with mpi4py's buffer (upper-case) calls; bfloat16, which MPI has no
datatype for, moves as its bits (uint16) and reduces as bfloat16. A team that is not the whole
world in rank order gets a sub-communicator, made once by `prepare` with
`COMM_WORLD.Split`, which every rank calls for every team in program order, so
no rank waits on a split the others skip. SendRecv pairs use point-to-point
messages on the world communicator. Reductions combine partial results with
user-defined ops that compute `communicator.combine`, the same function the sim
backend folds left to right, so both agree bit for bit wherever the order cannot
matter (max, integers, bools) and whatever tree MPI picks.

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

from fuserlite.ir.errors import ExecutionError, FuserliteError
from fuserlite.ir.types import ReductionOpType
from fuserlite.program.communication import CommKind, Communication
from fuserlite.runtime.communicator import (
    Buffers,
    BufferSpec,
    Communicator,
    canonical,
    combine,
    contiguous,
    identity,
)

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


# per process, one per (op, dtype) a program reduces: MPI limits how many exist
_USER_OPS: dict[tuple[ReductionOpType, np.dtype], object] = {}


def _user_op(MPI, op: ReductionOpType, dtype: np.dtype):
    """The MPI op that computes communicator.combine on `dtype`, as sim does.

    MPI's own MAX drops NaN depending on which rank holds it and is undefined for bool
    (so is SUM); combine is commutative, so MPI may apply it in any order. The op
    reads its buffers as `dtype` whatever datatype MPI was told: bfloat16 travels as
    uint16 (see `_wire`) but is combined as bfloat16.
    """
    key = (op, np.dtype(dtype))
    if key not in _USER_OPS:

        def apply(inbuf, inoutbuf, datatype) -> None:
            mine = np.frombuffer(inoutbuf, key[1])
            mine[...] = combine(op, np.frombuffer(inbuf, key[1]), mine)

        _USER_OPS[key] = MPI.Op.Create(apply, commute=True)
    return _USER_OPS[key]


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

        Collective over COMM_WORLD: every rank must call it with the same program.
        """
        devices = sorted(devices)
        if devices != list(range(self.size)):
            raise ExecutionError(
                f"rank {self.rank}: the program runs on devices {devices} but MPI started "
                f"{self.size} rank(s); rank r is device r, so launch it with "
                f"mpiexec -n {len(devices)} and a mesh of devices 0..{len(devices) - 1}"
            )
        for comm in communications:
            if comm.kind.is_collective and comm.kind is not CommKind.SendRecv:
                self._split(comm.team)

    def _split(self, team: tuple[int, ...]) -> None:
        if team in self._teams:
            return
        member = self.rank in team
        color = 0 if member else self.MPI.UNDEFINED
        sub = self.world.Split(color, team.index(self.rank) if member else 0)
        self._teams[team] = sub if member else None

    def _team(self, team: Sequence[int]):
        """This rank's communicator for `team`, or None if the rank is not in it."""
        team = tuple(team)
        if team not in self._teams:
            raise ExecutionError(
                f"rank {self.rank}: no communicator for team {list(team)}; the executor creates "
                "them in prepare() (collectively, on every rank) before running"
            )
        return self._teams[team]

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
    def allgather(self, team, bufs: Buffers) -> Buffers:
        comm = self._team(team)
        if comm is None:
            return {}
        send = contiguous(bufs[self.rank])
        recv = np.empty((len(team) * send.shape[0], *send.shape[1:]), send.dtype)
        self.bytes_sent += send.nbytes
        comm.Allgather(_wire(send), _wire(recv))
        return {self.rank: recv}

    def _check_divisible(self, kind: str, team, send: np.ndarray) -> None:
        if send.shape[0] % len(team):
            raise ExecutionError(
                f"rank {self.rank}: {kind} over team {list(team)}: axis extent "
                f"{send.shape[0]} is not divisible by {len(team)} devices"
            )

    def alltoall(self, team, bufs: Buffers) -> dict[int, list[np.ndarray]]:
        comm = self._team(team)
        if comm is None:
            return {}
        send = contiguous(bufs[self.rank])
        self._check_divisible("AllToAll", team, send)
        recv = np.empty_like(send)
        self.bytes_sent += send.nbytes * (len(team) - 1) // len(team)
        comm.Alltoall(_wire(send), _wire(recv))
        return {self.rank: np.split(recv, len(team), axis=0)}

    def allreduce(self, team, bufs: Buffers, op: ReductionOpType) -> Buffers:
        comm = self._team(team)
        if comm is None:
            return {}
        send = contiguous(bufs[self.rank])
        recv = np.empty_like(send)
        self.bytes_sent += send.nbytes
        comm.Allreduce(_wire(send), _wire(recv), op=_user_op(self.MPI, op, send.dtype))
        return {self.rank: canonical(recv)}

    def reduce_scatter(self, team, bufs: Buffers, op: ReductionOpType) -> Buffers:
        comm = self._team(team)
        if comm is None:
            return {}
        send = contiguous(bufs[self.rank])
        self._check_divisible("ReduceScatter", team, send)
        recv = np.empty((send.shape[0] // len(team), *send.shape[1:]), send.dtype)
        self.bytes_sent += send.nbytes * (len(team) - 1) // len(team)
        comm.Reduce_scatter_block(_wire(send), _wire(recv), op=_user_op(self.MPI, op, send.dtype))
        return {self.rank: canonical(recv)}

    def broadcast(self, team, root: int, bufs: Buffers, spec: BufferSpec) -> Buffers:
        comm = self._team(team)
        if comm is None:
            return {}
        if self.rank == root:
            buf = contiguous(bufs[root], dtype=spec.dtype)
            self.bytes_sent += buf.nbytes
        else:
            buf = np.empty(spec.shape, spec.dtype)
        comm.Bcast(_wire(buf), root=tuple(team).index(root))
        return {self.rank: buf}

    def _chunked(self, team, members, shape, what: str):
        """Counts and displacements (in elements) of one axis-0 chunk per member of `team`."""
        if shape[0] % len(members):
            raise ExecutionError(
                f"rank {self.rank}: {what} over team {list(team)}: axis extent {shape[0]} "
                f"is not divisible by {len(members)} devices"
            )
        rows = shape[0] // len(members)
        per = rows * int(np.prod(shape[1:], dtype=np.int64))
        members = list(members)
        counts = [per if d in members else 0 for d in team]
        displs = [members.index(d) * per if d in members else 0 for d in team]
        return (rows, *shape[1:]), counts, displs

    def scatter(self, team, root: int, receivers, bufs: Buffers, spec: BufferSpec) -> Buffers:
        comm = self._team(team)
        if comm is None:
            return {}
        chunk, counts, displs = self._chunked(team, receivers, spec.shape, "Scatter")
        send = None
        if self.rank == root:
            whole = _wire(contiguous(bufs[root], dtype=spec.dtype))
            send = [whole, (counts, displs), self.MPI.Datatype.fromcode(whole.dtype.char)]
            kept = counts[tuple(team).index(root)] * whole.itemsize
            self.bytes_sent += whole.nbytes - kept
        mine = chunk if self.rank in receivers else (0, *chunk[1:])
        recv = np.empty(mine, spec.dtype)
        comm.Scatterv(send, _wire(recv), root=tuple(team).index(root))
        return {self.rank: recv} if self.rank in receivers else {}

    def gather(self, team, root: int, senders, bufs: Buffers, spec: BufferSpec) -> Buffers:
        comm = self._team(team)
        if comm is None:
            return {}
        whole_shape = (spec.shape[0] * len(senders), *spec.shape[1:])
        _, counts, displs = self._chunked(team, senders, whole_shape, "Gather")
        if self.rank in senders:
            send = contiguous(bufs[self.rank], dtype=spec.dtype)
        else:
            send = np.empty((0, *spec.shape[1:]), spec.dtype)
        recv = None
        if self.rank == root:
            whole = np.empty(whole_shape, spec.dtype)
            wire = _wire(whole)
            recv = [wire, (counts, displs), self.MPI.Datatype.fromcode(wire.dtype.char)]
        if self.rank != root:
            self.bytes_sent += send.nbytes
        comm.Gatherv(_wire(send), recv, root=tuple(team).index(root))
        return {root: whole} if self.rank == root else {}

    def reduce(
        self, team, root: int, senders, bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Buffers:
        comm = self._team(team)
        if comm is None:
            return {}
        if self.rank in senders:
            send = contiguous(bufs[self.rank], dtype=spec.dtype)
        else:  # a root outside the input mesh contributes the neutral element
            send = np.full(spec.shape, identity(np.dtype(spec.dtype), op), spec.dtype)
        recv = np.empty(spec.shape, spec.dtype) if self.rank == root else None
        if self.rank != root:
            self.bytes_sent += send.nbytes
        mpi_op = _user_op(self.MPI, op, send.dtype)
        comm.Reduce(_wire(send), _wire(recv), op=mpi_op, root=tuple(team).index(root))
        return {root: canonical(recv)} if self.rank == root else {}

    def sendrecv(self, pairs, bufs: Buffers, spec: BufferSpec) -> Buffers:
        out: Buffers = {}
        requests, sent = [], []  # `sent` keeps send buffers alive until Waitall
        for src, dst in pairs:
            if src == self.rank and dst == self.rank:
                out[dst] = bufs[src]
            elif src == self.rank:
                sent.append(contiguous(bufs[src], dtype=spec.dtype))
                self.bytes_sent += sent[-1].nbytes
                requests.append(self.world.Isend(_wire(sent[-1]), dest=dst, tag=_SENDRECV_TAG))
            elif dst == self.rank:
                out[dst] = np.empty(spec.shape, spec.dtype)
                requests.append(self.world.Irecv(_wire(out[dst]), source=src, tag=_SENDRECV_TAG))
        self.MPI.Request.Waitall(requests)
        return out


_SENDRECV_TAG = 7301
