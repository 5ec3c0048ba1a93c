"""Executing a move between meshes (`plan.cross_mesh.Move`) on any backend.

Every source device holds its box of the global tensor (of addend `term` for a
partial source) as a local array; the move's transfers are point-to-point
messages of sub-boxes (`Communicator.exchange`). Each destination assembles
its box per addend from what it holds itself and what it receives, and folds
the addends in term order (`communicator.fold`, as every reduction does). Only
the transport differs between backends: the bits are the same on sim and mpi.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.types import ReductionOpType
from fuserlite.plan.blocks import Box, box_text, intersect
from fuserlite.plan.cross_mesh import Holding, Move
from fuserlite.runtime.communicator import (
    Buffers,
    BufferSpec,
    Communicator,
    Message,
    Operation,
    contiguous,
    fold,
)


def extents(box: Box) -> tuple[int, ...]:
    """The shape of a box."""
    return tuple(hi - lo for lo, hi in box)


def within(box: Box, outer: Box) -> tuple[slice, ...]:
    """`box` as slices of an array that holds `outer` (box lies inside outer)."""
    return tuple(slice(lo - o, hi - o) for (lo, hi), (o, _) in zip(box, outer))


def run_move(
    move: Move,
    sources: Sequence[Holding],
    destinations: Sequence[tuple[int, Box]],
    backend: Communicator,
    bufs: Buffers,
    dtype: np.dtype,
    op: ReductionOpType | None = None,
) -> Buffers:
    """Each hosted destination's box, from `bufs` (each hosted source's local array)."""
    return backend.run(move_operation(move, sources, destinations, backend, bufs, dtype, op))


def move_operation(
    move: Move,
    sources: Sequence[Holding],
    destinations: Sequence[tuple[int, Box]],
    backend: Communicator,
    bufs: Buffers,
    dtype: np.dtype,
    op: ReductionOpType | None = None,
) -> Operation:
    """`run_move` as an Operation (communicator's docstring): post it, wait for it later."""
    held = {h.device: h for h in sources}
    for d in backend.hosted(list(held)):
        if d not in bufs or bufs[d].shape != extents(held[d].box):
            got = "no buffer" if d not in bufs else f"a buffer of shape {list(bufs[d].shape)}"
            raise ExecutionError(
                f"a move between meshes: source device {d} holds {got}, expected its box "
                f"{box_text(held[d].box)} (shape {list(extents(held[d].box))})"
            )
    spec = lambda t: BufferSpec(extents(t.box), np.dtype(dtype))  # noqa: E731
    messages = [Message(t.src, t.dst, spec(t)) for t in move.transfers]
    payloads = {
        i: contiguous(bufs[t.src][within(t.box, held[t.src].box)])
        for i, t in enumerate(move.transfers)
        if t.src in bufs
    }
    got = yield from backend.iexchange(messages, payloads)
    terms = sorted({h.term for h in sources})
    if len(terms) > 1 and op is None:
        raise ExecutionError("a move of a partial tensor needs its reduction op to add the terms")
    out = {}
    hosted = set(backend.hosted([d for d, _ in destinations]))
    for dst, need in destinations:
        if dst not in hosted:
            continue
        arrived = [(t, got[i]) for i, t in enumerate(move.transfers) if t.dst == dst]
        parts = [_assemble(dst, need, term, held.get(dst), bufs, arrived, dtype) for term in terms]
        out[dst] = parts[0] if len(parts) == 1 else fold(parts, op)
    return out


def _assemble(dst, need: Box, term: int, own: Holding | None, bufs, arrived, dtype) -> np.ndarray:
    """Addend `term` of destination `dst`'s box: its own part and the parts it received."""
    out = np.empty(extents(need), dtype)
    filled = np.zeros(out.shape, bool)  # a plan that leaves a gap must fail, not return garbage
    if own is not None and own.term == term:
        common = intersect(own.box, need)
        if common is not None:
            out[within(common, need)] = bufs[dst][within(common, own.box)]
            filled[within(common, need)] = True
    for t, array in arrived:
        if t.term == term:
            out[within(t.box, need)] = array
            filled[within(t.box, need)] = True
    if not filled.all():
        raise ExecutionError(
            f"a move between meshes leaves part of destination device {dst}'s box "
            f"{box_text(need)} (addend {term}) unfilled: the move does not fit these holdings"
        )
    return out
