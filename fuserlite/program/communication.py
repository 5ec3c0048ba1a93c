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
from fuserlite.ir.errors import FuserliteError, ParseError
from fuserlite.ir.expr import Expr
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import is_uneven, logical_placement, placement
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ReductionOpType
from fuserlite.ops.forms import KINDS, Kind, Template
from fuserlite.plan.blocks import Box
from fuserlite.plan.cross_mesh import Holding, Move, holdings, needs, plan_move
from fuserlite.plan.permute import permute_move
from fuserlite.plan.steps import StepKind
from fuserlite.program.shards import device_shape

# A Communication's kind is its planner step's kind: one enum for both levels.
CommKind = StepKind


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


def reduces_problem(inp: TensorView, reduces: tuple[int, ...] | None) -> str | None:
    """What is wrong with a communication reducing the logical axes `reduces` of its input
    `inp` itself, if anything: each must be a data axis of `inp` sharded over mesh axes
    that holds one row on every device (its local extent 1), so that the values the
    devices hold are the partial values a partial-reduction kernel would have written.
    Where a device holds more rows (an outer split leaving k > 1 rows, an axis its mesh
    does not divide) the sum of those rows is a kernel's work: lower-communications keeps
    the kernel there (`drop_local_reductions`)."""
    if reduces is None:
        return None
    if not reduces or list(reduces) != sorted(set(reduces)):
        return f"reduces={reduces}: the input's reduced axes, each once, in order"
    data, shards = inp.data_positions(), logical_placement(inp).shards
    for li in reduces:
        if li not in data:
            return f"reduces axis {li}, which is no data axis of {inp.name}"
        if not shards[li]:
            return (
                f"reduces axis {li} of {inp.name}, which no mesh axis shards: a local "
                "reduction is a kernel's"
            )
    k = [data.index(li) for li in reduces]
    for d in inp.mesh.devices:
        shape = device_shape(inp, d)
        rows = [shape[i] for i in k]
        if any(r != 1 for r in rows):
            li = reduces[next(j for j, r in enumerate(rows) if r != 1)]
            return (
                f"reduces axis {li} of {inp.name} itself, but device {d} holds "
                f"{shape[data.index(li)]} rows of it, not 1: a collective combines one "
                "value per device; reduce the rows in a kernel first (sum(...) into a partial "
                "tensor, as lower-communications lowers it)"
            )
    return None


def _reduced_data(inp: TensorView, reduces: tuple[int, ...] | None) -> tuple[int, ...]:
    """The axes `reduces` (logical) as positions among inp's data axes."""
    if not reduces:
        return ()
    data = inp.data_positions()
    return tuple(data.index(li) for li in reduces)


def input_placement(inp: TensorView, reduces: tuple[int, ...] | None = None) -> Placement:
    """The placement of a communication's input as its collective reads it: `inp`'s, or
    where the communication reduces axes of it itself (`reduces`) those axes dropped and
    their mesh axes partial, as a partial-reduction kernel would have written it."""
    p = placement(inp)
    dropped = _reduced_data(inp, reduces)
    if not dropped:
        return p
    shards = tuple(s for k, s in enumerate(p.shards) if k not in dropped)
    partial = tuple(sorted({*p.partial, *(a for k in dropped for a in p.shards[k])}))
    return Placement(p.mesh_rank, shards, partial)


def as_reduced(inp: TensorView, reduces: tuple[int, ...] | None, entries: tuple) -> tuple:
    """A shape or box of `inp`'s data (its global shape, a device's shape or box) as the
    collective reducing `reduces` reads it: the entries of those axes dropped."""
    dropped = _reduced_data(inp, reduces)
    return tuple(v for k, v in enumerate(entries) if k not in dropped)


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
    "index": Kind(r"[a-z]\w*", lambda v, e, t: v, str),
    "reduction": Kind(r"\w+", lambda v, e, t: v.value, _choice(ReductionOpType, "reduction op")),
    "layout": Kind(r"free|pinned\{(?:\d+(?:, \d+)*)?\}", lambda v, e, t: str(v), _read_layout),
    "sizing": Kind(r"\w+", lambda v, e, t: v.value, _choice(Sizing, "chunk sizing")),
    # Shown on an N-D mesh only: its mesh, the parallel types of its teams, and the
    # placements around it (read back as text: they must be those of its tensors).
    "mesh": Kind(r"DeviceMesh\{[^()]*\}", lambda v, e, t: v.text(), str),
    "group": Kind(
        r"\((?:\w+(?: \w+)*)?\)",
        lambda v, e, t: "(" + " ".join(e.group_names) + ")",
        lambda s: tuple(s[1:-1].split()),
    ),
    "placement": Kind(r"\([^()]*\)", lambda v, e, t: str(v), str),
    # A move by box transfers: the first LIST_LIMIT of them (read back as text: they
    # must be the move planned between the tensors' placements, `planned_move`).
    "transfers": Kind(r"\[[^\]]*(?:\][^\]]*)*\]", lambda v, e, t: f"[{transfers_text(v)}]", str),
}

