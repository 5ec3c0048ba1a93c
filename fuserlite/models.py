"""Ready-made fusions: the two seeds and the tensor-parallel MLPs.

Shared by the examples, the tests and the benchmarks so that each builds the
same program.
"""

from __future__ import annotations

import fuserlite.ops as fl
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.types import ParallelType
from fuserlite.schedule.shard import shard_axis
from fuserlite.spmd import all_gather, all_reduce, local_sum, reduce_scatter, spmd_input


def add_broadcast(num_devices: int, broadcast_is_parallelized: bool) -> Fusion:
    """Seed 004: z = x[D] + y[1]; either y's broadcast axis or x and z are DIDx."""
    with Fusion() as fusion:
        mesh = DeviceMesh.for_num_devices(num_devices)
        x = fl.tensor([num_devices])
        y = fl.tensor([1])
        x.set_device_mesh(mesh)
        y.set_device_mesh(mesh)
        z = fl.add(x, y)
        fusion.add_input(x)
        fusion.add_input(y)
        fusion.add_output(z)
        if broadcast_is_parallelized:
            y.axis(0).parallelize(ParallelType.DIDx)
        else:
            x.axis(0).parallelize(ParallelType.DIDx)
            z.axis(0).parallelize(ParallelType.DIDx)
    return fusion


def all_gather_all_reduce_reduce_scatter(num_devices: int = 8, local: int = 1024) -> Fusion:
    """Seed 000: t5 = sum(reduce_scatter(all_reduce(all_gather(t1)))) per device."""
    with Fusion() as fusion:
        mesh = DeviceMesh.for_num_devices(num_devices)
        t1 = spmd_input([local], mesh)
        t2 = all_gather(t1)
        t3 = all_reduce(t2)
        t4 = reduce_scatter(t3, scatter_dim=0, shard_count=num_devices)
        t5 = local_sum(t4)
        fusion.add_input(t1)
        fusion.add_output(t5)
    return fusion


def tensor_parallel_mlp(
    num_devices: int,
    batch: int = 2,
    seq: int = 8,
    hidden: int = 16,
    sequence_parallel: bool = False,
) -> Fusion:
    """Megatron MLP: column-parallel linear, gelu, row-parallel linear.

    Weights stay in place: w1/b1 sharded on the output features, w2 on the
    input features. Plain tensor parallelism lowers to one Allreduce; the
    sequence-parallel variant (x and y sharded on the sequence axis) to one
    Allgather before and one ReduceScatter after.
    """
    with Fusion() as fusion:
        mesh = DeviceMesh.for_num_devices(num_devices)
        x = fl.tensor([batch, seq, hidden])
        w1 = fl.tensor([4 * hidden, hidden])
        b1 = fl.tensor([4 * hidden])
        w2 = fl.tensor([hidden, 4 * hidden])
        b2 = fl.tensor([hidden])
        for t in (x, w1, b1, w2, b2):
            t.set_device_mesh(mesh)
            fusion.add_input(t)
        shard_axis(w1, 0, mesh)
        shard_axis(b1, 0, mesh)
        shard_axis(w2, 1, mesh)
        if sequence_parallel:
            shard_axis(x, 1, mesh)
        h = fl.gelu(fl.linear(x, w1, b1))
        y = fl.linear(h, w2)
        if sequence_parallel:
            shard_axis(y, 1, mesh)
        fusion.add_output(fl.add(y, b2))
    return fusion
