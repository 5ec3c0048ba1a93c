"""Sharding queries on expressions: where an op's inputs must be for it to compute locally.

They read an op through its axis map and sharding rule (fuserlite.ops.registry);
the queries on one tensor (shardings, placement, local shape) are the IR's
(fuserlite.ir.sharding).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from fuserlite.ir.errors import LoweringError
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import (
    MeshPlacement,
    is_resharding,
    logical_placement,
    placement,
    shardings,
    signature_facts,
)
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ReductionOpType
from fuserlite.ops.registry import (
    OpDef,
    definition,
    definition_of,
    is_indexed,
    operand_to_output,
    positional,
)

T = TypeVar("T")


def needed_placement(
    expr: Expr, target: TensorView, position: int, placed: Placement | None = None
) -> MeshPlacement:
    """How operand `position` of `expr` must be sharded for it to compute `target`
    locally: on every mesh axis, sharded where it maps to an axis of `target` that mesh
    axis shards (unless broadcast; nesting kept), whole elsewhere. On the operand's
    logical axes; `placed`: as if `target` lay so (on its logical axes, on its mesh)."""
    if placed is None:
        return _decided("needed_placement", expr, target, _needed, expr, target, position)
    return target.mesh, Placement(placed.mesh_rank, _needed_shards(expr, target, position, placed))


def _needed(expr: Expr, target: TensorView, position: int) -> MeshPlacement:
    shards = _needed_shards(expr, target, position)
    return target.mesh, Placement(logical_placement(target).mesh_rank, shards)


def _decided(
    question: str, expr: Expr, target: TensorView, compute: Callable[..., T], *args: Any
) -> T:
    """compute(*args), a sharding question about `expr` computing `target` (and, in
    `args` past them, an operand position), answered once per (question, signature_key
    of the op and its inputs, target's mesh and signature facts, the rest of `args`)
    where the op reads only its tensors' signatures (reads_signatures_only): the 20 000
    `x + k` of one fusion are asked once."""
    base = signature_key(expr, outputs=False)
    if base is None:
        return compute(*args)
    return _once((question, base, target.mesh, signature_facts(target), args[2:]), compute, *args)


def _once(key: tuple, compute: Callable[..., T], *args: Any) -> T:
    """compute(*args), kept under `key` (everything the answer reads), in a bounded table."""
    hit = _DECIDED.get(key, _DECIDED)
    if hit is _DECIDED:
        if len(_DECIDED) >= _DECIDED_SIZE:
            _DECIDED.clear()  # bounded: a long process sees many signatures
        hit = _DECIDED[key] = compute(*args)
    return hit  # type: ignore[return-value]


_DECIDED: dict[tuple, object] = {}
_DECIDED_SIZE = 8192


def _needed_shards(
    expr: Expr, target: TensorView, position: int, placed: Placement | None = None
) -> tuple[tuple[int, ...], ...]:
    """needed_placement's shards (no Placement made: non_local_inputs only compares)."""
    producer = expr.inputs[position]
    wanted = (logical_placement(target) if placed is None else placed).shards
    shards: list[tuple[int, ...]] = [()] * len(producer.domain.logical)
    if any(wanted):
        back = {c: p for p, c in operand_to_output(expr, position, target).items()}
        for c, axes in enumerate(wanted):
            p = back.get(c)
            if axes and p is not None and not producer.domain.logical[p].is_broadcast:
                shards[p] = axes
    return tuple(shards)


def _placed_as_needed(expr: Expr, target: TensorView, position: int) -> bool:
    """mesh_placement(operand) == needed_placement(expr, target, position)."""
    p = expr.inputs[position]
    have, wanted = logical_placement(p), logical_placement(target)
    return (
        p.mesh == target.mesh
        and have.mesh_rank == wanted.mesh_rank
        and not have.partial
        and have.shards == _needed_shards(expr, target, position)
    )


def has_unmapped_sharding(expr: Expr, target: TensorView) -> bool:
    """True if a sharded axis of `target` comes from no input axis that could be
    sharded the same way (e.g. a reshape whose axes the mesh does not divide), unless
    the op makes it from its global coordinates (iota)."""
    if target.mesh is None:
        return False
    return _decided("has_unmapped_sharding", expr, target, _has_unmapped, expr, target)


def _has_unmapped(expr: Expr, target: TensorView) -> bool:
    for c, axes in enumerate(logical_placement(target).shards):
        if not axes:
            continue
        devices = math.prod(target.mesh.shape[a] for a in axes)
        sources = [
            p.domain.logical[pi]
            for k, p in enumerate(expr.inputs)
            for pi, ci in operand_to_output(expr, k, target).items()
            if ci == c
        ]
        if not sources and is_indexed(expr):
            continue  # made at its elements' global coordinates: computed where it lies
        extent = target.domain.logical[c].extent
        if not any(
            ax.is_broadcast or chunks_correspond(ax.extent, extent, devices) for ax in sources
        ):
            return True
    return False


def broadcast_sums(expr: Expr) -> list[tuple[TensorView, int, TensorView, int]]:
    """(output, its logical axis, producer, its logical axis) for each device-sharded
    reduction axis of a summing op whose producer axis is a broadcast: every device holds
    the broadcast's row whole (b == bDIDx), so each partial sum would count it once."""
    op = definition(expr)
    if op is None or op.sharding.partial is not ReductionOpType.sum:
        return []
    found = []
    for out in expr.outputs:
        for s in shardings(out).values():
            if not s.is_partial:
                continue
            for k, p in enumerate(expr.inputs):
                for pi, ci in operand_to_output(expr, k, out).items():
                    if ci == s.logical_index and p.domain.logical[pi].is_broadcast:
                        found.append((out, ci, p, pi))
    return found


def chunks_correspond(source: int, target: int, d: int) -> bool:
    """True when chunk i of a source axis over d devices holds the elements of chunk i of
    the target axis it maps to: the same extent (any d, torch.chunk's rows alike), or a
    reshape's outer axes that d divides both (an uneven chunk of one is not of the other)."""
    return source == target or (source % d == 0 and target % d == 0)


def chunk_permutation(expr: Expr) -> tuple[int, ...] | None:
    """The source chunk of each output chunk where the expression moves whole chunks of
    its input's sharded axis 0 between devices (its op's sharding rule,
    `Sharding.permutes`), whatever its output's placement; else None."""
    rule = _permutes(expr)
    return None if rule is None else rule(expr)


def _permutes(expr: Expr):
    """The op's `Sharding.permutes` rule, or None (most ops never permute)."""
    d = definition(expr)
    return d.sharding.permutes if d is not None and expr.inputs else None


def block_permutation(expr: Expr) -> tuple[int, ...] | None:
    """chunk_permutation(expr) where the output is placed like the input, on its mesh:
    the expression is then a communication (one CollectivePermute); else None."""
    rule = _permutes(expr)  # asked before working out placements: it runs on every expr
    if rule is None:
        return None
    x, out = expr.inputs[0], expr.output
    if x.mesh is None or x.mesh != out.mesh or placement(out) != placement(x):
        return None
    return rule(expr)


def propagation_axis_map(expr: Expr, position: int, out: TensorView) -> dict[int, int]:
    """The axes along which propagate-shardings copies operand `position`'s sharding onto
    out: the op's axis map, and for a block permutation (chunk_permutation) its axis 0
    as well, whose chunks only change devices."""
    axis_map = operand_to_output(expr, position, out)
    if position == 0 and chunk_permutation(expr) is not None:
        axis_map = {**axis_map, expr.inputs[0].data_positions()[0]: 0}
    return axis_map


def moves_data(expr: Expr) -> bool:
    """True for an expression that is a communication of its own, not part of a kernel: a
    resharding Set, or a block permutation (lowered to one CollectivePermute)."""
    return is_resharding(expr) or block_permutation(expr) is not None


def movement_text(expr: Expr) -> str:
    """`T3 = Set(T2)` or `T3 = take(T2)`: a data movement (moves_data) as messages name it."""
    name = "Set" if isinstance(expr, LoadStoreOp) else expr.op_name
    return f"{expr.output.name} = {name}({expr.inputs[0].name})"


def reads_signatures_only(op: OpDef | None) -> bool:
    """True for an op whose expressions' locality (non_local_inputs, moves_data) reads
    only their tensors' meshes and sharding signatures: a positional op, one axis map
    for all its outputs, that never permutes blocks."""
    return (
        op is not None
        and op.axis_map is positional
        and op.outputs_axis_map is None
        and op.sharding.permutes is None
    )


def non_local_inputs(expr: Expr) -> list[TensorView]:
    """The inputs a non-Set expression cannot compute its output from locally (none for
    a block permutation: it is a communication)."""
    if isinstance(expr, LoadStoreOp):
        return []
    key = signature_key(expr)  # one answer per signature: found once for 20k `x + k`
    wrong = _non_local(expr) if key is None else _once(("non_local", key), _non_local, expr)
    return list(dict.fromkeys(expr.inputs[k] for k in wrong))  # a tensor read twice: once


def signature_key(expr: Expr, outputs: bool = True) -> tuple | None:
    """(op, each input's (mesh, signature_facts), each output's): everything a sharding
    question about `expr` reads when its op is positional and never permutes (its axis
    map then reads only its tensors' signatures), so one answer serves every expression
    of the key; None for other ops, whose maps read the expression itself. Without
    `outputs`, the op and the inputs only (the caller keys the outputs itself)."""
    op = definition(expr)
    if not reads_signatures_only(op):
        return None
    inputs = tuple([(t.mesh, signature_facts(t)) for t in expr.inputs])
    if not outputs:
        return op, inputs
    return op, inputs, tuple([(t.mesh, signature_facts(t)) for t in expr.outputs])


def _non_local(expr: Expr) -> tuple[int, ...]:
    """The operand positions of `expr` (not a Set) not placed to compute its outputs."""
    positions = range(len(expr.inputs))
    if block_permutation(expr) is not None:
        return ()
    if any(has_unmapped_sharding(expr, out) for out in expr.outputs):
        return tuple(positions)
    outs = expr.outputs
    return tuple(k for k in positions if not all(_placed_as_needed(expr, o, k) for o in outs))


def propagation_sources(expr: Expr) -> list[int]:
    """The operand positions in the order propagate-shardings copies a sharding from
    (for linear and matmul the weight first)."""
    first = definition_of(expr).sharding.prefer
    n = len(expr.inputs)
    return [k for k in first if k < n] + [k for k in range(n) if k not in first]


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
