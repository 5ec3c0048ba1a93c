"""propagate-shardings: every tensor gets a mesh and the sharding its producers imply.

Before: users set meshes and DID parallel types on some tensors.
After: every tensor of a fusion that uses a mesh has one. A tensor the user
left unsharded and without a mesh inherits, through the expression's axis map,
the sharding of its first producer sharded on a data axis that stays a data
axis (for linear/matmul the weight is looked at first). Never propagated: DID on broadcast axes (b and bDIDx are the same
sharding, seed 004), DID onto a reduction axis (that is a device reduction,
left to insert-reshardings), and a second axis with a parallel type a tensor
already carries.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.axis_map import producer_to_consumer
from fuserlite.ir.expr import LinearOp, MatmulOp
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.sharding import shardings
from fuserlite.ir.tensor import TensorView
from fuserlite.passes.base import Pass, register
from fuserlite.schedule.shard import shard_axis


def _propagate_meshes(fusion: Fusion) -> None:
    """Forward from producers, backward from consumers, until nothing changes (a
    mesh found going backward can open a new forward path to a sibling)."""
    exprs = fusion.exprs()
    changed = True
    while changed:
        changed = False
        for expr in exprs:
            mesh = next((t.mesh for t in expr.inputs if t.mesh is not None), None)
            for out in expr.outputs:
                if out.mesh is None and mesh is not None:
                    out.mesh = mesh
                    changed = True
        for expr in reversed(exprs):
            mesh = next((t.mesh for t in expr.outputs if t.mesh is not None), None)
            for inp in expr.inputs:
                if inp.mesh is None and mesh is not None:
                    inp.mesh = mesh
                    changed = True


def _candidates(expr) -> list[TensorView]:
    """Producers in order of preference: for linear/matmul the weight first, since
    tensor parallelism keeps weights in place and moves activations."""
    if isinstance(expr, (LinearOp, MatmulOp)):
        return [expr.inputs[1], expr.inputs[0], *expr.inputs[2:]]
    return list(expr.inputs)


def _inherit_sharding(expr, out: TensorView) -> None:
    for producer in _candidates(expr):
        if producer.mesh != out.mesh:
            continue
        axis_map = producer_to_consumer(expr, producer)
        for pt, s in shardings(producer).items():
            if s.is_partial or s.logical_index not in axis_map:
                continue
            target = axis_map[s.logical_index]
            ax = out.domain.logical[target]
            if ax not in out.domain.loop:  # the user scheduled this axis: leave it alone
                continue
            if ax.is_broadcast or ax.is_reduction or pt in out.device_axes():
                continue
            if ax.extent % out.mesh.size:
                continue
            shard_axis(out, target, out.mesh, pt)
            return


@register
@dataclass(frozen=True)
class PropagateShardings(Pass):
    """Give every tensor a mesh and the DID sharding implied by its producers."""

    name = "propagate-shardings"

    def run(self, fusion: Fusion) -> None:
        untouched = {
            id(t)
            for t in fusion.tensors()
            if t.mesh is None and not any(ax.parallel_type.is_device for ax in t.domain.loop)
        }
        _propagate_meshes(fusion)
        for expr in fusion.exprs():
            for out in expr.outputs:
                if id(out) in untouched and out.mesh is not None:
                    _inherit_sharding(expr, out)
