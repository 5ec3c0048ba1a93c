"""The two bug reports this project exists for, as regression tests (sim backend)."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.pipeline import Pipeline, default_pass_names
from fuserlite.program.communication import CommKind, Layout


@pytest.mark.parametrize("num_devices", [1, 2, 4, 8])
@pytest.mark.parametrize("parallelized", [True, False], ids=["bDIDx", "iDIDx"])
def test_seed_004_add_with_broadcast(num_devices, parallelized):
    fusion = models.add_broadcast(num_devices, parallelized)
    ex = fl.FusionExecutor(fusion)
    inputs = fl.random_inputs(fusion, seed=num_devices)
    fl.validate(fusion, inputs, ex.run(inputs))
    assert ex.communications == []  # b and bDIDx are the same sharding
    for tv in ex.program.tensors():
        dids = [ax for ax in tv.domain.loop if ax.parallel_type is fl.ParallelType.DIDx]
        assert len(dids) <= 1, tv


@pytest.mark.parametrize("direction", ["b->bDIDx", "bDIDx->b"])
def test_explicit_set_between_b_and_bdidx_moves_nothing(direction):
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(4)
        y = fl.tensor([1])
        f.add_input(y)
        z = fl.set(y)
        y.set_device_mesh(mesh)
        z.set_device_mesh(mesh)
        (y if direction == "bDIDx->b" else z).axis(0).parallelize(fl.ParallelType.DIDx)
        f.add_output(z)
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, ex.run(inputs))
    assert ex.communications == []


def _pipeline(pin: str) -> Pipeline:
    return Pipeline(default_pass_names(**{"assign-layouts": f"pin={pin}"}))


@pytest.mark.parametrize("pin", ["all", "none"])
def test_seed_000_all_gather_all_reduce_reduce_scatter(pin):
    fusion = models.all_gather_all_reduce_reduce_scatter(8)
    ex = fl.FusionExecutor(fusion, pipeline=_pipeline(pin))
    inputs = [np.ones(8 * 1024, np.float32)]
    per_device = ex.run_per_device(inputs)
    assert sorted(per_device) == list(range(8))
    for outputs in per_device.values():
        np.testing.assert_array_equal(outputs[0], [65536.0])
    kinds = sorted(c.kind.value for c in ex.communications)
    assert kinds == ["Allgather", "Allreduce", "ReduceScatter"]
    assert {c.layout.pinned for c in ex.communications} == {pin == "all"}
    fl.validate(fusion, inputs, ex.run(inputs))


def test_seed_000_mixed_layouts_are_rejected():
    lowered = fl.lower(models.all_gather_all_reduce_reduce_scatter(8))
    comms = lowered.communications
    reducing = [c for c in comms if c.kind in (CommKind.Allreduce, CommKind.ReduceScatter)]
    reducing[1].layout = Layout(False)  # what torch_xla's reduce_scatter did
    with pytest.raises(fl.VerifyError) as err:
        fl.verify_program(lowered)
    msg = str(err.value)
    assert "mix of layout-pinned and free all-reduce-class collectives" in msg
    assert "Allreduce" in msg and "ReduceScatter" in msg and "(free)" in msg and "(pinned)" in msg


def test_seed_000_collective_without_layout_is_rejected():
    lowered = fl.lower(models.all_gather_all_reduce_reduce_scatter(4))
    comms = lowered.communications
    comms[0].layout = None
    with pytest.raises(fl.VerifyError, match="some collectives have a layout and others do not"):
        fl.verify_program(lowered)
