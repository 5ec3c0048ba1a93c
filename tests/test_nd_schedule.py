"""The pointwise scheduler on nested shardings: one tensor axis over both axes of a 2x4
mesh (DIDy then DIDx, or DIDx then DIDy) is scheduled, its loop axes the device axes
outer first, then [blockIdx.x, US, threadIdx.x], and computes the reference on every path.
It was left unscheduled ("cannot propagate"): a kernel's locals got the outer sharding
split only, so the reference's nested one reached an unsharded axis."""

from __future__ import annotations

import numpy as np
import pytest
from three_way import run_three_ways

import fuserlite as fl
from fuserlite.ir.placement import Placement
from fuserlite.plan.blocks import blocks
from fuserlite.schedule.shard import shard_as

MESH = fl.DeviceMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
CASES = [  # (shape, shards): even, uneven (10 over 2 then 4), either nesting, either axis
    ((8, 6), ((0, 1), ())),
    ((8, 6), ((1, 0), ())),
    ((10, 6), ((0, 1), ())),
    ((3, 16), ((), (0, 1))),
    ((9, 7), ((), (1, 0))),
]


def nested(shape: tuple[int, int], shards: tuple) -> fl.Fusion:
    """exp(x) + 1 and x * y, x and y sharded alike on one axis over both mesh axes."""
    with fl.Fusion() as f:
        x, y = fl.tensor(list(shape), name="x"), fl.tensor(list(shape), name="y")
        for t in (x, y):
            f.add_input(t)
            shard_as(t, MESH, Placement(2, shards))
        f.add_output(fl.exp(x) + 1.0)
        f.add_output(x * y)
    return f


@pytest.mark.parametrize(("shape", "shards"), CASES)
def test_a_nested_sharding_is_scheduled_device_axes_first(shape, shards) -> None:
    ex = fl.FusionExecutor(nested(shape, shards), compute="interpret")
    (kernel,) = ex.program.kernels
    assert kernel.scheduled, kernel.notes
    order = [MESH.parallel_types[a] for axes in shards for a in axes]
    for e in kernel.exprs:
        loop = [ax.parallel_type for ax in e.output.domain.loop]
        assert loop[:2] == order and loop[2:] == [
            fl.ParallelType.BIDx,
            fl.ParallelType.Unswitch,
            fl.ParallelType.TIDx,
        ], e.output.name


@pytest.mark.parametrize(("shape", "shards"), CASES)
def test_a_nested_sharding_computes_the_reference_on_every_path(shape, shards) -> None:
    f = nested(shape, shards)
    inputs = fl.random_inputs(f, seed=sum(shape))
    run_three_ways(f, inputs)
    ex = fl.FusionExecutor(f, compute="interpret")
    got = ex.run_per_device(inputs)
    for d, box in zip(MESH.devices, blocks(shape, (2, 4), Placement(2, shards))):
        where = tuple(slice(*b) for b in box)
        np.testing.assert_array_equal(got[d][1], inputs[0][where] * inputs[1][where])
