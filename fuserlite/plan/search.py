"""The redistribution planner: the cheapest sequence of steps between two placements.

`plan()` runs Dijkstra over placement states: the edges are the steps of
`steps.moves`, weighted by their cost (plan.cost: the bytes each device sends, plus
`latency_bytes` per collective), ties broken by fewer collectives, then fewer steps,
then the steps' fixed order, so the same question always gets the same plan. It
never goes through replicated when one AllToAll does the move (that is always
cheaper), and completes partials over several mesh axes with one collective over
the flattened team when that is cheaper. A target may keep partial values over some
of the source's partial mesh axes (a reduction completed over the others first, as
insert-reshardings asks when a reduction's output is sharded over fewer mesh axes than
its input): every step keeps the values of its untouched mesh axes as they are, so
the partial op carries through; a target partial where the source is not is an error
(nothing makes partial values but a reduction). Each Plan records its steps with their
bytes and the cheapest rejected alternative, for `fuserlite explain`.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fuserlite.ir.errors import RedistributionError
from fuserlite.plan.classic import classic_steps
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES, Cost, check_latency
from fuserlite.plan.mesh_axes import axis_name
from fuserlite.plan.placement import Placement
from fuserlite.plan.steps import Geometry, Step, StepKind, moves

Key = tuple[int, int, int, tuple]  # cost, collectives, steps, the steps' sort keys


@dataclass(frozen=True)
class PlannedStep:
    """One step of a plan, the placements around it and the bytes each device sends."""

    step: Step
    before: Placement
    after: Placement
    bytes: int


def _cost(steps: Sequence[PlannedStep], latency_bytes: int) -> Cost:
    launches = sum(s.step.kind.is_collective for s in steps)
    return Cost(launches, sum(s.bytes for s in steps), latency_bytes)


@dataclass(frozen=True)
class Alternative:
    """A rejected plan: the one of fewest bytes ('fewest bytes', where the latency term
    chose another), the classic one ('via replicate', 'one mesh axis at a time') or 'next best'."""

    label: str
    steps: tuple[PlannedStep, ...]
    latency_bytes: int  # of the plan it was rejected for

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.steps)

    @property
    def cost(self) -> Cost:
        """Its launches and bytes under the latency its plan was chosen with."""
        return _cost(self.steps, self.latency_bytes)

    def describe(self) -> str:
        """'via replicate: Allgather + LocalSlice, 768 B/device' (and its launches where
        they cost: ', ... B/device in 2 launches')."""
        kinds = " + ".join(s.step.kind.value for s in self.steps)
        return f"{self.label}: {kinds}, {self.cost.amount()}"


@dataclass(frozen=True)
class Plan:
    """The chosen steps from `source` to `target`; `alternative` is computed when asked."""

    geometry: Geometry
    source: Placement
    target: Placement
    steps: tuple[PlannedStep, ...]
    _alternative: Callable[[], Alternative | None] = field(repr=False, compare=False)
    latency_bytes: int  # what a collective cost the planner that chose it (plan.cost)

    @property
    def cost(self) -> Cost:
        """Its launches and bytes, and their sum under `latency_bytes` (plan.cost)."""
        return _cost(self.steps, self.latency_bytes)

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
        head = f"{self.source} -> {self.target}: "
        alt = self.alternative
        return head + self.describe_steps() + (f"; {alt.describe()}" if alt else "")

    def describe_steps(self, labels: Sequence[str] | None = None) -> str:
        """'AllToAll S1->S2 on DIDx teams, 384 B/device'; several steps with their bytes
        (the mesh axes called by `labels` where given: 'DIDx (tp) teams')."""
        rank = len(self.geometry.mesh)
        if not self.steps:
            return "nothing to move, 0 B/device"
        if len(self.steps) == 1:
            chosen = self.steps[0].step.describe(rank, labels)
        else:
            chosen = " + ".join(
                f"{s.step.describe(rank, labels)} ({s.bytes} B)" for s in self.steps
            )
        return f"{chosen}, {self.cost.amount()}"


Edge = tuple[Step, Placement, int]


class OnOneMesh:
    """A search over the placements of one tensor shape (and dtype size) on one mesh,
    each collective costing `latency_bytes` on top of its bytes (plan.cost): the
    geometry both planners (this module's and plan.brute_force's) are made of."""

    def __init__(
        self,
        shape: Sequence[int],
        itemsize: int,
        mesh: Sequence[int],
        latency_bytes: int = DEFAULT_LATENCY_BYTES,
    ) -> None:
        self.geometry = Geometry.checked(shape, itemsize, mesh)
        self.latency_bytes = check_latency(latency_bytes)


class Planner(OnOneMesh):
    """Plans redistributions of one tensor shape on one mesh; caches its search graph."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        """OnOneMesh's arguments: shape, itemsize, mesh, latency_bytes."""
        super().__init__(*args, **kwargs)
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
        self,
        start: Placement,
        goal: Placement | None = None,
        banned: Step | None = None,
        latency_bytes: int | None = None,
    ) -> dict[Placement, tuple[Key, tuple[Edge, ...]]]:
        """Dijkstra from `start` (to every state, or until `goal`); `banned` is skipped at
        start; each collective costs `latency_bytes` (the planner's if None) on top."""
        alpha = self.latency_bytes if latency_bytes is None else latency_bytes
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
                launches = step.kind.is_collective
                new = (
                    key[0] + sent + launches * alpha,
                    key[1] + launches,
                    key[2] + 1,
                    (*key[3], step.sort_key()),
                )
                if after not in best or new < best[after][0]:
                    best[after] = (new, (*path, edge))
                    heapq.heappush(heap, (new, after))
        return best

    def plan(self, source: Placement, target: Placement) -> Plan:
        """The cheapest plan from `source` to `target` (see the module doc): a partial target
        keeps partial values of the source's, over a subset of its partial mesh axes."""
        g = self.geometry
        pair = f"from {source} to {target}"
        g.check(source, "source", pair)
        g.check(target, "target", pair)
        strided = next((p for p in (source, target) if p.cyclic), None)
        if strided is not None and source != target:
            t = strided.cyclic_axis()
            b = strided.block_of(strided.shards[t][-1])
            rows = "rows i, i + d, ..." if b == 1 else f"blocks of {b} rows spaced d*{b} apart"
            raise RedistributionError(
                f"cannot redistribute {g.what()} {pair}: {'the source' if strided is source else 'the target'} "
                f"shards tensor axis {t} cyclically (C{t}{f'/{b}' if b > 1 else ''}: device i "
                f"holds {rows}), "
                "which the collectives, moving blocks, do not move; give both tensors the same "
                "cyclic shard (a pointwise kernel between them is local), or shard the axis in "
                "blocks (outer_split it and parallelize the outer part)"
            )
        made = [a for a in target.partial if a not in source.partial]
        if made:
            partial = ", ".join(axis_name(target.mesh_rank, a) for a in made)
            raise RedistributionError(
                f"cannot redistribute {g.what()} {pair}: the target is partial over {partial}, "
                "where the source is not; a redistribution combines partial values, it never "
                "makes them (they come only from a reduction); make the target replicated or "
                "sharded on those mesh axes"
            )
        if source not in self._trees:
            self._trees[source] = self._search(source)
        found = self._trees[source].get(target)
        if found is None:  # every target partial where the source is is reachable: a guard
            raise RedistributionError(f"cannot redistribute {g.what()} {pair}: no plan exists")
        steps = self._planned_edges(source, found[1])
        alternative = functools.partial(self._alternative, source, target, steps)
        return Plan(g, source, target, steps, alternative, self.latency_bytes)

    @staticmethod
    def _planned_edges(source: Placement, edges: Sequence[Edge]) -> tuple[PlannedStep, ...]:
        befores = [source, *(after for _, after, _ in edges)]
        return tuple(
            PlannedStep(step, before, after, sent)
            for before, (step, after, sent) in zip(befores, edges)
        )

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
        """The plan of fewest bytes where the latency term chose another, else the classic
        plan where it differs from `chosen`, otherwise the next best plan."""
        if not chosen or not sum(s.bytes for s in chosen):
            return None  # nothing moves: nothing cheaper to explain
        alpha = self.latency_bytes
        same = [s.step for s in chosen]
        if alpha:
            found = self._search(source, target, latency_bytes=0)[target]
            fewest = self._planned_edges(source, found[1])
            if [s.step for s in fewest] != same:
                return Alternative("fewest bytes", fewest, alpha)
        classic = self.planned(source, classic_steps(source, target))
        if [s.step for s in classic] != same:
            slices = any(s.step.kind is StepKind.LocalSlice for s in classic)
            label = "via replicate" if slices else "one mesh axis at a time"
            return Alternative(label, classic, alpha)
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
        return Alternative("next best", self.planned(source, best), alpha)

    def _key(self, source: Placement, steps: Sequence[Step]) -> Key:
        """The search's order on a whole plan."""
        planned = self.planned(source, steps)
        cost = _cost(planned, self.latency_bytes)
        return (
            cost.total,
            cost.launches,
            len(planned),
            tuple(s.sort_key() for s in steps),
        )


def plan(
    shape: Sequence[int],
    itemsize: int,
    mesh: Sequence[int],
    source: Placement,
    target: Placement,
    latency_bytes: int = DEFAULT_LATENCY_BYTES,
) -> Plan:
    """The cheapest plan moving a tensor of `shape` on a mesh of `mesh` from source to target."""
    return Planner(shape, itemsize, mesh, latency_bytes).plan(source, target)
