"""How long one step takes on one device: a kernel's roofline, a communication's
alpha-beta time.

A kernel on a device takes

    kernel_launch + max(sum of FLOPs / peak, bytes / memory_bandwidth)

its FLOPs each expression's (the OpDef's cost, fuserlite.ops.cost, on the device's
own rows), each at the peak of its unit and dtype (matrix units for matmuls, vector
units otherwise), and its bytes the global memory it touches: a scheduled kernel
(fused: intermediates stay on chip) reads its inputs and writes its outputs once; an
unscheduled one runs op by op, each op's bytes.

A communication over a team of D devices takes

    latency + steps x step_latency + bytes_per_device / bandwidth

on the team's link (the node's, or the network where the team spans nodes), with
the steps of its algorithm as NCCL counts them (src/graph/tuning.cc): D-1 for a ring
Allgather, ReduceScatter or AllToAll, 2(D-1) for a ring Allreduce, D-1 for the rooted
kinds, 1 for point-to-point transfers. bytes_per_device is the planner's ring count
(fuserlite/plan/steps.py), so this is the planner's alpha-beta model
(plan/cost.py: launches x latency_bytes + bytes) in seconds, per algorithm and link.
A LocalSlice moves nothing and takes no time.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.tensor import TensorView
from fuserlite.ops.cost import elements
from fuserlite.ops.registry import compute_dtype, definition_of
from fuserlite.program.communication import CommKind, Communication
from fuserlite.program.program import Kernel
from fuserlite.program.shards import device_shape
from fuserlite.timing.machine import Link, Machine


@dataclass(frozen=True)
class KernelTime:
    """A kernel's work on one device and its roofline time."""

    flops: int
    bytes: int
    compute: float  # s: FLOPs at the peaks of their units
    memory: float  # s: bytes at the memory bandwidth
    launch: float  # s

    @property
    def seconds(self) -> float:
        return self.launch + max(self.compute, self.memory)

    @property
    def bound(self) -> str:
        """'compute' or 'memory': which side of the roofline the kernel is on."""
        return "compute" if self.compute > self.memory else "memory"


def _tensor_bytes(tv: TensorView, device: int) -> int:
    return elements(device_shape(tv, device)) * tv.dtype.itemsize


def kernel_time(machine: Machine, kernel: Kernel, device: int) -> KernelTime:
    """The roofline time of `kernel` on `device` (module doc)."""

    def shape(tv: TensorView) -> tuple[int, ...]:
        return device_shape(tv, device)

    flops = op_bytes = 0
    compute = 0.0
    for e in kernel.exprs:
        cost = definition_of(e).cost(e, shape)
        flops += cost.flops
        op_bytes += cost.bytes
        if cost.flops:
            peak = (
                machine.matmul_peak(e.inputs[0].dtype)
                if cost.matmul
                else machine.vector_peak(compute_dtype(e))
            )
            compute += cost.flops / peak
    if kernel.scheduled:  # fused: its inputs read and its outputs written once
        moved = sum(_tensor_bytes(t, device) for t in (*kernel.inputs, *kernel.outputs))
    else:
        moved = op_bytes
    return KernelTime(
        flops, moved, compute, moved / machine.memory_bandwidth, machine.kernel_launch
    )


def algorithm_steps(kind: CommKind, team_size: int) -> int:
    """The steps of a collective's algorithm over `team_size` devices (NCCL's nsteps)."""
    d = team_size
    if kind is CommKind.LocalSlice:
        return 0
    if kind is CommKind.Allreduce:
        return 2 * (d - 1)
    if kind in (CommKind.SendRecv, CommKind.CollectivePermute):
        return 1
    return d - 1


@dataclass(frozen=True)
class CommTime:
    """A communication's time over one team: latency, algorithm steps, bytes."""

    link: Link | None  # None: it moves nothing (a LocalSlice)
    steps: int
    bytes: int  # sent per device

    @property
    def latency(self) -> float:
        if self.link is None:
            return 0.0
        return self.link.latency + self.steps * self.link.step_latency

    @property
    def transfer(self) -> float:
        return 0.0 if self.link is None else self.bytes / self.link.bandwidth

    @property
    def seconds(self) -> float:
        return self.latency + self.transfer


def communication_time(machine: Machine, comm: Communication, team: tuple[int, ...]) -> CommTime:
    """The alpha-beta time of `comm` over `team` (one of its teams; module doc)."""
    if comm.kind is CommKind.LocalSlice or _stays(comm):
        return CommTime(None, 0, 0)
    return CommTime(
        machine.link(team), algorithm_steps(comm.kind, len(team)), comm.bytes_per_device
    )


def _stays(comm: Communication) -> bool:
    """A CollectivePermute whose every block stays where it is (a ring's step 0): it
    moves nothing and takes no time."""
    sources = comm.sources
    return comm.kind is CommKind.CollectivePermute and sources == tuple(range(len(sources or ())))
