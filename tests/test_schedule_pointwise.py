"""The schedule-pointwise pass: caches, reference, [blockIdx.x, US, threadIdx.x], ca_pos."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from pointwise_cases import build, seed004, segmented, whole_kernel

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.expr import LoadStoreOp
from fuserlite.ir.types import MemoryType, ParallelType
from fuserlite.passes.base import REGISTRY, make_pass
from fuserlite.passes.schedule_pointwise import SchedulePointwise, schedule_pointwise
from fuserlite.schedule.pointwise import choose_reference


def test_registered_with_options() -> None:
    assert REGISTRY["schedule-pointwise"] is SchedulePointwise
    p = make_pass("schedule-pointwise[block_size=64,vectorize=true]")
    assert (p.block_size, p.vectorize) == (64, True)
    assert "holds" not in SchedulePointwise.description()  # first docstring line only
    module_doc = sys.modules[SchedulePointwise.__module__].__doc__
    assert "Before:" in module_doc and "After:" in module_doc


def test_pass_on_seed004_matches_seed_shape() -> None:
    fusion = seed004(parallelized=True, num_devices=2)
    SchedulePointwise().run(segmented(fusion))
    text = str(fusion)
    # The seed's structure: T3/T4 cache the inputs, T5 computes, T2 = Set(T5).
    assert "T3_l_float[ iblockIdx.x" in text and "cache_op=Streaming" in text
    assert "= Set( T1_g_float[ bdeviceIdx.x1{1} ] (DeviceMesh{0 1}), cache_op=AllLevels )" in text
    assert "T4_l_float[ bblockIdx.x" in text and "bthreadIdx.x" in text
    # as in the seed: loads and stores at the Unswitch axis, the add innermost
    assert "T2_g_float[ iblockIdx.x" in text and "ca_pos( 2 ) produce_pos( 3 )" in text
    assert "] ca_pos( 3 ) produce_pos( 2 ) (DeviceMesh{0 1})" in text
    # The only device axis anywhere is T1's own bdeviceIdx.x1{1}: never copied, never split.
    assert text.count("deviceIdx.x") == text.count("bdeviceIdx.x1{1}") == 4
    fl.verify(fusion)


def test_golden_scheduled_seed004_on_2_devices(golden) -> None:
    for parallelized, name in ((True, "parallelized"), (False, "not_parallelized")):
        fusion = seed004(parallelized, num_devices=2)
        SchedulePointwise().run(segmented(fusion))
        golden(f"scheduled_seed004_{name}_2dev.txt", str(fusion))


def test_caches_and_reference() -> None:
    fusion = build([[3, 5], [5]], lambda a, b: [a + b, b * 2.0])
    kernel = whole_kernel(fusion)
    ref = schedule_pointwise(kernel)
    assert kernel.scheduled and kernel.reference is ref is fusion.outputs[0]
    loads = [e for e in kernel.exprs if isinstance(e, LoadStoreOp) and e.input in fusion.inputs]
    assert [e.input for e in loads] == kernel.inputs and set(kernel.inputs) == set(fusion.inputs)
    assert all(e.output.memory_type is MemoryType.LOCAL for e in loads)
    for out in fusion.outputs:  # outputs are written from a local
        assert isinstance(out.definition, LoadStoreOp)
        assert out.definition.input.memory_type is MemoryType.LOCAL
    assert [ax.parallel_type for ax in ref.domain.loop] == [
        ParallelType.BIDx,
        ParallelType.Unswitch,
        ParallelType.TIDx,
    ]
    assert [ax.extent for ax in ref.domain.loop] == [1, 1, 128]


def test_reference_skips_broadcast_and_device_axes() -> None:
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(2)
        a = fl.tensor([2, 4])
        b = fl.tensor([2, 1])
        a.set_device_mesh(mesh)
        a.axis(0).parallelize(ParallelType.DIDx)
        fusion.add_input(a)
        fusion.add_input(b)
        fusion.add_output(fl.neg(b))  # [2, b1]: one free axis
        fusion.add_output(fl.neg(a))  # [2, 4]: axis 0 is DIDx only on the input
    first, second = fusion.outputs
    assert choose_reference([first, second]) is second


def test_non_pointwise_kernels_are_skipped_with_a_note() -> None:
    program = segmented(build([[4, 8]], lambda a: [fl.sum(a, 1)]))
    SchedulePointwise().run(program)
    (kernel,) = program.kernels
    assert not kernel.scheduled
    assert kernel.notes and "T1 = sum(...) is not a pointwise" in kernel.notes[0]


def test_segments_are_each_scheduled_once() -> None:
    fusion = build([[300]], lambda a: [fl.exp(a)])
    program = segmented(fusion)
    (kernel,) = program.kernels
    SchedulePointwise(block_size=256).run(program)
    SchedulePointwise(block_size=256).run(program)  # scheduled kernels are left alone
    assert kernel.scheduled
    assert [ax.extent for ax in fusion.outputs[0].domain.loop] == [2, 1, 256]
    assert len(kernel.exprs) == 3


def test_running_the_pass_twice_on_a_program_schedules_once() -> None:
    program = segmented(models.add_broadcast(2, True))
    SchedulePointwise().run(program)
    once = str(program)
    SchedulePointwise().run(program)
    assert str(program) == once


# -- one sharding written two ways (issue 8, item 8) --------------------------
def _sharded(tv: fl.TensorView, logical: int, mesh: fl.DeviceMesh, outer: bool) -> None:
    """Shard `tv` on a logical axis of extent D: whole (`ideviceIdx.x{D}`), or as an outer
    split by D whose inner part has extent 1 (`ideviceIdx.x{D}, iS{1}`)."""
    tv.set_device_mesh(mesh)
    pos = tv.domain.loop_positions.index(logical)
    if outer:
        tv.outer_split(pos, mesh.size).axis(pos).parallelize(ParallelType.DIDx)
    else:
        tv.axis(pos).parallelize(ParallelType.DIDx)


def _made_elsewhere_then_add(kind: str, producer_outer: bool, consumer_outer: bool) -> fl.Fusion:
    """`y = add(s, 1.0)` where `s` comes from another segment, both sharded on an axis of
    extent D = 2, each written whole or as an outer split."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as f:
        x = fl.tensor({"linear": [4, 8], "expand": [2, 1]}.get(kind, [2, 3, 4]))
        x.set_device_mesh(mesh)
        f.add_input(x)
        if kind == "linear":
            w = fl.tensor([2, 8])
            f.add_input(w)
            _sharded(w, 0, mesh, False)
            s, axis = fl.linear(x, w), 1
        else:
            if kind != "set":  # a set of replicated x to a sharded s is a LocalSlice
                _sharded(x, 0, mesh, False)
            ops = {
                "reduction": lambda: fl.sum(x, [1]),
                "reshape": lambda: fl.reshape(x, [2, 12]),
                "expand": lambda: fl.expand(x, [2, 5]),
                "set": lambda: fl.set(x),
            }
            s, axis = ops[kind](), 0
        _sharded(s, axis, mesh, producer_outer)
        y = fl.add(s, 1.0)
        _sharded(y, s.data_positions().index(axis), mesh, consumer_outer)
        f.add_output(y)
    return f


