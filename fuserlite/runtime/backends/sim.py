"""The `sim` backend: every device of the mesh lives in this process."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fuserlite.ir.types import ReductionOpType
from fuserlite.runtime.communicator import (
    Buffers,
    BufferSpec,
    Communicator,
    Message,
    Team,
    check_teams,
    fold,
    parts,
)


class SimCommunicator(Communicator):
    """An in-process mesh: collectives are numpy concatenations and folds, team by team."""

    name = "sim"

    def hosted(self, devices) -> list[int]:
        return list(devices)

    def allgather(self, teams: Sequence[Team], bufs: Buffers, rows=None) -> Buffers:
        out = {}
        for t in check_teams(teams, "Allgather"):
            whole = np.concatenate([bufs[d] for d in t.members], axis=0)  # equal or not
            out |= {d: whole for d in t.members}
        return out

    def alltoall(
        self, teams: Sequence[Team], bufs: Buffers, rows=None, shapes=None
    ) -> dict[int, list[np.ndarray]]:
        out = {}
        for t in check_teams(teams, "AllToAll"):
            chunks = {d: parts(bufs[d], t, rows, "AllToAll") for d in t.members}
            out |= {dst: [chunks[src][j] for src in t.members] for j, dst in enumerate(t.members)}
        return out

    def allreduce(self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType) -> Buffers:
        out = {}
        for t in check_teams(teams, "Allreduce"):
            total = fold([bufs[d] for d in t.members], op)
            out |= {d: total for d in t.members}
        return out

    def reduce_scatter(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, rows=None
    ) -> Buffers:
        out = {}
        for t in check_teams(teams, "ReduceScatter"):
            total = fold([bufs[d] for d in t.members], op)
            out |= dict(zip(t.members, parts(total, t, rows, "ReduceScatter")))
        return out

    def broadcast(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec) -> Buffers:
        return {d: bufs[t.root] for t in check_teams(teams, "Broadcast") for d in t.members}

    def scatter(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None) -> Buffers:
        out = {}
        for t in check_teams(teams, "Scatter"):
            out |= dict(zip(t.members, parts(bufs[t.root], t, rows, "Scatter")))
        return out

    def gather(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None) -> Buffers:
        return {
            t.root: np.concatenate([bufs[d] for d in t.members], axis=0)
            for t in check_teams(teams, "Gather")
        }

    def reduce(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Buffers:
        return {
            t.root: fold([bufs[d] for d in t.members], op) for t in check_teams(teams, "Reduce")
        }

    def exchange(
        self, messages: Sequence[Message], payloads: dict[int, np.ndarray]
    ) -> dict[int, np.ndarray]:
        return {i: payloads[i] for i in range(len(messages))}
