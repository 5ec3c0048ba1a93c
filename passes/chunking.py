"""How lower-communications moves the chunks of an axis its mesh does not divide.

Chunks are torch.chunk's (plan.blocks): n rows over d devices give chunks of c =
ceil(n/d) rows, the trailing ones short or empty. A collective that cuts such an
axis (Allgather, Gather, AllToAll, ReduceScatter, Scatter) either pads every chunk
to c rows and runs the plain collective, or runs the variable-size one (Allgatherv,
Alltoallv, Reduce_scatter with counts, Scatterv, Gatherv) on the real rows; `sized`
picks one and gives its bytes per device (docs/design.md §5).
"""

from __future__ import annotations

from typing import Literal

from fuserlite.ir.sharding import sharded_data_axis
from fuserlite.ir.tensor import TensorView
from fuserlite.plan.blocks import axis_rows
from fuserlite.program.communication import CommKind, Sizing, chunks_unevenly

# A variable-size collective must know every member's count and displacement (MPI's
# Allgatherv, Alltoallv, ... take both per member): 2 x 8 bytes per team member, beyond
# its data. On a tie, or where padding costs less than that, the plain collective on
# padded chunks is the cheaper one.
COUNT_BYTES = 16

Chunks = Literal["cheaper", "padded", "variable"]


def uneven_bytes(kind: CommKind, inp: TensorView, out: TensorView) -> tuple[int, int] | None:
    """(padded, variable) bytes sent per device of a collective over an axis its mesh
    does not divide, or None where every chunk is equal or nothing is chunked.

    Chunks are torch.chunk's (plan.blocks): n rows over d devices give chunks of c =
    ceil(n/d) rows, the last short or empty. Padded, every chunk moves c rows: the
    even bound plus at most the padding, d*c - n rows. Variable, exactly the n rows."""
    if not chunks_unevenly(kind, inp, out):
        return None
    a_in, a_out = sharded_data_axis(inp), sharded_data_axis(out)
    if kind in (CommKind.Allgather, CommKind.Gather):
        n, d = inp.shape[a_in], inp.mesh.size
        row, c = inp.nbytes // n, axis_rows(n, d)[0]
        if kind is CommKind.Gather:  # each sender its chunk
            return c * row, n * row // d
        return (d - 1) * c * row, (d - 1) * n * row // d
    if kind is CommKind.ReduceScatter:
        n, d = out.shape[a_out], out.mesh.size
        row, c = out.nbytes // n, axis_rows(n, d)[0]
        return (d - 1) * c * row, (d - 1) * n * row // d
    if kind is CommKind.AllToAll:
        d = inp.mesh.size
        n_in, n_out = inp.shape[a_in], inp.shape[a_out]
        cell = inp.nbytes // (n_in * n_out)
        r_in, r_out = axis_rows(n_in, d), axis_rows(n_out, d)
        kept = sum(i * o for i, o in zip(r_in, r_out))  # what each device keeps, summed
        return (d - 1) * r_in[0] * r_out[0] * cell, (n_in * n_out - kept) * cell // d
    n, mesh = out.shape[a_out], out.mesh  # a Scatter
    row, rows = inp.nbytes // n, axis_rows(n, mesh.size)
    root = inp.mesh.devices[0]
    own = rows[mesh.index(root)] if root in mesh else 0
    padded = (mesh.size * rows[0] - (rows[0] if root in mesh else 0)) * row
    return padded, (n - own) * row


def sized(
    kind: CommKind, inp: TensorView, out: TensorView, even: int, chunks: Chunks
) -> tuple[Sizing, int]:
    """How a communication moves uneven chunks, and the bytes it then sends per device
    (`even`: its bytes where the chunks are equal): `chunks` forces padded or variable;
    "cheaper" picks by bytes (COUNT_BYTES). Over several mesh axes the chunks are padded
    (the planner's bytes count the largest chunk)."""
    if not chunks_unevenly(kind, inp, out):
        return Sizing.even, even
    if inp.mesh.rank > 1 or out.mesh.rank > 1:
        return Sizing.padded, even
    padded, variable = uneven_bytes(kind, inp, out)
    team = max(inp.mesh.size, out.mesh.size)
    if chunks == "padded" or (chunks == "cheaper" and padded <= variable + COUNT_BYTES * team):
        return Sizing.padded, padded
    return Sizing.variable, variable
