"""The schedule-pointwise pass: caches, reference, [blockIdx.x, US, threadIdx.x], ca_pos."""

from __future__ import annotations

import sys

from pointwise_cases import build, seed004

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.expr import LoadStoreOp
from fuserlite.ir.program import Kernel
from fuserlite.ir.types import MemoryType, ParallelType
from fuserlite.passes.base import REGISTRY, make_pass
from fuserlite.passes.schedule_pointwise import SchedulePointwise, schedule_pointwise
from fuserlite.schedule.pointwise import choose_reference, whole_fusion_kernel


def test_registered_with_options() -> None:
    assert REGISTRY["schedule-pointwise"] is SchedulePointwise
    p = make_pass("schedule-pointwise[block_size=64,vectorize=true]")
    assert (p.block_size, p.vectorize) == (64, True)
    assert "holds" not in SchedulePointwise.description()  # first docstring line only
    module_doc = sys.modules[SchedulePointwise.__module__].__doc__
    assert "Before:" in module_doc and "After:" in module_doc


def test_pass_on_unsegmented_fusion_matches_seed_shape() -> None:
    fusion = seed004(parallelized=True, num_devices=2)
    SchedulePointwise().run(fusion)
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
        SchedulePointwise().run(fusion)
        golden(f"scheduled_seed004_{name}_2dev.txt", str(fusion))


def test_caches_and_reference() -> None:
    fusion = build([[3, 5], [5]], lambda a, b: [a + b, b * 2.0])
    kernel = whole_fusion_kernel(fusion)
    ref = schedule_pointwise(kernel)
    assert kernel.scheduled and kernel.reference is ref is fusion.outputs[0]
    loads = [e for e in kernel.exprs if isinstance(e, LoadStoreOp) and e.input in fusion.inputs]
    assert [e.input for e in loads] == fusion.inputs
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
    fusion = build([[4, 8]], lambda a: [fl.sum(a, 1)])
    kernel = Kernel(fusion.exprs(), list(fusion.inputs), list(fusion.outputs), None)
    fusion.segments = [kernel]
    SchedulePointwise().run(fusion)
    assert not kernel.scheduled
    assert kernel.notes and "reduction" in kernel.notes[0]


def test_segments_are_each_scheduled_once() -> None:
    fusion = build([[300]], lambda a: [fl.exp(a)])
    kernel = Kernel(fusion.exprs(), list(fusion.inputs), list(fusion.outputs), None)
    fusion.segments = [kernel]
    SchedulePointwise(block_size=256).run(fusion)
    SchedulePointwise(block_size=256).run(fusion)  # scheduled kernels are left alone
    assert kernel.scheduled
    assert [ax.extent for ax in fusion.outputs[0].domain.loop] == [2, 1, 256]
    assert len(kernel.exprs) == 3


def test_running_the_pass_twice_on_an_unsegmented_fusion_schedules_once() -> None:
    from fuserlite.passes.schedule_pointwise import SchedulePointwise

    fusion = models.add_broadcast(2, True)
    SchedulePointwise().run(fusion)
    once = str(fusion)
    SchedulePointwise().run(fusion)
    assert str(fusion) == once
