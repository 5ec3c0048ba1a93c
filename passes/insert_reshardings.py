"""insert-reshardings: make every expression local or a single resharding.

Before: tensors have meshes and shardings (propagate-shardings ran).
After: every expression other than a Set reads inputs sharded exactly as its
output needs them (same mesh, the sharded output axis maps to the sharded
input axis), so it computes locally. Where an input differs, a Set to the
needed sharding is inserted before the expression; that Set is the only
place data moves. A reduction over a device-parallel axis becomes a local
partial reduction (output axis rDIDx) followed by a Set to the final sharding
(on the same mesh, or on a one-device mesh: a Reduce to that root).
A fusion output is always a complete value: one the user made partial (rDIDx)
is completed by a Set to its sharding without the partial axis, and that
completed tensor takes its place among the outputs.
Broadcast axes never take part: b and bDIDx are the same sharding (seed 004).
"""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.axis_map import producer_to_consumer
from fuserlite.ir.communication import Communication
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import (
    Placement,
    completed_placement,
    has_unmapped_sharding,
    is_partial,
    needed_placement,
    placement,
    shardings,
)
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ops import like
from fuserlite.passes.base import Pass, register
from fuserlite.schedule.shard import shard_axis


def _shard(tv: TensorView, mesh: DeviceMesh | None, axes: dict[ParallelType, int]) -> None:
    if mesh is not None:
        tv.set_device_mesh(mesh)
    for pt, li in axes.items():
        shard_axis(tv, li, mesh, pt)


def _split_device_reduction(expr: Expr, fusion: Fusion) -> TensorView:
    """If `expr` reduces a sharded axis, make it write a partial tensor; return the
    tensor whose sharding the expression computes in."""
    out = expr.output
    partial_axes: dict[ParallelType, int] = {}
    mesh = None
    for producer in expr.inputs:
        if producer.mesh is None or out.mesh is None:
            continue
        if producer.mesh != out.mesh and out.mesh.size != 1:
            continue  # partial sums only ever meet on the same mesh or at one root
        amap = producer_to_consumer(expr, producer)
        for pt, s in shardings(producer).items():
            target = amap.get(s.logical_index)
            if target is not None and out.domain.logical[target].is_reduction:
                partial_axes.setdefault(pt, target)
                mesh = mesh or producer.mesh
    already = {pt for pt, s in shardings(out).items() if s.is_partial}
    partial_axes = {pt: li for pt, li in partial_axes.items() if pt not in already}
    if not partial_axes:
        return out
    partial = like(out, keep_reductions=True)
    _shard(partial, mesh, partial_axes)
    expr.outputs = [partial]
    partial.definition = expr
    out.definition = None
    LoadStoreOp(out, partial)
    return partial


def _compute_replicated_then_slice(expr: Expr, fusion: Fusion) -> TensorView:
    """For outputs whose sharded axis maps to no input axis: compute replicated, then slice."""
    out = expr.output
    replicated = like(out, keep_reductions=True)
    replicated.set_device_mesh(out.mesh)
    expr.outputs = [replicated]
    replicated.definition = expr
    out.definition = None
    LoadStoreOp(out, replicated)
    return replicated


def _on_data_axes(tv: TensorView, wanted: Placement) -> Placement:
    """A placement given on tv's logical axes, on its data axes instead (the logical
    axes of a copy of tv, which has no reduction axes)."""
    mesh, axes = wanted
    data = tv.data_positions()
    return mesh, {pt: data.index(li) for pt, li in axes.items()}


def _resharded(producer: TensorView, wanted: Placement) -> TensorView:
    """`Set( producer )` to the placement `wanted` (on the logical axes of `producer`)."""
    resharded = like(producer)
    _shard(resharded, *_on_data_axes(producer, wanted))
    LoadStoreOp(resharded, producer)
    return resharded


def _reshard_input(expr: Expr, producer: TensorView, wanted: Placement) -> None:
    expr.replace_input(producer, _resharded(producer, wanted))


def _complete_outputs(fusion: Fusion) -> None:
    """Replace every partial fusion output by the Set that completes it (reusing one
    a consumer already needed), in the same output position."""
    for out in list(fusion.outputs):
        if not is_partial(out):
            continue
        wanted = completed_placement(out)
        copy = _on_data_axes(out, wanted)
        done = [u.output for u in out.uses if isinstance(u, LoadStoreOp)]
        complete = next((t for t in done if placement(t) == copy), None)
        fusion.replace_output(out, complete or _resharded(out, wanted))


@register
@dataclass(frozen=True)
class InsertReshardings(Pass):
    """Insert a Set wherever an expression's inputs are sharded unlike its output."""

    name = "insert-reshardings"

    def run(self, fusion: Fusion) -> None:
        for expr in fusion.exprs():
            if isinstance(expr, (LoadStoreOp, Communication)):
                continue
            target = _split_device_reduction(expr, fusion)
            if has_unmapped_sharding(expr, target):
                target = _compute_replicated_then_slice(expr, fusion)
            needed = [needed_placement(expr, target, p) for p in expr.inputs]
            for producer, wanted in zip(list(expr.inputs), needed):
                if producer in expr.inputs and placement(producer) != wanted:
                    _reshard_input(expr, producer, wanted)
        _complete_outputs(fusion)
