"""One test per row of DESIGN.md §5: kind, bytes per device, and numbers."""

from __future__ import annotations

import numpy as np
import pytest
from fuserlite.passes.lower_communications import plan_communication

import fuserlite as fl
from fuserlite.schedule.shard import shard_axis

D = 4
ROWS, COLS = 8, 12
ITEM = 4  # float32
B = ROWS * COLS * ITEM


def mesh(devices=None):
    return fl.DeviceMesh(range(D)) if devices is None else fl.DeviceMesh(devices)


def build(in_mesh, in_axis, out_mesh, out_axis, reduce_axis=None):
    """x[ROWS, COLS] sharded on in_axis -> y = set(x) (or sum over reduce_axis) sharded on out_axis."""
    with fl.Fusion() as f:
        x = fl.tensor([ROWS, COLS])
        f.add_input(x)
        x.set_device_mesh(in_mesh)
        if in_axis is not None:
            shard_axis(x, in_axis, in_mesh)
        y = fl.set(x) if reduce_axis is None else fl.sum(x, reduce_axis)
        y.set_device_mesh(out_mesh)
        if out_axis is not None:
            shard_axis(y, out_axis if reduce_axis is None else out_axis + 1, out_mesh)
        f.add_output(y)
    return f


def run(f):
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=3)
    fl.validate(f, inputs, ex.run(inputs))
    return ex.communications


CASES = [
    # id, fusion, expected kind (None: no communication), expected bytes per device
    ("same-sharding", lambda: build(mesh(), 0, mesh(), 0), None, 0),
    ("replicated-to-sharded", lambda: build(mesh(), None, mesh(), 1), "LocalSlice", 0),
    ("allgather", lambda: build(mesh(), 0, mesh(), None), "Allgather", (D - 1) * B // D),
    ("alltoall", lambda: build(mesh(), 0, mesh(), 1), "AllToAll", (D - 1) * B // (D * D)),
    (
        "allreduce",
        lambda: build(mesh(), 0, mesh(), None, 0),
        "Allreduce",
        2 * (D - 1) * COLS * ITEM // D,
    ),
    (
        "reduce-scatter",
        lambda: build(mesh(), 0, mesh(), 0, 0),
        "ReduceScatter",
        (D - 1) * COLS * ITEM // D,
    ),
    ("broadcast", lambda: build(mesh([0]), None, mesh(), None), "Broadcast", B),
    ("scatter", lambda: build(mesh([0]), None, mesh(), 0), "Scatter", (D - 1) * B // D),
    ("gather", lambda: build(mesh(), 0, mesh([0]), None), "Gather", B // D),
    ("reduce", lambda: build(mesh(), 0, mesh([0]), None, 0), "Reduce", COLS * ITEM),
    ("sendrecv", lambda: build(mesh(range(4)), 1, mesh(range(4, 8)), 1), "SendRecv", B // D),
]


@pytest.mark.parametrize("name,make,kind,nbytes", CASES, ids=[c[0] for c in CASES])
def test_table_row(name, make, kind, nbytes):
    comms = [c for c in run(make()) if c.kind.is_collective or c.kind.value == "LocalSlice"]
    if kind is None:
        assert comms == []
        return
    assert [c.kind.value for c in comms] == [kind]
    assert comms[0].bytes_per_device == nbytes


def test_root_is_recorded():
    comms = run(build(mesh([0]), None, mesh(), 0))
    assert comms[0].root == 0 and comms[0].team == (0, 1, 2, 3)
    comms = run(build(mesh(), 0, mesh([2]), None))
    assert comms[0].root == 2


def test_unlowerable_resharding_names_both_shardings():
    with fl.Fusion() as f:
        x = fl.tensor([ROWS, COLS])
        f.add_input(x)
        shard_axis(x, 0, mesh([0, 1]))
        y = fl.set(x)
        shard_axis(y, 1, mesh([2, 3, 4, 5]))
        f.add_output(y)
    with pytest.raises(fl.LoweringError) as err:
        fl.lower(f)
    msg = str(err.value)
    assert "Set(T0)" in msg and "DeviceMesh{0 1}, sharded on axis 0" in msg
    assert "DeviceMesh{2 3 4 5}, sharded on axis 1" in msg
    assert "Lowerable:" in msg


def test_plan_needs_meshes():
    with fl.Fusion():
        x = fl.tensor([2])
        y = fl.set(x)
    with pytest.raises(fl.LoweringError, match="need a mesh"):
        plan_communication(x, y)


def test_every_communication_prints_one_line():
    lowered = fl.lower(build(mesh([0]), None, mesh(), 0))
    line = [s for s in lowered.print_math().splitlines() if s.startswith("Communication")]
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
