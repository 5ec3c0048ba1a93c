"""reorder-sharded-axis: the device axis is outermost in communication buffers."""

from __future__ import annotations

import fuserlite as fl
from fuserlite.pipeline import Pipeline
from fuserlite.schedule.shard import shard_axis


def test_sharded_axis_is_first_in_the_allocation_domain():
    with fl.Fusion() as f:
        x = fl.tensor([4, 6])
        f.add_input(x)
        shard_axis(x, 1, fl.DeviceMesh.for_num_devices(2))
        y = fl.set(x)
        y.set_device_mesh(fl.DeviceMesh.for_num_devices(2))
        f.add_output(y)
    lowered = Pipeline(["propagate-shardings", "insert-reshardings", "reorder-sharded-axis"]).run(f)
    x2 = lowered.inputs[0]
    assert x.domain.allocation is None  # the user's fusion is untouched
    alloc = x2.domain.allocation
    assert alloc[0].parallel_type is fl.ParallelType.DIDx
    assert [ax.extent for ax in alloc] == [2, 4, 3]
    assert "allocation domain : (ideviceIdx.x" in lowered.print_transforms()
    assert lowered.outputs[0].domain.allocation is None  # replicated: nothing to reorder


def test_unsharded_buffers_are_left_alone():
    with fl.Fusion() as f:
        x = fl.tensor([4])
        f.add_input(x)
        f.add_output(fl.neg(x))
    lowered = Pipeline(["reorder-sharded-axis"]).run(f)
    assert all(tv.domain.allocation is None for tv in lowered.tensors())
