"""propagate-shardings: meshes and DID shardings flow from producers to consumers."""

from __future__ import annotations

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
    product = [e for e in f.exprs() if isinstance(e, fl.ir.LinearOp)][0].output
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
