"""Shardings on N-D meshes: one placement per mesh axis, nested splits, partials, errors."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.ir.sharding import local_shape, logical_placement, placement
from fuserlite.passes.insert_reshardings import InsertReshardings
from fuserlite.passes.propagate_shardings import PropagateShardings
from fuserlite.plan import Placement, all_placements
from fuserlite.plan.blocks import blocks
from fuserlite.schedule.shard import shard_as, shard_axis

DIDx, DIDy, DIDz = fl.ParallelType.DIDx, fl.ParallelType.DIDy, fl.ParallelType.DIDz
MESH = fl.DeviceMesh.for_shape([2, 4])


def test_one_tensor_axis_split_over_two_mesh_axes_in_either_nesting() -> None:
    with fl.Fusion():
        x = fl.tensor([16, 6], name="x")
        x.set_device_mesh(MESH)
        x.outer_split(0, 2).axis(0).parallelize(DIDy)  # DIDy first: DTensor's (S0, S0)
        x.outer_split(1, 4).axis(1).parallelize(DIDx)
        y = fl.tensor([16, 6], name="y")
        y.set_device_mesh(MESH)
        y.outer_split(0, 4).axis(0).parallelize(DIDx)  # DIDx outermost: (S0.1, S0.0)
        y.outer_split(1, 2).axis(1).parallelize(DIDy)
    assert placement(x) == Placement(2, ((0, 1), ())) and str(placement(x)) == "(S0,S0)"
    assert placement(y) == Placement(2, ((1, 0), ())) and str(placement(y)) == "(S0.1,S0.0)"
    assert local_shape(x) == local_shape(y) == (2, 6)


@pytest.mark.parametrize(("shape", "ndim"), [([2, 4], 2), ([2, 2, 2], 3)])
def test_shard_as_gives_back_every_placement(shape: list[int], ndim: int) -> None:
    """The one conversion each way: shard_as(p) then reading the placement gives p."""
    mesh = fl.DeviceMesh.for_shape(shape)
    seen = 0
    for p in all_placements(ndim, mesh.rank, partial=False):
        with fl.Fusion() as f:
            t = fl.tensor([8, 8, 16][:ndim])
            f.add_input(t)
            f.add_output(fl.neg(t))
            shard_as(t, mesh, p)
        fl.verify(f)
        assert logical_placement(t) == placement(t) == p, str(p)
        seen += 1
    assert seen >= 11


def test_propagation_keeps_every_mesh_axis_and_the_nesting() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([16, 8], name="x")
        f.add_input(x)
        shard_as(x, MESH, Placement(2, ((1, 0), ())))
        w = fl.tensor([16, 8], name="w")
        f.add_input(w)
        shard_axis(w, 1, MESH, DIDy)
        y = fl.exp(x) + w
        f.add_output(y)
    PropagateShardings().run(f)
    assert placement(y) == Placement(2, ((1, 0), ()))


def test_batch_over_didy_and_a_reduction_over_didx_is_partial_over_didx_only() -> None:
    """Megatron's second linear: the partial tensor keeps the batch on DIDy."""
    with fl.Fusion() as f:
        h = fl.tensor([4, 8], name="h")
        w = fl.tensor([6, 8], name="w")
        f.add_input(h)
        f.add_input(w)
        shard_as(h, MESH, Placement(2, ((0,), (1,))))  # batch over DIDy, hidden over DIDx
        shard_as(w, MESH, Placement(2, ((), (1,))))
        y = fl.linear(h, w)
        f.add_output(y)
    PropagateShardings().run(f)
    InsertReshardings().run(f)
    fl.verify(f)
    (partial,) = [t for t in f.tensors() if t.definition and t.definition.op_name == "linear"]
    assert placement(partial) == Placement(2, ((0,), ()), (1,))  # (S0,P)
    sets = [e for e in f.exprs() if e.op_name == "set"]
    assert len(sets) == 1 and sets[0].input is partial  # only the partial sums move
    assert placement(f.outputs[0]) == Placement(2, ((0,), ()))


def test_an_outer_split_by_the_wrong_size_names_tensor_axis_and_mesh_axis() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([8, 4], name="x")
        x.set_device_mesh(MESH)
        x.outer_split(0, 4).axis(0).parallelize(DIDy)
        f.add_input(x)
        f.add_output(fl.neg(x))
    with pytest.raises(fl.VerifyError) as err:
        fl.verify(f)
    message = str(err.value)
    assert "x" in message and "axis 0" in message
    assert "DIDy (mesh axis 0 of DeviceMesh{{0 1 2 3}{4 5 6 7}}, 2 devices)" in message
    assert "outer_split by 2" in message


def test_a_mesh_axis_used_by_two_tensor_axes_is_an_error() -> None:
    with fl.Fusion():
        x = fl.tensor([4, 4], name="x")
        x.set_device_mesh(MESH)
        x.axis(1).parallelize(DIDx)
        with pytest.raises(fl.ScheduleError, match="DIDx names one mesh axis"):
            x.axis(0).parallelize(DIDx)


def test_nested_mesh_fus_round_trip() -> None:
    text = (
        "mesh m = [[0, 1, 2, 3], [4, 5, 6, 7]]\n"
        "input x: float[16, 8] on m\n"
        "y = neg(x)\n"
        "output y\n"
        "outer_split x axis 0 by 2\n"
        "parallelize x axis 0 DIDy\n"
        "outer_split x axis 1 by 4\n"
        "parallelize x axis 1 DIDx\n"
    )
    f = fl.parse(text)
    assert placement(f.inputs[0]) == Placement(2, ((0, 1), ()))
    again = fl.parse(fl.to_fus(f))
    assert str(again) == str(f)


@pytest.mark.parametrize("shape", [(8, 8), (9, 7), (3, 5)])
@pytest.mark.parametrize("shards", [((0,), (1,)), ((1,), (0,)), ((0, 1), ()), ((), (1,))])
def test_the_executor_cuts_nd_shards_by_their_blocks(shape, shards) -> None:
    """Each device of 2x4 gets its plan.blocks box of x (uneven and nested too: 9 over
    2 then 4 is 2 2 1 0 | 2 2 0 0), and the outputs assembled from them validate."""
    with fl.Fusion() as f:
        x = fl.tensor(list(shape), name="x")
        f.add_input(x)
        shard_as(x, MESH, Placement(2, shards))
        f.add_output(fl.exp(x))
    inputs = fl.random_inputs(f, seed=sum(shape))
    ex = fl.FusionExecutor(f, compute="interpret")
    fl.validate(f, inputs, ex.run(inputs))
    boxes = blocks(shape, (2, 4), Placement(2, shards))
    got = ex.run_per_device(inputs)
    for d, box in zip(MESH.devices, boxes):
        np.testing.assert_array_equal(got[d][0], np.exp(inputs[0][tuple(slice(*b) for b in box)]))


def test_a_tensor_axis_split_over_two_mesh_axes_holds_its_innermost_part_per_device() -> None:
    """The pointwise scheduler's 'iterated axes' follow nested sharding splits: an axis of
    8 over 2x4 devices holds one element per device (it counted 4, from the first split)."""
    from fuserlite.schedule.pointwise import _iterated

    with fl.Fusion():
        x = fl.tensor([8, 6], name="x")
        shard_as(x, MESH, Placement(2, ((0, 1), ())))
    assert _iterated(x.domain) == {1}  # logical positions
