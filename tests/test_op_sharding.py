"""Sharding rules of permute through the whole pipeline: which input shardings pass
through (no communication), and the numbers against the reference."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import fuserlite as fl
from fuserlite.ir.sharding import shardings
from fuserlite.schedule.shard import shard_axis

D = 4


def _lowered(
    shapes: list[list[int]], sharded: list[int | None], body: Callable[..., fl.TensorView]
) -> tuple[fl.Fusion, fl.FusionExecutor]:
    """Inputs of `shapes`, input k sharded on axis sharded[k] (None: replicated) over D
    devices; one output; lowered by the default pipeline and validated on sim."""
    mesh = fl.DeviceMesh.for_num_devices(D)
    with fl.Fusion() as fusion:
        inputs = [fl.tensor(s, name=f"in{k}") for k, s in enumerate(shapes)]
        for t, axis in zip(inputs, sharded):
            fusion.add_input(t)
            t.set_device_mesh(mesh)
            if axis is not None:
                shard_axis(t, axis, mesh)
        fusion.add_output(body(*inputs))
    ex = fl.FusionExecutor(fusion)
    arrays = fl.random_inputs(fusion, seed=2)
    fl.validate(fusion, arrays, ex.run(arrays))
    return fusion, ex


def _kinds(ex: fl.FusionExecutor) -> list[str]:
    return [c.kind.value for c in ex.communications]


def _sharded_axis(ex: fl.FusionExecutor) -> int | None:
    out = ex.program.fusion.outputs[0] if hasattr(ex.program, "fusion") else None
    if out is None:
        return None
    found = list(shardings(out).values())
    return found[0].logical_index if found else None


@pytest.mark.parametrize(("axis", "moved_to"), [(0, 2), (1, 0), (2, 1)])
def test_permute_moves_the_sharded_axis_without_communication(axis: int, moved_to: int) -> None:
    _, ex = _lowered([[8, 4, 12]], [axis], lambda x: fl.permute(fl.exp(x), [1, 2, 0]))
    assert _kinds(ex) == []
    assert _sharded_axis(ex) == moved_to
