"""propagate-shardings: every tensor gets a mesh and the sharding its producers imply.

Before: users set meshes and DID parallel types on some tensors.
After: every tensor connected through expressions to a tensor with a mesh has one
(`meshes_given`, the pass's `ensures`). A tensor the user
left unsharded and without a mesh inherits, through the expression's axis map,
on each mesh axis the sharding of its first producer sharded there on a data
axis that stays a data axis (for linear/matmul the weight is looked at first),
with a tensor axis split over several mesh axes kept nested in the same order. Never propagated: DID on broadcast axes (b and bDIDx are the same
sharding, seed 004), DID onto a reduction axis (that is a device reduction,
left to insert-reshardings), and a second axis with a parallel type a tensor
already carries. A take of whole chunks of its input's sharded axis 0 keeps that
sharding too (its chunks only change devices: a block permutation, lowered to one
CollectivePermute).
Then backward (nvFuser's propagation from consumers): a tensor computed by a pointwise
op (random draws and iota included) that is no fusion input, that the user left
unsharded and its producers too, takes the sharding its readers'
outputs imply (through the inverse of their axis maps, by the same rules) where they
all imply one (a reader that needs it whole keeps it whole), in reverse order so that
it flows up a chain; a Set the user placed otherwise is not followed (it says where
the tensor is wanted).
So an intermediate is computed on the shards its reader needs (its whole inputs
sliced, for nothing) rather than whole and sliced after, and a random draw of a shape
(`fl.rand`, `fl.uniform(shape)`), made from nothing, draws only each device's shard.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.errors import LoweringError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import layout_facts, sharding_problem
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.values import fact
from fuserlite.ops.registry import is_pointwise, operand_to_output, positional_map
from fuserlite.ops.sharding import (
    chunks_correspond,
    moves_data,
    propagation_axis_map,
    propagation_sources,
)
from fuserlite.passes.base import Level, Pass, register
from fuserlite.schedule.shard import shard_as
from fuserlite.verify.fusion import located


def _sweep(exprs: list[Expr], todo: list[int] | None, forward: bool, next_of) -> list[TensorView]:
    """One sweep in (reverse) topological order over the expressions at positions `todo`
    (None: all of them) and those `next_of(tensor)` adds when a tensor gets a mesh:
    each gives its outputs (its inputs, going backward) without a mesh the first mesh
    on the other side. Returns the tensors that got one."""
    changed: list[TensorView] = []

    def visit(expr: Expr) -> list[TensorView]:
        source, dest = (expr.inputs, expr.outputs) if forward else (expr.outputs, expr.inputs)
        for t in source:  # loops, not generators: one visit per expression
            mesh = t.mesh
            if mesh is not None:
                break
        else:
            return []
        got = []
        for t in dest:
            if t.mesh is None:
                t.mesh = mesh
                got.append(t)
        changed.extend(got)
        return got

    if todo is None:  # every expression, in order: what a tensor's mesh opens comes later
        for expr in exprs if forward else reversed(exprs):
            visit(expr)
        return changed
    sign = 1 if forward else -1
    heap = [sign * k for k in set(todo)]
    heapq.heapify(heap)
    done: set[int] = set()
    while heap:
        k = sign * heapq.heappop(heap)
        if k not in done:
            done.add(k)
            for t in visit(exprs[k]):
                for j in next_of(t):
                    heapq.heappush(heap, sign * j)
    return changed


def _propagate_meshes(exprs: list[Expr], missing: int) -> None:
    """Forward from producers, backward from consumers, until nothing changes (a
    mesh found going backward can open a new forward path to a sibling). After the
    first two, a sweep visits only the expressions next to a tensor that got a mesh
    since: the result of repeated full sweeps, with each tensor changed once.
    `missing`: how many tensors have no mesh; once that many got one, none is left."""
    if len(_sweep(exprs, None, True, None)) == missing:
        return  # the common case: meshes flow from the inputs to every tensor
    readers: dict[int, list[int]] = {}
    writer: dict[int, list[int]] = {}
    for k, e in enumerate(exprs):
        for t in e.inputs:
            readers.setdefault(id(t), []).append(k)
        for t in e.outputs:
            writer.setdefault(id(t), []).append(k)

    def reading(t: TensorView) -> list[int]:
        return readers.get(id(t), [])

    def writing(t: TensorView) -> list[int]:
        return writer.get(id(t), [])

    got = _sweep(exprs, None, False, writing)
    while got:
        got = _sweep(exprs, [k for t in got for k in reading(t)], True, reading)
        got = _sweep(exprs, [k for t in got for k in writing(t)], False, writing)


def _inherit_sharding(expr: Expr, out: TensorView) -> None:
    """Give `out`, on each mesh axis, the sharding of its first producer sharded there on a
    data axis that maps to a data axis of out (nesting kept)."""
    d = expr.op_def
    if d is not None and d.reads_layouts_only and out is expr.outputs[0]:
        # A positional op's axis maps are its layouts' (propagation_axis_map): what out
        # inherits is a fact of the layouts alone, worked out once for a chain of them.
        inputs = expr.inputs
        if len(inputs) == 1:  # a unary op or a scalar's: its one operand (a chain's steps)
            layouts = ((inputs[0].domain, inputs[0].mesh),)
        else:
            layouts = tuple([(inputs[k].domain, inputs[k].mesh) for k in propagation_sources(expr)])
        _place(out, _inherited_positional(out.domain, out.mesh, layouts))
        return
    sources = [
        (expr.inputs[k], propagation_axis_map(expr, k, out)) for k in propagation_sources(expr)
    ]
    _place(out, _inherited(out, sources))


@fact
def _inherited_positional(
    dom: TensorDomain, mesh: DeviceMesh | None, layouts: tuple[tuple[TensorDomain, object], ...]
) -> Placement | None:
    """_inherited of a tensor laid out so from operands of these layouts (domain, mesh),
    each mapped positionally."""
    sources = [(d, m, positional_map(d, dom)) for d, m in layouts]
    return _inherited_of(dom, mesh, sources)


def _inherit_backward(tv: TensorView) -> None:
    """Give `tv` (no fusion input, left unsharded by the user and by its producers) the
    sharding its readers' outputs imply through their axis maps, where they all imply the
    same one: nvFuser's backward propagation, so that tv is computed sharded as its
    readers need it, not computed whole and sliced (a random draw of a shape draws only
    its own shard). Readers that differ (one wants tv whole) leave it whole: a reshard
    of its readers' own would cost what computing it whole saves."""
    if not is_pointwise(tv.definition):
        return  # a reduction's, a view's or an op of several outputs: computed as it lies
    implied = set()
    for use in tv.uses:
        if moves_data(use):
            continue  # a Set the user placed otherwise says where tv is wanted: whole
        for k, operand in enumerate(use.inputs):
            if operand is not tv:
                continue
            for out in use.outputs:
                forward = operand_to_output(use, k, out)
                implied.add(_inherited(tv, [(out, {c: p for p, c in forward.items()})]))
    if len(implied) == 1:
        _place(tv, implied.pop())


