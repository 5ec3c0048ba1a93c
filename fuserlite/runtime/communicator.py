"""The Communicator interface and how each Communication runs on it.

A backend moves numpy buffers between devices. Every method takes and returns
{device: array} for the devices this process hosts (all of them for `sim`,
one for `mpi`), and works on axis 0: the executor first lays each buffer out
with its sharded axis outermost, as assign-layouts pinned it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.types import DType, ReductionOpType
from fuserlite.program.communication import CommKind, Communication

Buffers = dict[int, np.ndarray]


@dataclass(frozen=True)
class BufferSpec:
    """Shape and dtype of each sender's buffer, for receivers that hold none yet."""

    shape: tuple[int, ...]
    dtype: np.dtype


class Communicator:
    """Collectives over teams of devices; subclasses implement the data movement."""

    name = "abstract"

    # -- multi-process hooks: the defaults suit a backend that hosts every device --
    def prepare(self, devices: Sequence[int], communications: Sequence[Communication]) -> None:
        """Called once per executor, before any communication, with the program's devices."""

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

    def allgather(self, team, bufs: Buffers) -> Buffers:
        raise NotImplementedError

    def alltoall(self, team, bufs: Buffers) -> dict[int, list[np.ndarray]]:
        raise NotImplementedError

    def allreduce(self, team, bufs: Buffers, op: ReductionOpType) -> Buffers:
        raise NotImplementedError

    def reduce_scatter(self, team, bufs: Buffers, op: ReductionOpType) -> Buffers:
        raise NotImplementedError

    def broadcast(self, team, root: int, bufs: Buffers, spec: BufferSpec) -> Buffers:
        raise NotImplementedError

    def scatter(self, team, root: int, receivers, bufs: Buffers, spec: BufferSpec) -> Buffers:
        raise NotImplementedError

    def gather(self, team, root: int, senders, bufs: Buffers, spec: BufferSpec) -> Buffers:
        raise NotImplementedError

    def reduce(
        self, team, root: int, senders, bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Buffers:
        raise NotImplementedError

    def sendrecv(self, pairs, bufs: Buffers, spec: BufferSpec) -> Buffers:
        raise NotImplementedError


def combine(op: ReductionOpType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a op b element by element: how every backend combines partial results of devices.

    Commutative bit for bit, and for max, integers and bools associative too, so any
    reduction tree (MPI picks its own) gives the bits of the left-to-right one. max
    propagates NaN, as np.maximum does, and max(-0.0, 0.0) is 0.0 in either order;
    every NaN either op makes is the one quiet NaN (`canonical`). Float sums round at
    each step, so only their order decides the last bit.
    """
    with np.errstate(all="ignore"):
        if op is ReductionOpType.sum:
            out = np.add(a, b)
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
    return DType.from_numpy(dtype).is_float


def identity(dtype: np.dtype, op: ReductionOpType) -> np.generic:
    """The neutral element of `op` (ReductionOpType.identity) as a numpy scalar of `dtype`."""
    return dtype.type(op.identity(DType.from_numpy(dtype)))


def chunk(a: np.ndarray, axis: int, index: int, parts: int) -> np.ndarray:
    """Part `index` of `parts` equal parts of `a` along `axis`: a view, never a copy."""
    size = a.shape[axis] // parts
    where = [slice(None)] * a.ndim
    where[axis] = slice(index * size, (index + 1) * size)
    return a[tuple(where)]


def contiguous(a: np.ndarray, dtype=None) -> np.ndarray:
    """A C-contiguous array with a's shape (np.ascontiguousarray turns 0-d into 1-d)."""
    return np.require(a, dtype=dtype, requirements="C")


def _front(a: np.ndarray, axis: int | None) -> np.ndarray:
    return contiguous(a if axis is None else np.moveaxis(a, axis, 0))


def _back(a: np.ndarray, axis: int | None) -> np.ndarray:
    return a if axis is None else np.moveaxis(a, 0, axis)


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
    k, team = comm.kind, comm.team
    in_mesh, out_mesh = comm.input.mesh.devices, comm.output.mesh.devices
    senders = backend.hosted(in_mesh)
    _check_buffers(comm, bufs, senders)
    a_in, a_out = comm.in_axis, comm.out_axis
    if k is CommKind.LocalSlice:
        return {
            d: chunk(bufs[d], a_out, out_mesh.index(d), len(out_mesh))
            for d in backend.hosted(out_mesh)
        }
    if k is CommKind.Allgather:
        got = backend.allgather(team, {d: _front(bufs[d], a_in) for d in senders})
        return {d: _back(v, a_in) for d, v in got.items()}
    if k is CommKind.AllToAll:
        moved = {d: _front(bufs[d], a_out) for d in senders}
        concat_at = a_in + 1 if a_in < a_out else a_in
        got = backend.alltoall(team, moved)
        return {
            d: _back(np.concatenate(chunks, axis=concat_at), a_out) for d, chunks in got.items()
        }
    if k is CommKind.Allreduce:
        return backend.allreduce(team, {d: contiguous(bufs[d]) for d in senders}, comm.op)
    if k is CommKind.ReduceScatter:
        got = backend.reduce_scatter(team, {d: _front(bufs[d], a_out) for d in senders}, comm.op)
        return {d: _back(v, a_out) for d, v in got.items()}
    if k is CommKind.Broadcast:
        got = backend.broadcast(team, comm.root, {d: bufs[d] for d in senders}, _spec(comm, None))
        return {d: v for d, v in got.items() if d in out_mesh}
    if k is CommKind.Scatter:
        moved = {d: _front(bufs[d], a_out) for d in senders}
        got = backend.scatter(team, comm.root, out_mesh, moved, _spec(comm, a_out))
        return {d: _back(v, a_out) for d, v in got.items()}
    if k is CommKind.Gather:
        moved = {d: _front(bufs[d], a_in) for d in senders}
        got = backend.gather(team, comm.root, in_mesh, moved, _spec(comm, a_in))
        return {d: _back(v, a_in) for d, v in got.items()}
    if k is CommKind.Reduce:
        held = {d: bufs[d] for d in senders}
        return backend.reduce(team, comm.root, in_mesh, held, comm.op, _spec(comm, None))
    if k is CommKind.SendRecv:
        pairs = list(zip(in_mesh, out_mesh))
        return backend.sendrecv(pairs, {d: bufs[d] for d in senders}, _spec(comm, None))
    raise ExecutionError(f"no implementation for communication kind {k.value}")
