"""Time: the step-time model (docs/time.md).

`timeline(program, machine)` schedules a lowered program's kernels and communications
on each device's streams, with a roofline time per kernel (the ops' FLOPs and bytes)
and an alpha-beta time per communication (its algorithm's steps on its team's link),
from a machine model that is data (machines.json); the Timeline has the step time,
the events, the totals and the Chrome trace, and `chart` / `svg` draw it.
"""

from fuserlite.ir.errors import MachineError
from fuserlite.timing.machine import DEFAULT_MACHINE, Link, Machine, built_in_names, machine
from fuserlite.timing.schedule import timeline
from fuserlite.timing.timeline import Event, Timeline, Totals

__all__ = [
    "DEFAULT_MACHINE",
    "Event",
    "Link",
    "Machine",
    "MachineError",
    "Timeline",
    "Totals",
    "built_in_names",
    "machine",
    "timeline",
]
