"""Executes planner steps on numpy arrays, one local array per device, as the collectives would.

Independent of the planner's bookkeeping: each step is run by its teams
(`mesh_axes.teams`, in team-rank order) with concatenations, splits and sums;
only the expected result of a placement comes from the block model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fuserlite.plan import Placement, Step, StepKind, blocks, teams
from fuserlite.plan.mesh_axes import coords, rank_in_team


def source_arrays(
    value: np.ndarray, mesh: tuple[int, ...], p: Placement, rng: np.random.Generator
) -> list[np.ndarray]:
    """Per-device local arrays holding `value` under `p`; partial axes hold random addends."""
    terms = int(np.prod([mesh[a] for a in p.partial], dtype=int))
    addends = [rng.integers(-50, 50, value.shape) for _ in range(terms - 1)]
    addends.append(value - sum(addends, np.zeros_like(value)))
    out = []
    for c, box in zip(coords(mesh), blocks(value.shape, mesh, p)):
        term = rank_in_team(mesh, p.partial, c)
        out.append(addends[term][tuple(slice(a, b) for a, b in box)].copy())
    return out


def run_step(mesh: tuple[int, ...], step: Step, local: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The local arrays after `step`, computed team by team."""
    out = list(local)
    k, t, u = step.kind, step.axis, step.to_axis
    for team in teams(mesh, step.group):
        xs, d = [local[i] for i in team], len(team)
        for r, i in enumerate(team):
            if k is StepKind.LocalSlice:
                out[i] = np.split(xs[r], d, axis=t)[r]
            elif k is StepKind.Allgather:
                out[i] = np.concatenate(xs, axis=t)
            elif k is StepKind.AllToAll:  # member r receives chunk r of every member's axis u
                out[i] = np.concatenate([np.split(x, d, axis=u)[r] for x in xs], axis=t)
            elif k is StepKind.Allreduce:
                out[i] = sum(xs)
            elif k is StepKind.ReduceScatter:
                out[i] = np.split(sum(xs), d, axis=t)[r]
            else:
                raise AssertionError(f"not a one-mesh step: {step}")
    return out


def holds(
    value: np.ndarray, mesh: tuple[int, ...], p: Placement, local: Sequence[np.ndarray]
) -> str:
    """'' when the local arrays hold `value` under `p` (partials summing to it), else why not."""
    boxes = blocks(value.shape, mesh, p)
    for team in teams(mesh, p.partial) if p.partial else [(i,) for i in range(len(local))]:
        want = value[tuple(slice(a, b) for a, b in boxes[team[0]])]
        got = [local[i] for i in team]
        if any(g.shape != want.shape for g in got):
            return f"devices {team}: shapes {[g.shape for g in got]}, want {want.shape}"
        if not np.array_equal(sum(got), want):
            return f"devices {team}: values differ from {p}'s blocks"
    return ""
