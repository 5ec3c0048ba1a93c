"""schedule-pointwise: give every pointwise compute kernel a blockIdx/threadIdx schedule.

Before: `fusion.segments` holds the compute kernels (Kernel objects); when it
is None the whole fusion is treated as one kernel. Kernels may be unscheduled
or already scheduled (those are left alone).

After: every kernel whose expressions are all pointwise, broadcast or Set has
its inputs cached into local tensors (`Set( in, cache_op=Streaming )`), its
outputs written from locals, a reference tensor (`kernel.reference`) whose
device-parallel axes come first and are untouched while the other axes are
merged and split into `[blockIdx.x, US, threadIdx.x{block_size}]`, that
schedule propagated to every tensor of the kernel (no tensor has two loop
axes with one parallel type; a device type on a broadcast axis is never
copied onto split outputs), `ca_pos` / `produce_pos` set, and
`kernel.scheduled = True`. Other kernels (reductions, matmul, linear,
expand, reshape) are unchanged and say why in `kernel.notes`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from fuserlite.ir.fusion import Fusion
from fuserlite.passes.base import Pass, register
from fuserlite.schedule.pointwise import compute_kernels, schedule_pointwise, unsupported_reason

__all__ = ["SchedulePointwise", "schedule_pointwise"]


@register
@dataclasses.dataclass(frozen=True)
class SchedulePointwise(Pass):
    """Schedule each pointwise compute kernel for blockIdx.x / Unswitch / threadIdx.x."""

    name: ClassVar[str] = "schedule-pointwise"
    block_size: int = 128
    vectorize: bool = False

    def run(self, fusion: Fusion) -> None:
        for kernel in compute_kernels(fusion):
            if kernel.scheduled:
                continue
            why = unsupported_reason(kernel)
            if why is not None:
                kernel.notes.append(f"schedule-pointwise: not scheduled: {why}")
                continue
            schedule_pointwise(kernel, self.block_size, self.vectorize)
