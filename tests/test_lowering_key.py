"""kernel.indexing.lowering_key: what a tensor's index lowering reads (its domain, and
for an iota or rand_like the device indices its global index reads), by which the
kernel runner plans tensors once: tensors alike but for one detail get their own."""

from __future__ import annotations

import numpy as np

import fuserlite as fl
from fuserlite.kernel.indexing import device_indices, lowering_key
from fuserlite.schedule.shard import shard_axis

MESH = fl.DeviceMesh([0, 1])


def lowered_tensors(body, extent: int = 8) -> dict[str, fl.TensorView]:
    """The tensors a scheduled kernel computes, by op, for x[extent] sharded on 2 devices."""
    with fl.Fusion() as f:
        x = fl.tensor([extent])
        f.add_input(x)
        shard_axis(x, 0, MESH)
        for out in body(x):
            f.add_output(out)
    (kernel,) = fl.lower(f).kernels
    return {e.op_name: e.output for e in kernel.exprs}


def iota_beside_add(x):
    i = fl.iota(x.shape[0], "float32", 0.0, 1.0)
    shard_axis(i, 0, MESH)
    return [x + 1.0, i]


def test_an_indexed_op_of_an_evenly_sharded_domain_gets_its_own_key() -> None:
    """iota's values read the device index even where the sharding is even; an add of
    the same domain does not: one key for both would plan the iota without it."""
    t = lowered_tensors(iota_beside_add)
    assert t["iota"].domain is t["add"].domain
    assert lowering_key(t["iota"]) != lowering_key(t["add"])
    assert device_indices([t["iota"]]) == ["didx"] and device_indices([t["add"]]) == []


def test_an_uneven_sharding_gets_its_own_key_and_device_index() -> None:
    even, uneven = lowered_tensors(lambda x: [x + 1.0]), lowered_tensors(lambda x: [x + 1.0], 7)
    assert lowering_key(even["add"]) != lowering_key(uneven["add"])
    assert device_indices([even["add"]]) == [] and device_indices([uneven["add"]]) == ["didx"]


def test_values_of_an_iota_beside_an_add_of_one_domain() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([8])
        f.add_input(x)
        shard_axis(x, 0, MESH)
        for out in iota_beside_add(x):
            f.add_output(out)
    inputs = fl.random_inputs(f)
    got = fl.FusionExecutor(f, compute="interpret").run(inputs)
    np.testing.assert_array_equal(got[1], np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(got[0], inputs[0] + np.float32(1))
