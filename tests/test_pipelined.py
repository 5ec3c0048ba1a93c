"""runtime/host_loops.pipelined on host programs built by hand (tests/host_programs.py):
a communication is never posted before the step that writes what it reads, and a
store into a buffer a posted communication still reads waits for it first."""

from __future__ import annotations

from host_programs import add_then_allgather, in_a_loop

from fuserlite.ir.streams import Chunking
from fuserlite.program.communication import Communication
from fuserlite.program.host import ChunkView, ShardByStream
from fuserlite.program.program import Kernel
from fuserlite.runtime.host_loops import Await, Post, pipelined


def _where(order: list, kind: type, step) -> int:
    return next(i for i, a in enumerate(order) if isinstance(a, kind) and a.comm is step)


def test_a_communication_is_not_posted_before_the_kernel_that_writes_its_input() -> None:
    """Each iteration's kernel writes y and its Allgather reads y: posting the Allgather
    before its kernel (as the next chunk's is posted before a kernel it does not read)
    would send the last iteration's y. Each Post comes after its own kernel; the kernel
    of iteration i + 1 runs while iteration i's Allgather is in flight."""
    steps = in_a_loop(iterations=3).executed()
    order = pipelined(steps)
    kernels = [i for i, a in enumerate(order) if isinstance(a, Kernel)]
    posts = [i for i, a in enumerate(order) if isinstance(a, Post)]
    assert len(kernels) == len(posts) == 3
    assert all(k < p for k, p in zip(kernels, posts))  # its producer first
    assert kernels[1] < _where(order, Await, order[posts[0]].comm)  # overlap kept


def test_a_store_into_a_buffer_a_posted_communication_reads_waits_for_it() -> None:
    """The Allgather reads y; a chunk store then writes y in place (a ShardByStream
    write: into y's array, not a fresh one). Posted early on MPI, the Allgather may still
    be sending y's buffer: the store must wait for it, and the Allgather stays posted
    after the kernel that wrote y."""
    program = add_then_allgather()
    kernel, comm = program.steps
    assert isinstance(comm, Communication)
    y, x = comm.input, kernel.inputs[0]
    store = ChunkView(ShardByStream(y, x, Chunking(1, 2), "i"), 0, writes=True)
    order = pipelined([kernel, comm, store])
    assert [type(a).__name__ for a in order] == ["Kernel", "Post", "Await", "ChunkView"]
    # a read view of y, by contrast, makes a view and writes nothing in place: no wait
    read = ChunkView(ShardByStream(y, x, Chunking(1, 2), "i"), 0, writes=False)
    order = pipelined([kernel, comm, read])
    assert [type(a).__name__ for a in order] == ["Kernel", "Post", "ChunkView", "Await"]
