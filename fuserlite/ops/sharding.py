"""Sharding queries on expressions: where an op's inputs must be for it to compute locally.

They read an op through its axis map and sharding rule (fuserlite.ops.registry);
the queries on one tensor (shardings, placement, local shape) are the IR's
(fuserlite.ir.sharding). What they read of an expression is a `View`: its
operands' and outputs' layouts (domain, mesh) and the axis maps between them. An op
whose answers read nothing else (a positional op, one axis map for all its outputs,
that never permutes blocks: `reads_layouts_only`) is answered as a fact of those
values (`PositionalView`), once for every expression alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.errors import LoweringError
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import (
    MeshPlacement,
    is_partial,
    is_resharding,
    layout_facts,
    placement,
    shardings,
)
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, ReductionOpType
from fuserlite.ir.values import fact
from fuserlite.ops.registry import (
    OpDef,
    definition,
    definition_of,
    is_indexed,
    operand_to_output,
    positional_map,
)

Layout = tuple[TensorDomain, DeviceMesh | None]  # what a sharding question reads of a tensor


def _logical(layout: Layout) -> Placement:
    dom, mesh = layout
    return layout_facts(dom, None if mesh is None else mesh.shape).logical


class PositionalView(NamedTuple):
    """An expression of a positional op as the sharding questions read it: a value."""

    inputs: tuple[Layout, ...]
    outputs: tuple[Layout, ...]
    indexed: bool

    def amap(self, k: int, j: int) -> Mapping[int, int]:
        """Operand k's logical axes onto output j's."""
        return positional_map(self.inputs[k][0], self.outputs[j][0])


class ExprView:
    """An expression of any op as the sharding questions read it (its maps read the
    expression itself)."""

    def __init__(self, expr: Expr) -> None:
        self.expr = expr
        self.inputs = tuple((t.domain, t.mesh) for t in expr.inputs)
        self.outputs = tuple((t.domain, t.mesh) for t in expr.outputs)
        self.indexed = is_indexed(expr)

    def amap(self, k: int, j: int) -> Mapping[int, int]:
        return operand_to_output(self.expr, k, self.expr.outputs[j])


View = PositionalView | ExprView


def reads_layouts_only(op: OpDef | None) -> bool:
    """True for an op whose expressions' sharding questions (non_local_inputs,
    needed_placement, moves_data) read only their tensors' layouts: a positional op,
    one axis map for all its outputs, that never permutes blocks (a fact of the
    definition, OpDef.reads_layouts_only)."""
    return op is not None and op.reads_layouts_only


def _layouts(tensors: list[TensorView]) -> tuple[Layout, ...]:
    if len(tensors) == 1:  # most expressions: one input or one output
        t = tensors[0]
        return ((t.domain, t.mesh),)
    return tuple([(t.domain, t.mesh) for t in tensors])


_new_view = tuple.__new__  # PositionalView(...) without its Python-level __new__


def view(expr: Expr) -> View:
    """What the sharding questions read of `expr`: a value where its op reads only its
    tensors' layouts. Asked for every expression by every locality check: the value is
    made without the NamedTuple's keyword-taking constructor."""
    d = expr.op_def
    if d is not None and d.reads_layouts_only:
        return _new_view(
            PositionalView, (_layouts(expr.inputs), _layouts(expr.outputs), d.indexed_pointwise)
        )
    return ExprView(expr)


def needed_placement(
    expr: Expr, target: TensorView, position: int, placed: Placement | None = None
) -> MeshPlacement:
    """How operand `position` of `expr` must be sharded for it to compute `target`
    locally: on every mesh axis, sharded where it maps to an axis of `target` that mesh
    axis shards (unless broadcast; nesting kept), whole elsewhere. On the operand's
    logical axes; `placed`: as if `target` lay so (on its logical axes, on its mesh)."""
    v = view(expr)
    j = _index(expr, target)
    if placed is None:
        return _needed(v, j, position) if type(v) is ExprView else _needed_fact(v, j, position)
    shards = _needed_shards(v, j, position, placed)
    return target.mesh, Placement(
        placed.mesh_rank, shards, (), *_needed_cyclic(v, j, position, shards, placed)
    )


def _index(expr: Expr, target: TensorView) -> int:
    outputs = expr.outputs
    return 0 if outputs[0] is target else next(j for j, t in enumerate(outputs) if t is target)


