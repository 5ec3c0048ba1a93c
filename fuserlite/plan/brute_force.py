"""The optimum over every sequence of up to `max_steps` steps, for the tests and benchmark.

Independent of `plan()`'s search: the steps tried are every entry of
`steps.catalog` (every kind on every group and tensor axis) that `Step.apply`
accepts, not `steps.moves`, and the optimum is found by exhaustive dynamic
programming over sequence length (layer k holds, per state, the cheapest of
all k-step sequences reaching it; a cheapest sequence's prefix is a cheapest
sequence, because cost adds up), not by Dijkstra. The cost is plan.cost's:
bytes plus `latency_bytes` per collective, ties broken by fewer collectives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES
from fuserlite.plan.placement import Placement
from fuserlite.plan.search import OnOneMesh
from fuserlite.plan.steps import Step, catalog

# Four steps are not always enough: on a 2x2x2 mesh (R,P,P) -> (S0.1,R,S0.0) of [8, 8]
# takes 5 (LocalSlice, ReduceScatter, ReduceScatter, AllToAll, Allgather) and
# (R,P,S0) -> (S0,R,S0) of [4, 8] takes 6. The tests run to the longest plan plus one.
MAX_STEPS = 6


@dataclass(frozen=True)
class Optimum:
    """The least cost, then the fewest collectives, and a sequence achieving them."""

    cost: int  # bytes + latency_bytes * collectives
    bytes: int
    collectives: int
    steps: tuple[Step, ...] = ()


class BruteForce(OnOneMesh):
    """Exhaustive optima for one tensor shape on one mesh (caches the step table)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        """OnOneMesh's arguments: shape, itemsize, mesh, latency_bytes."""
        super().__init__(*args, **kwargs)
        self._steps = catalog(len(self.geometry.shape), len(self.geometry.mesh))
        self._table: dict[Placement, list[tuple[Step, Placement, int]]] = {}

    def _transitions(self, p: Placement) -> list[tuple[Step, Placement, int]]:
        if p not in self._table:
            found = ((s, self.geometry.transition(s, p)) for s in self._steps)
            self._table[p] = [(s, *t) for s, t in found if t is not None]
        return self._table[p]

    def optima(self, source: Placement, max_steps: int = MAX_STEPS) -> dict[Placement, Optimum]:
        """For every placement reachable in at most `max_steps` steps, its Optimum."""
        return self.optima_by_length(source, max_steps)[-1]

    def optima_by_length(self, source: Placement, max_steps: int) -> list[dict[Placement, Optimum]]:
        """Entry k: the optimum over sequences of at most k steps, per reachable placement."""
        Label = tuple[int, int, int, tuple[Step, ...]]  # cost, collectives, bytes, steps
        layer: dict[Placement, Label] = {source: (0, 0, 0, ())}
        best = dict(layer)
        out = [best]
        alpha = self.latency_bytes
        for _ in range(max_steps):
            nxt: dict[Placement, Label] = {}
            for p, (total, c, b, steps) in layer.items():
                for step, after, sent in self._transitions(p):
                    launch = step.kind.is_collective
                    cost = (total + sent + alpha * launch, c + launch)
                    if after not in nxt or cost < nxt[after][:2]:
                        nxt[after] = (*cost, b + sent, (*steps, step))
            best = dict(best)
            for p, label in nxt.items():
                if p not in best or label[:2] < best[p][:2]:
                    best[p] = label
            layer = nxt
            out.append(best)
        return [{p: Optimum(t, b, c, s) for p, (t, c, b, s) in layer.items()} for layer in out]


def brute_force(
    shape: Sequence[int],
    itemsize: int,
    mesh: Sequence[int],
    source: Placement,
    target: Placement,
    max_steps: int = MAX_STEPS,
    latency_bytes: int = DEFAULT_LATENCY_BYTES,
) -> Optimum | None:
    """The optimum over every sequence of up to `max_steps` steps, or None if none reaches."""
    return BruteForce(shape, itemsize, mesh, latency_bytes).optima(source, max_steps).get(target)
