"""Moves between two meshes (pipeline stages): who sends which box to whom.

A pure function over boxes. Each source device holds a box of the global
tensor (for a partial source, an addend of it: devices with the same `term`
hold the same addend, and the value is the sum over the terms). Each
destination device must end up holding the complete value on its box. Every
destination receives exactly the parts of its box it lacks (per term: what it
does not hold itself), once, from a device that holds them, so the bytes moved
are the bytes the destinations lack. Where several devices hold a part (a
replicated side), the senders are chosen to balance the bytes per sender:
longest parts first, each to the least-loaded holder, a part split into
pieces where there are fewer parts than holders; ties go to the lower device
id, so the result is deterministic. A collective names the move where one
fits: Broadcast or Scatter from one box (one device, or a replicated side),
Gather or Reduce onto one box (one device, or a replicated side), SendRecv
(point to point) otherwise. A move is an error only where the data cannot
exist: a destination needs a part that no source device holds.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from fuserlite.ir.errors import RedistributionError
from fuserlite.plan.blocks import Box, box_text, chunk_bounds, contains, device_box, intersect
from fuserlite.plan.blocks import volume as elements
from fuserlite.plan.mesh_axes import MeshShape, coords, rank_in_team
from fuserlite.plan.placement import Placement
from fuserlite.plan.steps import StepKind

Unit = tuple[int, int, Box, tuple[int, ...]]  # destination, term, part, the devices holding it


@dataclass(frozen=True)
class Holding:
    """A source device's data: the box it holds, and which addend (term) of a partial value."""

    device: int
    box: Box
    term: int = 0


@dataclass(frozen=True)
class Transfer:
    """`src` sends its `box` of addend `term` to `dst` (which adds the terms it receives)."""

    src: int
    dst: int
    box: Box
    term: int = 0


@dataclass(frozen=True)
class Move:
    """The transfers of a move between meshes and the collective that names it (if any)."""

    kind: StepKind | None  # None: every destination already holds its box
    roots: tuple[int, ...]  # Broadcast/Scatter: the senders; Gather/Reduce: the receivers
    transfers: tuple[Transfer, ...]
    itemsize: int

    @property
    def bytes(self) -> int:
        """Bytes moved in all: the bytes the destinations lack."""
        return sum(elements(t.box) for t in self.transfers) * self.itemsize

    def sent(self) -> dict[int, int]:
        """Bytes each sender sends."""
        out: dict[int, int] = {}
        for t in self.transfers:
            out[t.src] = out.get(t.src, 0) + elements(t.box) * self.itemsize
        return out

    def describe(self) -> str:
        """'Scatter from 0 1: 4 transfers, 256 B' or 'nothing to move'."""
        if self.kind is None:
            return "nothing to move"
        where = {StepKind.Broadcast: " from", StepKind.Scatter: " from", StepKind.Gather: " to"}
        root = where.get(self.kind, " to" if self.kind is StepKind.Reduce else "")
        roots = f"{root} {' '.join(map(str, self.roots))}" if root else ""
        return f"{self.kind.value}{roots}: {len(self.transfers)} transfers, {self.bytes} B"


def holdings(
    shape: Sequence[int], mesh: MeshShape, devices: Sequence[int], p: Placement
) -> list[Holding]:
    """The boxes (and addends) of a placement on a mesh whose device indices map to `devices`."""
    return [
        Holding(dev, device_box(shape, mesh, p, c), rank_in_team(mesh, p.partial, c))
        for dev, c in zip(devices, coords(mesh))
    ]


def needs(
    shape: Sequence[int], mesh: MeshShape, devices: Sequence[int], p: Placement
) -> list[tuple[int, Box]]:
    """The box each destination device must hold under the complete placement `p`."""
    if not p.is_complete:
        raise RedistributionError(
            f"a move between meshes produces complete values; the destination {p} is partial"
        )
    return [(dev, device_box(shape, mesh, p, c)) for dev, c in zip(devices, coords(mesh))]


def plan_move(
    sources: Sequence[Holding], destinations: Sequence[tuple[int, Box]], itemsize: int
) -> Move:
    """The cheapest correct transfers from `sources` to `destinations` (see the module doc)."""
    _check(sources, destinations)
    terms = sorted({h.term for h in sources})
    units: list[Unit] = []
    for dst, need in destinations:
        for term in terms:
            holders = [h for h in sources if h.term == term]
            units += _lacking(dst, need, term, holders, partial=len(terms) > 1)
    transfers = _assign(_spread(units), [d for d, _ in destinations])
    kind, roots = _name(transfers, sources, destinations, len(terms) > 1)
    return Move(kind, roots, transfers, itemsize)


def _check(sources: Sequence[Holding], destinations: Sequence[tuple[int, Box]]) -> None:
    """Raise for duplicate devices or boxes of different ranks."""
    for what, devs in (
        ("source", [h.device for h in sources]),
        ("destination", [d for d, _ in destinations]),
    ):
        if len(set(devs)) != len(devs):
            raise RedistributionError(f"a move lists {what} device(s) twice: {devs}")
    ranks = {len(h.box) for h in sources} | {len(b) for _, b in destinations}
    if len(ranks) > 1:
        raise RedistributionError(
            f"a move's boxes must all have one rank, got ranks {sorted(ranks)}"
        )
    if not sources:
        raise RedistributionError("a move needs at least one source device")


