"""runtime.dispatch runs a Communication by its tensors' placements on N-D meshes: a
same-mesh kind as the one planner step between them, a move between meshes as
plan.cross_mesh's transfers (built by hand; tests/team_cases.py, also on mpi)."""

from __future__ import annotations

from collections import Counter

import pytest
from team_cases import DISPATCH_MESHES, dispatch_cases, nd_tensor, same_bits

import fuserlite as fl
from fuserlite.ir.placement import Placement
from fuserlite.program.communication import CommKind, Communication
from fuserlite.runtime.backends.sim import SimCommunicator
from fuserlite.runtime.dispatch import move_of, step_of

CASES = dispatch_cases()


def test_every_one_step_pair_and_every_move_gives_each_device_its_target_block():
    for case in CASES:
        assert same_bits(case.execute(SimCommunicator()), case.model(case.inputs())) == "", (
            case.name
        )


def test_the_cases_cover_every_kind_and_group_size():
    kinds = Counter(c.name.split(" ")[1] for c in CASES)
    assert set(kinds) == {"Allgather", "AllToAll", "LocalSlice", "SendRecv"}
    # LocalSlice runs on no team; the collectives over 1, 2 and 4 teams of 8, 4 and 2
    shapes = {(len(c.teams), len(c.teams[0].members)) for c in CASES if c.teams}
    assert shapes >= {(1, 8), (2, 4), (4, 2), (1, 4), (2, 2)}
    assert len(CASES) > 100 * len(DISPATCH_MESHES)


def test_a_communication_whose_kind_is_not_the_step_between_its_tensors_is_an_error():
    mesh = fl.DeviceMesh([[0, 1], [2, 3]])
    with fl.Fusion():
        x = nd_tensor(mesh, Placement.parse("(S0,S1)", 3))
        y = nd_tensor(mesh, Placement.parse("(S0,R)", 3))
    comm = Communication(CommKind.AllToAll, y, x, mesh.devices)  # it is an Allgather
    with pytest.raises(fl.ExecutionError, match=r"no AllToAll steps take \(S0,S1\) to \(S0,R\)"):
        step_of(comm)


def test_a_recorded_step_or_placement_that_contradicts_the_tensors_is_an_error():
    mesh, other = fl.DeviceMesh([[0, 1], [2, 3]]), fl.DeviceMesh([[4, 5], [6, 7]])
    source, target = Placement.parse("(S0,S1)", 3), Placement.parse("(S0,R)", 3)
    with fl.Fusion():
        x, y, z = nd_tensor(mesh, source), nd_tensor(mesh, target), nd_tensor(other, target)
    right = Communication(CommKind.Allgather, y, x, mesh.devices, mesh=mesh, group=(1,), axes=(1,))
    assert step_of(right).group == (1,)
    wrong = Communication(CommKind.Allgather, y, x, mesh.devices, mesh=mesh, group=(0,), axes=(0,))
    with pytest.raises(fl.ExecutionError, match=r"does not take \(S0,S1\) to \(S0,R\)"):
        step_of(wrong)
    move = Communication(CommKind.SendRecv, z, x, (0, 1, 2, 3, 4, 5, 6, 7), before=target)
    with pytest.raises(fl.ExecutionError, match=r"records T\d+ as \(S0,R\), but T\d+ is \(S0,S1\)"):
        move_of(move)
