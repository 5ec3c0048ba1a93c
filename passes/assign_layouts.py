"""assign-layouts: every collective gets an explicit, consistent buffer layout (seed 000).

Before: a Program whose resharding Sets are Communications (lower-communications ran).
After: every collective has a Layout: with `pin=all` (default) each is pinned
to its allocation order (sharded axis first); with `pin=none` none is. All
collectives agree, so all-gather, all-reduce and reduce-scatter can meet in one
program; the validator rejects any mix among all-reduce-class collectives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.errors import LoweringError
from fuserlite.passes.base import Level, Pass, register
from fuserlite.program.communication import Communication, Layout
from fuserlite.program.program import Program


def allocation_order(comm: Communication) -> tuple[int, ...]:
    """Data axes of the communicated buffer, the sharded one first."""
    rank = len(comm.output.shape)
    first = comm.in_axis if comm.in_axis is not None else comm.out_axis
    rest = [i for i in range(rank) if i != first]
    return tuple(([first] if first is not None else []) + rest)


@register
@dataclass(frozen=True)
class AssignLayouts(Pass):
    """Give every collective a buffer layout: all pinned (pin=all) or all free (pin=none)."""

    name: ClassVar[str] = "assign-layouts"
    level: ClassVar[Level] = Level.program
    pin: str = "all"

    def run(self, program: Program) -> None:
        if self.pin not in ("all", "none"):
            raise LoweringError(f"assign-layouts: pin must be 'all' or 'none', got {self.pin!r}")
        for comm in program.communications:
            if comm.kind.is_collective:
                comm.layout = (
                    Layout(True, allocation_order(comm)) if self.pin == "all" else Layout(False)
                )