def _place(tv: TensorView, placed: Placement | None) -> None:
    if placed is not None:
        shard_as(tv, tv.mesh, placed)


def _inherited(
    tv: TensorView, sources: list[tuple[TensorView, Mapping[int, int]]]
) -> Placement | None:
    """The placement `tv` inherits from `sources` (a tensor and a map of its logical axes
    onto tv's): on each mesh axis, the sharding of the first source on tv's mesh sharded
    there on a data axis that maps to a data axis of tv (nesting kept); never onto a
    broadcast or reduction axis, an axis the user scheduled, or a second axis per mesh
    axis. None where none is."""
    return _inherited_of(tv.domain, tv.mesh, [(s.domain, s.mesh, amap) for s, amap in sources])


def _inherited_of(
    dom: TensorDomain,
    mesh: DeviceMesh | None,
    sources: list[tuple[TensorDomain, DeviceMesh | None, Mapping[int, int]]],
) -> Placement | None:
    """_inherited of a tensor of domain `dom` on `mesh` from sources given by their domain,
    mesh and axis map."""
    logical, loop = dom.logical, dom.loop_positions
    shards = [()] * len(logical)
    used: set[int] = set()
    cyclic: dict[int, int] = {}  # cyclic mesh axis -> its block
    for source_dom, source_mesh, axis_map in sources:
        if source_mesh != mesh:
            continue
        placed = _logical(source_dom, source_mesh)  # read once per source
        data = source_dom.data_positions()
        source_logical = source_dom.logical
        for li, axes in enumerate(placed.shards):
            target = axis_map.get(li)
            if not axes or li not in data or target is None or shards[target]:
                continue
            ax = logical[target]
            if target not in loop:  # the user scheduled this axis
                continue
            if ax.is_broadcast or ax.is_reduction or used & set(axes):
                continue
            devices = math.prod(mesh.shape[a] for a in axes)
            strided = set(axes) & set(placed.cyclic) if placed.cyclic else ()
            extent = source_logical[li].extent
            if strided and extent != ax.extent:
                continue  # a cyclic shard's rows are those of an axis of its extent
            if not chunks_correspond(extent, ax.extent, devices):
                continue  # a reshape's axes of other extents: their chunks differ
            shards[target] = axes
            used |= set(axes)
            cyclic.update((a, placed.block_of(a)) for a in strided)
    if not used:
        return None
    axes = tuple(sorted(cyclic)) if cyclic else ()
    shards_t, block = tuple(shards), tuple(cyclic[a] for a in axes)
    if len(sources) == 1:  # one source placed the same (a pointwise op's): its value
        have = _logical(sources[0][0], sources[0][1])
        if (have.shards, have.partial, have.cyclic, have.block) == (shards_t, (), axes, block):
            return have
    return Placement(mesh.rank, shards_t, (), axes, block)


