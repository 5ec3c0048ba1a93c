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

from fuserlite.ir.args import LIST_LIMIT
from fuserlite.ir.expr import Expr
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
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
    """out = <kind>(in) over the teams of `group` on `mesh`, or between two meshes.

    On one mesh (a step of the redistribution planner's plan): `group` is the mesh
    axes of its teams, ordered outer -> inner (a device's rank in its team is its
    coordinates along them, outer first); every device of the mesh is in one team
    (`teams`). `before` and `after` are the placements (on the data axes, partial
    mesh axes apart) around it, `axes` the tensor axes it moves (sliced, gathered,
    reduce-scattered onto; an AllToAll's from and to). Between two meshes, `mesh` is
    None and, where the move is not one of the forms of the 1-D table
    (docs/design.md §5), `transfers` (plan.Transfer: a box of one addend from one
    device to another; None for a table move) say who sends what. `team` is every device taking
    part; in_axis/out_axis are the sharded data axes of a 1-D move (or None).
    """

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
        mesh: DeviceMesh | None = None,
        group: tuple[int, ...] = (),
        before: Placement | None = None,
        after: Placement | None = None,
        axes: tuple[int, ...] = (),
        transfers: tuple | None = None,
    ) -> None:
        super().__init__([inp], [out])
        self.kind = kind
        self.team = tuple(team)
        self.root = root
        self.op = op
        self.in_axis = in_axis
        self.out_axis = out_axis
        self.bytes_per_device = int(bytes_per_device)
        self.mesh = mesh
        self.group = tuple(group)
        self.before = before
        self.after = after
        self.axes = tuple(axes)
        self.transfers = None if transfers is None else tuple(transfers)
        self.layout: Layout | None = None
        self.op_name = kind.value

    @property
    def teams(self) -> list[tuple[int, ...]]:
        """The teams of a collective on one mesh (each device in one); else [team]."""
        if self.mesh is None or not self.group:
            return [self.team]
        return self.mesh.teams([self.mesh.parallel_types[a] for a in self.group])

    @property
    def group_names(self) -> tuple[str, ...]:
        """The parallel types of `group`: ('DIDy', 'DIDx')."""
        if self.mesh is None:
            return ()
        return tuple(self.mesh.parallel_types[a].name for a in self.group)

    def describe(self, namer) -> str:
        """`Communication Allgather (team=(0 1), input=..., output=..., ...)`; on an N-D
        mesh also its mesh, the parallel types of its teams and the placements."""
        parts = [f"team=({' '.join(str(d) for d in self.team)})"]
        if self.mesh is not None and self.mesh.rank > 1:
            parts.append(f"mesh={self.mesh.text()}")
            parts.append(f"teams=({' '.join(self.group_names)})")
            parts.append(f"placements={self.before}->{self.after}")
        if self.root is not None:
            parts.append(f"root={self.root}")
        if self.op is not None:
            parts.append(f"op={self.op.value}")
        parts.append(f"input={namer.tensor(self.input)}")
        parts.append(f"output={namer.tensor(self.output)}")
        if self.transfers is not None:
            parts.append(f"transfers=[{transfers_text(self.transfers)}]")
        if self.layout is not None:
            parts.append(f"layout={self.layout}")
        parts.append(f"bytes_per_device={self.bytes_per_device}")
        return f"Communication {self.kind.value} ({', '.join(parts)})"


def transfers_text(transfers: tuple) -> str:
    """`0->2 [0:4, 0:8]; 1->3 [4:8, 0:8]` (a term other than 0 as `+t1`), 8 at most."""
    items = [
        f"{t.src}->{t.dst} [{', '.join(f'{lo}:{hi}' for lo, hi in t.box)}]"
        + (f" +t{t.term}" if t.term else "")
        for t in transfers
    ]
    if len(items) > LIST_LIMIT:
        items = [*items[: LIST_LIMIT - 1], f"... ({len(items) - LIST_LIMIT + 1} more)"]
    return "; ".join(items)