def test_issue_case_outer_split_of_an_extent_d_axis_runs_through_the_schedule() -> None:
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as f:
        x = fl.tensor([2, 3, 4])
        x.set_device_mesh(mesh)
        f.add_input(x)
        x.axis(0).parallelize(ParallelType.DIDx)
        s = fl.sum(x, [1])
        s.outer_split(0, 2)
        s.axis(0).parallelize(ParallelType.DIDx)
        f.add_output(fl.add(s, 1.0))
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, ex.run(inputs))
    kernels = [k for k in ex.program.kernels if k.scheduled]  # the sum's too (its scheduler's)
    (pointwise,) = [k for k in kernels if any(e.op_name == "add" for e in k.exprs)]
    assert pointwise.notes == []


@pytest.mark.parametrize("kind", ["reduction", "reshape", "linear", "expand", "set"])
@pytest.mark.parametrize("producer_outer", [False, True], ids=["s-whole", "s-outer"])
@pytest.mark.parametrize("consumer_outer", [False, True], ids=["y-whole", "y-outer"])
def test_a_sharding_written_two_ways_is_one_kernel_schedule(
    kind: str, producer_outer: bool, consumer_outer: bool
) -> None:
    f = _made_elsewhere_then_add(kind, producer_outer, consumer_outer)
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, ex.run(inputs))
    kernel = ex.program.kernels[-1]
    assert kernel.scheduled, kernel.notes  # scheduled, not fallen back to op by op


def test_a_schedule_that_fits_no_single_grid_is_rejected_at_scheduling_time() -> None:
    """The scheduler checks the whole kernel's grid before execution could fail on it."""
    from fuserlite.schedule.pointwise import check_grid

    kernel = whole_kernel(build([[6, 8]], lambda a: [fl.exp(fl.neg(a))]))
    schedule_pointwise(kernel)
    extra = kernel.exprs[1].output  # one tensor gets a loop axis no other tensor has
    extra.split(-1, 2)
    with pytest.raises(fl.ScheduleError, match=r"scheduled loop axes but the kernel has"):
        check_grid(kernel)


@pytest.mark.parametrize("compute", ["compiled", "interpret"])
def test_a_tensor_read_directly_and_through_a_permute_is_not_computed_at_one_order(compute):
    """x.T + x (x square): one schedule inlined x at its own element order into both
    reads, so the kernel computed x + x (a silent wrong answer on every scheduled path;
    differential seed 2655). Such a kernel is left unscheduled, with the reason."""
    with fl.Fusion() as f:
        x = fl.tensor([4, 4], name="x")
        f.add_input(x)
        f.add_output(fl.add(fl.transpose(x, 0, 1), x))
    ex = fl.FusionExecutor(f, compute=compute)
    (kernel,) = ex.program.kernels
    assert not kernel.scheduled
    assert any("two axis maps" in note for note in kernel.notes)
    inputs = fl.random_inputs(f, 1)
    (out,) = ex.run(inputs)
    assert np.array_equal(out, inputs[0].T + inputs[0])
