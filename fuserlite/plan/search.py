"""The redistribution planner: the cheapest sequence of steps between two placements.

`plan()` runs Dijkstra over placement states: the edges are the steps of
`steps.moves`, weighted by the bytes each device sends, ties broken by fewer
collectives, then fewer steps, then the steps' fixed order, so the same
question always gets the same plan. It never goes through replicated when an
AllToAll does the move (that is always cheaper), and completes partials over
several mesh axes with one collective over the flattened team when that is
cheaper. Each Plan records its steps with their bytes and the cheapest
rejected alternative, for `fuserlite explain`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fuserlite.ir.errors import RedistributionError
from fuserlite.plan.classic import classic_steps
from fuserlite.plan.mesh_axes import axis_name, integers, mesh_shape
from fuserlite.plan.placement import Placement
from fuserlite.plan.steps import Geometry, Step, StepKind, moves

Key = tuple[int, int, int, tuple]  # bytes, collectives, steps, the steps' sort keys


@dataclass(frozen=True)
class PlannedStep:
    """One step of a plan, the placements around it and the bytes each device sends."""

    step: Step
    before: Placement
    after: Placement
    bytes: int


@dataclass(frozen=True)
class Alternative:
    """A rejected plan: the classic one ('via replicate', 'one mesh axis at a time') or 'next best'."""

    label: str
    steps: tuple[PlannedStep, ...]

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.steps)

    def describe(self) -> str:
        """'via replicate: Allgather + LocalSlice, 768 B/device'."""
        kinds = " + ".join(s.step.kind.value for s in self.steps)
        return f"{self.label}: {kinds}, {self.bytes} B/device"


@dataclass(frozen=True)
class Plan:
    """The chosen steps from `source` to `target`; `alternative` is computed when asked."""

    geometry: Geometry
    source: Placement
    target: Placement
    steps: tuple[PlannedStep, ...]
    _alternative: Callable[[], Alternative | None] = field(repr=False, compare=False)

    @property
    def bytes(self) -> int:
        """Bytes each device sends over the whole plan."""
        return sum(s.bytes for s in self.steps)

    @property
    def collectives(self) -> int:
        """Steps that move data (every step but LocalSlice)."""
        return sum(s.step.kind.is_collective for s in self.steps)

    @property
    def alternative(self) -> Alternative | None:
        """The cheapest rejected alternative, or None when nothing needs to move."""
        return self._alternative()

    def describe(self) -> str:
        """'(S1,S1) -> (S1,S2): AllToAll S1->S2 on DIDx teams, 384 B/device; via replicate: ...'."""
        rank = len(self.geometry.mesh)
        head = f"{self.source} -> {self.target}: "
        if not self.steps:
            return head + "nothing to move, 0 B/device"
        if len(self.steps) == 1:
            chosen = self.steps[0].step.describe(rank)
        else:
            chosen = " + ".join(f"{s.step.describe(rank)} ({s.bytes} B)" for s in self.steps)
        alt = self.alternative
        return head + f"{chosen}, {self.bytes} B/device" + (f"; {alt.describe()}" if alt else "")


Edge = tuple[Step, Placement, int]


class Planner:
    """Plans redistributions of one tensor shape on one mesh; caches its search graph."""

    def __init__(self, shape: Sequence[int], itemsize: int, mesh: Sequence[int]) -> None:
        extents, size = integers(shape), integers([itemsize])
        if extents is None or size is None or any(n < 0 for n in extents) or size[0] < 1:
            raise RedistributionError(
                f"a redistribution needs non-negative extents and a positive element size, "
                f"got shape {list(shape)} and itemsize {itemsize}"
            )
        self.geometry = Geometry(extents, size[0], mesh_shape(mesh))
        self._edges: dict[Placement, list[Edge]] = {}
        self._trees: dict[Placement, dict[Placement, tuple[Key, tuple[Edge, ...]]]] = {}

    def edges(self, p: Placement) -> list[Edge]:
        """The steps from `p` to a placement whose shardings divide, with their bytes."""
        if p not in self._edges:
            g = self.geometry
            out = []
            for step in moves(p):
                found = g.transition(step, p)
                if found is not None:
                    out.append((step, *found))
            self._edges[p] = out
        return self._edges[p]

    def _search(
        self, start: Placement, goal: Placement | None = None, banned: Step | None = None
    ) -> dict[Placement, tuple[Key, tuple[Edge, ...]]]:
        """Dijkstra from `start` (to every state, or until `goal`); `banned` is skipped at start."""
        best: dict[Placement, tuple[Key, tuple[Edge, ...]]] = {start: ((0, 0, 0, ()), ())}
        heap: list[tuple[Key, Placement]] = [((0, 0, 0, ()), start)]
        done = set()
        while heap:
            key, p = heapq.heappop(heap)
            if p in done:
                continue
            done.add(p)
            if p == goal:
                break
            path = best[p][1]
            for edge in self.edges(p):
                step, after, sent = edge
                if p == start and step == banned:
                    continue
                new = (
                    key[0] + sent,
                    key[1] + step.kind.is_collective,
                    key[2] + 1,
                    (*key[3], step.sort_key()),
                )
                if after not in best or new < best[after][0]:
                    best[after] = (new, (*path, edge))
                    heapq.heappush(heap, (new, after))
        return best

    def plan(self, source: Placement, target: Placement) -> Plan:
        """The cheapest plan from `source` to the complete `target` (see the module doc)."""
        g = self.geometry
        pair = f"from {source} to {target}"
        g.check(source, "source", pair)
        g.check(target, "target", pair)
        if not target.is_complete:
            partial = ", ".join(axis_name(target.mesh_rank, a) for a in target.partial)
            raise RedistributionError(
                f"cannot redistribute {g.what()} {pair}: the target is partial over {partial}; "
                "a redistribution produces complete values (partial values come only from a "
                "reduction); make the target replicated or sharded on those mesh axes"
            )
        if source not in self._trees:
            self._trees[source] = self._search(source)
        found = self._trees[source].get(target)
        if found is None:  # every complete, dividing target is reachable: kept as a guard
            raise RedistributionError(f"cannot redistribute {g.what()} {pair}: no plan exists")
        befores = [source, *(after for _, after, _ in found[1])]
        steps = tuple(
            PlannedStep(step, before, after, sent)
            for before, (step, after, sent) in zip(befores, found[1])
        )
        return Plan(g, source, target, steps, lambda: self._alternative(source, target, steps))

    def planned(self, source: Placement, steps: Sequence[Step]) -> tuple[PlannedStep, ...]:
        """`steps` from `source` with the placements between them and their bytes."""
        out, p = [], source
        for step in steps:
            after = step.apply(p)
            out.append(PlannedStep(step, p, after, self.geometry.cost(step, p)))
            p = after
        return tuple(out)

    def _alternative(
        self, source: Placement, target: Placement, chosen: tuple[PlannedStep, ...]
    ) -> Alternative | None:
        """The classic plan where it differs from `chosen`, otherwise the next best plan."""
        if not chosen or not sum(s.bytes for s in chosen):
            return None  # nothing moves: nothing cheaper to explain
        classic = self.planned(source, classic_steps(source, target))
        if [s.step for s in classic] != [s.step for s in chosen]:
            slices = any(s.step.kind is StepKind.LocalSlice for s in classic)
            return Alternative("via replicate" if slices else "one mesh axis at a time", classic)
        # Yen's spur paths: leave the chosen plan at each of its states in turn.
        candidates = []
        for i, s in enumerate(chosen):
            found = self._search(s.before, target, banned=s.step).get(target)
            if found is not None:
                steps = [c.step for c in chosen[:i]] + [e[0] for e in found[1]]
                candidates.append((self._key(source, steps), steps))
        if not candidates:
            return None
        best = min(candidates, key=lambda c: c[0])[1]
        return Alternative("next best", self.planned(source, best))

    def _key(self, source: Placement, steps: Sequence[Step]) -> Key:
        """The search's order on a whole plan."""
        planned = self.planned(source, steps)
        return (
            sum(s.bytes for s in planned),
            sum(s.step.kind.is_collective for s in planned),
            len(planned),
            tuple(s.sort_key() for s in steps),
        )


def plan(
    shape: Sequence[int],
    itemsize: int,
    mesh: Sequence[int],
    source: Placement,
    target: Placement,
) -> Plan:
    """The cheapest plan moving a tensor of `shape` on a mesh of `mesh` from source to target."""
    return Planner(shape, itemsize, mesh).plan(source, target)