def _needed(v: View, j: int, position: int) -> MeshPlacement:
    shards = _needed_shards(v, j, position)
    wanted = _logical(v.outputs[j])
    return v.outputs[j][1], Placement(
        wanted.mesh_rank, shards, (), *_needed_cyclic(v, j, position, shards)
    )


def _needed_cyclic(
    v: View, j: int, position: int, shards: tuple, placed: Placement | None = None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The cyclic mesh axes of the operand's needed placement and their blocks: the
    output's, on an axis of the same extent (rows r, r + d, ... of another extent are
    other rows)."""
    wanted = _logical(v.outputs[j]) if placed is None else placed
    if not wanted.cyclic:
        return (), ()
    producer, out = v.inputs[position][0], v.outputs[j][0]
    back = {c: p for p, c in v.amap(position, j).items()}
    keep = [
        a
        for c, axes in enumerate(wanted.shards)
        if set(axes) & set(wanted.cyclic)
        and (p := back.get(c)) is not None
        and shards[p] == axes
        and producer.logical[p].extent == out.logical[c].extent
        for a in axes
        if a in wanted.cyclic
    ]
    keep.sort()
    return tuple(keep), tuple(wanted.block_of(a) for a in keep)


_needed_fact = fact(_needed)


def _needed_shards(
    v: View, j: int, position: int, placed: Placement | None = None
) -> tuple[tuple[int, ...], ...]:
    """needed_placement's shards (no Placement made: non_local_inputs only compares)."""
    producer = v.inputs[position][0]
    wanted = (_logical(v.outputs[j]) if placed is None else placed).shards
    shards: list[tuple[int, ...]] = [()] * producer.n_logical
    if any(wanted):
        back = {c: p for p, c in v.amap(position, j).items()}
        for c, axes in enumerate(wanted):
            p = back.get(c)
            if axes and p is not None and not producer.logical[p].is_broadcast:
                shards[p] = axes
    return tuple(shards)


def _placed_as_needed(v: View, j: int, position: int) -> bool:
    """mesh_placement(operand) == needed_placement(expr, output j, position)."""
    have, wanted = _logical(v.inputs[position]), _logical(v.outputs[j])
    return (
        v.inputs[position][1] == v.outputs[j][1]
        and have.mesh_rank == wanted.mesh_rank
        and not have.partial
        and have.shards == (shards := _needed_shards(v, j, position))
        and (have.cyclic, have.block) == _needed_cyclic(v, j, position, shards)
    )


def forward_placement(expr: Expr, position: int, target: TensorView) -> Placement | None:
    """The placement (on target's logical axes) in which `expr` computes `target` locally
    from operand `position` as it lies: each of the operand's sharded data axes onto the
    data axis of target it maps to (nesting kept); None where one maps to none, to a
    broadcast or reduction axis, or to an axis whose chunks differ (a reshape's)."""
    operand = expr.inputs[position]
    mesh = operand.mesh
    if mesh is None or is_partial(operand):
        return None
    amap = operand_to_output(expr, position, target)
    shards: list[tuple[int, ...]] = [()] * target.domain.n_logical
    data = operand.data_positions()
    placed = layout_facts(operand.domain, mesh.shape).logical
    for li, axes in enumerate(placed.shards):
        if not axes or li not in data:
            continue
        c = amap.get(li)
        if c is None:
            return None
        ax = target.domain.logical[c]
        devices = math.prod(mesh.shape[a] for a in axes)
        extent = operand.domain.logical[li].extent
        if ax.is_broadcast or ax.is_reduction or not chunks_correspond(extent, ax.extent, devices):
            return None
        if set(axes) & set(placed.cyclic) and extent != ax.extent:
            return None  # a cyclic shard's rows r, r + d, ... of another extent
        shards[c] = axes
    return placed.keeping(tuple(shards))


def has_unmapped_sharding(expr: Expr, target: TensorView) -> bool:
    """True if a sharded axis of `target` comes from no input axis that could be
    sharded the same way (e.g. a reshape whose axes the mesh does not divide), unless
    the op makes it from its global coordinates (iota)."""
    if target.mesh is None:
        return False
    v = view(expr)
    j = _index(expr, target)
    return _has_unmapped(v, j) if type(v) is ExprView else _has_unmapped_fact(v, j)


