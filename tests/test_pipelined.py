"""runtime/host_loops.pipelined on host programs built by hand (tests/host_programs.py):
a communication is never posted before the step that writes what it reads, and a
store into a buffer a posted communication still reads waits for it first."""

from __future__ import annotations

import numpy as np
from host_programs import add_then_allgather, in_a_loop

import fuserlite as fl
from fuserlite.ir.streams import Chunking
from fuserlite.program import host
from fuserlite.program.communication import Communication
from fuserlite.program.host import ChunkView, ShardByStream, StreamEvent
from fuserlite.program.parser import parse_printed
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


# -- a host program's Waits and Synchronizes are points in time on their streams -------


def _kinds(order: list) -> list[str]:
    return [type(a).__name__ for a in order]


def _switch(stream: int) -> StreamEvent:
    return StreamEvent("switch", stream)


def test_a_wait_completes_its_communication_before_the_next_step_on_its_stream() -> None:
    """`Wait` then a kernel that does not read the communication's output, on one stream:
    the wait is honoured there (before, the executor waited only at the end, at the
    first reader); on another stream the kernel runs while it is in flight."""
    kernel, comm = add_then_allgather().steps
    wait = StreamEvent("wait", comm=comm)
    same = pipelined([_switch(1), kernel, comm, wait, kernel])
    assert _kinds(same) == ["Kernel", "Post", "Await", "Kernel"]
    other = pipelined([_switch(1), kernel, comm, wait, _switch(2), kernel])
    assert _kinds(other) == ["Kernel", "Post", "Kernel", "Await"]
    # without the Wait, the first reader (none here) or the end completes it
    assert _kinds(pipelined([_switch(1), kernel, comm, kernel])) == [
        "Kernel",
        "Post",
        "Kernel",
        "Await",
    ]


def test_a_synchronize_passes_the_other_stream_s_wait_on() -> None:
    """Stream 1 waits for the Allgather; stream 0 synchronizing with stream 1 afterwards
    must not run ahead of that wait. Without the Synchronize it may."""
    kernel, comm = add_then_allgather().steps
    wait = StreamEvent("wait", comm=comm)
    sync = StreamEvent("sync", 1)
    synced = pipelined([_switch(1), kernel, comm, wait, _switch(0), sync, kernel])
    assert _kinds(synced) == ["Kernel", "Post", "Await", "Kernel"]
    apart = pipelined([_switch(1), kernel, comm, wait, _switch(0), kernel])
    assert _kinds(apart) == ["Kernel", "Post", "Kernel", "Await"]


def _gather_beside_a_kernel():
    """x [2, 8, 32] sharded on its rows: y = x + x (a kernel), z = Allgather(x), which
    does not read the kernel: lowered, flat, and its kernel and communication."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([2, 8, 32], name="x")
        x.set_device_mesh(mesh)
        f.add_input(x)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        f.add_output(fl.add(x, x))
        z = fl.set(x)
        z.set_device_mesh(mesh)
        f.add_output(z)
    program = fl.lower(f)
    kernel = next(s for s in program.steps if isinstance(s, Kernel))
    comm = next(s for s in program.steps if isinstance(s, Communication))
    assert comm.input not in kernel.outputs  # independent: hoisting is allowed by data
    return program, kernel, comm


def test_no_post_moves_ahead_of_a_wait_on_its_stream() -> None:
    """The executor posts the next communication before a kernel it does not feed; where
    a Wait on the communication's stream lies between, the post stays after it."""
    _, kernel, comm = _gather_beside_a_kernel()
    free = pipelined([comm, kernel, comm])
    assert _kinds(free) == ["Post", "Post", "Kernel", "Await", "Await"]
    held = pipelined([comm, kernel, StreamEvent("wait", comm=comm), comm])
    assert _kinds(held) == ["Post", "Kernel", "Await", "Post", "Await"]


def test_a_hand_written_early_wait_is_where_the_executor_waits() -> None:
    """A host program posting the Allgather, waiting for it, then posting the kernel on
    stream 1 (verified, printed and parsed back): the executor completes the Allgather
    before the kernel, as written (it used to wait at the end), with the flat
    program's values."""
    program, kernel, comm = _gather_beside_a_kernel()
    flat = fl.FusionExecutor(program, compute="interpret")
    post = host.PostOnStream(comm)
    program.steps = [
        host.SetCurrentStream(host.StreamIndex(1)),
        post,
        host.Wait(post),
        host.PostOnStream(kernel),
        host.SetCurrentStream(host.StreamIndex(0)),
        host.Synchronize(host.StreamIndex(1)),
    ]
    fl.verify_program(program)
    back = parse_printed(str(program))
    for p in (program, back):
        ex = fl.FusionExecutor(p, compute="interpret")
        assert _kinds(ex._steps) == ["Post", "Await", "Kernel"]
        inputs = fl.random_inputs(p.fusion, seed=1)
        assert all(np.array_equal(a, b) for a, b in zip(ex.run(inputs), flat.run(inputs)))
