"""Collectives over the teams of N-D meshes and moves between meshes, on the sim backend,
against a numpy model (tests/team_cases.py; test_mpi.py runs the same cases on mpi)."""

from __future__ import annotations

import numpy as np
import pytest
from team_cases import MESHES, MOVES, PLAN_MESHES, all_cases, plan_cases, same_bits

import fuserlite as fl
from fuserlite.plan import Holding, Move, Transfer
from fuserlite.plan.mesh_axes import groups
from fuserlite.runtime.backends.sim import SimCommunicator
from fuserlite.runtime.communicator import Team
from fuserlite.runtime.moves import run_move
from fuserlite.runtime.redistribute import mesh_teams

CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_kind_over_every_group_equals_the_numpy_model(case):
    got = case.execute(SimCommunicator())
    assert same_bits(got, case.model(case.inputs())) == ""


@pytest.mark.parametrize("mesh", PLAN_MESHES, ids=lambda m: "x".join(map(str, m[0])) + str(m[1]))
def test_planner_plans_run_step_by_step_as_the_plan_simulator_says(mesh):
    """All pairs of placements of a [8, 8, 16] tensor on 2x2 and 2x4 (a sample on 2x2x2
    and on a 2x2 mesh of devices {3 1 0 2}): each plan's steps through runtime.redistribute
    on sim leave every device the numpy simulation's arrays, the target's blocks."""
    cases = plan_cases(mesh)
    assert len(cases) >= 100
    for case in cases:
        assert same_bits(case.execute(SimCommunicator()), case.model(case.inputs())) == "", (
            case.name
        )


def test_the_cases_cover_every_kind_on_every_mesh_and_group():
    kinds = {"Allgather", "AllToAll", "Allreduce", "ReduceScatter"}
    kinds |= {"Broadcast", "Scatter", "Gather", "Reduce"}
    for name, *_ in MESHES:
        here = {c.name.split(" ")[0].split("-")[0] for c in CASES if f" {name} group" in c.name}
        assert here == kinds, name
    # 2x2x2: the 15 ordered groups (3 single axes, 6 pairs, 6 orders of all three)
    assert len({c.name.split(" group ")[1] for c in CASES if " 2x2x2 group" in c.name}) == 15
    assert len([c for c in CASES if c.name.startswith("move ")]) == len(MOVES)
    assert any("root outside" in c.name for c in CASES)


def test_team_order_is_the_concatenation_order():
    """The team (2, 0) gathers device 2's block first; (0, 2) the other way round."""
    bufs = {0: np.zeros((1, 2), np.float32), 2: np.ones((1, 2), np.float32)}
    sim = SimCommunicator()
    assert sim.allgather([Team((2, 0))], bufs)[0][0, 0] == 1
    assert sim.allgather([Team((0, 2))], bufs)[0][0, 0] == 0


def test_overlapping_teams_are_an_error_naming_the_device():
    bufs = {d: np.zeros((2, 1), np.float32) for d in range(3)}
    with pytest.raises(
        fl.ExecutionError, match="device 1 is in two teams, \\[0, 1\\] and \\[1, 2\\]"
    ):
        SimCommunicator().allgather([Team((0, 1)), Team((1, 2))], bufs)


def test_an_indivisible_alltoall_is_an_execution_error():
    bufs = {d: np.zeros((3, 1), np.float32) for d in range(2)}
    with pytest.raises(fl.ExecutionError, match="axis extent 3 is not divisible by 2 devices"):
        SimCommunicator().alltoall([Team((0, 1))], bufs)


def test_a_move_that_leaves_a_gap_fails_instead_of_returning_garbage():
    box = ((0, 4),)
    sources = [Holding(0, ((0, 2),)), Holding(1, ((2, 4),))]
    half = Move(None, (), (Transfer(0, 2, ((0, 2),)),), 4)  # device 1's half never arrives
    bufs = {0: np.ones(2, np.float32), 1: np.ones(2, np.float32)}
    with pytest.raises(fl.ExecutionError, match="device 2's box \\[0:4\\] .* unfilled"):
        run_move(half, sources, [(2, box)], SimCommunicator(), bufs, np.dtype("float32"))


def test_a_move_checks_each_source_buffer_against_its_box():
    sources = [Holding(0, ((0, 4),))]
    move = Move(None, (), (Transfer(0, 1, ((0, 4),)),), 4)
    with pytest.raises(fl.ExecutionError, match="source device 0 holds a buffer of shape \\[3\\]"):
        run_move(move, sources, [(1, ((0, 4),))], SimCommunicator(), {0: np.ones(3)}, np.float32)


@pytest.mark.parametrize("entry", MESHES, ids=lambda m: m[0])
def test_runtime_teams_are_the_device_meshs_teams_along_the_parallel_types(entry):
    """plan_steps.mesh_teams (mesh axes, for the planner's steps) and DeviceMesh.teams
    (parallel types, for the IR) name the same teams in the same order."""
    _, shape, devices, _ = entry
    mesh = fl.DeviceMesh(np.array(devices).reshape(shape).tolist())
    for group in groups(len(shape)):
        pts = [mesh.parallel_types[a] for a in group]
        assert [t.members for t in mesh_teams(mesh, group)] == mesh.teams(pts), group
