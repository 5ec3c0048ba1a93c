"""assign-layouts: every collective gets an explicit, consistent buffer layout (seed 000).

Before: a Program whose resharding Sets are Communications (lower-communications ran).
After: every collective has a Layout: with `pin=all` (default) each is pinned
to its allocation order (sharded axis first); with `pin=none` none is. All
collectives agree, so all-gather, all-reduce and reduce-scatter can meet in one
program; the validator rejects any mix among all-reduce-class collectives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from fuserlite.passes.base import Level, Pass, register
from fuserlite.passes.lower_communications import unlowered_steps
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
    pin: Literal["all", "none"] = "all"

    def requires(self, program: Program) -> list[str]:
        return [f"{p}; run lower-communications first" for p in unlowered_steps(program)]

    def ensures(self, program: Program) -> list[str]:
        pinned = self.pin == "all"
        return [
            f"{c.kind.value} {c.input.name} -> {c.output.name} has layout {c.layout}, not "
            f"{'pinned' if pinned else 'free'} as pin={self.pin} asks"
            for c in program.communications
            if c.kind.is_collective and (c.layout is None or c.layout.pinned is not pinned)
        ]

    def run(self, program: Program) -> None:
        for comm in program.communications:
            if comm.kind.is_collective:
                comm.layout = (
                    Layout(True, allocation_order(comm)) if self.pin == "all" else Layout(False)
                )