# The one printed form of a communication, both ways: every field a constructor
# argument of the same name, shown where it is not None.
FORM = Template(
    "Communication {kind:comm} (team={team:team}[, mesh={mesh:mesh}, teams={group:group}, "
    "placements={before:placement}->{after:placement}][, root={root:int}]"
    "[, op={op:reduction}][, reduces={reduces:team}][, sources={sources:team}]"
    "[, shift={shift:index}], input={input}, "
    "output={output}"
    "[, in_axis={in_axis:int}]"
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
    part; in_axis/out_axis are the sharded data axes of a 1-D move (or None). A
    CollectivePermute (a take of whole blocks) is on one mesh: chunk r of its output along
    in_axis is chunk `sources[r]` of its input, in each team of `group` (the mesh axes
    sharding that axis), and `transfers` are its point-to-point messages (plan.permute).
    `reduces` (None for most) are the logical axes of its input a reducing collective
    reduces itself, one row of each on every device (reduces_problem): a reduction lowered
    to its collective alone; it reads its input as input_placement says.
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
        sources: tuple[int, ...] | None = None,
        shift: str | None = None,
        reduces: tuple[int, ...] | None = None,
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
        self.sources = None if sources is None else tuple(sources)
        self.shift = shift
        self.reduces = None if not reduces else tuple(reduces)
        self.op_name = kind.value

    @property
    def teams(self) -> list[tuple[int, ...]]:
        """The teams of a collective on one mesh (each device in one); else [team]."""
        if self.mesh is None or not self.group:
            return [self.team]
        return self.mesh.teams([self.mesh.parallel_types[a] for a in self.group])

    @property
    def permutation(self) -> str:
        """A CollectivePermute's sources in words, 'block r from block (3 0 1 2)[r]', or
        a ring step's 'block r from block (r + i) % 4'; ''."""
        if self.shift is not None:
            return f"block r from block (r + {self.shift}) % {self.ring_size}"
        if self.sources is None:
            return ""
        return f"block r from block ({' '.join(map(str, self.sources))})[r]"

    @property
    def ring_size(self) -> int:
        """The blocks a team's CollectivePermute permutes (its team's size)."""
        return len(self.teams[0])

    def at_shift(self, i: int) -> Communication:
        """A ring step's CollectivePermute (`shift`: block r from block (r + i) mod D)
        at loop index `i`: the permutation of that step, its transfers and the bytes
        each device sends (none at i = 0, where every block stays put)."""
        d = self.ring_size
        sources = tuple((r + i) % d for r in range(d))
        move = permuted(self.input, self.in_axis or 0, sources)[0]
        # A view of this step, not a node of the graph: its tensors stay this one's (no
        # definition or use of theirs changes), its fields those of the step at i.
        comm = Communication.__new__(Communication)
        for name in ("inputs", "outputs"):
            object.__setattr__(comm, name, getattr(self, name))
        comm.__dict__.update(self.__dict__)
        comm.__dict__.update(
            sources=sources,
            shift=None,
            transfers=move.transfers,
            bytes_per_device=max(move.sent().values(), default=0),
        )
        return comm

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
        if self.mesh is None or self.mesh.rank == 1:
            values["mesh"] = None  # on a 1-D mesh they follow from the tensors alone
        if self.sizing is Sizing.even:  # the plain collective: no chunks= (as before)
            values["sizing"] = None
        return FORM.print(values, self, namer.tensor)

    @classmethod
    def from_printed(cls, text: str, tensor: Callable[[str], TensorView]) -> Communication | None:
        """The communication a printed line describes, between the tensors `tensor(printed
        text)` resolves; None if the line is not a communication's. What the line does
        not show follows from the tensors: the mesh, the placements around it, the axes
        it moves (its in_axis and out_axis), a 1-D mesh's group and a move's transfers;
        a ParseError where the line shows them otherwise."""
        values = FORM.match(text)
        if values is None:
            return None
        inp = values["input"] = tensor(values["input"])
        out = values["output"] = tensor(values["output"])
        shown = {k: values.pop(k, None) for k in ("mesh", "group", "before", "after", "transfers")}
        return cls(**values, **_from_tensors(inp, out, values, shown, text))


def _from_tensors(inp: TensorView, out: TensorView, values: dict, shown: dict, text: str) -> dict:
    """The fields a printed communication leaves to its tensors, checked against what
    the line shows (`shown`: its mesh=, teams= and placements= on an N-D mesh, a
    move's or a CollectivePermute's transfers=)."""

    def fail(message: str, field: str) -> ParseError:
        return ParseError(message, column=max(text.find(f"{field}="), 0) + 1)

    if inp.mesh is None or out.mesh is None:
        raise fail(f"a communication's tensors have a mesh; {inp.name} -> {out.name}", "input")
    if values["bytes_per_device"] < 0:
        raise fail("bytes_per_device is what each device sends: at least 0", "bytes_per_device")
    reduces = values.get("reduces")
    why = reduces_problem(inp, reduces)
    if why is not None:
        raise fail(why, "reduces")
    before, after = input_placement(inp, reduces), placement(out)
    derived = {"before": before, "after": after}
    permutes = values["kind"] is CommKind.CollectivePermute
    ring = values.get("shift") is not None
    if ring and values.get("sources") is not None:
        raise fail(
            "a ring step's CollectivePermute shows shift=i (block r from block (r + i) "
            "mod D) instead of sources=(...), not both",
            "shift",
        )
    if permutes != (values.get("sources") is not None or ring):
        raise fail(
            "a CollectivePermute shows its sources=(...) or, a ring step's, shift=i (and "
            "no other communication does)",
            "sources" if not permutes else "input",
        )
    if inp.mesh != out.mesh:  # a move between meshes
        if shown["mesh"] is not None or permutes:
            raise fail(
                f"a move between meshes ({inp.mesh} -> {out.mesh}) shows no mesh= or teams=, "
                "and is no CollectivePermute (which permutes blocks on one mesh)",
                "mesh" if not permutes else "input",
            )
        if shown["transfers"] is not None:
            move = lambda: planned_move(inp, out, reduces)  # noqa: E731
            derived["transfers"] = _transfers(inp, out, move, shown["transfers"], fail)
        return derived
    mesh = inp.mesh
    if values["team"] != tuple(mesh.devices):
        team = " ".join(map(str, mesh.devices))
        raise fail(f"a communication on {mesh} takes every device of it: team=({team})", "team")
    if values.get("root") is not None:
        raise fail("a communication on one mesh has no root (its teams have none)", "root")
    derived["mesh"] = mesh
    derived["axes"] = tuple(
        a for a in (values.get("in_axis"), values.get("out_axis")) if a is not None
    )
    if shown["transfers"] is not None and not permutes:
        raise fail(
            "a communication on one mesh has no transfers (a move between meshes and a "
            "CollectivePermute do)",
            "transfers",
        )
    derived["group"] = _group(inp, out, shown, fail, reduces)
    if permutes:
        axis = values.get("in_axis")
        if axis is None:  # no default: axis 0 would silently permute the wrong axis
            after_output = ("out_axis", "transfers", "layout", "chunks", "bytes_per_device")
            at = min(i for f in after_output if (i := text.find(f", {f}=")) >= 0)
            raise ParseError(
                "a CollectivePermute shows in_axis=N, the tensor axis whose blocks it "
                "permutes, after its output=",
                column=at + 1,
            )
        sharding = before.shards[axis] if axis < len(before.shards) else ()
        if derived["group"] != sharding:
            raise fail(
                f"a CollectivePermute of axis {axis} runs over the mesh axes that shard it in "
                f"{inp.name} ({before})",
                "input",
            )
        if ring:  # the permutation, its transfers and bytes are the step's (at_shift)
            if shown["transfers"] is not None:
                raise fail("a ring step's transfers are its step's: it shows none", "transfers")
            d = len(mesh.teams([mesh.parallel_types[a] for a in derived["group"]])[0])
            sources = tuple((r + 1) % d for r in range(d))  # a step's bytes: one block
        else:
            sources = values["sources"]
        move = lambda: permuted(inp, axis, sources)[0]  # noqa: E731
        transfers = _transfers(inp, out, move, shown["transfers"], fail)
        if not ring:
            derived["transfers"] = transfers
        sent = max(move().sent().values(), default=0)  # explain shows it as one block's bytes
        if values["bytes_per_device"] != sent:
            raise fail(
                f"bytes_per_device={values['bytes_per_device']}, but each device of this "
                f"CollectivePermute sends at most {sent}",
                "bytes_per_device",
            )
    return derived


def _group(
    inp: TensorView, out: TensorView, shown: dict, fail, reduces: tuple[int, ...] | None
) -> tuple[int, ...]:
    """The group (mesh axes) of a communication on one mesh: (0,) on a 1-D mesh, else the
    teams= the line shows, checked with its mesh= and placements=."""
    mesh, before, after = inp.mesh, input_placement(inp, reduces), placement(out)
    if mesh.rank == 1:
        if shown["mesh"] is not None:
            raise fail(
                "on a 1-D mesh a communication shows no mesh=, teams= or placements=", "mesh"
            )
        return (0,)
    if shown["mesh"] is None:
        raise fail(
            f"a communication on the N-D mesh {mesh} shows `mesh=..., teams=(...), "
            "placements=(...)->(...)` after its team",
            "input",
        )
    if shown["mesh"] != mesh.text():
        raise fail(f"mesh={shown['mesh']}, but its tensors are on {mesh.text()}", "mesh")
    names = [pt.name for pt in mesh.parallel_types]
    unknown = [n for n in shown["group"] if n not in names]
    if unknown or len(set(shown["group"])) != len(shown["group"]):
        raise fail(
            f"teams=({' '.join(shown['group'])}): each a parallel type of {mesh} "
            f"({', '.join(names)}) at most once",
            "teams",
        )
    if (shown["before"], shown["after"]) != (str(before), str(after)):
        raise fail(
            f"placements={shown['before']}->{shown['after']}, but {inp.name} is {before} and "
            f"{out.name} is {after}: the placements are those of its tensors",
            "placements",
        )
    return tuple(names.index(n) for n in shown["group"])


def _transfers(inp: TensorView, out: TensorView, move, shown: str | None, fail) -> tuple:
    """The transfers of the move `move()` plans between inp and out, which the line shows
    (None: it shows none)."""
    try:
        transfers = move().transfers
    except FuserliteError as exc:
        raise fail(f"no move from {inp.name} to {out.name}: {exc}", "input") from None
    if shown is not None and shown != f"[{transfers_text(transfers)}]":
        raise fail(
            f"transfers={shown} are not the move planned between {inp.name} and {out.name}: "
            f"[{transfers_text(transfers)}]",
            "transfers",
        )
    return transfers


def planned_move(inp: TensorView, out: TensorView, reduces: tuple[int, ...] | None = None) -> Move:
    """plan.cross_mesh's move from inp's placement on its mesh (input_placement: the axes
    `reduces` it reduces itself partial) to out's (the one lower-communications lowers a
    move between meshes by)."""
    mi, mo, shape = inp.mesh, out.mesh, as_reduced(inp, reduces, inp.shape)
    return plan_move(
        holdings(shape, mi.shape, mi.devices, input_placement(inp, reduces)),
        needs(shape, mo.shape, mo.devices, placement(out)),
        inp.dtype.itemsize,
    )


def permuted(
    inp: TensorView, axis: int, sources: tuple[int, ...]
) -> tuple[Move, list[Holding], list[tuple[int, Box]]]:
    """plan.permute's move of the block permutation `sources` of inp's axis `axis` (chunk
    r of the result is chunk sources[r]), with the devices' holdings and needs: the one
    lower-communications lowers a take of whole chunks by, and the executor runs."""
    m = inp.mesh
    return permute_move(
        inp.shape, m.shape, m.devices, placement(inp), axis, sources, inp.dtype.itemsize
    )


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
