"""The kernel runner executes scheduled kernels through their indices and matches the reference."""

from __future__ import annotations

import numpy as np
import pytest
from pointwise_cases import CASES, build, seed004, segmented, whole_kernel

import fuserlite as fl
from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.types import ParallelType
from fuserlite.kernel.runner import run_kernel, run_scheduled, shard_slices
from fuserlite.program import Kernel
from fuserlite.schedule.pointwise import schedule_pointwise


def run_device0(fusion: fl.Fusion, block_size: int = 128, vectorize: bool = False):
    """(runner outputs on device 0, matching slices of the reference outputs)."""
    inputs = fl.random_inputs(fusion, seed=1)
    expected = fl.evaluate(fusion, inputs)
    program = segmented(fusion)
    schedule_pointwise(program.kernels[0], block_size, vectorize)
    local = [a[shard_slices(t, 0)] for t, a in zip(fusion.inputs, inputs)]
    got = run_scheduled(program, local)
    want = [e[shard_slices(t, 0)] for t, e in zip(fusion.outputs, expected)]
    return got, want


def assert_same(got, want) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("num_devices", [1, 2, 4, 8])
@pytest.mark.parametrize("parallelized", [True, False])
def test_seed004_runner_equals_reference(parallelized: bool, num_devices: int) -> None:
    assert_same(*run_device0(seed004(parallelized, num_devices)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_cases_runner_equals_reference(name: str) -> None:
    assert_same(*run_device0(build(*CASES[name])))


@pytest.mark.parametrize("block_size", [1, 32, 1024])
def test_block_sizes(block_size: int) -> None:
    assert_same(*run_device0(build(*CASES["rank_mix"]), block_size=block_size))


def test_vectorized_schedule() -> None:
    fusion = build([[8, 16], [16]], lambda a, b: [a * b + 1.0])
    got, want = run_device0(fusion, vectorize=True)
    assert_same(got, want)
    out = fusion.outputs[0]
    assert [ax.parallel_type for ax in out.domain.loop] == [
        ParallelType.BIDx,
        ParallelType.Unswitch,
        ParallelType.TIDx,
        ParallelType.Vectorize,
    ]


def test_sharded_outer_split_runs_on_local_shard() -> None:
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x = fl.tensor([8, 6])
        y = fl.tensor([1, 6])
        t = x * y
        z = fl.relu(t)
        for tv in (x, y, t, z):
            tv.set_device_mesh(mesh)
        for tv in (x, t, z):  # y's broadcast axis stays replicated (b == bDIDx)
            tv.outer_split(0, 4)
            tv.axis(0).parallelize(ParallelType.DIDx)
        fusion.add_input(x)
        fusion.add_input(y)
        fusion.add_output(z)
    got, want = run_device0(fusion)
    assert got[0].shape == (2, 6)
    assert_same(got, want)


def test_unsharded_intermediate_between_sharded_tensors_is_rejected() -> None:
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([4])
        z = fl.relu(x * 2.0)
        for tv in (x, z):
            tv.set_device_mesh(mesh)
            tv.outer_split(0, 2)
            tv.axis(0).parallelize(ParallelType.DIDx)
        fusion.add_input(x)
        fusion.add_output(z)
    with pytest.raises(fl.ScheduleError, match=r"is sharded \(deviceIdx.x\) but T\d axis"):
        # One kernel, as segment would make of it had the intermediate a mesh too.
        schedule_pointwise(Kernel(fusion.exprs(), fusion.inputs, fusion.outputs, mesh))


def _reschedule(tv: fl.TensorView, factor: int, swap_merge: bool = False) -> None:
    """Replace tv's schedule by a hand-made one: [blockIdx.x, US, threadIdx.x{factor}]."""
    tv.domain = TensorDomain(tv.domain.logical, tv.domain.contiguity)
    if swap_merge and tv.ndim > 1:
        tv.reorder({0: 1})
    while tv.ndim > 1:
        tv.merge(0, 1)
    tv.split(0, factor).split(0, 1)
    for ax, pt in zip(tv.loop, (ParallelType.BIDx, ParallelType.Unswitch, ParallelType.TIDx)):
        ax.parallelize(pt)


def _broken_run(which: str, factor: int, swap_merge: bool):
    fusion = build([[6, 50], [6, 50]], lambda a, b: [fl.exp(a) + b])
    inputs = fl.random_inputs(fusion, seed=2)
    (want,) = fl.evaluate(fusion, inputs)
    program = segmented(fusion)
    (kernel,) = program.kernels
    schedule_pointwise(kernel, 128)
    (good,) = run_scheduled(program, inputs)
    np.testing.assert_allclose(good, want, rtol=1e-6)
    by_role = {
        "load": kernel.exprs[0].output,  # the local cache of the first input
        "intermediate": next(e.output for e in kernel.exprs if e.op_name == "exp"),
        "store": fusion.outputs[0],
    }
    _reschedule(by_role[which], factor, swap_merge)
    (bad,) = run_scheduled(program, inputs)
    return bad, want


@pytest.mark.parametrize(
    "which,factor,swap",
    [("load", 128, True), ("intermediate", 64, False), ("store", 128, True), ("store", 96, False)],
)
def test_broken_schedule_gives_wrong_numbers(which: str, factor: int, swap: bool) -> None:
    bad, want = _broken_run(which, factor, swap)
    assert not np.allclose(bad, want, equal_nan=False)


def test_missing_input_is_an_error() -> None:
    fusion = build([[4]], lambda a: [a + 1.0])
    kernel = whole_kernel(fusion)
    schedule_pointwise(kernel)
    with pytest.raises(fl.ExecutionError, match="no array given for kernel input T0"):
        run_kernel(kernel, {})


def test_unscheduled_kernel_is_rejected() -> None:
    fusion = build([[4]], lambda a: [a + 1.0])
    with pytest.raises(fl.ScheduleError, match="schedule the kernel first"):
        run_kernel(whole_kernel(fusion), {fusion.inputs[0]: np.ones(4, np.float32)})
