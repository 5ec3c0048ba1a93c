"""FusionExecutor on the sim backend: sharding inputs, per-device results, errors."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.program.communication import CommKind, Communication
from fuserlite.program.shards import layout, layouts_of
from fuserlite.runtime.backends.sim import SimCommunicator
from fuserlite.runtime.dispatch import run_communication
from fuserlite.runtime.executor import shard
from fuserlite.schedule.shard import shard_axis


def allgather_fusion(d=4):
    with fl.Fusion() as f:
        x = fl.tensor([8, 3])
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(d))
        y = fl.set(x)
        y.set_device_mesh(fl.DeviceMesh.for_num_devices(d))
        f.add_output(fl.mul(y, 2.0))
    return f


def test_run_per_device_returns_local_shards_and_run_the_global_array():
    f = allgather_fusion()
    ex = fl.FusionExecutor(f)
    x = fl.random_inputs(f)[0]
    per_device = ex.run_per_device([x])
    assert sorted(per_device) == [0, 1, 2, 3]
    for outputs in per_device.values():
        np.testing.assert_array_equal(outputs[0], 2 * x)
    np.testing.assert_array_equal(ex.run([x])[0], 2 * x)
    assert [c.kind for c in ex.communications] == [CommKind.Allgather]
    assert ex.devices == [0, 1, 2, 3]


def test_fusion_without_mesh_runs_on_one_device():
    with fl.Fusion() as f:
        x = fl.tensor([5])
        f.add_input(x)
        f.add_output(fl.tanh(x))
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, ex.run(inputs))
    assert list(ex.run_per_device(inputs)) == [0]


@pytest.mark.parametrize(
    "inputs,match",
    [
        ([], "takes 1 inputs, got 0"),
        ([np.zeros((8, 4), np.float32)], r"shape \[8, 3\], got an array of shape \[8, 4\]"),
        ([np.zeros((8, 3), np.float64)], "dtype float32, got an array of dtype float64"),
    ],
)
def test_bad_inputs_are_rejected_before_any_work(inputs, match):
    with pytest.raises(fl.ExecutionError, match=match):
        fl.FusionExecutor(allgather_fusion()).run(inputs)


def test_communication_checks_buffer_shapes_first():
    ex = fl.FusionExecutor(allgather_fusion())
    comm = ex.communications[0]
    bufs = {d: np.zeros((2, 3), np.float32) for d in range(4)}
    bufs[2] = np.zeros((3, 3), np.float32)
    with pytest.raises(
        fl.ExecutionError,
        match=r"Allgather T0 -> T\d+: device 2 holds a buffer of shape \[3, 3\], expected \[2, 3\]",
    ):
        run_communication(comm, SimCommunicator(), bufs)
    del bufs[2]
    with pytest.raises(fl.ExecutionError, match="device 2 has no buffer"):
        run_communication(comm, SimCommunicator(), bufs)
    assert isinstance(comm, Communication)


def six_rows_on_four_devices(factor: int) -> fl.Fusion:
    """neg(x), x[6] outer-split by `factor` and sharded over 4 devices."""
    with fl.Fusion() as f:
        x = fl.tensor([6])
        f.add_input(x)
        x.set_device_mesh(fl.DeviceMesh.for_num_devices(4))
        x.outer_split(0, factor)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        f.add_output(fl.neg(x))
    return f


def test_non_divisible_extent_runs_in_torch_chunk_chunks():
    f = six_rows_on_four_devices(4)
    inputs = fl.random_inputs(f)
    ex = fl.FusionExecutor(f)
    fl.validate(f, inputs, ex.run(inputs))
    assert [o[0].shape for o in ex.run_per_device(inputs).values()] == [(2,), (2,), (2,), (0,)]


def test_outer_split_factor_other_than_the_mesh_size_is_rejected():
    with pytest.raises(
        fl.VerifyError, match=r"axis has extent 3 but DIDx .* has 4 devices; outer_split by 4"
    ):
        fl.FusionExecutor(six_rows_on_four_devices(3))


def test_operands_on_different_meshes_and_shardings_meet_by_box_transfers():
    """Was a LoweringError: y moves from {2 3} (columns) to the add on {0 1} (rows)."""
    with fl.Fusion() as f:
        x = fl.tensor([6, 4])
        y = fl.tensor([6, 4])
        f.add_input(x)
        f.add_input(y)
        shard_axis(x, 0, fl.DeviceMesh([0, 1]))
        shard_axis(y, 1, fl.DeviceMesh([2, 3]))
        f.add_output(fl.add(x, y))
    ex = fl.FusionExecutor(f)
    (move,) = [c for c in ex.communications if c.transfers is not None]
    assert {t.dst for t in move.transfers} == {0, 1}  # y comes to the add on {0 1}
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, ex.run(inputs))


def test_sendrecv_between_meshes_and_every_device_holds_its_part():
    with fl.Fusion() as f:
        x = fl.tensor([4, 6])
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh([0, 1]))
        y = fl.neg(x)
        shard_axis(y, 0, fl.DeviceMesh([2, 3]))
        f.add_output(y)
    ex = fl.FusionExecutor(f)
    x = fl.random_inputs(f)[0]
    per_device = ex.run_per_device([x])
    assert per_device[0] == [None] and per_device[1] == [None]
    np.testing.assert_array_equal(per_device[3][0], -x[2:])
    assert [c.kind.value for c in ex.communications] == ["SendRecv"]


def test_validate_reports_a_mismatch():
    f = models.add_broadcast(2, True)
    inputs = fl.random_inputs(f)
    out = fl.FusionExecutor(f).run(inputs)
    with pytest.raises(fl.ValidationError, match="differs from the reference"):
        fl.validate(f, inputs, [out[0] + 1])


def test_alltoall_and_reduce_scatter_on_non_leading_axes():
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([4, 6, 8])
        f.add_input(x)
        shard_axis(x, 2, mesh)
        y = fl.set(x)
        shard_axis(y, 1, mesh)  # AllToAll from axis 2 to axis 1
        s = fl.sum(y, 1)
        shard_axis(s, 2, mesh)  # reduce the sharded axis 1, scatter on axis 2 -> ReduceScatter
        f.add_output(s)
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, ex.run(inputs))
    assert [c.kind.value for c in ex.communications] == ["AllToAll", "ReduceScatter"]


def test_shards_are_views_and_inputs_are_never_written():
    with fl.Fusion() as g:
        x = fl.tensor([2, 13])
        g.add_input(x)
        g.add_output(fl.neg(x))
        shard_axis(x, 1, fl.DeviceMesh.for_num_devices(4))
    a = np.arange(26).reshape(2, 13)
    parts = [shard(x, a, d) for d in range(4)]  # torch.chunk's 4, 4, 4, 1 columns
    assert [p.shape[1] for p in parts] == [4, 4, 4, 1]
    assert all(np.shares_memory(p, a) for p in parts)
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), a)
    f = models.tensor_parallel_mlp(4, sequence_parallel=True)
    inputs = fl.random_inputs(f, seed=4)
    before = [x.copy() for x in inputs]
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))
    for x, y in zip(inputs, before):
        np.testing.assert_array_equal(x, y)


def test_linear_of_a_stack_equals_the_batched_product():
    with fl.Fusion() as f:
        x, w = fl.tensor([2, 3, 4]), fl.tensor([5, 4])
        f.add_input(x)
        f.add_input(w)
        f.add_output(fl.linear(x, w))
    xs, ws = fl.random_inputs(f, seed=6)
    (out,) = fl.evaluate(f, [xs, ws])
    np.testing.assert_allclose(out, np.einsum("bsk,nk->bsn", xs, ws), rtol=1e-5)


@pytest.mark.parametrize("num_devices", [2, 4])
def test_full_reduction_of_a_sharded_axis_is_a_scalar(num_devices):
    with fl.Fusion() as f:
        x = fl.tensor([8])
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(num_devices))
        f.add_output(fl.sum(x))
        f.add_output(fl.max(x))
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f)
    outputs = ex.run(inputs)
    assert [o.shape for o in outputs] == [(), ()]
    fl.validate(f, inputs, outputs)


def test_a_program_without_lowered_communications_is_refused():
    pipeline = fl.Pipeline(["propagate-shardings", "insert-reshardings", "segment"])
    with pytest.raises(fl.ExecutionError, match="unlowered step .*must run segment and lower-comm"):
        fl.FusionExecutor(allgather_fusion(), pipeline=pipeline)
    with pytest.raises(fl.ExecutionError, match="leaves a fusion, not a program"):
        fl.FusionExecutor(allgather_fusion(), pipeline=fl.Pipeline(["propagate-shardings"]))


def test_random_inputs_reject_bad_seeds_and_huge_tensors():
    with fl.Fusion() as f:
        x = fl.tensor([2**20, 2**20])
        f.add_input(x)
        f.add_output(fl.neg(x))
    with pytest.raises(fl.ExecutionError, match="limited to"):
        fl.random_inputs(f)
    with pytest.raises(fl.ExecutionError, match="the seed must be an integer >= 0, got -1"):
        fl.random_inputs(allgather_fusion(), seed=-1)


def test_a_fusion_that_passes_an_input_through_runs():
    with fl.Fusion() as f:
        x = fl.tensor([4])
        f.add_input(x)
        f.add_output(x)
    inputs = fl.random_inputs(f)
    np.testing.assert_array_equal(fl.FusionExecutor(f).run(inputs)[0], inputs[0])


def test_communication_kind_compares_to_its_name():
    (comm,) = fl.FusionExecutor(allgather_fusion()).communications
    assert comm.kind == "Allgather" and comm.bytes_per_device == 3 * 2 * 3 * 4


@pytest.mark.parametrize("compute", ["interpret", "numpy"])
def test_outputs_of_one_kernel_keep_their_own_device_shapes(compute):
    """Two outputs of one scheduled kernel, one sharded unevenly (rows 4 and 3 of 7), one
    replicated: each output's device shape is its own, on every device and every run
    (the executor asks the outputs' layouts once per kernel)."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as f:
        x, b = fl.tensor([7, 5]), fl.tensor([5])
        for t in (x, b):
            f.add_input(t)
        shard_axis(x, 0, mesh)
        b.set_device_mesh(mesh)
        f.add_output(x + b)
        f.add_output(b * 2.0)
    ex = fl.FusionExecutor(f, compute=compute)
    assert len(ex.program.kernels) == 1 and ex.program.kernels[0].scheduled
    for seed in (0, 1):  # a second run reads what the first asked
        inputs = fl.random_inputs(f, seed)
        per_device = ex.run_per_device(inputs)
        assert [[o.shape for o in per_device[d]] for d in (0, 1)] == [
            [(4, 5), (5,)],
            [(3, 5), (5,)],
        ]
        got = ex.run(inputs)
        np.testing.assert_array_equal(got[0], inputs[0] + inputs[1])
        np.testing.assert_array_equal(got[1], inputs[1] * np.float32(2))


def test_tensors_alike_but_for_their_sharding_keep_their_own_layouts():
    """layouts_of asks one tensor per (domain signature, mesh): x + 1 and y + 1 of one
    shape and mesh, x sharded and y replicated, are laid out each its own way."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as f:
        x, y = fl.tensor([8, 16]), fl.tensor([8, 16])
        for t in (x, y):
            f.add_input(t)
        shard_axis(x, 0, mesh)
        y.set_device_mesh(mesh)
        for k in range(3):
            f.add_output(x + float(k))
            f.add_output(y + float(k))
    outputs = fl.lower(f).outputs
    got = layouts_of(outputs)
    assert [lay for lay, _ in got] == [layout(t) for t in outputs]
    assert [lay.sharded for lay, _ in got] == [True, False] * 3
    assert [m for _, m in got] == [t.mesh for t in outputs]
