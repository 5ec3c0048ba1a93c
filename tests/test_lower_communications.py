"""One test per row of docs/design.md §5: kind, bytes per device, and numbers."""

from __future__ import annotations

import re

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.errors import PassOptionError, RedistributionError
from fuserlite.program import CommKind
from fuserlite.schedule.shard import shard_axis

D = 4
ROWS, COLS = 8, 12


def mesh(devices=None):
    return fl.DeviceMesh(range(D)) if devices is None else fl.DeviceMesh(devices)


def build(in_mesh, in_axis, out_mesh, out_axis, reduce_axis=None):
    """x[ROWS, COLS] sharded on in_axis -> y = set(x) (or sum over reduce_axis) sharded on out_axis."""
    return models.resharding(in_mesh, in_axis, out_mesh, out_axis, reduce_axis, ROWS, COLS)


def run(f):
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=3)
    fl.validate(f, inputs, ex.run(inputs))
    return ex.communications


CASES = models.resharding_cases(D, ROWS, COLS)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_table_row(case: models.ReshardingCase):
    comms = [c for c in run(case.build()) if c.kind.is_collective or c.kind.value == "LocalSlice"]
    if case.kind is None:
        assert comms == []
        return
    assert [c.kind.value for c in comms] == [case.kind]
    assert comms[0].bytes_per_device == case.bytes_per_device


def test_every_row_of_the_table_has_a_case():
    kinds = {c.kind for c in CASES} - {None}
    assert len(kinds) == 10 and len({c.name for c in CASES}) == len(CASES)


def test_root_is_recorded():
    comms = run(build(mesh([0]), None, mesh(), 0))
    assert comms[0].root == 0 and comms[0].team == (0, 1, 2, 3)
    comms = run(build(mesh(), 0, mesh([2]), None))
    assert comms[0].root == 2


def across_meshes() -> fl.Fusion:
    """Sharded on axis 0 of {0 1} -> sharded on axis 1 of {2 3 4 5}: no row of §5."""
    with fl.Fusion() as f:
        x = fl.tensor([ROWS, COLS])
        f.add_input(x)
        shard_axis(x, 0, mesh([0, 1]))
        y = fl.set(x)
        shard_axis(y, 1, mesh([2, 3, 4, 5]))
        f.add_output(y)
    return f


def test_a_move_no_row_of_the_table_covers_lowers_to_box_transfers():
    """It was a LoweringError: each destination now receives exactly the box it lacks."""
    program = fl.lower(across_meshes())
    (comm,) = program.communications
    assert comm.kind is CommKind.SendRecv and comm.mesh is None
    chunk_rows, chunk_cols = ROWS // 2, COLS // 4
    got = {(t.src, t.dst, t.box) for t in comm.transfers}
    want = {
        (
            src,
            2 + j,
            ((i * chunk_rows, (i + 1) * chunk_rows), (j * chunk_cols, (j + 1) * chunk_cols)),
        )
        for i, src in enumerate([0, 1])
        for j in range(4)
    }
    assert got == want
    itemsize = 4
    assert comm.bytes_per_device == 4 * chunk_rows * chunk_cols * itemsize  # per sender
    (record,) = program.reshardings
    assert record.move is not None and record.move.bytes == ROWS * COLS * itemsize
    assert "transfers=[0->2 [0:" in str(program)


