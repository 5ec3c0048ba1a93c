"""MPI's vector (*v) calls for the mpi backend: buffers, counts and displacements.

The collectives of `backends.mpi` move parts of given rows with them: the even
ones where a part is not the buffer over the team size (Allreduce's flat chunks,
Scatter's and Gather's team with a root outside it), and the variable-size ones
of uneven chunks (docs/design.md §5): Allgatherv, Alltoallv (an AllToAll's and a
ReduceScatter's), Scatterv and Gatherv of each member's own rows. A count is in
elements of the buffer's dtype; `wire` gives MPI a dtype it has (bfloat16 as bits).
Operations are posted non-blocking: the caller waits for the request (the watchdog).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fuserlite.runtime.communicator import Team


def wire(a: np.ndarray | None) -> np.ndarray | None:
    """`a` as MPI can describe it: a numpy extension dtype (ml_dtypes' bfloat16, which
    mpi4py has no datatype for) as a view of its bits, unsigned integers of its size."""
    if a is None or a.dtype.kind != "V":
        return a
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def vector(MPI, array: np.ndarray, counts: list[int], displs: list[int]) -> list:
    """A vector buffer for MPI's *v calls: the array's wire form, counts, displacements."""
    w = wire(array)
    return [w, (counts, displs), MPI.Datatype.fromcode(w.dtype.char)]


def row_counts(rows: Sequence[int], rest: tuple[int, ...]) -> list[int]:
    """Elements of parts of `rows` rows of an array whose other axes are `rest`."""
    per_row = int(np.prod(rest, dtype=np.int64))
    return [r * per_row for r in rows]


def offsets(sizes: list[int]) -> list[int]:
    """Each part's displacement: the sizes before it."""
    return [sum(sizes[:j]) for j in range(len(sizes))]


def layout(team: Team, per: int | list[int]) -> tuple[list[int], list[int]]:
    """Counts and displacements (elements) of one part of `per` per member (or of each
    member's own count, in member order), for each device of the team's communicator
    (a root outside gets none)."""
    sizes = per if isinstance(per, list) else [per] * len(team.members)
    where = {d: j for j, d in enumerate(team.members)}
    starts = offsets(sizes)
    return (
        [sizes[where[d]] if d in where else 0 for d in team.devices],
        [starts[where[d]] if d in where else 0 for d in team.devices],
    )


def allgatherv(MPI, comm, send: np.ndarray, rows: list[int]) -> tuple[object, np.ndarray]:
    """Post the joining of every member's own rows (`rows`, in member order) along axis 0:
    the MPI_Iallgatherv's request and the buffer it fills."""
    recv = np.empty((sum(rows), *send.shape[1:]), send.dtype)
    sizes = row_counts(rows, send.shape[1:])
    return comm.Iallgatherv(wire(send), vector(MPI, recv, sizes, offsets(sizes))), recv


def alltoallv(
    MPI, comm, send: np.ndarray, rows: list[int], shapes: list[tuple[int, ...]], me: int
) -> tuple[object, np.ndarray, list[tuple[int, ...]], int]:
    """Post the MPI_Ialltoallv where part j of `send` (axis 0) has member j's `rows`, and
    from member s come member `me`'s rows of s's buffer (of shape shapes[s]). Its
    request, the flat buffer it fills, the shapes of the parts in it (`received` cuts
    them out once it completes) and the elements this member sends to the others."""
    sent = row_counts(rows, send.shape[1:])
    shapes_in = [(rows[me], *shape[1:]) for shape in shapes]
    got = [int(np.prod(shape, dtype=np.int64)) for shape in shapes_in]
    recv = np.empty(sum(got), send.dtype)
    request = comm.Ialltoallv(
        vector(MPI, send.reshape(-1), sent, offsets(sent)), vector(MPI, recv, got, offsets(got))
    )
    return request, recv, shapes_in, send.size - sent[me]


def received(recv: np.ndarray, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """The parts of shapes `shapes`, one after another in the flat buffer `recv` (views)."""
    sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
    return [p.reshape(shape) for p, shape in zip(np.split(recv, np.cumsum(sizes)[:-1]), shapes)]
