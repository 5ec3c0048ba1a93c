"""SPMD collectives (torch_xla / shard_map semantics) lower through the normal passes."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl

D = 4


def run(build):
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(D)
        t = fl.spmd_input([2, 8], mesh)
        f.add_input(t)
        f.add_output(build(t))
    ex = fl.FusionExecutor(f)
    x = fl.random_inputs(f, seed=7)[0]
    per_device = ex.run_per_device([x])
    fl.validate(f, [x], ex.run([x]))
    local = np.split(x, D, axis=0)  # device d's local value
    return per_device, local, [c.kind.value for c in ex.communications]


def test_all_gather_concatenates_local_values():
    per_device, local, kinds = run(fl.all_gather)
    for d in range(D):
        np.testing.assert_array_equal(per_device[d][0], np.concatenate(local))
    assert kinds == ["Allgather"]


def test_all_reduce_of_local_values():
    per_device, local, kinds = run(fl.all_reduce)
    for d in range(D):
        np.testing.assert_allclose(per_device[d][0], sum(local), rtol=1e-5)
    assert kinds == ["Allreduce"]


def test_reduce_scatter_of_a_replicated_value():
    per_device, local, kinds = run(lambda t: fl.reduce_scatter(fl.all_gather(t), scatter_dim=0))
    whole = np.concatenate(local)
    for d in range(D):
        np.testing.assert_allclose(per_device[d][0], D * np.split(whole, D)[d], rtol=1e-5)
    assert kinds == ["Allgather", "ReduceScatter"]


def test_all_to_all_moves_the_split_axis():
    per_device, local, kinds = run(lambda t: fl.all_to_all(t, split_dim=1, concat_dim=0))
    whole = np.concatenate(local)
    for d in range(D):
        np.testing.assert_array_equal(per_device[d][0], np.split(whole, D, axis=1)[d])
    assert kinds == ["AllToAll"]


def test_local_sum_is_per_device():
    per_device, local, _ = run(fl.local_sum)
    for d in range(D):
        np.testing.assert_allclose(per_device[d][0], [local[d].sum()], rtol=1e-5)


def test_misuse_is_a_clear_error():
    with fl.Fusion():
        mesh = fl.DeviceMesh.for_num_devices(D)
        t = fl.spmd_input([2, 8], mesh)
        with pytest.raises(fl.FusionError, match="must be sharded on axis 1"):
            fl.all_gather(t, dim=1)
        with pytest.raises(fl.FusionError, match="op must be one of"):
            fl.all_reduce(t, op="prod")
        with pytest.raises(fl.FusionError, match="shard_count 3 must equal the mesh size 4"):
            fl.reduce_scatter(t, shard_count=3)
        with pytest.raises(fl.FusionError, match="has no device mesh"):
            fl.all_reduce(fl.tensor([4]))
