"""propagate-shardings: meshes and DID shardings flow from producers to consumers."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.sharding import sharded_data_axis
from fuserlite.passes.propagate_shardings import PropagateShardings
from fuserlite.schedule.shard import shard_axis

DIDx = fl.ParallelType.DIDx


def run_pass(fusion):
    PropagateShardings().run(fusion)
    fl.verify(fusion, require_mesh=True)
    return fusion


def test_seed_004_broadcast_did_is_not_propagated():
    f = run_pass(models.add_broadcast(4, True))
    z = f.outputs[0]
    assert z.mesh == fl.DeviceMesh.for_num_devices(4)
    assert sharded_data_axis(z) is None  # y's bDIDx holds no data: z stays replicated
    assert not any(ax.parallel_type.is_device for ax in z.domain.loop)


def test_seed_004_user_sharded_output_gets_a_mesh_and_keeps_its_did():
    f = run_pass(models.add_broadcast(4, False))
    z = f.outputs[0]
    assert z.mesh is not None and sharded_data_axis(z) == 0


def test_sharding_flows_through_a_pointwise_chain():
    with fl.Fusion() as f:
        x = fl.tensor([8, 6])
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(4))
        y = fl.exp(fl.neg(x))
        f.add_output(y)
    run_pass(f)
    assert sharded_data_axis(y) == 0
    assert [ax.parallel_type for ax in y.domain.loop] == [
        DIDx,
        fl.ParallelType.Serial,
        fl.ParallelType.Serial,
    ]


def test_no_did_onto_a_reduction_axis_and_never_two_dids():
    with fl.Fusion() as f:
        x = fl.tensor([8, 6])
        w = fl.tensor([8, 6])
        f.add_input(x)
        f.add_input(w)
        mesh = fl.DeviceMesh.for_num_devices(2)
        shard_axis(x, 0, mesh)
        shard_axis(w, 1, mesh)
        s = fl.sum(x, 0)  # the sharded axis is reduced: s stays unsharded
        t = fl.add(x, w)  # two producers sharded differently: the first wins
        f.add_output(s)
        f.add_output(t)
    run_pass(f)
    assert not any(ax.parallel_type.is_device for ax in s.domain.loop)
    assert sharded_data_axis(t) == 0
    for tv in f.tensors():
        assert sum(ax.parallel_type is DIDx for ax in tv.domain.loop) <= 1


def test_linear_prefers_the_weight_sharding():
    f = models.tensor_parallel_mlp(2, sequence_parallel=True)
    run_pass(f)
    product = [e for e in f.exprs() if e.op_name == "linear"][0].output
    assert sharded_data_axis(product) == 2  # the output features, like w1; x moves instead


def test_unsharded_fusion_gets_no_mesh():
    with fl.Fusion() as f:
        x = fl.tensor([3])
        f.add_input(x)
        f.add_output(fl.relu(x))
    run_pass(f)
    assert all(tv.mesh is None for tv in f.tensors())


def test_mesh_flows_backwards_to_inputs():
    with fl.Fusion() as f:
        x = fl.tensor([4])
        f.add_input(x)
        y = fl.neg(x)
        y.set_device_mesh(fl.DeviceMesh([0, 1]))
        f.add_output(y)
    run_pass(f)
    assert x.mesh == fl.DeviceMesh([0, 1])


def test_resize_meshes_keeps_the_sharded_axes():
    from fuserlite.schedule.shard import resize_meshes

    f = models.tensor_parallel_mlp(2)
    resize_meshes(f, 4)
    fl.verify(f)
    w1 = f.inputs[1]
    assert w1.mesh == fl.DeviceMesh.for_num_devices(4) and sharded_data_axis(w1) == 0
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))


def _full_sweeps(exprs) -> None:
    """The specification of mesh propagation: whole forward and backward sweeps until
    nothing changes (propagate-shardings visits only what can change)."""
    changed = True
    while changed:
        changed = False
        for sweep, src, dst in ((exprs, "inputs", "outputs"), (exprs[::-1], "outputs", "inputs")):
            for expr in sweep:
                mesh = next((t.mesh for t in getattr(expr, src) if t.mesh is not None), None)
                for t in getattr(expr, dst):
                    if t.mesh is None and mesh is not None:
                        t.mesh = mesh
                        changed = True


def test_meshes_propagate_as_repeated_full_sweeps_would():
    """A zig-zag needs several sweeps: x -> a <- y -> b <- z -> c, meshes from x and c."""
    from random_sharded import build_case

    from fuserlite.passes.propagate_shardings import _propagate_meshes

    with fl.Fusion() as zigzag:
        x, y, z = fl.tensor([4]), fl.tensor([4]), fl.tensor([4])
        for t in (x, y, z):
            zigzag.add_input(t)
        x.set_device_mesh(fl.DeviceMesh([0, 1]))
        a, b = fl.add(x, y), fl.add(y, z)
        c = fl.neg(z)
        c.set_device_mesh(fl.DeviceMesh([2, 3]))
        for t in (a, b, c):
            zigzag.add_output(t)
    fusions = [zigzag] + [build_case(seed).fusion for seed in range(300)]
    for fusion in fusions:
        spec, _ = fusion.clone()
        ours, _ = fusion.clone()
        _full_sweeps(spec.exprs())
        exprs = ours.exprs()
        _propagate_meshes(exprs, sum(t.mesh is None for t in ours.tensors(exprs)))
        assert [t.mesh for t in ours.tensors_created] == [t.mesh for t in spec.tensors_created]
    lowered = fl.Pipeline(["propagate-shardings"]).run(zigzag)
    assert lowered.outputs[1].mesh == fl.DeviceMesh([0, 1])  # b: from y, found going backward


def test_a_tensor_sharded_without_a_mesh_that_its_inherited_mesh_cannot_hold_is_an_error():
    """y is split over DIDx by 2 with no mesh of its own; the only mesh near it has one
    device. A clear LoweringError naming y (was: PassFailed, "propagate-shardings left
    an invalid fusion", as if the pass were at fault)."""
    with fl.Fusion() as f:
        x = fl.tensor([4, 8], name="x")
        f.add_input(x)
        x.set_device_mesh(fl.DeviceMesh([0]))
        y = fl.set(fl.neg(x))
        y.user_name = "y"
        y.outer_split(1, 2).axis(1).parallelize(fl.ParallelType.DIDx)
        f.add_output(fl.abs(y))
    fl.verify(f)  # valid until the mesh is known: it is inherited
    with pytest.raises(
        fl.LoweringError, match=r"y \(T\d+\) axis 1 is DIDx, but y \(T\d+\) has no mesh"
    ):
        fl.Pipeline(["propagate-shardings"]).run(f)


# -- one decision per signature: outputs alike but for one detail get their own ------
MESH = fl.DeviceMesh.for_num_devices(2)
OTHER = fl.DeviceMesh([2, 3])  # the same shape, other devices


def _layout(tv):
    """What propagation gave a tensor: its mesh, placement and loop axes."""
    from fuserlite.ir.sharding import logical_placement

    loop = [(ax.extent, ax.iter_type, ax.parallel_type) for ax in tv.domain.loop]
    return tv.mesh, logical_placement(tv), loop, len(tv.domain.transforms)


def _alone(build):
    """The layout `build(x)` gets when it is the only output: no decision to share."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16])
        f.add_input(x)
        shard_axis(x, 0, MESH)
        y = build(x)
        f.add_output(y)
    PropagateShardings().run(f)
    return _layout(y)


def _sum1(x):
    return fl.sum(x, 1)


def _sum0(x):
    return fl.sum(x, 0)


@pytest.mark.parametrize("order", [(_sum1, _sum0), (_sum0, _sum1)], ids=["kept-first", "kept-last"])
def test_outputs_reduced_on_other_axes_get_their_own_sharding(order):
    """sum(x, 1) inherits x's DIDx on axis 0; sum(x, 0), the same op on the same input
    but for its output's axis types, must not (DID onto a reduction axis)."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16])
        f.add_input(x)
        shard_axis(x, 0, MESH)
        outs = [build(x) for build in order for _ in range(2)]
        for y in outs:
            f.add_output(y)
    run_pass(f)
    for k, y in enumerate(outs):
        assert _layout(y) == _alone(order[k // 2])
    assert sharded_data_axis(outs[2 * order.index(_sum1)]) == 0


def test_operands_sharded_on_other_axes_give_their_own_sharding():
    with fl.Fusion() as f:
        a, b = fl.tensor([8, 16]), fl.tensor([8, 16])
        f.add_input(a)
        f.add_input(b)
        shard_axis(a, 0, MESH)
        shard_axis(b, 1, MESH)
        ys = [a + 1.0, b + 1.0, a + 2.0]
        for y in ys:
            f.add_output(y)
    run_pass(f)
    assert [sharded_data_axis(y) for y in ys] == [0, 1, 0]


def test_an_operand_on_another_mesh_than_the_output_gives_no_sharding():
    """v + x with v replicated and x sharded: the output takes v's mesh. With v on x's
    mesh it inherits x's sharding; with v on another mesh of that shape (the same
    signature, another mesh) it must not (x is on another mesh than the output)."""
    with fl.Fusion() as f:
        x, v, u = fl.tensor([8, 16]), fl.tensor([8, 16]), fl.tensor([8, 16])
        for t in (x, v, u):
            f.add_input(t)
        shard_axis(x, 0, MESH)
        v.set_device_mesh(MESH)
        u.set_device_mesh(OTHER)
        same, other = v + x, u + x
        f.add_output(same)
        f.add_output(other)
    PropagateShardings().run(f)
    assert same.mesh == MESH and sharded_data_axis(same) == 0
    assert other.mesh == OTHER and not any(ax.parallel_type.is_device for ax in other.domain.loop)


def test_an_output_the_user_scheduled_is_sharded_on_its_own():
    """y2's axis 1 is split before the pass: its domain is not the signature's, so its
    sharding is worked out for it (its split kept), not copied from y1's."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16])
        f.add_input(x)
        shard_axis(x, 0, MESH)
        y1, y2, y3 = x + 1.0, x + 2.0, x + 3.0
        y2.split(1, 4)
        for y in (y1, y2, y3):
            f.add_output(y)
    run_pass(f)
    assert _layout(y1) == _layout(y3) == _alone(lambda x: x + 1.0)
    assert _layout(y2) == _alone(lambda x: (x + 2.0).split(1, 4))


def _run_and_validate(f):
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=5)
    fl.validate(f, inputs, ex.run(inputs))
    return ex


def test_a_tensor_left_whole_by_its_producers_takes_its_readers_sharding():
    """nvFuser's backward propagation: x is a replicated input, the user sharded only the
    output; exp(x) is computed on each device's rows, x sliced (0 bytes), not computed
    whole and sliced after. The fusion input itself keeps the user's placement."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x = fl.tensor([8, 6], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        y = fl.exp(x)
        z = fl.neg(y)
        f.add_output(z)
        shard_axis(z, 0, mesh)
    ex = _run_and_validate(f)
    copy, _ = f.clone()
    run_pass(copy)
    x2, y2 = copy.inputs[0], copy.exprs()[0].output
    assert sharded_data_axis(x2) is None and sharded_data_axis(y2) == 0
    assert [(c.kind.value, c.bytes_per_device) for c in ex.communications] == [("LocalSlice", 0)]
    assert ex.communications[0].input.number == x.number  # the input is sliced, not y


@pytest.mark.parametrize("agree", [True, False])
def test_backward_propagation_takes_the_sharding_all_readers_imply(agree):
    """y = exp(x) read by a (sharded on axis 1) and by b: a sum over axis 0 sharded on its
    kept axis (readers agree: y computed sharded), or whole (y is needed whole once: it
    stays whole, computed once, and a is sliced from it)."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([4, 6])
        f.add_input(x)
        x.set_device_mesh(mesh)
        y = fl.exp(x)
        a = fl.neg(y)
        b = fl.sum(y, 0)
        f.add_output(a)
        f.add_output(b)
        shard_axis(a, 1, mesh)
        if agree:
            shard_axis(b, 1, mesh)
    copy, _ = f.clone()
    run_pass(copy)
    assert sharded_data_axis(copy.exprs()[0].output) == (1 if agree else None)
    ex = _run_and_validate(f)
    (comm,) = ex.communications
    assert comm.kind.value == "LocalSlice"
    assert (comm.input.number == x.number) == agree  # x sliced, else y


def test_uniform_of_a_shape_is_drawn_sharded_as_its_reader():
    """fl.uniform(shape): no tensor operand; its mesh and sharding come back from the add
    that reads it, so each device draws its own rows: no communication, and exactly the
    unsharded program's numbers."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x = fl.tensor([8, 6], name="x")
        f.add_input(x)
        shard_axis(x, 0, mesh)
        r = fl.uniform([8, 6], -1.0, 1.0, seed=3)
        f.add_output(fl.add(x, r))
    ex = _run_and_validate(f)
    assert ex.communications == []
    draw = [e for e in ex.program.fusion.exprs() if e.op_name == "rand"][0].output
    assert sharded_data_axis(draw) == 0 and draw.mesh == mesh
    inputs = fl.random_inputs(f, seed=5)
    got = ex.run(inputs)[0] - inputs[0]
    assert got.min() >= -1.0 and got.max() < 1.0 and len(np.unique(got)) == got.size


def test_rand_on_a_2d_mesh_takes_both_mesh_axes_and_round_trips_through_fus():
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_shape([2, 2])
        x = fl.tensor([4, 6], name="x")
        f.add_input(x)
        fl.distribute(x, mesh, [fl.Shard(0), fl.Shard(1)])
        f.add_output(fl.mul(x, fl.rand([4, 6], "float32", seed=9, offset=2)))
    ex = _run_and_validate(f)
    assert ex.communications == []
    again = fl.parse(fl.to_fus(f))
    assert "rand([4, 6], float32, seed=9, offset=2)" in fl.to_fus(again)


def test_rand_rejects_a_shape_it_cannot_draw():
    with fl.Fusion():
        with pytest.raises(fl.FusionError, match="rand: dtype int32 holds no random numbers"):
            fl.rand([4], "int32")
        with pytest.raises(fl.FusionError, match="must be in 1"):
            fl.rand([4, 0])


def test_a_pointwise_output_inherits_its_input_placement_value_and_a_cyclic_one_too():
    """_inherited hands on the one source's placement where it maps through unchanged
    (no new Placement made); a cyclic, blocked one keeps its cyclic axis and block."""
    from fuserlite.ir.placement import Placement
    from fuserlite.ir.sharding import logical_placement
    from fuserlite.passes.propagate_shardings import _inherited
    from fuserlite.schedule.shard import shard_as

    mesh = fl.DeviceMesh.for_num_devices(4)

    def tanh_of(placed):
        with fl.Fusion() as f:
            x = fl.tensor([64], name="x")
            f.add_input(x)
            shard_as(x, mesh, placed)
            f.add_output(fl.tanh(x))
        return f, x, f.outputs[0]

    for placed in (Placement(1, ((0,),)), Placement(1, ((0,),), (), (0,), (2,))):
        f, x, y = tanh_of(placed)
        y.set_device_mesh(mesh)
        got = _inherited(y, [(x, {0: 0})])
        assert got == placed and got is logical_placement(x)
        f, x, y = tanh_of(placed)
        run_pass(f)
        assert logical_placement(y) == placed
    # Two sources: a new value, the first source's sharding.
    with fl.Fusion() as f:
        a, b = fl.tensor([64], name="a"), fl.tensor([64], name="b")
        f.add_input(a)
        f.add_input(b)
        shard_as(a, mesh, Placement(1, ((0,),)))
        c = a + b
        f.add_output(c)
    b.set_device_mesh(mesh)
    c.set_device_mesh(mesh)
    assert _inherited(c, [(b, {0: 0}), (a, {0: 0})]) == Placement(1, ((0,),))
