"""The kernel grid runs in bounded chunks of whole blocks, with the results of one chunk."""

from __future__ import annotations

import pytest
from pointwise_cases import CASES, build

import fuserlite as fl
import fuserlite.runtime.kernel_grid as kernel_grid
from fuserlite.schedule.grid import GridAxis


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

    import fuserlite.runtime.kernel_runner as kernel_runner

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

    def counting(expr, args, index=None):
        nonlocal most_alive
        most_alive = max(most_alive, sum(r() is not None for r in produced))
        out = original(expr, args, index)
        produced.append(weakref.ref(out))
        return out

    monkeypatch.setattr(kernel_runner, "eval_at_points", counting)
    inputs = fl.random_inputs(fusion)
    fl.validate(fusion, inputs, fl.FusionExecutor(fusion, compute="interpret").run(inputs))
    assert len(produced) >= 20
    assert most_alive <= 3  # the operand's register (and its load), not the whole chain
