"""The kernel grid runs in bounded chunks of whole blocks, with the results of one chunk."""

from __future__ import annotations

import pytest
from pointwise_cases import CASES, build
from three_way import run_three_ways

import fuserlite as fl
import fuserlite.kernel.grid_index as kernel_grid
from fuserlite.kernel.cuda import launch_dims
from fuserlite.schedule.grid import GridAxis
from fuserlite.schedule.grid import kernel_grid as kernel_grid_of
from fuserlite.schedule.shard import shard_axis


def test_grid_chunks_are_whole_blocks_and_cover_the_grid(monkeypatch):
    monkeypatch.setattr(kernel_grid, "CHUNK_POINTS", 1000)
    grid = kernel_grid.Grid([GridAxis(e, fl.ParallelType.Serial) for e in (7, 3, 128)])
    chunks = list(grid.chunks())
    assert [c.extents for c in chunks] == [(2, 3, 128)] * 3 + [(1, 3, 128)]
    assert [c.start for c in chunks] == [0, 768, 1536, 2304]
    # A block larger than a chunk: the chunks split the inner loops, one outer value each.
    monkeypatch.setattr(kernel_grid, "CHUNK_POINTS", 100)
    chunks = list(
        kernel_grid.Grid([GridAxis(e, fl.ParallelType.Serial) for e in (2, 3, 64)]).chunks()
    )
    assert [c.extents for c in chunks] == [(1, 1, 64)] * 6
    assert max(c.size for c in chunks) <= 100 and sum(c.size for c in chunks) == 2 * 3 * 64


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("chunk_points", [1, 37, 128])
def test_chunked_kernel_runner_equals_one_chunk(name: str, chunk_points: int, monkeypatch):
    fusion = build(*CASES[name])
    inputs = fl.random_inputs(fusion, seed=3)
    ex = fl.FusionExecutor(fusion, compute="interpret")
    whole = ex.run(inputs)
    monkeypatch.setattr(kernel_grid, "CHUNK_POINTS", chunk_points)
    ex.grids.clear()  # the executor's cache: its grids are rebuilt with the new chunks
    chunked = ex.run(inputs)
    for a, b in zip(whole, chunked):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_registers_are_dropped_after_their_last_reader(monkeypatch):
    import weakref

    import fuserlite.kernel.runner as kernel_runner

    with fl.Fusion() as fusion:
        x = fl.tensor([64, 32])
        fusion.add_input(x)
        t = x
        for k in range(20):
            t = fl.tanh(t) if k % 2 else t * 0.5
        fusion.add_output(t)
    produced: list[weakref.ref] = []
    most_alive = 0
    original = kernel_runner.eval_at_points

    def counting(expr, args, *more):
        nonlocal most_alive
        most_alive = max(most_alive, sum(r() is not None for r in produced))
        out = original(expr, args, *more)
        produced.append(weakref.ref(out))
        return out

    monkeypatch.setattr(kernel_runner, "eval_at_points", counting)
    inputs = fl.random_inputs(fusion)
    fl.validate(fusion, inputs, fl.FusionExecutor(fusion, compute="interpret").run(inputs))
    assert len(produced) >= 20
    assert most_alive <= 3  # the operand's register (and its load), not the whole chain


def _one_element_fusions() -> dict[str, fl.Fusion]:
    """Kernels whose every tensor holds one element on a device."""
    fusions = {}
    with fl.Fusion() as f:  # 0-d
        x = fl.tensor([])
        f.add_input(x)
        f.add_output(fl.minimum(fl.relu(x), x) - 1.5)
    fusions["0-d"] = f
    with fl.Fusion() as f:  # broadcast-only: a 0-d value broadcast to [1, 1]
        x = fl.tensor([])
        f.add_input(x)
        f.add_output(fl.exp(fl.broadcast(x, [True, True])) * 2.0)
    fusions["broadcast-only"] = f
    with fl.Fusion() as f:  # axes of extent 1
        x = fl.tensor([1, 1])
        f.add_input(x)
        f.add_output(fl.exp(x))
    fusions["extent 1"] = f
    with fl.Fusion() as f:  # 3 rows over 4 devices: one row each, the last device none
        x = fl.tensor([3])
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(4))
        f.add_output(fl.dropout(x, 0.5, seed=1) + 1.0)
    fusions["uneven, one row a device"] = f
    return fusions


@pytest.mark.parametrize("name", sorted(_one_element_fusions()))
def test_a_kernel_of_one_element_tensors_runs_one_thread(name: str) -> None:
    """Every point of a one-element tensor's loops holds that element: its kernel's
    grid is one point (one block of one thread), not 128 threads storing the same
    element, and every compute path still gives the reference's values."""
    fusion = _one_element_fusions()[name]
    program = fl.lower(fusion)
    (kernel,) = program.kernels
    assert kernel.scheduled
    grid = kernel_grid_of([e.output for e in kernel.exprs])
    assert [g.extent for g in grid] == [1] * len(grid)
    assert launch_dims(grid) == ((1, 1, 1), (1, 1, 1))
    run_three_ways(fusion, fl.random_inputs(fusion, seed=2))


def test_a_one_element_output_beside_a_wider_one_keeps_the_wide_grid() -> None:
    with fl.Fusion() as f:
        x, y = fl.tensor([300]), fl.tensor([1])
        f.add_input(x)
        f.add_input(y)
        f.add_output(y * 3.0)
        f.add_output(x + y)
    (kernel,) = fl.lower(f).kernels
    grid = kernel_grid_of([e.output for e in kernel.exprs])
    assert launch_dims(grid) == ((3, 1, 1), (128, 1, 1))
    run_three_ways(f, fl.random_inputs(f, seed=2))
