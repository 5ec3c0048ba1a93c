"""Transform propagation: the reference schedule reaches every tensor, DID axes stay pinned."""

from __future__ import annotations

import pytest
from pointwise_cases import CASES, build, seed004, whole_kernel

import fuserlite as fl
from fuserlite.ir.types import ParallelType
from fuserlite.schedule.pointwise import schedule_pointwise
from fuserlite.schedule.propagate import propagate


def parallel_types(tv: fl.TensorView) -> list[ParallelType]:
    return [ax.parallel_type for ax in tv.domain.loop]


@pytest.mark.parametrize("num_devices", [1, 2, 4, 8])
@pytest.mark.parametrize("parallelized", [True, False])
def test_seed004_at_most_one_didx_per_tensor(parallelized: bool, num_devices: int) -> None:
    fusion = seed004(parallelized, num_devices)
    schedule_pointwise(whole_kernel(fusion))
    for tv in fusion.tensors():
        assert parallel_types(tv).count(ParallelType.DIDx) <= 1, str(fusion)
    fl.verify(fusion)
    if parallelized:  # the seed's T1: bDIDx stays one pinned axis, never split
        y = fusion.inputs[1]
        assert len(y.domain.loop) == 1 and y.domain.transforms == ()
        assert parallel_types(y) == [ParallelType.DIDx]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_tensor_gets_the_grid(name: str) -> None:
    fusion = build(*CASES[name])
    schedule_pointwise(whole_kernel(fusion))
    fl.verify(fusion)
    inputs = set(map(id, fusion.inputs))
    for tv in fusion.tensors():
        types = [pt for pt in parallel_types(tv) if pt is not ParallelType.Serial]
        if id(tv) in inputs:
            assert types == []  # global inputs get the transforms, not the parallelization
        else:
            assert types == [ParallelType.BIDx, ParallelType.Unswitch, ParallelType.TIDx]


def test_replay_by_hand_through_broadcast() -> None:
    fusion = build([[4]], lambda a: [fl.broadcast(a, [True, False]) * 2.0])
    out = fusion.outputs[0]  # [b1, i4]
    out.merge(0).split(0, 2)
    out.axis(1).parallelize(ParallelType.TIDx)
    reached = propagate(out, fusion.exprs())
    assert [t.name for t in reached] == ["T2", "T1", "T0"]
    a = fusion.inputs[0]
    assert [ax.extent for ax in a.domain.loop] == [2, 2]  # merge forwarded, then split
    assert parallel_types(a) == [ParallelType.Serial, ParallelType.TIDx]


def test_device_type_on_broadcast_is_never_split() -> None:
    fusion = seed004(parallelized=True, num_devices=2)
    z = fusion.outputs[0]
    z.split(0, 128)
    reached = propagate(z, fusion.exprs())
    y = fusion.inputs[1]
    assert y in reached
    assert y.domain.transforms == () and parallel_types(y) == [ParallelType.DIDx]


def test_incompatible_user_schedule_is_a_schedule_error() -> None:
    fusion = build([[1000], [1000]], lambda a, b: [a + b])
    fusion.inputs[1].split(0, 64)
    with pytest.raises(fl.ScheduleError) as err:
        schedule_pointwise(whole_kernel(fusion))
    msg = str(err.value)
    assert "T1" in msg and "split by 128" in msg and "iS1{1000}" in msg


def test_incompatible_merge_is_a_schedule_error() -> None:
    fusion = build([[4, 6]], lambda a: [fl.neg(a)])
    a = fusion.inputs[0]
    a.reorder({0: 1}).merge(0)  # merges the axes in the other order
    with pytest.raises(fl.ScheduleError, match="T0.*transformed differently"):
        schedule_pointwise(whole_kernel(fusion))


def test_thread_extent_over_1024_is_a_schedule_error() -> None:
    fusion = build([[4096]], lambda a: [a + 1.0])
    with pytest.raises(fl.ScheduleError, match=r"threadIdx.x .*2048.*1024"):
        schedule_pointwise(whole_kernel(fusion), block_size=2048)


def test_thread_extent_over_1024_by_hand_names_tensor_and_axis() -> None:
    fusion = build([[4096]], lambda a: [a + 1.0])
    out = fusion.outputs[0]
    out.split(0, 2048)
    with pytest.raises(fl.ScheduleError, match=r"T1 axis 1: threadIdx.x extent 2048 exceeds 1024"):
        out.axis(1).parallelize(ParallelType.TIDx)


def test_moved_says_whether_the_way_back_agrees() -> None:
    """propagate skips going back through the expression a tensor was reached by only
    where moving its map back gives the map it came from (moved's third answer)."""
    from fuserlite.schedule.propagate import moved

    assert moved((0, 1), ((0, 0), (1, 1)), True, 2) == ((0, 1), 2, True)
    assert moved((0, -1), ((0, 1),), True, 2) == ((-1, 0), 1, True)
    assert moved((1, 0), ((0, 1), (1, 0)), False, 2) == ((0, 1), 2, True)
    # two producer axes onto one consumer axis: the way back maps both from it
    assert moved((0, 1), ((0, 0), (1, 0)), True, 1) == ((1,), 1, False)
