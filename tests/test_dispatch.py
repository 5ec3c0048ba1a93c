"""runtime.dispatch runs a Communication by its tensors' placements on N-D meshes: a
same-mesh kind as the one planner step between them, a move between meshes as
plan.cross_mesh's transfers (the lowering does not emit these yet: built by hand)."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.ir.placement import Placement
from fuserlite.plan import Planner, all_placements, blocks
from fuserlite.program.communication import CommKind, Communication
from fuserlite.runtime.backends.sim import SimCommunicator
from fuserlite.runtime.dispatch import run_communication, step_of, teams_of
from fuserlite.schedule.shard import shard_as

SHAPE = (8, 8, 16)


def tensor(mesh: fl.DeviceMesh, p: Placement):
    t = fl.tensor(list(SHAPE))
    shard_as(t, mesh, p)
    return t


def local(value: np.ndarray, mesh: fl.DeviceMesh, p: Placement) -> dict[int, np.ndarray]:
    boxes = blocks(SHAPE, mesh.shape, p)
    return {d: value[tuple(slice(*b) for b in box)] for d, box in zip(mesh.devices, boxes)}


def one_step_pairs(shape: tuple[int, ...]):
    """Every pair of complete placements one collective (or slice) apart."""
    planner = Planner(SHAPE, 4, shape)
    places = list(all_placements(len(SHAPE), len(shape), partial=False))
    for s in places:
        for t in places:
            plan = planner.plan(s, t).steps if s != t else []
            if len(plan) == 1:
                yield s, t, plan[0].step


@pytest.mark.parametrize("shape", [(2, 2), (2, 4), (2, 2, 2)], ids=lambda s: "x".join(map(str, s)))
def test_same_mesh_communications_run_as_their_step_over_the_groups_teams(shape):
    mesh = fl.DeviceMesh(np.arange(int(np.prod(shape)))[::-1].reshape(shape).tolist())
    value = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    count = 0
    with fl.Fusion():
        for source, target, step in one_step_pairs(shape):
            x, y = tensor(mesh, source), tensor(mesh, target)
            comm = Communication(CommKind(step.kind.value), y, x, mesh.devices)
            assert step_of(comm) == step
            got = run_communication(comm, SimCommunicator(), local(value, mesh, source))
            want = local(value, mesh, target)
            assert sorted(got) == sorted(want)
            for d in want:
                assert got[d].tobytes() == np.ascontiguousarray(want[d]).tobytes(), (step, d)
            count += 1
    assert count >= 20


def test_a_communication_whose_kind_is_not_the_step_between_its_tensors_is_an_error():
    mesh = fl.DeviceMesh([[0, 1], [2, 3]])
    with fl.Fusion():
        x = tensor(mesh, Placement.parse("(S0,S1)", 3))
        y = tensor(mesh, Placement.parse("(S0,R)", 3))
        comm = Communication(CommKind.AllToAll, y, x, mesh.devices)  # it is an Allgather
        with pytest.raises(
            fl.ExecutionError, match=r"no AllToAll steps take \(S0,S1\) to \(S0,R\)"
        ):
            step_of(comm)


MOVES = [
    ([[0, 1], [2, 3]], "(S0,S1)", [[4, 5], [6, 7]], "(S1,S0)"),
    ([0, 1], "(S1)", [[2, 3], [4, 5]], "(S0,S1)"),
    ([[0, 1, 2, 3], [4, 5, 6, 7]], "(S0,S1)", [[[0, 1], [2, 3]], [[4, 5], [6, 7]]], "(S1,S0,R)"),
    ([[0, 1], [2, 3]], "(R,S2)", [5], "(R)"),
]


@pytest.mark.parametrize("src,sp,dst,dp", MOVES, ids=lambda v: str(v))
def test_moves_between_nd_meshes_give_every_destination_its_box(src, sp, dst, dp):
    a, b = fl.DeviceMesh(src), fl.DeviceMesh(dst)
    pa, pb = Placement.parse(sp, 3), Placement.parse(dp, 3)
    value = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    with fl.Fusion():
        x, y = tensor(a, pa), tensor(b, pb)
        comm = Communication(CommKind.SendRecv, y, x, a.devices)
        assert teams_of(comm) == ()  # point to point: no team communicators
        got = run_communication(comm, SimCommunicator(), local(value, a, pa))
    want = local(value, b, pb)
    assert sorted(got) == sorted(want)
    for d in want:
        assert got[d].tobytes() == np.ascontiguousarray(want[d]).tobytes(), d
