"""The kernel grid runs in bounded chunks of whole blocks, with the results of one chunk."""

from __future__ import annotations

import pytest
from pointwise_cases import CASES, build

import fuserlite as fl
import fuserlite.runtime.kernel_grid as kernel_grid
from fuserlite.schedule.indexing import GridAxis


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
    ex = fl.FusionExecutor(fusion)
    kernel_grid._GRIDS.clear()
    whole = ex.run(inputs)
    monkeypatch.setattr(kernel_grid, "CHUNK_POINTS", chunk_points)
    kernel_grid._GRIDS.clear()
    chunked = ex.run(inputs)
    kernel_grid._GRIDS.clear()
    for a, b in zip(whole, chunked):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
