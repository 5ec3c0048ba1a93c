"""schedule-pointwise: give every pointwise compute kernel a blockIdx/threadIdx schedule.

Before: a Program (segment ran) whose compute kernels may be unscheduled or
already scheduled (those are left alone).

After: every kernel whose expressions are all pointwise, broadcast or Set has
its inputs cached into local tensors (`Set( in, cache_op=Streaming )`), its
outputs written from locals, a reference tensor (`kernel.reference`) whose
device-parallel axes come first and are untouched while the other axes are
merged and split into `[blockIdx.x, US, threadIdx.x{block_size}]`, that
schedule propagated to every tensor of the kernel (no tensor has two loop
axes with one parallel type; a device type on a broadcast axis is never
copied onto split outputs), `ca_pos` / `produce_pos` set, and
`kernel.scheduled = True`. Other kernels (reductions, matmul, linear,
expand, reshape, or pointwise kernels one reference cannot reach entirely,
whose attempt is undone) are unchanged and say why in `kernel.notes`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from fuserlite.ir.errors import ScheduleError
from fuserlite.passes.base import Level, Pass, register
from fuserlite.program.program import Kernel, Program
from fuserlite.schedule.pointwise import (
    check_block_size,
    schedule_pointwise,
    schedule_supported,
    unsupported_reason,
)
from fuserlite.schedule.shard import has_schedule

__all__ = ["KernelSnapshot", "SchedulePointwise", "schedule_pointwise"]


@register
@dataclasses.dataclass(frozen=True)
class SchedulePointwise(Pass):
    """Schedule each pointwise compute kernel for blockIdx.x / Unswitch / threadIdx.x."""

    name: ClassVar[str] = "schedule-pointwise"
    level: ClassVar[Level] = Level.program
    block_size: int = 128
    vectorize: bool = False

    def ensures(self, program: Program) -> list[str]:
        problems = []
        for k, kernel in enumerate(program.steps):
            if not isinstance(kernel, Kernel) or (kernel.scheduled and kernel.reference):
                continue
            if kernel.scheduled:
                problems.append(f"kernel {k} is marked scheduled but has no reference tensor")
            elif not kernel.notes:
                problems.append(f"kernel {k} is neither scheduled nor says why (kernel.notes)")
        return problems

    def run(self, program: Program) -> None:
        check_block_size(self.block_size)
        # Tensors carrying transforms other than sharding splits before this pass
        # were scheduled by the user; earlier kernels' schedules do not count.
        user = {id(tv) for tv in program.tensors() if has_schedule(tv)}
        for kernel in program.kernels:
            if kernel.scheduled:
                continue
            why = unsupported_reason(kernel)
            if why is not None:
                kernel.notes.append(f"schedule-pointwise: not scheduled: {why}")
                continue
            snapshot = KernelSnapshot(kernel)
            try:
                schedule_supported(kernel, self.block_size, self.vectorize)
            except ScheduleError as exc:
                if any(id(tv) in user for tv in kernel.tensors):
                    raise  # the user's own schedule cannot be propagated: say so
                # One reference cannot reach every tensor of this kernel (unrelated
                # outputs, a broadcast-only reference next to a sharded one): run it
                # expression by expression instead, and say why.
                snapshot.restore()
                kernel.notes.append(f"schedule-pointwise: not scheduled: {exc}")


class KernelSnapshot:
    """Everything schedule_pointwise may change in a kernel, to undo a failed attempt:
    every tensor's domain (a value) and inline positions, the expressions' lists (read
    only, kept as they are), and every tensor's links, which the caches it inserts (or
    pointwise.uncached removes) read or write (the tensors it makes are dropped with it)."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.exprs = kernel.exprs
        self.edges = [(e, e.inputs, e.outputs) for e in kernel.exprs]
        tensors = kernel.tensors
        self.tensors = [(tv, tv.domain, tv.compute_at_pos, tv.produce_pos) for tv in tensors]
        self.links = [(tv, tv.definition, list(tv.uses)) for tv in tensors]

    def restore(self) -> None:
        self.kernel.exprs = self.exprs
        for e, inputs, outputs in self.edges:
            if e.inputs is not inputs:
                e.inputs = inputs
            if e.outputs is not outputs:
                e.outputs = outputs
        for tv, definition, uses in self.links:
            tv.definition, tv.uses = definition, uses
        for tv, domain, ca_pos, produce_pos in self.tensors:
            if tv.domain is not domain:
                tv.domain = domain
            tv.compute_at_pos, tv.produce_pos = ca_pos, produce_pos
