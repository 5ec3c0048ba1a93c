"""What order the executor posts, waits for and computes a streamed program's steps in:
the check that communication overlaps compute (tests/test_host_program.py on sim,
tests/mpi_scripts/streamed.py on MPI ranks)."""

from __future__ import annotations

import numpy as np

import fuserlite as fl
from fuserlite.runtime.communicator import Communicator


def recording(backend: Communicator) -> list[tuple]:
    """Make `backend` record ("post", step) and ("wait", step) for every communication the
    executor starts and completes (step: its index in the unrolled program); returns the
    list it appends to. Kernels are added by `run_recorded`."""
    events: list[tuple] = []
    at = [None]
    begin, post, wait = backend.begin_step, backend.post, backend.wait

    def begin_step(index, comm):
        at[0] = index
        begin(index, comm)

    def posted(operation):
        events.append(("post", at[0]))
        return post(operation)

    def waited(handle):
        events.append(("wait", at[0]))
        return wait(handle)

    backend.begin_step, backend.post, backend.wait = begin_step, posted, waited
    return events


def run_recorded(
    program: fl.Program, backend: Communicator, inputs, stores: bool = False
) -> tuple[list, list[tuple]]:
    """Run `program` on `backend` (kernels interpreted: each is a `_run_kernel` or a launch
    plan's run): its outputs (None off the host rank) and the events in the order they
    happened; with `stores`, ("store",) for each chunk a loop stores into its whole."""
    events = recording(backend)
    from fuserlite.runtime import executor

    def run_view(view, values):
        if view.writes:
            events.append(("store",))
        return viewed(view, values)

    viewed = executor.run_view

    class Counted:  # a launch plan (a library call, a view) that records its runs
        def __init__(self, launch):
            self.launch = launch

        def run(self, *args):
            events.append(("kernel",))
            return self.launch.run(*args)

    class Recorded(fl.FusionExecutor):
        def _run_kernel(self, kernel, values):
            events.append(("kernel",))
            super()._run_kernel(kernel, values)

        def _launch_plans(self):
            first = self._launches is None
            launches = super()._launch_plans()
            if first:
                for plans in (launches, self._library_launches):
                    for i, launch in list(plans.items()):
                        plans[i] = Counted(launch)
            return launches

    if stores:
        executor.run_view = run_view
    try:
        with Recorded(program, backend, compute="interpret") as ex:
            return ex.run(inputs), events
    finally:
        executor.run_view = viewed


def pipelined_order(events: list[tuple]) -> list[tuple]:
    """The events of a loop of chunks [Allgather_i, kernel_i] pipelined, steps numbered
    by chunk: post 0, then for each chunk i post i+1 (while there is one), wait i,
    kernel i. What `events` must equal, renumbered (`by_chunk`)."""
    chunks = len({e[1] for e in events if e[0] == "post"})
    out: list[tuple] = [("post", 0)]
    for i in range(chunks):
        if i + 1 < chunks:
            out.append(("post", i + 1))
        out += [("wait", i), ("kernel",)]
    return out


def reduce_pipelined_order(events: list[tuple]) -> list[tuple]:
    """The events of a loop of chunks [kernel_i, collective_i, store_i] (matmul +
    ReduceScatter or Allreduce: the collective reads its chunk's kernel), pipelined and
    numbered by chunk: kernel 0, post 0, then for each next chunk i its kernel, wait
    i-1, store i-1, post i; wait and store the last. Chunk i+1 computes while chunk i
    moves. `events` recorded with stores (run_recorded(..., stores=True))."""
    chunks = len({e[1] for e in events if e[0] == "post"})
    out: list[tuple] = [("kernel",), ("post", 0)]
    for i in range(1, chunks):
        out += [("kernel",), ("wait", i - 1), ("store",), ("post", i)]
    return out + [("wait", chunks - 1), ("store",)]


def by_chunk(events: list[tuple]) -> list[tuple]:
    """`events` with each step index replaced by its chunk number (the order of posts)."""
    number = {}
    for e in events:
        if e[0] == "post":
            number.setdefault(e[1], len(number))
    return [(e[0], number[e[1]]) if len(e) > 1 else e for e in events]


def same_bits(a: list, b: list) -> bool:
    """Whether two runs' outputs are equal bit for bit (NaN where NaN)."""
    return all(
        x.dtype == y.dtype
        and x.shape == y.shape
        and np.array_equal(x.view(np.uint8), y.view(np.uint8))
        for x, y in ((np.ascontiguousarray(x), np.ascontiguousarray(y)) for x, y in zip(a, b))
    ) and len(a) == len(b)
