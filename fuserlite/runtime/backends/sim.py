"""The `sim` backend: every device of the mesh lives in this process."""

from __future__ import annotations

import numpy as np

from fuserlite.ir.types import ReductionOpType
from fuserlite.runtime.communicator import Buffers, BufferSpec, Communicator, canonical, combine


def _reduce(arrays: list[np.ndarray], op: ReductionOpType) -> np.ndarray:
    """Left to right, the same order on every device: results are deterministic."""
    out = canonical(np.array(arrays[0]))  # a new array (0-d stays an array)
    for a in arrays[1:]:
        out = combine(op, out, a)
    return out


class SimCommunicator(Communicator):
    """An in-process mesh: collectives are numpy concatenations and reductions."""

    name = "sim"

    def hosted(self, devices) -> list[int]:
        return list(devices)

    def allgather(self, team, bufs: Buffers) -> Buffers:
        whole = np.concatenate([bufs[d] for d in team], axis=0)
        return {d: whole for d in team}

    def alltoall(self, team, bufs: Buffers) -> dict[int, list[np.ndarray]]:
        chunks = {d: np.split(bufs[d], len(team), axis=0) for d in team}
        return {dst: [chunks[src][j] for src in team] for j, dst in enumerate(team)}

    def allreduce(self, team, bufs: Buffers, op: ReductionOpType) -> Buffers:
        total = _reduce([bufs[d] for d in team], op)
        return {d: total for d in team}

    def reduce_scatter(self, team, bufs: Buffers, op: ReductionOpType) -> Buffers:
        total = _reduce([bufs[d] for d in team], op)
        return dict(zip(team, np.split(total, len(team), axis=0)))

    def broadcast(self, team, root: int, bufs: Buffers, spec: BufferSpec) -> Buffers:
        return {d: bufs[root] for d in team}

    def scatter(self, team, root: int, receivers, bufs: Buffers, spec: BufferSpec) -> Buffers:
        return dict(zip(receivers, np.split(bufs[root], len(receivers), axis=0)))

    def gather(self, team, root: int, senders, bufs: Buffers, spec: BufferSpec) -> Buffers:
        return {root: np.concatenate([bufs[d] for d in senders], axis=0)}

    def reduce(
        self, team, root: int, senders, bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Buffers:
        return {root: _reduce([bufs[d] for d in senders], op)}

    def sendrecv(self, pairs, bufs: Buffers, spec: BufferSpec) -> Buffers:
        return {dst: bufs[src] for src, dst in pairs}
