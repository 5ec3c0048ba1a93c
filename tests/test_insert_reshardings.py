"""insert-reshardings: every expression is local or a single resharding Set."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.expr import LoadStoreOp, ReductionOp
from fuserlite.ir.sharding import is_partial, same_sharding, sharded_data_axis
from fuserlite.passes.insert_reshardings import InsertReshardings
from fuserlite.passes.propagate_shardings import PropagateShardings
from fuserlite.schedule.shard import shard_axis


def run_passes(fusion):
    PropagateShardings().run(fusion)
    InsertReshardings().run(fusion)
    fl.verify(fusion, require_mesh=True)
    return fusion


def resharding_sets(fusion):
    return [
        e
        for e in fusion.exprs()
        if isinstance(e, LoadStoreOp) and not same_sharding(e.input, e.output)
    ]


def assert_every_expr_is_local_or_a_set(fusion):
    from fuserlite.ir.axis_map import producer_to_consumer

    for e in fusion.exprs():
        if isinstance(e, LoadStoreOp):
            continue
        for p in e.inputs:
            assert p.mesh == e.output.mesh
            amap = producer_to_consumer(e, p)
            s = sharded_data_axis(p)
            if s is not None:
                li = [i for i, ax in enumerate(p.domain.logical) if not ax.is_reduction][s]
                assert li in amap


def test_seed_004_inserts_nothing():
    for parallelized in (True, False):
        f = run_passes(models.add_broadcast(4, parallelized))
        assert resharding_sets(f) == []
        assert [type(e) for e in f.exprs()] == [fl.ir.BinaryOp]


def test_mismatched_input_gets_a_set_to_the_output_sharding():
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([4, 6])
        y = fl.tensor([4, 6])
        f.add_input(x)
        f.add_input(y)
        shard_axis(x, 0, mesh)
        shard_axis(y, 1, mesh)
        f.add_output(fl.add(x, y))
    run_passes(f)
    sets = resharding_sets(f)
    assert len(sets) == 1 and sets[0].input is y
    assert sharded_data_axis(sets[0].output) == 0
    assert_every_expr_is_local_or_a_set(f)


def test_device_reduction_becomes_partial_then_set():
    with fl.Fusion() as f:
        x = fl.tensor([8, 6])
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(4))
        s = fl.sum(x, 0)
        f.add_output(s)
    run_passes(f)
    red = [e for e in f.exprs() if isinstance(e, ReductionOp)][0]
    partial = red.output
    assert is_partial(partial)
    assert "rdeviceIdx.x" in str(partial)
    assert s.definition.input is partial and isinstance(s.definition, LoadStoreOp)
    assert not is_partial(s)


def test_sharded_reshape_output_is_computed_replicated_then_sliced():
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([4, 6])
        f.add_input(x)
        x.set_device_mesh(mesh)
        r = fl.reshape(x, [6, 4])
        shard_axis(r, 1, mesh)  # axis 1 of the view maps to no axis of x
        f.add_output(r)
    run_passes(f)
    sets = resharding_sets(f)
    assert len(sets) == 1 and sets[0].output is r
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, ex.run(inputs))
    assert [c.kind.value for c in ex.communications] == ["LocalSlice"]


def test_validator_rejects_a_program_segmented_without_insert_reshardings():
    pipeline = fl.Pipeline(["propagate-shardings", "segment"])
    with pytest.raises(fl.pipeline.PassFailed) as err:
        pipeline.run(models.tensor_parallel_mlp(2))
    msg = str(err.value)
    assert "pass segment (after: propagate-shardings) left an invalid fusion" in msg
    assert "not local; run insert-reshardings before segment" in msg
