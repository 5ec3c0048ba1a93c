"""segment: split the program into compute kernels and communications.

Before: every expression is local or a single resharding Set.
After: `fusion.segments` lists, in execution order, Kernels and the
resharding Sets (or Communications) between them. A kernel is either a maximal
run of pointwise expressions on one mesh (for schedule-pointwise) or a single
other expression (reduction, matmul, linear, expand, reshape), as nvFuser gives
each scheduler its own segment.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.sharding import is_resharding
from fuserlite.passes.base import Pass, register
from fuserlite.program.communication import Communication
from fuserlite.program.program import Kernel
from fuserlite.schedule.pointwise import POINTWISE_EXPRS


def _is_data_movement(expr: Expr) -> bool:
    return isinstance(expr, Communication) or is_resharding(expr)


def finish_kernel(kernel: Kernel, fusion_outputs: set[int], users: dict[int, list[Expr]]) -> None:
    """Fill a kernel's inputs (read, not produced inside) and outputs (used outside or
    `fusion_outputs`, the ids of the fusion's outputs)."""
    inside = {id(e) for e in kernel.exprs}
    produced = {id(t) for e in kernel.exprs for t in e.outputs}
    inputs, outputs = {}, {}
    for e in kernel.exprs:
        for t in e.inputs:
            if id(t) not in produced:
                inputs.setdefault(id(t), t)
        for t in e.outputs:
            outside = any(id(u) not in inside for u in users.get(id(t), []))
            if outside or id(t) in fusion_outputs:
                outputs.setdefault(id(t), t)
    kernel.inputs = list(inputs.values())
    kernel.outputs = list(outputs.values())


def segment_exprs(fusion: Fusion) -> list:
    """Kernels and data movements in execution order."""
    exprs = fusion.exprs()
    users: dict[int, list[Expr]] = {}
    for e in exprs:
        for t in e.inputs:
            users.setdefault(id(t), []).append(e)
    segments: list = []
    current: Kernel | None = None
    current_pointwise = False
    for e in exprs:
        if _is_data_movement(e):
            segments.append(e)
            current = None
            continue
        mesh = e.output.mesh
        pointwise = isinstance(e, POINTWISE_EXPRS)
        if current is None or current.mesh != mesh or not (pointwise and current_pointwise):
            current = Kernel([], [], [], mesh)
            segments.append(current)
            current_pointwise = pointwise
        current.exprs.append(e)
    fusion_outputs = {id(t) for t in fusion.outputs}
    for s in segments:
        if isinstance(s, Kernel):
            finish_kernel(s, fusion_outputs, users)
    return segments


@register
@dataclass(frozen=True)
class Segment(Pass):
    """Split the program into compute kernels and communication steps."""

    name = "segment"

    def run(self, fusion: Fusion) -> None:
        fusion.segments = segment_exprs(fusion)