def test_a_gather_onto_a_replicated_mesh_sends_each_half_once_to_each_device():
    """{0 1} sharded -> {2 3} replicated (was a LoweringError): a Gather onto two roots."""
    with fl.Fusion() as f:
        x = fl.tensor([ROWS, COLS])
        f.add_input(x)
        shard_axis(x, 0, mesh([0, 1]))
        y = fl.set(x)
        y.set_device_mesh(mesh([2, 3]))
        f.add_output(y)
    (comm,) = fl.lower(f).communications
    assert comm.kind is CommKind.Gather
    half = ((0, ROWS // 2), (0, COLS)), ((ROWS // 2, ROWS), (0, COLS))
    assert {(t.src, t.dst, t.box) for t in comm.transfers} == {
        (0, 2, half[0]),
        (1, 2, half[1]),
        (0, 3, half[0]),
        (1, 3, half[1]),
    }


def test_every_communication_prints_one_line():
    lowered = fl.lower(build(mesh([0]), None, mesh(), 0))
    line = [s for s in str(lowered).splitlines() if s.startswith("Communication")]
    assert len(line) == 1
    assert line[0].startswith("Communication Scatter (team=(0 1 2 3), root=0, input=T0_g_float")
    assert "bytes_per_device=" in line[0]


def test_numbers_match_reference_for_every_device():
    f = build(mesh(), 0, mesh(), 1)
    ex = fl.FusionExecutor(f)
    x = fl.random_inputs(f)[0]
    per_device = ex.run_per_device([x])
    for d in range(D):
        np.testing.assert_array_equal(per_device[d][0], x[:, d * 3 : (d + 1) * 3])


def test_root_outside_the_mesh_sends_everything():
    comms = run(build(mesh([4]), None, mesh(), 0))
    whole = ROWS * COLS * 4
    assert comms[0].kind.value == "Scatter" and comms[0].bytes_per_device == whole
    comms = run(build(mesh([0]), None, mesh(), 0))
    assert comms[0].bytes_per_device == (D - 1) * whole // D


def test_lowering_errors_name_the_pass_and_keep_their_class(monkeypatch):
    """A move the planner refuses (here made to) is a LoweringError naming the Set, what
    needed it, both shardings and the planner's reason, and the pass."""
    import fuserlite.passes.lower_communications as lower

    def refuse(*args, **kwargs):
        raise RedistributionError("no source device holds [0:4, 0:2]")

    monkeypatch.setattr(lower, "planned_move", refuse)
    with pytest.raises(fl.LoweringError) as err:
        fl.lower(across_meshes())
    msg = str(err.value)
    assert re.search(r"pass lower-communications \(after: .*segment", msg)
    assert "Set(T0)" in msg and "DeviceMesh{0 1}, sharded on axis 0" in msg
    assert "DeviceMesh{2 3 4 5}, sharded on axis 1" in msg and "no source device holds" in msg


def test_the_latency_option_is_checked_and_printed():
    from fuserlite.passes.base import make_pass

    assert str(make_pass("lower-communications[latency_bytes=0]")) == (
        "lower-communications[latency_bytes=0]"
    )
    assert str(make_pass("lower-communications")) == "lower-communications"  # the default
    with pytest.raises(PassOptionError, match="option latency_bytes must be a non-negative"):
        make_pass("lower-communications[latency_bytes=-5]")
    with pytest.raises(PassOptionError, match="latency_bytes expects an integer"):
        make_pass("lower-communications[latency_bytes=lots]")


def test_lower_communications_needs_a_program():
    """Refused when the pipeline is built, before anything runs."""
    with pytest.raises(PassOptionError, match="lower-communications works on a program.*segment"):
        fl.Pipeline(["propagate-shardings", "insert-reshardings", "lower-communications"])


def test_a_reduction_that_is_only_sliced_again_is_one_reduce_scatter():
    with fl.Fusion() as f:
        x = fl.tensor([ROWS, COLS])
        f.add_input(x)
        shard_axis(x, 0, mesh())
        y = fl.sum(x, 0)  # left unsharded: partial sums -> replicated
        z = fl.relu(y)
        shard_axis(z, 0, mesh())  # ... then sliced again
        f.add_output(z)
    comms = run(f)
    assert [c.kind.value for c in comms] == ["ReduceScatter"]
    assert comms[0].bytes_per_device == (D - 1) * COLS * 4 // D


def test_a_reduction_also_used_whole_stays_an_allreduce():
    with fl.Fusion() as f:
        x = fl.tensor([ROWS, COLS])
        f.add_input(x)
        shard_axis(x, 0, mesh())
        y = fl.sum(x, 0)
        z = fl.relu(y)
        shard_axis(z, 0, mesh())
        f.add_output(z)
        f.add_output(fl.neg(y))
    assert [c.kind.value for c in run(f)] == ["Allreduce", "LocalSlice"]


def test_moves_between_meshes_outside_the_table_run_and_match_the_reference():
    """Box transfers execute: sharded -> resharded on a bigger mesh, and a sum whose input
    is gathered from {0 1} onto both devices of {2 3}."""
    with fl.Fusion() as f:
        x = fl.tensor([ROWS, COLS])
        f.add_input(x)
        shard_axis(x, 1, mesh([0, 1]))
        s = fl.sum(x, 1)
        s.set_device_mesh(mesh([2, 3]))
        f.add_output(s)
    cases = [across_meshes(), f]
    for fusion in cases:
        program = fl.lower(fusion)
        assert all(c.transfers is not None for c in program.communications)
        inputs = fl.random_inputs(fusion, 3)
        fl.validate(fusion, inputs, fl.FusionExecutor(program).run(inputs))


@pytest.mark.parametrize("sharded", [None, 0])
def test_one_device_to_another_is_a_send_recv(sharded):
    """From {0} to {1}: one sender, one receiver, nvFuser's SendRecv (it was a Broadcast
    over a team of 2)."""
    (comm,) = run(build(mesh([0]), sharded, mesh([1]), sharded))
    assert (comm.kind.value, comm.team, comm.root) == ("SendRecv", (0, 1), None)
    assert comm.bytes_per_device == ROWS * COLS * 4
