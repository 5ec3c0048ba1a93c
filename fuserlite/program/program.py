"""The lowered program: an ordered list of compute kernels and communications.

The `segment` pass fills `fusion.segments`. A Kernel is a set of expressions
every device of its mesh runs on its local shards; communications are the
Communication expressions between kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fuserlite.ir.expr import Expr
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView


@dataclass(eq=False)
class Kernel:
    """Expressions computed locally on each device of `mesh`, in order."""

    exprs: list[Expr]
    inputs: list[TensorView]
    outputs: list[TensorView]
    mesh: DeviceMesh | None
    scheduled: bool = False
    # Set by schedule-pointwise: the reference tensor whose loop domain drives the kernel.
    reference: TensorView | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def tensors(self) -> list[TensorView]:
        """Every tensor the kernel reads or writes, inputs first."""
        seen: dict[int, TensorView] = {id(t): t for t in self.inputs}
        for e in self.exprs:
            for t in (*e.inputs, *e.outputs):
                seen.setdefault(id(t), t)
        return list(seen.values())