def _lacking(
    dst: int, need: Box, term: int, holders: Sequence[Holding], *, partial: bool
) -> list[Unit]:
    """The parts of `need` that `dst` lacks of addend `term`, each with the devices holding it."""
    own = [h.box for h in holders if h.device == dst]
    relevant = [h for h in holders if intersect(h.box, need) is not None]
    cells: dict[tuple[int, ...], list[Box]] = {}
    for cell in _grid(need, [h.box for h in relevant] + own):
        if own and contains(own[0], cell):
            continue
        who = tuple(sorted(h.device for h in relevant if contains(h.box, cell)))
        if not who:
            addend = f" of addend {term} (a sum needs every addend)" if partial else ""
            raise RedistributionError(
                f"cannot move the tensor: destination device {dst} needs {box_text(need)}, but "
                f"no source device holds {box_text(cell)}{addend}; the source devices hold "
                + ", ".join(f"{h.device}: {box_text(h.box)}" for h in holders[:8])
                + (" ..." if len(holders) > 8 else "")
            )
        cells.setdefault(who, []).append(cell)
    return [(dst, term, box, who) for who, cs in cells.items() for box in merge_boxes(cs)]


def _grid(region: Box, boxes: Sequence[Box]) -> list[Box]:
    """`region` cut into cells along every edge of `boxes` that crosses it."""
    cuts = []
    for axis, (lo, hi) in enumerate(region):
        edges = {lo, hi} | {min(max(b[axis][e], lo), hi) for b in boxes for e in (0, 1)}
        e = sorted(edges)
        cuts.append([(a, b) for a, b in zip(e, e[1:]) if a < b])
    return [tuple(c) for c in itertools.product(*cuts)]


def merge_boxes(boxes: Sequence[Box]) -> list[Box]:
    """Join boxes that meet face to face along one axis until none do (order fixed)."""
    out = sorted(boxes)
    merged = True
    while merged:
        merged = False
        for i, j in itertools.combinations(range(len(out)), 2):
            a, b = out[i], out[j]
            diff = [k for k in range(len(a)) if a[k] != b[k]]
            if len(diff) == 1 and (
                a[diff[0]][1] == b[diff[0]][0] or b[diff[0]][1] == a[diff[0]][0]
            ):
                k = diff[0]
                joined = (min(a[k][0], b[k][0]), max(a[k][1], b[k][1]))
                out = sorted(
                    [*out[:i], *out[i + 1 : j], *out[j + 1 :], (*a[:k], joined, *a[k + 1 :])]
                )
                merged = True
                break
    return out


def _spread(units: list[Unit]) -> list[Unit]:
    """Cut each part into pieces where fewer parts than holders share one holder set."""
    count: dict[tuple[int, ...], int] = {}
    for *_, who in units:
        count[who] = count.get(who, 0) + 1
    out = []
    for dst, term, box, who in units:
        pieces = -(-len(who) // count[who])
        out += [(dst, term, b, who) for b in _split(box, pieces)]
    return out


def _split(box: Box, pieces: int) -> list[Box]:
    """`box` cut into up to `pieces` near-equal boxes along its longest axis (a scalar's
    box, of no axes, is one element: it stays whole)."""
    if pieces <= 1 or not box:
        return [box]
    axis = max(range(len(box)), key=lambda k: (box[k][1] - box[k][0], -k))
    lo, hi = box[axis]
    parts = [chunk_bounds(hi - lo, pieces, i) for i in range(pieces)]
    return [(*box[:axis], (lo + a, lo + b), *box[axis + 1 :]) for a, b in parts if a < b]


def _assign(units: list[Unit], order: Sequence[int]) -> tuple[Transfer, ...]:
    """Give each part a sender: forced parts first, then the largest to the least loaded."""
    load: dict[int, int] = {}
    chosen: dict[tuple[int, int, int], list[Box]] = {}
    position = {d: i for i, d in enumerate(order)}
    key = lambda u: (len(u[3]) > 1, -elements(u[2]), position[u[0]], u[1], u[2])  # noqa: E731
    for dst, term, box, who in sorted(units, key=key):
        src = min(who, key=lambda d: (load.get(d, 0), d))
        load[src] = load.get(src, 0) + elements(box)
        chosen.setdefault((src, dst, term), []).append(box)
    out = [
        Transfer(src, dst, box, term)
        for (src, dst, term), boxes in chosen.items()
        for box in merge_boxes(boxes)
    ]
    return tuple(sorted(out, key=lambda t: (position[t.dst], t.term, t.src, t.box)))


def _name(
    transfers: Sequence[Transfer],
    sources: Sequence[Holding],
    destinations: Sequence[tuple[int, Box]],
    partial: bool,
) -> tuple[StepKind | None, tuple[int, ...]]:
    """The collective that fits the transfers, with its roots; SendRecv where none does."""
    if not transfers:
        return None, ()
    senders = sorted({t.src for t in transfers})
    receivers = sorted({t.dst for t in transfers})
    need = dict(destinations)
    one_target = len({need[d] for d in receivers}) == 1
    held = {h.device: h.box for h in sources}
    one_source = len({held[s] for s in senders}) == 1
    if len(senders) == 1 and len(receivers) == 1:
        return StepKind.SendRecv, ()
    if partial:
        return (StepKind.Reduce, tuple(receivers)) if one_target else (StepKind.SendRecv, ())
    if one_source:
        return (StepKind.Broadcast if one_target else StepKind.Scatter), tuple(senders)
    if one_target:
        return StepKind.Gather, tuple(receivers)
    return StepKind.SendRecv, ()
