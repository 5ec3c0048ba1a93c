"""The tensor-parallel MLP and its sequence-parallel variant."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite import models


@pytest.mark.parametrize("num_devices", [1, 2, 4])
def test_tensor_parallel_mlp_is_one_allreduce(num_devices):
    f = models.tensor_parallel_mlp(num_devices)
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=1)
    fl.validate(f, inputs, ex.run(inputs))
    assert [c.kind.value for c in ex.communications] == ["Allreduce"]
    out_bytes = 2 * 8 * 16 * 4
    assert ex.communications[0].bytes_per_device == 2 * (num_devices - 1) * out_bytes // num_devices


@pytest.mark.parametrize("num_devices", [2, 4])
def test_sequence_parallel_mlp_is_allgather_then_reduce_scatter(num_devices):
    f = models.tensor_parallel_mlp(num_devices, sequence_parallel=True)
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=2)
    fl.validate(f, inputs, ex.run(inputs))
    assert [c.kind.value for c in ex.communications] == ["Allgather", "ReduceScatter"]


def test_bias_is_added_once_after_the_reduction():
    f = models.tensor_parallel_mlp(4)
    inputs = fl.random_inputs(f, seed=5)
    inputs[4][:] = 100.0  # b2: a bias added per device would be off by 300
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))
