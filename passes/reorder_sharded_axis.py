"""reorder-sharded-axis: the sharded axis is outermost in every communication buffer.

Before: insert-reshardings ran; resharding Sets move data between shardings (and
block permutations, takes of whole chunks, between devices).
After: both tensors of every such expression that are sharded (or partial) have
an allocation domain whose first axis is the device-parallel one, so each
device's shard is one contiguous block, as collectives need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.domain import TensorDomain, default_contiguity
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.sharding import movement_text, moves_data
from fuserlite.passes.base import Level, Pass, register


def _device_axes(dom: TensorDomain) -> list[int]:
    """The positions of the device-parallel loop axes that hold data."""
    return [
        p
        for p in dom.loop_positions
        if dom.axes[p].parallel_type.is_device and not dom.axes[p].is_broadcast
    ]


def device_axis_outermost(tv: TensorView) -> None:
    """Allocation = the device-parallel loop axis, then the other loop axes in order."""
    dom = tv.domain
    device = _device_axes(dom)
    if not device:
        return
    allocation = (*device, *(p for p in dom.loop_positions if p not in device))
    contiguity = default_contiguity([dom.axes[p] for p in allocation])
    tv.domain = dom.with_allocation(allocation, contiguity)


@register
@dataclass(frozen=True)
class ReorderShardedAxis(Pass):
    """Put the sharded axis outermost in the allocation of every communication buffer."""

    name: ClassVar[str] = "reorder-sharded-axis"
    level: ClassVar[Level] = Level.fusion

    def ensures(self, fusion: Fusion) -> list[str]:
        problems = []
        for expr in fusion.exprs():
            if not moves_data(expr):
                continue
            for tv in (expr.input, expr.output):
                alloc = tv.domain.allocation
                if _device_axes(tv.domain) and (not alloc or not alloc[0].parallel_type.is_device):
                    problems.append(
                        f"{tv.name}, a buffer of {movement_text(expr)}, "
                        "does not have its device axis outermost in its allocation domain"
                    )
        return problems

    def run(self, fusion: Fusion) -> None:
        for expr in fusion.exprs():
            if moves_data(expr):
                device_axis_outermost(expr.input)
                device_axis_outermost(expr.output)
