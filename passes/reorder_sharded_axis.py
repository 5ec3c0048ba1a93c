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

from fuserlite.ir.domain import IterDomain
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.sharding import movement_text, moves_data
from fuserlite.passes.base import Level, Pass, register


def _device_axes(tv: TensorView) -> list[IterDomain]:
    return [ax for ax in tv.domain.loop if ax.parallel_type.is_device and not ax.is_broadcast]


def device_axis_outermost(tv: TensorView) -> None:
    """Allocation = the device-parallel loop axis, then the other loop axes in order."""
    device = _device_axes(tv)
    if not device:
        return
    rest = [ax for ax in tv.domain.loop if ax not in device]
    tv.domain.allocation = device + rest
    tv.domain.contiguity = [None if not ax.is_iteration else True for ax in tv.domain.allocation]


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
                if _device_axes(tv) and (not alloc or not alloc[0].parallel_type.is_device):
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
