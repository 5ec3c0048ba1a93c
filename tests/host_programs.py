"""Host programs built from lowered ones, as nvFuser's host IR tests write them by hand
(tests/cpp/test_multidevice_host_ir.cpp): a fusion and an Allgather posted on streams,
then waited; the same in a loop; S chunks of Allgather + matmul, each on its stream."""

from __future__ import annotations

import fuserlite as fl
from fuserlite.program import host
from fuserlite.program.program import Program


def add_then_allgather(devices: int = 2) -> Program:
    """x [D, 8, 32] sharded on its rows, y = x + x, z = Allgather(y): lowered, flat."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(devices)
        x = fl.tensor([devices, 8, 32], name="x")
        x.set_device_mesh(mesh)
        f.add_input(x)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        y = fl.add(x, x)
        z = fl.set(y)
        z.set_device_mesh(mesh)
        f.add_output(z)
    return fl.lower(f)


def single_fusion_single_comm(devices: int = 2) -> Program:
    """MultiDeviceHostIrTest.SingleFusionSingleComm on stream 1: post the fusion, post the
    Allgather, wait for it; back on the main stream, synchronize stream 1."""
    program = add_then_allgather(devices)
    kernel, comm = program.steps
    post = host.PostOnStream(comm)
    program.steps = [
        host.SetCurrentStream(host.StreamIndex(1)),
        host.PostOnStream(kernel),
        post,
        host.Wait(post),
        host.SetCurrentStream(host.StreamIndex(0)),
        host.Synchronize(host.StreamIndex(1)),
    ]
    return program


def in_a_loop(iterations: int = 2, streams: int = 2) -> Program:
    """MultiDeviceHostIrTest.SingleCommTwoFusionAndWait as a loop: each iteration posts the
    fusion and the Allgather on stream i % streams + 1 and waits for it."""
    program = add_then_allgather()
    kernel, comm = program.steps
    post = host.PostOnStream(comm)
    stream = host.StreamIndex(1, "i", streams)
    body = [host.SetCurrentStream(stream), host.PostOnStream(kernel), post, host.Wait(post)]
    program.steps = [
        host.ForLoop("i", iterations, body),
        host.SetCurrentStream(host.StreamIndex(0)),
        *(host.Synchronize(host.StreamIndex(s + 1)) for s in range(streams)),
    ]
    return program
