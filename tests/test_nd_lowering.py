"""Lowering reshardings on N-D meshes: one Communication per planner step, its fields."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.ir.sharding import placement
from fuserlite.plan import DEFAULT_LATENCY_BYTES, Placement, Planner, all_placements, blocks
from fuserlite.program import CommKind
from fuserlite.runtime.backends.sim import SimCommunicator
from fuserlite.runtime.dispatch import run_communication
from fuserlite.schedule.shard import shard_as

MESH = fl.DeviceMesh.for_shape([2, 4])
SHAPE = [8, 16]


def resharding(src: Placement, dst: Placement, mesh: fl.DeviceMesh = MESH) -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor(SHAPE, name="x")
        f.add_input(x)
        shard_as(x, mesh, src)
        y = fl.set(x)
        shard_as(y, mesh, dst)
        f.add_output(y)
    return f


@pytest.mark.parametrize("latency", [0, DEFAULT_LATENCY_BYTES], ids=["bytes", "latency"])
def test_every_pair_lowers_to_the_planners_steps(latency: int) -> None:
    """On a 2x4 mesh, every pair of complete placements of a rank-2 tensor: the
    communications are the plan's steps, chained, with the plan's bytes; by bytes alone
    and at the default latency (where many plans of this 512 B tensor are one Allgather
    over the flattened team and slices instead of two or three AllToAlls)."""
    planner = Planner(SHAPE, 4, MESH.shape, latency)
    pairs = 0
    for src in all_placements(2, 2, partial=False):
        for dst in all_placements(2, 2, partial=False):
            if src == dst:
                continue
            program = fl.lower(resharding(src, dst), latency_bytes=latency)
            plan = planner.plan(src, dst)
            comms = program.communications
            assert [c.kind.value for c in comms] == [s.step.kind.value for s in plan.steps]
            assert [c.group for c in comms] == [s.step.group for s in plan.steps]
            assert [c.bytes_per_device for c in comms] == [s.bytes for s in plan.steps]
            assert comms[0].before == src and comms[-1].after == dst
            for a, b in zip(comms, comms[1:]):
                assert a.output is b.input and a.after == b.before == placement(a.output)
            (record,) = program.reshardings
            assert record.plan.steps == plan.steps and record.communications == comms
            pairs += 1
    assert pairs == 11 * 10


def test_an_alltoall_on_the_didx_teams_not_a_gather_and_a_slice() -> None:
    src, dst = Placement.parse("(S0,S0)", 2), Placement.parse("(S0,S1)", 2)
    program = fl.lower(resharding(src, dst))
    (comm,) = program.communications
    assert comm.kind is CommKind.AllToAll and comm.group_names == ("DIDx",)
    assert comm.teams == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert comm.axes == (0, 1) and comm.mesh == MESH
    line = next(s for s in str(program).splitlines() if s.startswith("Communication"))
    assert "mesh=DeviceMesh{{0 1 2 3}{4 5 6 7}}, teams=(DIDx), placements=(S0,S0)->(S0,S1)" in line
    alt = program.reshardings[0].plan.alternative
    assert alt is not None and alt.bytes > comm.bytes_per_device


def test_partial_over_both_mesh_axes_is_one_allreduce_over_all_devices() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([8, 16], name="x")
        f.add_input(x)
        shard_as(x, MESH, Placement(2, ((), (0, 1))))
        y = fl.sum(x, 1)
        f.add_output(y)
    program = fl.lower(f)
    (comm,) = program.communications
    assert comm.kind is CommKind.Allreduce and comm.group == (0, 1)
    assert comm.teams == [MESH.devices] and comm.op is not None
    assert comm.before == Placement(2, ((),), (0, 1)) and comm.after == Placement(2, ((),))


def test_a_multi_step_plan_has_intermediate_tensors_on_the_mesh() -> None:
    planner = Planner(SHAPE, 4, MESH.shape)
    complete = list(all_placements(2, 2, partial=False))
    src, dst = next(
        (a, b) for a in complete for b in complete if len(planner.plan(a, b).steps) >= 2
    )
    program = fl.lower(resharding(src, dst))
    comms = program.communications
    plan = program.reshardings[0].plan
    assert len(comms) == len(plan.steps) >= 2
    middle = comms[0].output
    assert middle.mesh == MESH and placement(middle) == plan.steps[0].after
    assert middle.domain.allocation[0].parallel_type.is_device  # a collective's buffer
    fl.verify_program(program)


def test_partial_sums_kept_partial_between_steps_stay_on_their_reduction_axis() -> None:
    """(P,P) -> (S0,S0)-like plans may complete one mesh axis at a time: the tensor in
    between is partial over the other, on the reduced axis. (By bytes alone: at the
    default latency one Allreduce over all devices and a slice cost less.)"""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16], name="x")
        f.add_input(x)
        shard_as(x, MESH, Placement(2, ((), (0, 1))))
        y = fl.sum(x, 1)
        shard_as(y, MESH, Placement(2, ((1,),)))
        f.add_output(y)
    program = fl.lower(f, latency_bytes=0)
    plan = program.reshardings[0].plan
    comms = program.communications
    assert [c.kind.value for c in comms] == [s.step.kind.value for s in plan.steps]
    assert len(comms) == 2 and not comms[0].after.is_complete  # (P,P) -> (P,S0) -> (R,S0)
    for c in comms[:-1]:
        assert placement(c.output) == c.after
    fl.verify_program(program)


def _boxes_of(array, mesh: fl.DeviceMesh, p: Placement) -> dict:
    """Every device's box of `array` under `p` (the block model)."""
    return {
        d: array[tuple(slice(lo, hi) for lo, hi in box)]
        for d, box in zip(mesh.devices, blocks(array.shape, mesh.shape, p))
    }


@pytest.mark.parametrize("latency", [0, DEFAULT_LATENCY_BYTES], ids=["bytes", "latency"])
def test_every_pair_runs_on_sim_and_moves_each_block_where_its_target_placement_says(
    latency: int,
) -> None:
    """Lowering and the team machinery together: the communications of each pair's plan,
    run in order on the devices' boxes, leave every device the box of the target."""
    array = np.arange(8 * 16, dtype=np.float32).reshape(SHAPE)
    backend = SimCommunicator()
    complete = list(all_placements(2, 2, partial=False))
    for src in complete:
        for dst in complete:
            if src == dst:
                continue
            bufs = _boxes_of(array, MESH, src)
            for comm in fl.lower(resharding(src, dst), latency_bytes=latency).communications:
                bufs = run_communication(comm, backend, bufs)
            want = _boxes_of(array, MESH, dst)
            assert all(np.array_equal(bufs[d], want[d]) for d in MESH.devices), (src, dst)
