"""schedule-reduction: give every kernel of one sum or max a row-per-block schedule.

Before: a Program (schedule-pointwise ran) whose kernels of one sum or max are
unscheduled (schedule-pointwise says so in their notes).

After: each such kernel the reduction scheduler takes (fuserlite.schedule.reduction)
has its output scheduled `[deviceIdx..., iblockIdx.x{rows}, rS{ceil(n/T)},
rthreadIdx.x{T}]` (a row per block, T threads reducing it across), `kernel.reference`
set to it, `kernel.scheduled = True` and schedule-pointwise's note replaced; the
others say why in `kernel.notes`. Kernels that are not a sum or max are left alone.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from fuserlite.passes.base import Level, Pass, register
from fuserlite.program.program import Kernel, Program
from fuserlite.schedule.reduction import (
    check_block_size,
    reduction_expr,
    schedule_reduction,
    unsupported_reason,
)

__all__ = ["ScheduleReduction"]

_NOT_POINTWISE = "schedule-pointwise: not scheduled:"


@register
@dataclasses.dataclass(frozen=True)
class ScheduleReduction(Pass):
    """Schedule each kernel of one sum or max: a row per block, a cross-thread reduction."""

    name: ClassVar[str] = "schedule-reduction"
    level: ClassVar[Level] = Level.program
    block_size: int = 128

    def ensures(self, program: Program) -> list[str]:
        problems = []
        for k, kernel in enumerate(program.steps):
            if not isinstance(kernel, Kernel) or reduction_expr(kernel) is None:
                continue
            if kernel.scheduled and kernel.reference is None:
                problems.append(f"kernel {k} is marked scheduled but has no reference tensor")
            elif not kernel.scheduled and not kernel.notes:
                problems.append(f"kernel {k} is neither scheduled nor says why (kernel.notes)")
        return problems

    def run(self, program: Program) -> None:
        check_block_size(self.block_size)
        for kernel in program.kernels:
            if kernel.scheduled or reduction_expr(kernel) is None:
                continue
            why = unsupported_reason(kernel)
            if why is not None:
                kernel.notes.append(f"schedule-reduction: not scheduled: {why}")
                continue
            schedule_reduction(kernel, self.block_size)
            kernel.notes = [n for n in kernel.notes if not n.startswith(_NOT_POINTWISE)]
