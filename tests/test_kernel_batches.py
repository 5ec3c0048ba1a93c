"""The kernel runner evaluates expressions that lower alike as one batch, each with its
own operands and scalars: every output keeps its own, correct values."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.ir.types import ParallelType
from fuserlite.kernel.batches import plan_kernel
from fuserlite.kernel.grid_index import GridCache
from fuserlite.schedule.shard import shard_axis


def sharded(shape: list[int], devices: int, body, dtypes=("float32",)) -> fl.Fusion:
    """Inputs of `shape` (one per dtype) sharded on axis 0, and the outputs `body` makes."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(devices)
        inputs = [fl.tensor(shape, d) for d in dtypes]
        for t in inputs:
            fusion.add_input(t)
            shard_axis(t, 0, mesh)
        for out in body(*inputs):
            fusion.add_output(out)
    return fusion


def run_interpreted(fusion: fl.Fusion) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(outputs of the kernel runner on sim, the reference's), validated."""
    inputs = fl.random_inputs(fusion, seed=3)
    got = fl.FusionExecutor(fusion, compute="interpret").run(inputs)
    fl.validate(fusion, inputs, got)
    return got, fl.evaluate(fusion, inputs)


def largest_batch(fusion: fl.Fusion) -> int:
    """The most expressions one step of the executor's kernel plan evaluates at once."""
    program = fl.lower(fusion)
    (kernel,) = program.kernels
    plan = plan_kernel(kernel, GridCache())
    return max(len(p.batch) for steps, _ in plan.passes for p in steps)


def test_outputs_of_one_signature_with_different_constants_get_their_own_values() -> None:
    fusion = sharded([8, 16], 2, lambda x: [x + float(k) for k in range(6)])
    assert largest_batch(fusion) == 6  # one numpy step for the six adds (and the six stores)
    got, want = run_interpreted(fusion)
    x = fl.random_inputs(fusion, seed=3)[0]
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, x + np.float32(k))
        np.testing.assert_array_equal(g, w)
    assert len({g.tobytes() for g in got}) == 6


@pytest.mark.parametrize(
    "name, body, dtypes",
    [
        # each pair shares everything but one detail the batch key must hold
        ("op", lambda x: [x + 2.0, x - 2.0, x * 2.0], ("float32",)),
        ("scalar position", lambda x: [x - 2.0, fl.sub(2.0, x), x - 3.0], ("float32",)),
        ("operand dtype", lambda x, h: [x + 1.0, h + 1.0, x + 2.0], ("float32", "float16")),
        ("integer scalars", lambda i: [i + 1, i + 2**40, i * 3], ("int64",)),
        ("operand tensors", lambda x, y, z: [x + y, x + z, y + z], ("float32",) * 3),
        ("reads its neighbour", lambda x: (lambda a: [a, a + 1.0, x + 3.0])(x + 1.0), ("float32",)),
        ("comparison", lambda x: [fl.lt(x, 0.5), fl.lt(x, -0.5), x + 0.5], ("float32",)),
        # a batch reading one row of another batch's block of registers
        (
            "one register row",
            lambda x: (lambda a, b: [a, b, b * 2.0, b * 3.0])(x + 1.0, x + 2.0),
            ("float32",),
        ),
    ],
)
def test_expressions_that_differ_in_one_detail_get_their_own_values(name, body, dtypes) -> None:
    for shape, devices in (([8, 16], 2), ([7, 5], 3)):  # even, and uneven with predicates
        got, want = run_interpreted(sharded(shape, devices, body, dtypes))
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_operands_of_different_broadcasts_in_one_batch_are_read_each_as_its_own() -> None:
    with fl.Fusion() as fusion:
        x, row, col = fl.tensor([8, 16]), fl.tensor([1, 16]), fl.tensor([8, 1])
        for t in (x, row, col):
            fusion.add_input(t)
        fusion.add_output(x + row)
        fusion.add_output(x + col)
        fusion.add_output(x + row)
    got, want = run_interpreted(fusion)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_tensor_binding_the_grid_otherwise_than_its_batch_is_still_rejected() -> None:
    (kernel,) = fl.lower(sharded([8, 16], 2, lambda x: [x + float(k) for k in range(4)])).kernels
    odd = kernel.outputs[2]
    axis = next(ax for ax in odd.loop if ax.parallel_type is ParallelType.TIDx)
    axis.parallelize(ParallelType.BIDy)
    with pytest.raises(fl.ScheduleError, match=rf"{odd.name} loop axis .* but another tensor"):
        plan_kernel(kernel, GridCache())


def test_a_batch_too_large_for_a_chunk_is_split_and_keeps_its_values(monkeypatch) -> None:
    import fuserlite.kernel.batches as kernel_plan

    fusion = sharded([8, 16], 2, lambda x: [x + float(k) for k in range(7)])
    (kernel,) = fl.lower(fusion).kernels
    points = GridCache().grid(plan_kernel(kernel, GridCache()).grid).size  # one chunk
    monkeypatch.setattr(kernel_plan, "MAX_BATCH_POINTS", 3 * points)
    assert largest_batch(fusion) == 3
    got, want = run_interpreted(fusion)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_tensors_of_one_shape_on_meshes_of_other_sizes_get_their_own_boxes() -> None:
    from fuserlite.program.shards import device_shape, device_slices

    held = {}
    for devices in (2, 4):
        with fl.Fusion():
            x = fl.tensor([8, 16])
            shard_axis(x, 0, fl.DeviceMesh.for_num_devices(devices))
        held[devices] = (device_shape(x, 1), device_slices(x, 1))
    assert held[2] == ((4, 16), (slice(4, 8), slice(0, 16)))
    assert held[4] == ((2, 16), (slice(2, 4), slice(0, 16)))