def _logical(dom: TensorDomain, mesh: DeviceMesh | None) -> Placement:
    """logical_placement of a tensor of this domain on this mesh."""
    return layout_facts(dom, None if mesh is None else mesh.shape).logical


def _check_inherited(tv: TensorView) -> None:
    """A tensor the user sharded without a mesh must fit the mesh it inherits."""
    dom = tv.domain
    for pos, p in enumerate(dom.loop_positions):
        ax = dom.axes[p]
        why = sharding_problem(dom, tv.mesh, p) if ax.parallel_type.is_device else None
        if why is not None:
            raise LoweringError(
                located(
                    tv,
                    f"{tv.name} axis {pos} is {ax.parallel_type.name}, but {tv.name} has no "
                    f"mesh: it inherits {tv.mesh} from the tensors next to it, where {why}; "
                    f"or give {tv.name} a mesh of its own (set_device_mesh)",
                )
            )


def _sharded(tv: TensorView) -> bool:
    return _sharded_domain(tv.domain)


@fact
def _sharded_domain(dom: TensorDomain) -> bool:
    return any(ax.is_device_parallel for ax in dom.loop)


def meshes_given(fusion: Fusion) -> list[str]:
    """Every expression's tensors all have a mesh or all have none: a mesh reaches every
    tensor connected to one (a part of the fusion with no mesh anywhere keeps none)."""
    problems = []
    for e in fusion.exprs():
        with_mesh = without = False  # loops: two contracts ask this of every expression
        for group in (e.inputs, e.outputs):
            for t in group:
                if t.mesh is None:
                    without = True
                else:
                    with_mesh = True
        if without and with_mesh:
            missing = [t.name for t in (*e.inputs, *e.outputs) if t.mesh is None]
            problems.append(
                f"{e.output.name} = {e.op_name}(...) mixes tensors with and without a device "
                f"mesh: {', '.join(missing)} has none"
            )
    return problems


@register
@dataclass(frozen=True)
class PropagateShardings(Pass):
    """Give every tensor a mesh and the DID sharding implied by its producers."""

    name: ClassVar[str] = "propagate-shardings"
    level: ClassVar[Level] = Level.fusion

    def ensures(self, fusion: Fusion) -> list[str]:
        return meshes_given(fusion)

    def run(self, fusion: Fusion) -> None:
        exprs = fusion.exprs()
        untouched: set[int] = set()  # no mesh and no sharding: they inherit one
        sharded = []  # sharded without a mesh: they must fit the mesh they inherit
        for t in fusion.tensors(exprs):
            if t.mesh is None:
                if _sharded(t):
                    sharded.append(t)
                else:
                    untouched.add(id(t))
        _propagate_meshes(exprs, len(untouched) + len(sharded))
        for t in sharded:
            _check_inherited(t)
        for expr in exprs:
            for out in expr.outputs:
                if id(out) in untouched and out.mesh is not None:
                    _inherit_sharding(expr, out)
        # Backward: a tensor its producers leave whole that its readers shard.
        inputs = {id(t) for t in fusion.inputs}
        for expr in reversed(exprs):
            for out in expr.outputs:
                whole = id(out) in untouched and out.mesh is not None and not _sharded(out)
                if whole and id(out) not in inputs:
                    _inherit_backward(out)
