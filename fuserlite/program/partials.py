"""Partial values through a lowered program: the op they combine by.

A reduction sharded over fewer mesh axes than its input (insert-reshardings) is
completed in stages: an Allreduce over some of the partial mesh axes leaves values
still partial over the others, in the reduction's op, and a later collective reads
them. So the op of partial values is that of the last collective that combined them,
else that of the reduction that made them; a copy or a move keeps it.
"""

from __future__ import annotations

from fuserlite.ir.expr import LoadStoreOp
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ReductionOpType
from fuserlite.ops.sharding import partial_op
from fuserlite.program.communication import Communication


def partial_op_of(tv: TensorView) -> ReductionOpType:
    """How the partial values of `tv` combine: the op of the last collective that combined
    them, else that of the reduction that made them (ops.sharding.partial_op)."""
    t = tv
    while isinstance(t.definition, (Communication, LoadStoreOp)):
        d = t.definition
        if isinstance(d, Communication) and d.op is not None:
            return d.op
        t = d.input
    return partial_op(t)
