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
    Operation,
    Team,
    check_teams,
    fold,
    parts,
    ready,
)


class SimCommunicator(Communicator):
    """An in-process mesh: collectives are numpy concatenations and folds, team by team,
    done when posted (each operation is `ready` at once)."""

    name = "sim"

    def hosted(self, devices) -> list[int]:
        return list(devices)

    def iallgather(self, teams: Sequence[Team], bufs: Buffers, rows=None) -> Operation:
        out = {}
        for t in check_teams(teams, "Allgather"):
            whole = np.concatenate([bufs[d] for d in t.members], axis=0)  # equal or not
            out |= {d: whole for d in t.members}
        return ready(out)

    def ialltoall(self, teams: Sequence[Team], bufs: Buffers, rows=None, shapes=None) -> Operation:
        out = {}
        for t in check_teams(teams, "AllToAll"):
            chunks = {d: parts(bufs[d], t, rows, "AllToAll") for d in t.members}
            out |= {dst: [chunks[src][j] for src in t.members] for j, dst in enumerate(t.members)}
        return ready(out)

    def iallreduce(self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType) -> Operation:
        out = {}
        for t in check_teams(teams, "Allreduce"):
            total = fold([bufs[d] for d in t.members], op)
            out |= {d: total for d in t.members}
        return ready(out)

    def ireduce_scatter(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, rows=None
    ) -> Operation:
        out = {}
        for t in check_teams(teams, "ReduceScatter"):
            total = fold([bufs[d] for d in t.members], op)
            out |= dict(zip(t.members, parts(total, t, rows, "ReduceScatter")))
        return ready(out)

    def ibroadcast(self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec) -> Operation:
        return ready({d: bufs[t.root] for t in check_teams(teams, "Broadcast") for d in t.members})

    def iscatter(
        self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None
    ) -> Operation:
        out = {}
        for t in check_teams(teams, "Scatter"):
            out |= dict(zip(t.members, parts(bufs[t.root], t, rows, "Scatter")))
        return ready(out)

    def igather(
        self, teams: Sequence[Team], bufs: Buffers, spec: BufferSpec, rows=None
    ) -> Operation:
        return ready(
            {
                t.root: np.concatenate([bufs[d] for d in t.members], axis=0)
                for t in check_teams(teams, "Gather")
            }
        )

    def ireduce(
        self, teams: Sequence[Team], bufs: Buffers, op: ReductionOpType, spec: BufferSpec
    ) -> Operation:
        return ready(
            {t.root: fold([bufs[d] for d in t.members], op) for t in check_teams(teams, "Reduce")}
        )

    def iexchange(self, messages: Sequence[Message], payloads: dict[int, np.ndarray]) -> Operation:
        return ready({i: payloads[i] for i in range(len(messages))})
