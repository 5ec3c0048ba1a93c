"""Sharding queries on expressions: where an op's inputs must be for it to compute locally.

They read an op through its axis map and sharding rule (fuserlite.ops.registry);
the queries on one tensor (shardings, placement, local shape) are the IR's
(fuserlite.ir.sharding).
"""

from __future__ import annotations

from fuserlite.ir.errors import LoweringError
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.sharding import Placement, placement, shardings
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType, ReductionOpType
from fuserlite.ops.registry import definition, definition_of, producer_to_consumer


def needed_placement(expr: Expr, target: TensorView, producer: TensorView) -> Placement:
    """How `producer` must be sharded for `expr` to compute `target` locally: sharded
    where it maps to a sharded axis of `target` (unless broadcast), whole elsewhere."""
    sharded = shardings(target)
    if not sharded:
        return target.mesh, {}
    back = {c: p for p, c in producer_to_consumer(expr, producer).items()}
    needed: dict[ParallelType, int] = {}
    for pt, s in sharded.items():
        p = back.get(s.logical_index)
        if p is not None and not producer.domain.logical[p].is_broadcast:
            needed[pt] = p
    return target.mesh, needed


def has_unmapped_sharding(expr: Expr, target: TensorView) -> bool:
    """True if a sharded axis of `target` comes from no input axis that could be
    sharded the same way (e.g. a reshape whose source axis the mesh does not divide)."""
    for s in shardings(target).values():
        sources = [
            p.domain.logical[pi]
            for p in expr.inputs
            for pi, c in producer_to_consumer(expr, p).items()
            if c == s.logical_index
        ]
        if not any(ax.is_broadcast or ax.extent % s.num_devices == 0 for ax in sources):
            return True
    return False


def non_local_inputs(expr: Expr) -> list[TensorView]:
    """The inputs a non-Set expression cannot compute its output from locally."""
    if isinstance(expr, LoadStoreOp):
        return []
    if has_unmapped_sharding(expr, expr.output):
        return list(expr.inputs)
    return [p for p in expr.inputs if placement(p) != needed_placement(expr, expr.output, p)]


def propagation_sources(expr: Expr) -> list[TensorView]:
    """The inputs in the order propagate-shardings copies a sharding from (for linear
    and matmul the weight first)."""
    first = definition_of(expr).sharding.prefer
    return [expr.inputs[k] for k in first if k < len(expr.inputs)] + [
        t for k, t in enumerate(expr.inputs) if k not in first
    ]


def partial_op(tv: TensorView) -> ReductionOpType:
    """How the partial values of `tv` combine: by its reduction's op (sum for linear and
    matmul); a copy of partial values combines as its source does."""
    d = tv.definition
    while isinstance(d, LoadStoreOp):
        d = d.input.definition
    op = None if d is None else definition(d)
    if op is None or op.sharding.partial is None:
        raise LoweringError(
            f"{tv.name} holds partial values, but {tv.definition!r} reduces no axis: nothing "
            "says how they combine"
        )
    return op.sharding.partial
