"""propagate-shardings: meshes and DID shardings flow from producers to consumers."""

from __future__ import annotations

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
