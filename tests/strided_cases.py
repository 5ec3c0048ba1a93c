"""Fusions of cyclic (strided) shards, shared by tests/test_strided_shards.py and the MPI
jobs (tests/mpi_scripts): nvFuser's DIDx on the inner part of a split, and in blocks
(block-cyclic: DIDx on the outer part of a split of the inner part of a split)."""

from __future__ import annotations

import fuserlite as fl

DIDx = fl.ParallelType.DIDx


def shard_cyclically(x: fl.TensorView, num_devices: int, block: int = 1) -> None:
    """Axis 0 of x cyclic over DIDx: split(0, d), DIDx on the inner part (device i holds
    rows i, i + d, ...); in blocks of `block` > 1 as nvFuser's test_nonoutermost_split,
    outer_split(0, n / (d block)) and outer_split(1, d), DIDx on axis 1 (device i holds
    rows (k d + i) block + j)."""
    if block == 1:
        x.split(0, num_devices)
        x.axis(1).parallelize(DIDx)
        return
    x.outer_split(0, x.shape[0] // (num_devices * block))
    x.outer_split(1, num_devices)
    x.axis(1).parallelize(DIDx)


def cyclic_square(num_devices: int, n: int, cols: int | None = 3, block: int = 1) -> fl.Fusion:
    """x * x + 1, x[n, cols] (x[n]: cols None) split(0, d) with DIDx on the inner part:
    device i holds rows i, i + d, ... (in blocks: shard_cyclically) of x and of the
    output (propagated), and computes them in place."""
    with fl.Fusion() as f:
        x = fl.tensor([n] if cols is None else [n, cols], name="x")
        f.add_input(x)
        x.set_device_mesh(fl.DeviceMesh.for_num_devices(num_devices))
        shard_cyclically(x, num_devices, block)
        f.add_output(fl.add(fl.mul(x, x), 1.0))
    return f


def cyclic_gathered(num_devices: int, n: int, cols: int = 3, block: int = 1) -> fl.Fusion:
    """exp(x) gathered whole, x[n, cols] cyclic (split(0, d), DIDx on the inner part) and
    the output replicated: exp computed on each device's rows r, r + d, ..., then one
    strided Allgather (padded to ceil(n/d) rows, interleaved; in blocks: shard_cyclically)."""
    mesh = fl.DeviceMesh.for_num_devices(num_devices)
    with fl.Fusion() as f:
        x = fl.tensor([n, cols], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        shard_cyclically(x, num_devices, block)
        y = fl.exp(x)
        y.set_device_mesh(mesh)
        f.add_output(y)
    return f


def vector_2d_gathered(cols: int = 3) -> fl.Fusion:
    """exp(x), x[24, 2] on a 2x2 mesh as nvFuser's test_2d_sharded_vector ((S0,C0/3): DIDx
    cyclic in blocks of `cols` within DIDy's chunk of the periods), then gathered over
    DIDx to DIDy's blocks (S0,R): one Allgather per DIDy team, interleaved."""
    mesh = fl.DeviceMesh([[0, 1], [2, 3]])
    with fl.Fusion() as f:
        x = fl.tensor([24, 2], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        x.split(0, 2 * cols)
        x.outer_split(0, 2)
        x.axis(0).parallelize(fl.ParallelType.DIDy)
        x.outer_split(2, 2)
        x.axis(2).parallelize(DIDx)
        y = fl.exp(x)
        y.set_device_mesh(mesh)
        y.outer_split(0, 2)
        y.axis(0).parallelize(fl.ParallelType.DIDy)
        f.add_output(y)
    return f
