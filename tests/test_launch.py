"""Launch plans (runtime/launch.py): one native call per compiled kernel, buffers planned once.

Only exactly rounded arithmetic here, so compiled and interpreted agree to the bit."""

from __future__ import annotations

import os

import numpy as np
import pytest
from three_way import HAVE_COMPILER

import fuserlite as fl
from fuserlite.schedule.shard import shard_axis

pytestmark = pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on the PATH")


def pooled_fusion(rows: int = 4, devices: int = 2) -> fl.Fusion:
    """x * x + 1 and the row sums are compiled kernels' outputs that only the last
    compiled kernel reads (pooled buffers; the sum is a reduction kernel)."""
    with fl.Fusion() as f:
        x = fl.tensor([rows, 6], name="x")
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(devices))
        z = (x * x + 1.0) + fl.sum(x, 1, keepdim=True)
        f.add_output(fl.sqrt(z * z))
        f.add_output(fl.neg(x))
    return f


def counting(ex: fl.FusionExecutor) -> list[int]:
    """Count the native calls of every launch plan of `ex` (its launcher wrapped)."""
    calls = [0]
    for launch in ex._launch_plans().values():
        native = launch._launcher

        def counted(*args, native=native):
            calls[0] += 1
            native(*args)

        launch._launcher = counted
    return calls


# even, and uneven (a short chunk padded; the reduction scheduler leaves the sum op by op)
@pytest.mark.parametrize("rows, pooled", [(4, 2), (5, 1)])
def test_runs_match_the_kernel_runner_and_keep_earlier_outputs(rows, pooled):
    fusion = pooled_fusion(rows)
    compiled = fl.FusionExecutor(fusion, compute="compiled")
    interpreted = fl.FusionExecutor(fusion, compute="interpret")
    first = fl.random_inputs(fusion, seed=1)
    got = compiled.run(first)
    pooled_names = [s.outputs[0].name for s in compiled._steps[:pooled]]
    assert [t.name for t in compiled._pooled] == pooled_names
    kept = [a.copy() for a in got]
    for seed in (2, 3):  # later runs reuse the pooled buffer, never the returned arrays
        inputs = fl.random_inputs(fusion, seed=seed)
        for a, b in zip(compiled.run(inputs), interpreted.run(inputs)):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(got, kept):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(got, interpreted.run(first)):
        np.testing.assert_array_equal(a, b)


def test_one_native_call_per_kernel_and_run():
    fusion = pooled_fusion(8, devices=4)
    ex = fl.FusionExecutor(fusion)
    inputs = fl.random_inputs(fusion, seed=0)
    ex.run(inputs)
    calls = counting(ex)
    assert len(ex._launch_plans()) == 3  # the scheduled kernels (one a reduction), 4 devices each
    ex.run(inputs)
    ex.run(inputs)
    assert calls[0] == 6


def test_an_output_laid_out_as_its_rows_is_returned_whole():
    with fl.Fusion() as f:
        x = fl.tensor([8, 3], name="x")
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(4))
        f.add_output(fl.maximum(x, 0.5) * 2.0)
    ex = fl.FusionExecutor(f)
    (x,) = fl.random_inputs(f, seed=0)
    (a,) = ex.run([x])
    (b,) = ex.run([x + 1])  # a fresh array each run: the first is not overwritten
    assert a.base is not None and a.base is not b.base  # the kernel's own buffer, no copy
    np.testing.assert_array_equal(a, fl.FusionExecutor(f, compute="interpret").run([x])[0])
    np.testing.assert_array_equal(b, fl.FusionExecutor(f, compute="interpret").run([x + 1])[0])


def test_an_input_sharded_on_an_inner_axis_is_read_per_device():
    """A shard that is not one block of the global array (axis 1 cut) is copied, not
    addressed in place."""
    with fl.Fusion() as f:
        x = fl.tensor([4, 6], name="x")
        f.add_input(x)
        shard_axis(x, 1, fl.DeviceMesh.for_num_devices(2))
        f.add_output(x * 3.0 + x)
    inputs = fl.random_inputs(f, seed=0)
    got = fl.FusionExecutor(f).run(inputs)[0]
    np.testing.assert_array_equal(got, fl.FusionExecutor(f, compute="interpret").run(inputs)[0])


@pytest.mark.parametrize("sequence_parallel", [False, True])  # Allreduce; Allgather, ReduceScatter
def test_planned_collectives_give_dispatchs_bits(sequence_parallel):
    from fuserlite import models

    fusion = models.tensor_parallel_mlp(4, sequence_parallel=sequence_parallel)
    planned, dispatched = fl.FusionExecutor(fusion), fl.FusionExecutor(fusion)
    inputs = fl.random_inputs(fusion, seed=0)
    want = planned.run(inputs)
    kinds = sorted(p.kind.value for p in planned._collectives.values())
    assert kinds == (["Allgather", "ReduceScatter"] if sequence_parallel else ["Allreduce"])
    dispatched._launch_plans()
    dispatched._collectives = {}  # every communication through runtime.dispatch
    for a, b in zip(want, dispatched.run(inputs)):
        np.testing.assert_array_equal(a, b)


def test_a_planned_collective_names_a_wrong_buffer():
    from fuserlite import models

    fusion = models.tensor_parallel_mlp(2)
    ex = fl.FusionExecutor(fusion)
    ex.run(fl.random_inputs(fusion, seed=0))
    (plan,) = ex._collectives.values()
    values = {d: {plan.comm.input: np.zeros((1, 1), np.float32)} for d in (0, 1)}
    with pytest.raises(fl.ExecutionError, match="device 0 holds a buffer of shape"):
        plan.run(values)


@pytest.mark.parametrize("rows", [4, 5])
def test_outputs_above_one_block_are_a_buffer_per_row(rows, monkeypatch):
    """Above ONE_BLOCK_BYTES (32 MiB) each device's output is its own buffer: the same
    values, and a program output is still each device's own array."""
    from fuserlite.runtime import launch

    monkeypatch.setattr(launch, "ONE_BLOCK_BYTES", 0)
    fusion = pooled_fusion(rows)
    compiled = fl.FusionExecutor(fusion, compute="compiled")
    interpreted = fl.FusionExecutor(fusion, compute="interpret")
    for seed in (1, 2):
        inputs = fl.random_inputs(fusion, seed=seed)
        for a, b in zip(compiled.run(inputs), interpreted.run(inputs)):
            np.testing.assert_array_equal(a, b)
        per_device = compiled.run_per_device(inputs)
        views = [per_device[d][1] for d in sorted(per_device)]  # neg(x): each device's block
        assert len({v.ctypes.data for v in views}) == len(views)


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_openmp_threads_sleep_unless_the_user_says(given, monkeypatch):
    """Spinning OpenMP threads took the cores numpy's BLAS needed between two kernels
    (the transformer block at batch 4, seq 256: 250 ms a step against 175 ms)."""
    if given is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", given)
    fusion = pooled_fusion()
    fl.FusionExecutor(fusion, compute="compiled").run(fl.random_inputs(fusion, seed=1))
    assert os.environ["OMP_WAIT_POLICY"] == (given or "PASSIVE")
