"""segment: turn the fusion into a Program of compute kernels and communications.

Before: every expression is local or a single resharding Set (insert-reshardings
ensures it; the program verifier checks every kernel after segment).
After: a Program whose steps are, in execution order, Kernels and the
resharding Sets (or Communications) between them. A kernel is either a maximal
run of pointwise expressions on one mesh (for schedule-pointwise) or a single
other expression (reduction, matmul, linear, expand, reshape), as nvFuser gives
each scheduler its own segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ops.registry import Category, is_pointwise
from fuserlite.ops.sharding import moves_data
from fuserlite.passes.base import Level, Pass, register
from fuserlite.program.communication import Communication
from fuserlite.program.program import Kernel, Program, Step, finish_kernel


def _is_data_movement(expr: Expr) -> bool:
    return isinstance(expr, Communication) or moves_data(expr)


def segment_exprs(fusion: Fusion) -> list[Step]:
    """Kernels and data movements in execution order (of a fusion whose tensors' uses
    are live expressions only: Fusion.drop_dead_uses)."""
    exprs = fusion.exprs()
    runs: list[Expr | tuple[DeviceMesh | None, list[Expr]]] = []  # movements and kernels
    current: list[Expr] | None = None
    current_mesh: DeviceMesh | None = None
    current_pointwise = False
    for e in exprs:
        if _is_data_movement(e):
            runs.append(e)
            current = None
            continue
        mesh = e.output.mesh
        d = e.op_def
        pointwise = d is not None and d.category is Category.POINTWISE  # is_pointwise(e)
        new_mesh = mesh is not current_mesh and current_mesh != mesh
        if current is None or new_mesh or not (pointwise and current_pointwise):
            current, current_mesh, current_pointwise = [], mesh, pointwise
            runs.append((mesh, current))
        current.append(e)
    fusion_outputs = {id(t) for t in fusion.outputs}
    steps: list[Step] = []
    for run in runs:
        if isinstance(run, tuple):
            kernel = Kernel(run[1], [], [], run[0])
            finish_kernel(kernel, fusion_outputs)  # run() left every tensor's live uses
            run = kernel
        steps.append(run)
    return steps


@register
@dataclass(frozen=True)
class Segment(Pass):
    """Split the fusion into a program of compute kernels and communication steps."""

    name: ClassVar[str] = "segment"
    level: ClassVar[Level] = Level.fusion
    produces: ClassVar[Level] = Level.program

    def ensures(self, program: Program) -> list[str]:
        problems = []
        for k, kernel in enumerate(program.steps):
            if not isinstance(kernel, Kernel):
                continue
            mesh = kernel.mesh
            if any(e.output.mesh is not mesh and e.output.mesh != mesh for e in kernel.exprs):
                problems.append(f"kernel {k} computes on more than its mesh {kernel.mesh}")
            pointwise = all(is_pointwise(e) for e in kernel.exprs)
            if not pointwise and len(kernel.exprs) > 1:
                problems.append(
                    f"kernel {k} holds {len(kernel.exprs)} expressions, not all pointwise; "
                    "a reduction, linear, matmul, expand or reshape is a kernel of its own"
                )
        return problems

    def run(self, fusion: Fusion) -> Program:
        # The program is its steps: an expression no output needs must not count as a
        # reader (schedule-pointwise keeps the schedule of a tensor read elsewhere).
        fusion.drop_dead_uses()
        return Program(fusion, segment_exprs(fusion))
