"""Fusions shared by the scheduler, kernel-runner and codegen tests (seed 004 and friends)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from three_way import run_three_ways

import fuserlite as fl
from fuserlite import models
from fuserlite.passes.segment import Segment
from fuserlite.program import Kernel, Program
from fuserlite.schedule.shard import shard_axis


def segmented(fusion: fl.Fusion) -> Program:
    """The Program segment makes of `fusion`, in place: its steps hold the fusion's own
    tensors (a pipeline would work on a copy)."""
    return Segment().run(fusion)


def whole_kernel(fusion: fl.Fusion) -> Kernel:
    """The one compute kernel of a fusion of pointwise ops on one mesh, unscheduled."""
    (kernel,) = segmented(fusion).steps
    return kernel


def seed004(parallelized: bool, num_devices: int) -> fl.Fusion:
    """Seed 004 (models.add_broadcast) with z's mesh set, since the scheduler runs
    here without propagate-shardings."""
    fusion = models.add_broadcast(num_devices, parallelized)
    fusion.outputs[0].set_device_mesh(fusion.inputs[0].mesh)
    return fusion


def build(shapes: list[list[int]], body: Callable[..., list[fl.TensorView]]) -> fl.Fusion:
    """A fusion with one input per shape and the outputs `body` returns."""
    with fl.Fusion() as fusion:
        inputs = [fl.tensor(s) for s in shapes]
        for t in inputs:
            fusion.add_input(t)
        for out in body(*inputs):
            fusion.add_output(out)
    return fusion


def dtype_mix() -> fl.Fusion:
    """bool, half, int64 and float inputs with scalars C cannot spell naively: a bool
    widened to int64, an int64 past 2**53, -2**63, inf, NaN, and a half chain whose
    intermediate overflows half (x * 1000) but not float."""
    with fl.Fusion() as fusion:
        b, h = fl.tensor([300], "bool"), fl.tensor([300], "float16")
        i, x = fl.tensor([300], "int64"), fl.tensor([300], "float64")
        for t in (b, h, i, x):
            fusion.add_input(t)
        fusion.add_output(fl.add(b, 2**60 + 1))
        fusion.add_output(fl.div(fl.mul(h, 1000), 1000))
        fusion.add_output(fl.maximum(fl.add(i, b), -(2**63)))
        fusion.add_output(fl.add(fl.mul(h, float("inf")), float("nan")))
        fusion.add_output(fl.div(fl.sub(x, float("-inf")), b))
    return fusion


def run_everywhere(fusion: fl.Fusion, inputs: list[np.ndarray]) -> list[list[np.ndarray]]:
    """The reference, then every compute path (compiled, interpreted, op by op numpy),
    each validated, compiled and interpreted bit for bit (three_way.run_three_ways)."""
    return [fl.evaluate(fusion, inputs), *run_three_ways(fusion, inputs).values()]


def sharded_sum(shape: list[int], dtype: str, num_devices: int) -> fl.Fusion:
    """sum(x, [0]) of x sharded on axis 0, the result on the same mesh (partial sums)."""
    with fl.Fusion() as fusion:
        x = fl.tensor(shape, dtype)
        fusion.add_input(x)
        mesh = fl.DeviceMesh.for_num_devices(num_devices)
        shard_axis(x, 0, mesh)
        y = fl.sum(x, [0])
        y.set_device_mesh(mesh)
        fusion.add_output(y)
    return fusion


def bfloat16_chain() -> fl.Fusion:
    """(x + 100) - 100 on bfloat16, and bfloat16 * float16 (promoted to float32): in
    float the first is x again; rounded to bfloat16 after each op it would be a
    multiple of 0.5 (bfloat16's spacing at 100)."""
    with fl.Fusion() as fusion:
        x, h = fl.tensor([300], "bfloat16"), fl.tensor([300], "float16")
        fusion.add_input(x)
        fusion.add_input(h)
        fusion.add_output(fl.sub(fl.add(x, 100), 100))
        fusion.add_output(fl.mul(x, h))
    return fusion


def with_broadcast_at(rank: int, pos: int) -> list[list[int]]:
    """Shapes [full, same with extent 1 at `pos`] for a rank-`rank` tensor."""
    full = [3, 5, 7, 2][:rank]
    bcast = list(full)
    bcast[pos] = 1
    return [full, bcast]


# name -> (input shapes, body); every one is pointwise, broadcast or set only.
CASES: dict[str, tuple[list[list[int]], Callable[..., list[fl.TensorView]]]] = {
    "n1": ([[1]], lambda a: [a * 2.0]),
    "n127": ([[127]], lambda a: [fl.exp(a) - 1.0]),
    "n129": ([[129]], lambda a: [fl.relu(a) + a]),
    "n1000": ([[1000], [1000]], lambda a, b: [fl.tanh(a * b)]),
    "3x5x7": ([[3, 5, 7], [3, 5, 7]], lambda a, b: [a / (fl.abs(b) + 1.0)]),
    "rank_mix": ([[3, 5], [5]], lambda a, b: [fl.gelu(a + b), b * 2.0]),
    "inner_bcast_op": ([[4, 6], [4]], lambda a, b: [a * fl.broadcast(b, [False, True])]),
    "four_d": ([[2, 3, 4, 5], [1, 3, 1, 5]], lambda a, b: [fl.maximum(a, b), fl.neg(b)]),
    "disconnected": ([[127], [129]], lambda a, b: [a + 1.0, fl.set(b)]),
}
for _rank in (1, 2, 3, 4):
    for _pos in range(_rank):
        CASES[f"bcast_r{_rank}_p{_pos}"] = (
            with_broadcast_at(_rank, _pos),
            lambda a, b: [a + b, fl.sqrt(fl.abs(b))],
        )
