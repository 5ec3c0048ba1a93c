"""Schedule primitives: results of split/outer_split/merge/reorder/parallelize and every
illegal request raising ScheduleError that names the tensor and the axis."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite.ir import Merge, Split

P = fl.ParallelType


def _tensor(shape: list[int]) -> fl.TensorView:
    with fl.Fusion() as fusion:
        tv = fl.tensor(shape)
        fusion.add_input(tv)
    return tv


def _reduced() -> fl.TensorView:
    """T1[ i{4}, r{8} ] = sum(T0[4, 8], 1)."""
    with fl.Fusion() as fusion:
        x = fl.tensor([4, 8])
        fusion.add_input(x)
        out = fl.sum(x, 1)
        fusion.add_output(out)
    return out


def _extents(tv: fl.TensorView) -> list[int]:
    return [ax.extent for ax in tv.loop]


def test_split_is_inner_split_with_ceil_div() -> None:
    tv = _tensor([1000])
    logical = tv.axis(0)
    assert tv.split(0, 128) is tv
    assert _extents(tv) == [8, 128]
    (tr,) = tv.domain.transforms
    assert isinstance(tr, Split) and tr.inner_split and tr.input == logical.position
    assert tv.domain.loop_positions == (tr.outer, tr.inner)
    assert not tv.domain.divisible(tr)
    assert tv.logical == [logical]
    assert tv.shape == (1000,)


def test_split_negative_axis() -> None:
    tv = _tensor([4, 6])
    tv.split(-1, 2)
    assert _extents(tv) == [4, 3, 2]


def test_outer_split_fixes_the_outer_extent() -> None:
    tv = _tensor([8, 3])
    tv.outer_split(0, 2)
    assert _extents(tv) == [2, 4, 3]
    (tr,) = tv.domain.transforms
    assert not tr.inner_split and tv.domain.divisible(tr)


def test_merge_default_is_next_axis() -> None:
    tv = _tensor([2, 3, 5])
    tv.merge(1)
    assert _extents(tv) == [2, 15]
    assert isinstance(tv.domain.transforms[0], Merge)


def test_merge_non_adjacent_keeps_position_of_outer() -> None:
    tv = _tensor([2, 3, 5])
    first, last = tv.axis(0), tv.axis(2)
    tv.merge(0, 2)
    assert _extents(tv) == [10, 3]
    merged = tv.domain.transforms[0]
    assert (merged.outer, merged.inner) == (first.position, last.position)


def test_merge_reductions_together() -> None:
    with fl.Fusion() as fusion:
        x = fl.tensor([4, 8, 2])
        fusion.add_input(x)
        out = fl.sum(x, [1, 2])
        fusion.add_output(out)
    out.merge(1)
    assert _extents(out) == [4, 16]
    assert out.axis(1).is_reduction


def test_merge_broadcast_with_iteration_is_iteration() -> None:
    tv = _tensor([1, 6])
    tv.merge(0)
    assert tv.axis(0).is_iteration and tv.axis(0).extent == 6


def test_reorder_moves_axes() -> None:
    tv = _tensor([2, 3, 5])
    a, b, c = tv.loop
    tv.reorder({0: 2})
    assert tv.loop == [b, c, a]
    tv.reorder({-1: 0, 0: 1})
    assert tv.loop == [a, b, c]
    assert tv.domain.transforms == ()  # reorder changes the loop order only


def test_parallelize_sets_the_type() -> None:
    tv = _tensor([256])
    tv.split(0, 128)
    tv.axis(0).parallelize(P.BIDx)
    tv.axis(1).parallelize("threadIdx.x")
    assert [ax.parallel_type for ax in tv.loop] == [P.BIDx, P.TIDx]
    tv.axis(1).parallelize(P.Serial)
    tv.axis(0).parallelize(P.Serial)
    assert all(ax.parallel_type is P.Serial for ax in tv.loop)


def test_parallelize_again_with_the_same_type_is_fine() -> None:
    tv = _tensor([4])
    tv.axis(0).parallelize(P.TIDx)
    tv.axis(0).parallelize(P.TIDx)
    assert tv.axis(0).parallel_type is P.TIDx


def test_split_outputs_keep_the_iter_type() -> None:
    out = _reduced()
    out.split(1, 4)
    assert [ax.iter_type for ax in out.loop] == [
        fl.IterType.ITERATION,
        fl.IterType.REDUCTION,
        fl.IterType.REDUCTION,
    ]


# -- illegal requests --------------------------------------------------------------
def _raises(match: str):
    return pytest.raises(fl.ScheduleError, match=match)


@pytest.mark.parametrize("axis", [2, -3, 10])
def test_split_axis_out_of_range(axis: int) -> None:
    tv = _tensor([4, 4])
    with _raises(rf"split: T0 has 2 loop axes; axis {axis} is out of range"):
        tv.split(axis, 2)


def test_outer_split_axis_out_of_range() -> None:
    with _raises(r"outer_split: T0 has 1 loop axes; axis 1 is out of range"):
        _tensor([4]).outer_split(1, 2)


@pytest.mark.parametrize("factor", [0, -4, 2**31, 10**20])
def test_split_factor_out_of_range(factor: int) -> None:
    with _raises(rf"T0 axis 0: factor must be an integer in 1..2147483647, got {factor}"):
        _tensor([4]).split(0, factor)


def test_split_factor_not_an_integer() -> None:
    with _raises(r"T0 axis 0: factor must be an integer"):
        _tensor([4]).split(0, 2.5)


def test_merge_axis_out_of_range() -> None:
    with _raises(r"merge: T0 has 2 loop axes; axis 2 is out of range"):
        _tensor([4, 4]).merge(1)


def test_merge_with_itself() -> None:
    with _raises(r"merge: T0: cannot merge axis 0 with itself"):
        _tensor([4, 4]).merge(0, 0)


def test_merge_reduction_with_iteration() -> None:
    with _raises(r"merge: T1: axis 0 and axis 1 mix a reduction and an iteration axis"):
        _reduced().merge(0)


def test_reorder_out_of_range() -> None:
    with _raises(r"reorder: T0 has 2 loop axes; axis 5 is out of range"):
        _tensor([2, 3]).reorder({5: 0})


def test_reorder_two_axes_to_one_place() -> None:
    with _raises(r"reorder: T0: two axes moved to the same position"):
        _tensor([2, 3]).reorder({0: 1, 1: 1})


def test_reorder_needs_a_dict() -> None:
    with _raises(r"reorder: T0: order must be a dict \{old: new\}, got \[1, 0\]"):
        _tensor([2, 3]).reorder([1, 0])


def test_axis_out_of_range() -> None:
    with _raises(r"T0 has 1 loop axes; axis 1 is out of range"):
        _tensor([4]).axis(1)


@pytest.mark.parametrize("pt", [P.DIDx, P.BIDx, P.TIDx, P.Unswitch, P.Vectorize])
def test_parallelize_two_loop_axes_with_one_type(pt: fl.ParallelType) -> None:
    tv = _tensor([2, 4])
    tv.axis(0).parallelize(pt)
    with _raises(rf"parallelize: T0 axis 1: loop axis 0 already has parallel type {pt.value}"):
        tv.axis(1).parallelize(pt)
    assert tv.axis(1).parallel_type is P.Serial


def test_parallelize_thread_extent_over_1024() -> None:
    tv = _tensor([2048])
    with _raises(r"parallelize: T0 axis 0: threadIdx.x extent 2048 exceeds 1024"):
        tv.axis(0).parallelize(P.TIDx)
    tv.split(0, 1024)
    tv.axis(1).parallelize(P.TIDy)  # exactly 1024 is allowed


def test_parallelize_axis_not_in_loop_domain() -> None:
    tv = _tensor([8])
    logical = tv.axis(0)
    tv.split(0, 2)
    with _raises(r"parallelize: T0: blockIdx.x is given to an axis that is not in the loop"):
        logical.parallelize(P.BIDx)


def test_parallelize_unknown_type() -> None:
    with pytest.raises(fl.ScheduleError, match=r"unknown parallel type 'warpIdx'"):
        _tensor([8]).axis(0).parallelize("warpIdx")


def test_split_device_parallel_axis() -> None:
    tv = _tensor([8])
    tv.axis(0).parallelize(P.DIDx)
    with _raises(r"split: T0 axis 0 is device-parallel \(deviceIdx.x\)"):
        tv.split(0, 2)


def test_merge_device_parallel_axis() -> None:
    tv = _tensor([2, 4])
    tv.axis(1).parallelize(P.DIDx)
    with _raises(r"merge: T0 axis 1 is device-parallel \(deviceIdx.x\); device axes are never"):
        tv.merge(0)
