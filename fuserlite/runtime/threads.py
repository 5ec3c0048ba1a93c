"""Device threads: a launch's per-device calls spread over a small thread pool.

    threads = DeviceThreads(workers)           # once per executor (FusionExecutor(threads=))
    threads.run(work, rows)                    # work(start, stop) over rows [0, rows)
    with threads.one_blas_thread(): ...        # a run whose library launches use the pool

The simulated devices of one launch are independent: each device reads its operands
and writes its own rows of the output stacks. numpy's BLAS calls, its casts and
ufuncs, and the ctypes calls of compiled kernels release the GIL, so a launch's rows
can be computed by a few threads at once, each a contiguous range of devices (the
calling thread takes the first range). Which thread computes a row changes no value:
every row runs the very calls it runs alone.

One level of parallelism, not two: while a run's library launches use the pool,
numpy's BLAS is held to one thread (threadpoolctl), so two devices' GEMMs run on
two cores instead of each GEMM's BLAS threads competing for them (OpenBLAS's
threads wait spinning: on the shared 2-core machine, with another job on one core,
the transformer block's step took 4x longer with BLAS's two threads than with one,
benchmarks/README.md). A compiled kernel that runs its blocks on OpenMP threads
(kernel/cpu.py: PARALLEL_WORK, as many threads as the load leaves idle cores) keeps
that level and is not spread over devices; the smaller kernels are.

A launch goes to the pool only when its work (multiply-adds, or grid points x
expressions, summed over its devices) reaches POOL_WORK: below that, handing a range
to another thread costs more than it saves.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from threadpoolctl import ThreadpoolController

from fuserlite.ir.errors import ExecutionError

# Work (multiply-adds, or grid points x expressions, over every device of a launch) from
# which a launch is spread over the pool: a hand-over to another thread costs tens of
# microseconds, about what a core does in 2**20 multiply-adds.
POOL_WORK = 1 << 20


def default_workers() -> int:
    """The machine's cores (os.cpu_count()): the threads an executor uses by default."""
    return os.cpu_count() or 1


def check_workers(threads: int | None, who: str) -> int:
    """`threads` (None: default_workers()) as a number of workers, at least 1."""
    if threads is None:
        return default_workers()
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ExecutionError(f"{who}: threads must be a positive integer or None, got {threads!r}")
    return threads


@functools.lru_cache(maxsize=1)
def _blas_controller() -> ThreadpoolController:
    """threadpoolctl's view of the loaded BLAS libraries, found once per process (it
    scans the loaded shared libraries)."""
    return ThreadpoolController()


class DeviceThreads:
    """A pool of `workers` threads (the calling one among them) for a launch's rows."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None  # started at the first spread launch

    def spreads(self, work: int, rows: int) -> bool:
        """True if a launch of `rows` devices and `work` in all goes to the pool."""
        return self.workers > 1 and rows > 1 and work >= POOL_WORK

    def ranges(self, rows: int) -> list[tuple[int, int]]:
        """[start, stop) of each thread's rows: contiguous, as even as can be."""
        parts = min(self.workers, rows)
        cuts = [rows * i // parts for i in range(parts + 1)]
        return list(zip(cuts, cuts[1:]))

    def run(self, work: Callable[[int, int], None], rows: int) -> None:
        """work(start, stop) over every row of [0, rows): the ranges on the pool's threads
        and the first on the calling one; returns when all are done. An error is raised
        once every range has finished, the first range's first (the same one whichever
        thread was faster)."""
        ranges = self.ranges(rows)
        if len(ranges) <= 1:
            work(0, rows)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers - 1, thread_name_prefix="fuserlite")
        futures = [self._pool.submit(work, *r) for r in ranges[1:]]
        first = None
        try:
            work(*ranges[0])
        except BaseException as exc:  # wait for the others before raising
            first = exc
        for f in futures:
            exc = f.exception()
            if first is None:
                first = exc
        if first is not None:
            raise first

    @contextlib.contextmanager
    def one_blas_thread(self) -> Iterator[None]:
        """Hold numpy's BLAS to one thread inside (given back after)."""
        with _blas_controller().limit(limits=1, user_api="blas"):
            yield

    def close(self) -> None:
        """Stop the pool's threads (a later spread launch starts them again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


__all__ = [
    "POOL_WORK",
    "DeviceThreads",
    "check_workers",
    "default_workers",
]