def _has_unmapped(v: View, j: int) -> bool:
    target, mesh = v.outputs[j]
    for c, axes in enumerate(_logical(v.outputs[j]).shards):
        if not axes:
            continue
        devices = math.prod(mesh.shape[a] for a in axes)
        sources = [
            dom.logical[pi]
            for k, (dom, _) in enumerate(v.inputs)
            for pi, ci in v.amap(k, j).items()
            if ci == c
        ]
        if not sources and v.indexed:
            continue  # made at its elements' global coordinates: computed where it lies
        extent = target.logical[c].extent
        if not any(
            ax.is_broadcast or chunks_correspond(ax.extent, extent, devices) for ax in sources
        ):
            return True
    return False


_has_unmapped_fact = fact(_has_unmapped)


def broadcast_sums(expr: Expr) -> list[tuple[TensorView, int, TensorView, int]]:
    """(output, its logical axis, producer, its logical axis) for each device-sharded
    reduction axis of a summing op whose producer axis is a broadcast: every device holds
    the broadcast's row whole (b == bDIDx), so each partial sum would count it once."""
    op = expr.op_def
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
    d = expr.op_def
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
    d = expr.op_def
    if d is not None and d.reads_layouts_only and out is expr.outputs[0]:
        # operand_to_output of a positional op that never permutes blocks: its map
        return positional_map(expr.inputs[position].domain, out.domain)
    axis_map = operand_to_output(expr, position, out)
    if position == 0 and chunk_permutation(expr) is not None:
        axis_map = {**axis_map, expr.inputs[0].data_positions()[0]: 0}
    return axis_map


def moves_data(expr: Expr) -> bool:
    """True for an expression that is a communication of its own, not part of a kernel: a
    resharding Set, or a block permutation (lowered to one CollectivePermute)."""
    if isinstance(expr, LoadStoreOp):
        return is_resharding(expr) or block_permutation(expr) is not None
    d = expr.op_def  # most expressions: an op that never permutes blocks, asked at once
    return d is not None and d.sharding.permutes is not None and block_permutation(expr) is not None


def movement_text(expr: Expr) -> str:
    """`T3 = Set(T2)` or `T3 = take(T2)`: a data movement (moves_data) as messages name it."""
    name = "Set" if isinstance(expr, LoadStoreOp) else expr.op_name
    return f"{expr.output.name} = {name}({expr.inputs[0].name})"


def non_local_inputs(expr: Expr) -> list[TensorView]:
    """The inputs a non-Set expression cannot compute its output from locally (none for
    a block permutation: it is a communication)."""
    if isinstance(expr, LoadStoreOp):
        return []
    v = view(expr)
    if type(v) is ExprView:
        wrong = () if block_permutation(expr) is not None else _non_local(v)
    else:
        wrong = _non_local_fact(v)  # never a block permutation
    if not wrong:  # the common answer: nothing to name
        return []
    return list(dict.fromkeys(expr.inputs[k] for k in wrong))  # a tensor read twice: once


def _non_local(v: View) -> tuple[int, ...]:
    """The operand positions of an expression (not a Set, no block permutation) not
    placed to compute its outputs."""
    positions = range(len(v.inputs))
    outs = range(len(v.outputs))
    if any(v.outputs[j][1] is not None and _has_unmapped(v, j) for j in outs):
        return tuple(positions)
    return tuple(k for k in positions if not all(_placed_as_needed(v, j, k) for j in outs))


_non_local_fact = fact(_non_local)


def propagation_sources(expr: Expr) -> list[int]:
    """The operand positions in the order propagate-shardings copies a sharding from
    (for linear and matmul the weight first)."""
    first = definition_of(expr).sharding.prefer
    n = len(expr.inputs)
    if not first:  # most ops: their operands in order
        return list(range(n))
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


_HALVES = (DType.float16, DType.bfloat16)


def partial_dtype(dtype: DType, op: ReductionOpType | None) -> DType:
    """The dtype partial values of `dtype` combined by `op` are held in: float32 for
    partial sums of a half or bfloat16 tensor (accumulated in float, so that 40000 +
    40000 does not overflow float16's 65504 in one device's partial), rounded to `dtype`
    once, where the Set that completes them stores the value; `dtype` otherwise (a
    partial max is exact in any dtype)."""
    return DType.float32 if dtype in _HALVES and op is ReductionOpType.sum else dtype
