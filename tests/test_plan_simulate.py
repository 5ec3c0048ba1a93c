"""Every plan, executed on numpy arrays, leaves each device exactly its target block.

A plan that is cheap but wrong fails here: the steps run as the collectives
would (tests/plan_simulator.py), and after every step the local arrays must
hold the tensor as the step's recorded placement says (partial addends summing
to it), ending in the target's blocks of the global tensor.
"""

from __future__ import annotations

import numpy as np
import pytest
from plan_simulator import holds, run_step, source_arrays

from fuserlite.plan import Placement, Planner, Step, StepKind, all_placements, classic_steps

SHAPE = (8, 8, 16)
MESHES = [(2, 2), (2, 4), (2, 2, 2)]


def sample(mesh: tuple[int, ...], every: int) -> list[tuple[Placement, Placement]]:
    """Every `every`-th pair, plus every pair (of every 7th source) whose plan by bytes alone
    takes 5 steps."""
    planner = Planner(SHAPE, 4, mesh, latency_bytes=0)
    sources = list(all_placements(len(SHAPE), len(mesh)))
    pairs = [(s, t) for s in sources for t in sources if t.is_complete]
    some = [(s, t) for s, t in pairs if sources.index(s) % 7 == 0]
    return pairs[::every] + [pair for pair in some if len(planner.plan(*pair).steps) >= 5]


def check_steps(mesh, source, target, steps: list[Step], seed: int) -> None:
    rng = np.random.default_rng(seed)
    value = rng.integers(-100, 100, SHAPE)
    local, p = source_arrays(value, mesh, source, rng), source
    for step in steps:
        local, p = run_step(mesh, step, local), step.apply(p)
        assert holds(value, mesh, p, local) == "", f"{source} -> {target} after {step}"
    assert p == target


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: "x".join(map(str, m)))
def test_plans_and_classic_plans_move_the_right_blocks(mesh):
    """The plans by bytes alone, at the default latency, and the classic ones."""
    planners = [Planner(SHAPE, 4, mesh, latency_bytes=0), Planner(SHAPE, 4, mesh)]
    pairs = sample(mesh, every=5 if len(mesh) == 2 else 97)
    assert len(pairs) > 100
    for i, (source, target) in enumerate(pairs):
        plans = [[s.step for s in planner.plan(source, target).steps] for planner in planners]
        for steps in [plans[0]] + [p for p in plans[1:] if p != plans[0]]:
            check_steps(mesh, source, target, steps, i)
        check_steps(mesh, source, target, classic_steps(source, target), i)


def test_the_simulation_catches_a_wrong_nesting():
    """One AllToAll over (DIDy, DIDx) gives (S1,S1), not the other nesting (S1.1,S1.0)."""
    mesh = (2, 2)
    source = Placement.parse("(S0,S0)", 3)
    rng = np.random.default_rng(0)
    value = rng.integers(-100, 100, SHAPE)
    step = Step(StepKind.AllToAll, (0, 1), 0, 1)
    local = run_step(mesh, step, source_arrays(value, mesh, source, rng))
    assert step.apply(source) == Placement.parse("(S1,S1)", 3)
    assert holds(value, mesh, Placement.parse("(S1,S1)", 3), local) == ""
    assert "values differ" in holds(value, mesh, Placement.parse("(S1.1,S1.0)", 3), local)


def test_the_simulation_catches_a_missing_reduction():
    mesh = (2, 4)
    source = Placement.parse("(P,S0)", 3)
    rng = np.random.default_rng(1)
    value = rng.integers(-100, 100, SHAPE)
    local = source_arrays(value, mesh, source, rng)
    assert holds(value, mesh, source, local) == ""
    assert holds(value, mesh, Placement.parse("(R,S0)", 3), local) != ""
