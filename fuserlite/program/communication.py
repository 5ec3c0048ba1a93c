"""Communication: a collective (or a local slice) that replaces a resharding Set.

A Set between tensors of the same sharding (b and bDIDx included) is not a
resharding: it stays a local copy inside its kernel and never becomes one.

The `lower-communications` pass creates them; `assign-layouts` gives every
collective a buffer layout. Each prints on one line (nvFuser style).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from fuserlite.ir.expr import Expr
from fuserlite.ir.types import ReductionOpType

if TYPE_CHECKING:
    from fuserlite.ir.tensor import TensorView


class CommKind(str, Enum):
    """Kinds of communication; the value is the printed name."""

    Allgather = "Allgather"
    AllToAll = "AllToAll"
    Allreduce = "Allreduce"
    ReduceScatter = "ReduceScatter"
    Broadcast = "Broadcast"
    Scatter = "Scatter"
    Gather = "Gather"
    Reduce = "Reduce"
    SendRecv = "SendRecv"
    LocalSlice = "LocalSlice"

    @property
    def is_collective(self) -> bool:
        """False for LocalSlice, which moves no data between devices."""
        return self is not CommKind.LocalSlice

    @property
    def is_allreduce_class(self) -> bool:
        """Collectives a backend implements with an all-reduce (their layouts must agree)."""
        return self in (CommKind.Allreduce, CommKind.ReduceScatter, CommKind.Reduce)

    @property
    def has_root(self) -> bool:
        return self in (CommKind.Broadcast, CommKind.Scatter, CommKind.Gather, CommKind.Reduce)


@dataclass(frozen=True)
class Layout:
    """A collective's buffer layout: pinned to an allocation order, or left free."""

    pinned: bool
    order: tuple[int, ...] = ()

    def __str__(self) -> str:
        if not self.pinned:
            return "free"
        return "pinned{" + ", ".join(str(i) for i in self.order) + "}"


class Communication(Expr):
    """out = <kind>(in) over `team`; in_axis/out_axis are the sharded data axes (or None)."""

    op_name = "communication"

    def __init__(
        self,
        kind: CommKind,
        out: TensorView,
        inp: TensorView,
        team: tuple[int, ...],
        *,
        root: int | None = None,
        op: ReductionOpType | None = None,
        in_axis: int | None = None,
        out_axis: int | None = None,
        bytes_per_device: int = 0,
    ) -> None:
        super().__init__([inp], [out])
        self.kind = kind
        self.team = tuple(team)
        self.root = root
        self.op = op
        self.in_axis = in_axis
        self.out_axis = out_axis
        self.bytes_per_device = int(bytes_per_device)
        self.layout: Layout | None = None
        self.op_name = kind.value

    def describe(self, namer) -> str:
        """`Communication Allgather (team=(0 1), input=..., output=..., ...)`."""
        parts = [f"team=({' '.join(str(d) for d in self.team)})"]
        if self.root is not None:
            parts.append(f"root={self.root}")
        if self.op is not None:
            parts.append(f"op={self.op.value}")
        parts.append(f"input={namer.tensor(self.input)}")
        parts.append(f"output={namer.tensor(self.output)}")
        if self.layout is not None:
            parts.append(f"layout={self.layout}")
        parts.append(f"bytes_per_device={self.bytes_per_device}")
        return f"Communication {self.kind.value} ({', '.join(parts)})"
