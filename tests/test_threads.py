"""Device threads (runtime/threads.py): a launch's devices computed by a few threads at
once, the bits unchanged, BLAS held to one thread meanwhile, OpenMP kernels left alone."""

from __future__ import annotations

import threading
from itertools import product

import numpy as np
import pytest
from threadpoolctl import threadpool_info
from three_way import HAVE_COMPILER

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.errors import ExecutionError
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.runtime import compute
from fuserlite.runtime import threads as device_threads
from fuserlite.runtime.launch import KernelLaunch, LibraryLaunch
from fuserlite.runtime.threads import DeviceThreads, check_workers, default_workers
from fuserlite.schedule.shard import shard_axis


def test_ranges_cover_the_rows_in_order_as_evenly_as_can_be() -> None:
    assert DeviceThreads(2).ranges(8) == [(0, 4), (4, 8)]
    assert DeviceThreads(3).ranges(8) == [(0, 2), (2, 5), (5, 8)]
    assert DeviceThreads(4).ranges(2) == [(0, 1), (1, 2)]
    assert DeviceThreads(1).ranges(5) == [(0, 5)]


def test_run_computes_every_range_and_the_first_on_the_calling_thread() -> None:
    pool = DeviceThreads(3)
    seen: dict[tuple[int, int], int] = {}
    lock = threading.Lock()

    def work(start: int, stop: int) -> None:
        with lock:
            seen[(start, stop)] = threading.get_ident()

    pool.run(work, 7)
    assert sorted(seen) == [(0, 2), (2, 4), (4, 7)]
    assert seen[(0, 2)] == threading.get_ident()
    pool.close()


def test_an_error_waits_for_the_other_ranges_and_is_the_first_ranges() -> None:
    pool = DeviceThreads(2)
    done = []

    def work(start: int, stop: int) -> None:
        done.append(start)
        raise ValueError(f"rows {start}-{stop}")

    with pytest.raises(ValueError, match="rows 0-2"):
        pool.run(work, 4)
    assert sorted(done) == [0, 2]
    pool.close()


def test_the_number_of_threads_is_checked() -> None:
    assert check_workers(None, "x") == default_workers() >= 1
    assert check_workers(3, "x") == 3
    for bad in (0, True, 1.5, "2"):
        with pytest.raises(ExecutionError, match="FusionExecutor: threads must be"):
            fl.FusionExecutor(models.transformer_block(2, "float32"), threads=bad)


@pytest.mark.parametrize("compute", ["compiled", "interpret"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_blocks_bits_do_not_depend_on_the_threads(
    compute, dtype, monkeypatch, tmp_path
) -> None:
    """Every launch spread (POOL_WORK 0): library launches (GEMMs, sdpa with its dropout)
    and compiled kernels give the bits one thread gives, for 2 and 3 threads. With 2 a
    compiler of its own loads the dropout and casts inside the spread launches (the
    threads ask for them at once)."""
    if compute == "compiled" and not HAVE_COMPILER:
        pytest.skip("no C++ compiler on the PATH")
    monkeypatch.setattr(device_threads, "POOL_WORK", 0)
    fusion = models.transformer_block(8, dtype)
    inputs = fl.random_inputs(fusion, seed=3)
    lowered = fl.FusionExecutor(fusion, compute=compute)
    (want,) = fl.FusionExecutor(lowered.program, compute=compute, threads=1).run(inputs)
    for workers in (2, 3):
        own = compute == "compiled" and workers == 2
        path = KernelCompiler(cache_dir=tmp_path) if own else compute
        ex = fl.FusionExecutor(lowered.program, compute=path, threads=workers)
        (got,) = ex.run(inputs)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        library = [x for x in ex._library_launches.values() if isinstance(x, LibraryLaunch)]
        assert library and all(x.threads is ex.threads for x in library)
        if compute == "compiled":
            assert any(x.threads is ex.threads for x in ex._launch_plans().values())
        ex.close()


def test_blas_runs_one_thread_while_library_launches_are_spread(monkeypatch) -> None:

    monkeypatch.setattr(device_threads, "POOL_WORK", 0)
    before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    seen = []
    run = LibraryLaunch.run

    def recorded(self, *args):
        seen.extend(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")
        return run(self, *args)

    monkeypatch.setattr(LibraryLaunch, "run", recorded)
    fusion = models.transformer_block(8, "float32")
    fl.FusionExecutor(fusion, compute="interpret", threads=2).run(fl.random_inputs(fusion))
    assert seen and set(seen) == {1}
    after = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert after == before  # given back after the run


@pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on the PATH")
def test_a_kernel_on_openmp_threads_is_not_also_spread_over_devices(monkeypatch, tmp_path) -> None:
    """One level of parallelism: a kernel big enough for OpenMP (PARALLEL_WORK) keeps it
    and runs its devices in one native call; a smaller one is spread. Alike when the
    library is built and when a warm load finds it (no source generated to tell)."""
    monkeypatch.setattr(device_threads, "POOL_WORK", 0)
    for rows, build in product((8 * 4, 8 * 1024), ("cold", "warm")):
        spread = rows == 8 * 4
        with fl.Fusion() as f:
            x = fl.tensor([rows, 256], name="x")
            f.add_input(x)
            shard_axis(x, 0, fl.DeviceMesh.for_num_devices(8))
            f.add_output(fl.neg(x * 2.0 + 1.0))
        compiler = KernelCompiler(cache_dir=tmp_path / str(rows))
        if build == "warm":  # the cold pass cached it: nothing is generated now
            monkeypatch.setattr(compute, "cpu_function", None)
        ex = fl.FusionExecutor(f, compute=compiler, threads=2)
        inputs = fl.random_inputs(f, seed=1)
        (got,) = ex.run(inputs)
        np.testing.assert_array_equal(got, -(inputs[0] * 2 + 1))
        (launch,) = ex._launch_plans().values()
        assert isinstance(launch, KernelLaunch)
        assert (launch.threads is not None) == spread, (rows, build)
        ex.close()
        monkeypatch.undo()
        monkeypatch.setattr(device_threads, "POOL_WORK", 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_a_collectives_fold_on_threads_gives_folds_bits(dtype, op, monkeypatch) -> None:
    """The sim backend's planned Allreduce / ReduceScatter fold ranges of the elements on
    the threads: element by element, so the bits of one fold (NaNs, -0.0, half sums in
    float32 rounded once)."""
    from fuserlite.ir.types import DType, ReductionOpType
    from fuserlite.runtime.collectives import _fold
    from fuserlite.runtime.communicator import fold

    monkeypatch.setattr(device_threads, "POOL_WORK", 0)
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((5, 33)).astype(DType.parse(dtype).numpy) for _ in range(4)]
    arrays[1][0, :3] = np.nan
    arrays[2][1, :2] = -0.0
    reduction = ReductionOpType[op]
    pool = DeviceThreads(3)
    ranges = []
    run = pool.run
    monkeypatch.setattr(pool, "run", lambda work, rows: ranges.append(rows) or run(work, rows))
    got = _fold(arrays, reduction, pool)
    want = fold(arrays, reduction)
    assert ranges == [5 * 33]  # spread over the elements
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert got.shape == want.shape and got.dtype == want.dtype
