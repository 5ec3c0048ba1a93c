"""Communication: a collective (or a local slice) that replaces a resharding Set.

A Set between tensors of the same sharding (b and bDIDx included) is not a
resharding: it stays a local copy inside its kernel and never becomes one.

The `lower-communications` pass creates them; `assign-layouts` gives every
collective a buffer layout. Each prints on one line (nvFuser style), in the one
form FORM, which the parser of the printed program reads back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from fuserlite.ir.args import LIST_LIMIT
from fuserlite.ir.errors import ParseError
from fuserlite.ir.expr import Expr
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import is_uneven
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ReductionOpType
from fuserlite.ops.forms import KINDS, Kind, Template


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


class Sizing(str, Enum):
    """How a collective moves the chunks of an axis its mesh does not divide."""

    even = "even"  # every chunk the same size (the mesh divides the axis): the plain collective
    padded = "padded"  # every chunk padded to ceil(n/d) rows, then the plain collective
    variable = "variable"  # each chunk its own size: Allgatherv, Alltoallv, Scatterv, ...


def chunks_unevenly(kind: CommKind, inp: TensorView, out: TensorView) -> bool:
    """True when the collective cuts an axis its mesh does not divide into chunks, one
    per device: what it gathers (Allgather, Gather, AllToAll's source) or scatters
    (ReduceScatter, Scatter, AllToAll's target). Such a one is padded or variable."""
    gathers = kind in (CommKind.Allgather, CommKind.Gather, CommKind.AllToAll)
    scatters = kind in (CommKind.ReduceScatter, CommKind.Scatter, CommKind.AllToAll)
    return (gathers and is_uneven(inp)) or (scatters and is_uneven(out))


@dataclass(frozen=True)
class Layout:
    """A collective's buffer layout: pinned to an allocation order, or left free."""

    pinned: bool
    order: tuple[int, ...] = ()

    def __str__(self) -> str:
        if not self.pinned:
            return "free"
        return "pinned{" + ", ".join(str(i) for i in self.order) + "}"


def _choice(enum: type[Enum], what: str) -> Callable[[str], Enum]:
    """Read an enum member by its printed value, or a ParseError listing the values."""

    def read(text: str) -> Enum:
        try:
            return enum(text)
        except ValueError:
            values = ", ".join(m.value for m in enum)
            raise ParseError(f"unknown {what} {text!r}; expected one of {values}") from None

    return read


def _read_layout(text: str) -> Layout:
    if text == "free":
        return Layout(pinned=False)
    inner = text[len("pinned{") : -1]
    return Layout(pinned=True, order=tuple(int(i) for i in inner.split(", ")) if inner else ())


def _unreadable(what: str) -> Callable[[str], object]:
    """A field printed for the reader that the parser cannot rebuild yet: a ParseError
    rather than a communication without it."""

    def read(text: str) -> object:
        raise ParseError(
            f"{what} of a communication cannot be read back yet (N-D meshes and moves "
            "between meshes by box transfers print them); print and run it from the .fus file"
        )

    return read


# How each field of a printed communication is shown and read back (forms.KINDS adds
# `tensor`). A new field of Communication is one part of FORM, a new kind of value
# one entry here.
COMM_KINDS = {
    **KINDS,
    "comm": Kind(r"\w+", lambda v, e, t: v.value, _choice(CommKind, "communication kind")),
    "team": Kind(
        r"\((?:\d+(?: \d+)*)?\)",
        lambda v, e, t: "(" + " ".join(str(d) for d in v) + ")",
        lambda s: tuple(int(d) for d in s[1:-1].split()),
    ),
    "int": Kind(r"-?\d+", lambda v, e, t: str(v), int),
    "reduction": Kind(r"\w+", lambda v, e, t: v.value, _choice(ReductionOpType, "reduction op")),
    "layout": Kind(r"free|pinned\{(?:\d+(?:, \d+)*)?\}", lambda v, e, t: str(v), _read_layout),
    "sizing": Kind(r"\w+", lambda v, e, t: v.value, _choice(Sizing, "chunk sizing")),
    # Shown on an N-D mesh and for box transfers only (as `describe` always did).
    "nd": Kind(
        r"DeviceMesh\{[^()]*\}, teams=\([^()]*\), placements=\([^()]*\)->\([^()]*\)",
        lambda v, e, t: v,
        _unreadable("the mesh, teams and placements"),
    ),
    "transfers": Kind(r"\[[^\]]*(?:\][^\]]*)*\]", lambda v, e, t: v, _unreadable("the transfers")),
}

# The one printed form of a communication, both ways: every field a constructor
# argument of the same name, shown where it is not None.
FORM = Template(
    "Communication {kind:comm} (team={team:team}[, mesh={nd:nd}][, root={root:int}]"
    "[, op={op:reduction}], input={input}, output={output}[, in_axis={in_axis:int}]"
    "[, out_axis={out_axis:int}][, transfers={transfers:transfers}][, layout={layout:layout}]"
    "[, chunks={sizing:sizing}], bytes_per_device={bytes_per_device:int})",
    COMM_KINDS,
)


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
        output: TensorView,
        input: TensorView,
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
        layout: Layout | None = None,
        sizing: Sizing = Sizing.even,
    ) -> None:
        super().__init__([input], [output])
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
        self.layout = layout
        self.sizing = Sizing(sizing)
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
        values = {name: getattr(self, name, None) for name in FORM.fields}
        if self.mesh is not None and self.mesh.rank > 1:
            values["nd"] = (
                f"{self.mesh.text()}, teams=({' '.join(self.group_names)}), "
                f"placements={self.before}->{self.after}"
            )
        if self.transfers is not None:
            values["transfers"] = f"[{transfers_text(self.transfers)}]"
        if self.sizing is Sizing.even:  # the plain collective: no chunks= (as before)
            values["sizing"] = None
        return FORM.print(values, self, namer.tensor)

    @classmethod
    def from_printed(cls, text: str, tensor: Callable[[str], TensorView]) -> Communication | None:
        """The communication a printed line describes, between the tensors `tensor(printed
        text)` resolves; None if the line is not a communication's."""
        values = FORM.match(text)
        if values is None:
            return None
        values["input"], values["output"] = tensor(values["input"]), tensor(values["output"])
        return cls(**values)


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
