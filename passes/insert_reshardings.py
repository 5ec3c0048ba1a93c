"""insert-reshardings: make every expression local or a single resharding.

Before: tensors have meshes and shardings (propagate-shardings ran).
After: every expression other than a Set reads inputs sharded exactly as its
output needs them (same mesh, the sharded output axis maps to the sharded
input axis), so it computes locally. Where an input differs, a Set to the
needed sharding is inserted before the expression; that Set is the only
place data moves. A reduction over a device-parallel axis becomes a local
partial reduction (output axis rDIDx) followed by a Set to the final sharding
(on the same mesh, or on a one-device mesh: a Reduce to that root). Where the
output itself is partial over mesh axes its input's reduced axes are not sharded on
(the user's rDIDy), the reduction makes those partial values too, from its input
resharded first: a redistribution only ever combines partial values.
An input several expressions need resharded the same way is resharded once.
An expression of one tensor input whose input is sharded and whose output is wanted
otherwise on the same mesh (not merely sliced further) reshards after itself instead (nvFuser's insert
after): it computes in its input's placement and a Set after it moves the output,
where the output is no larger than the input (and, as large, where nothing else reads
the input): y = cast(x, bfloat16) gathers y, half of x's bytes; sum(x, 1) gathers the
sums, not the rows.
An op of several outputs computes once: where its outputs need its inputs placed
differently (sdpa's output on its heads, its logsumexp on its rows), it computes in
the cheapest placement (passes.multi_output) and a Set after each other output
moves it to the sharding its users asked for.
A linear with a bias is one op; where it would write partial sums, the bias
is split off and added once to the completed value (`add(out, bias)` takes
out's place; the op's sharding rule, in fuserlite.ops.contraction). A fusion
output is always a complete value: one the user made partial (rDIDx) is
completed by a Set to its sharding without the partial axis, and that
completed tensor takes its place among the outputs.
Broadcast axes never take part: b and bDIDx are the same sharding (seed 004).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import (
    MeshPlacement,
    completed_placement,
    is_partial,
    logical_placement,
    mesh_placement,
    on_data_axes,
)
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.ops.common import like
from fuserlite.ops.registry import definition_of, operand_to_output
from fuserlite.ops.sharding import (
    forward_placement,
    has_unmapped_sharding,
    moves_data,
    needed_placement,
    non_local_inputs,
    partial_dtype,
    partial_op,
)
from fuserlite.passes import multi_output
from fuserlite.passes.base import Level, Pass, register
from fuserlite.passes.propagate_shardings import meshes_given
from fuserlite.schedule.shard import shard_as
from fuserlite.verify.fusion import LazyNamer, non_local_problems, partial_output_problems


def _device_reduction(expr: Expr, out: TensorView | None = None) -> MeshPlacement | None:
    """The mesh and placement (on its logical axes) of the partial tensor `expr` must write
    into `out` (one of its outputs; None: the first) because it reduces axes its inputs
    shard: the reduced axes carry those mesh axes (rDIDx ...), and on the same mesh also
    the mesh axes `out` itself is partial over, and the output's own data shardings on
    the other mesh axes; None if that is `out`'s own placement."""
    out = expr.output if out is None else out
    dom = out.domain
    if out.mesh is None or len(dom.data_positions()) == dom.n_logical:
        return None  # partial sums need a reduction axis (one that holds no data) to sit on
    partial: dict[int, tuple[int, ...]] = {}  # output reduction axis: mesh axes
    mesh = None
    for k, producer in enumerate(expr.inputs):
        if producer.mesh is None:
            continue
        if producer.mesh != out.mesh and out.mesh.size != 1:
            continue  # partial sums only ever meet on the same mesh or at one root
        amap = operand_to_output(expr, k, out)
        for li, axes in enumerate(logical_placement(producer).shards):
            target = amap.get(li)
            if axes and target is not None and out.domain.logical[target].is_reduction:
                if mesh not in (None, producer.mesh):
                    continue
                partial.setdefault(target, axes)
                mesh = producer.mesh
    if mesh is None:
        return None
    shards = [()] * len(out.domain.logical)
    if mesh == out.mesh:
        _add_own_partials(out, partial)
        used = {a for axes in partial.values() for a in axes}
        for li, axes in enumerate(logical_placement(out).shards):
            if li in out.data_positions() and not used & set(axes):
                shards[li] = axes
    for li, axes in partial.items():
        shards[li] = axes
    wanted = Placement(mesh.rank, tuple(shards))
    return None if (mesh, wanted) == mesh_placement(out) else (mesh, wanted)


def _add_own_partials(out: TensorView, partial: dict[int, tuple[int, ...]]) -> None:
    """Add to `partial` (reduction axis: mesh axes its input shards) the mesh axes `out`
    is partial over that its input does not shard (the user's rDIDy where the input is
    whole or sharded elsewhere on DIDy), nested inside: a partial value is made only by
    the reduction, from its input sliced (or moved) over them, and never by the
    redistribution after it, which can only combine partial values."""
    used = {a for axes in partial.values() for a in axes}
    for li, axes in enumerate(logical_placement(out).shards):
        extra = tuple(a for a in axes if a not in used)
        if extra and out.domain.logical[li].is_reduction:
            partial[li] = partial.get(li, ()) + extra
            used.update(extra)


def _write_instead(expr: Expr, k: int, written: TensorView) -> TensorView:
    """Make output k of `expr` the tensor `written`; a Set copies it to the old output."""
    out = expr.outputs[k]
    expr.outputs = [written if i == k else t for i, t in enumerate(expr.outputs)]
    written.definition = expr
    out.definition = None
    LoadStoreOp(out, written)
    return written


def _split_device_reduction(expr: Expr, k: int) -> TensorView:
    """If `expr` reduces a sharded axis into output k, make it write a partial tensor
    there (of partial_dtype); return the tensor whose sharding the expression computes in."""
    out = expr.outputs[k]
    wanted = _device_reduction(expr, out)
    if wanted is None:
        return out
    dtype = partial_dtype(out.dtype, definition_of(expr).sharding.partial)
    partial = like(out, dtype, keep_reductions=True)
    shard_as(partial, *wanted)
    return _write_instead(expr, k, partial)


def _compute_replicated_then_slice(expr: Expr, k: int) -> TensorView:
    """For an output whose sharded axis maps to no input axis: compute replicated, then slice."""
    replicated = like(expr.outputs[k], keep_reductions=True)
    replicated.set_device_mesh(expr.outputs[k].mesh)
    return _write_instead(expr, k, replicated)


def _resharded(producer: TensorView, wanted: MeshPlacement) -> TensorView:
    """`Set( producer )` to the placement `wanted` (on the logical axes of `producer`)."""
    resharded = like(producer)
    shard_as(resharded, *on_data_axes(producer, wanted))
    LoadStoreOp(resharded, producer)
    return resharded


class _Reshardings:
    """The input reshardings the pass inserts: one Set per producer and placement,
    however many expressions (or operand positions of one: matmul(x, x)) read it; the
    reads are moved onto it together at the end (so that a tensor read by thousands
    costs one pass over its uses)."""

    def __init__(self) -> None:
        self._reads: dict[tuple, tuple[TensorView, TensorView, list[tuple[Expr, int]]]] = {}

    def request(self, expr: Expr, position: int, wanted: MeshPlacement) -> None:
        """Operand `position` of `expr` must be read resharded to `wanted` (on its logical
        axes)."""
        producer = expr.inputs[position]
        key = (id(producer), *wanted)
        if key not in self._reads:
            self._reads[key] = (producer, _resharded(producer, wanted), [])
        self._reads[key][2].append((expr, position))

    def insert(self) -> None:
        """Make every requested operand read its resharded input."""
        for producer, resharded, reads in self._reads.values():
            Expr.replace_reads(producer, resharded, reads)


def _complete_outputs(fusion: Fusion) -> None:
    """Replace every partial fusion output by the Set that completes it (reusing one
    a consumer already needed), in the same output position."""
    new_of: dict[TensorView, TensorView] = {}
    for out in fusion.outputs:
        if not is_partial(out):
            continue
        wanted = completed_placement(out)
        copy = on_data_axes(out, wanted)
        done = [u.output for u in out.uses if isinstance(u, LoadStoreOp)]
        complete = next((t for t in done if mesh_placement(t) == copy), None)
        new_of[out] = complete or _resharded(out, wanted)
    fusion.replace_outputs(new_of)


def _widen_half_partials(fusion: Fusion) -> None:
    """Partial sums the user declared half or bfloat16 (rDIDx on their tensor, or over a
    mesh axis their input does not shard) are written as float32 like the ones this pass
    makes (partial_dtype): the expression writes a float32 copy of the tensor, which
    every reader (the Sets that combine or complete it) reads instead."""
    for expr in fusion.exprs():
        for k, out in enumerate(expr.outputs):
            if not is_partial(out) or partial_dtype(out.dtype, partial_op(out)) is out.dtype:
                continue
            wide = like(out, DType.float32, keep_reductions=True)
            shard_as(wide, *mesh_placement(out))
            Expr.replace_uses(out, wide, list(out.uses))
            expr.outputs = [*expr.outputs[:k], wide, *expr.outputs[k + 1 :]]
            wide.definition = expr
            out.definition = None


def _rewrite_if_partial(expr: Expr, new_of: dict[TensorView, TensorView]) -> list[Expr]:
    """An op whose output would hold partial sums and whose sharding rule rewrites it
    then (linear adds its bias after completing the sums): apply the rewrite, place
    its result as the completed output and, through `new_of`, among the outputs in
    its place. Returns the new expressions, to make local in turn."""
    rule = definition_of(expr).sharding.when_partial
    if rule is None or not (is_partial(expr.output) or _device_reduction(expr)):
        return []
    rewrite = rule(expr)
    if rewrite is None:
        return []
    new_of[rewrite.replaced] = rewrite.result
    shard_as(rewrite.result, *on_data_axes(rewrite.replaced, completed_placement(rewrite.replaced)))
    # Each new intermediate tensor is placed as the new expression reading it needs it.
    for k in range(len(rewrite.exprs) - 2, -1, -1):
        made = rewrite.exprs[k].output
        reader, at = next(
            (e, i) for e in rewrite.exprs[k + 1 :] for i, t in enumerate(e.inputs) if t is made
        )
        shard_as(made, *needed_placement(reader, reader.output, at))
    return rewrite.exprs


def _compute_in(expr: Expr, k: int, user: TensorView, computed: MeshPlacement) -> None:
    """Make `expr` compute output k placed `computed`, a Set copying it to `user` (the
    output its users read) where that lies otherwise; a tensor written for `user` before
    (partial, or replicated) is dropped with its Set."""
    if mesh_placement(expr.outputs[k]) == computed:
        return
    before = expr.outputs[k]
    if before is not user:
        user.definition.detach()  # Set(user, before)
        before.definition = None
        expr.outputs = [user if i == k else t for i, t in enumerate(expr.outputs)]
        user.definition = expr
    if mesh_placement(user) != computed:
        written = like(user, keep_reductions=True)
        shard_as(written, *computed)
        _write_instead(expr, k, written)


def _compute_then_reshard(expr: Expr) -> bool:
    """nvFuser's insert-after for an expression of one tensor input: where that input is
    sharded and the output is wanted otherwise (not merely sliced further), compute the
    output in the input's placement and reshard the output after it (a Set after the
    expression), not the input before it, when the output is no larger: each device
    computes only its shard, and a reduction or a narrowing cast moves fewer bytes. An
    output as large as the input reshards after only where nothing else reads the input
    (one Set of the input before serves every reader alike). Returns True if it did."""
    if len(expr.inputs) != 1 or len(expr.outputs) != 1 or moves_data(expr):
        return False
    x, out = expr.input, expr.output
    if x.mesh is None or out.mesh != x.mesh or is_partial(out):
        return False  # on another mesh, the user chose where it computes
    if out.nbytes > x.nbytes or (out.nbytes == x.nbytes and len(x.uses) > 1):
        return False
    computed = forward_placement(expr, 0, out)
    if computed is None or not any(computed.shards):
        return False  # the input is whole (or cannot be followed): slice it first
    wanted = mesh_placement(out)[1]
    sliced_further = all(
        set(have) <= set(want) and want[: len(have)] == have
        for have, want in zip(computed.shards, wanted.shards)
    )
    if sliced_further:
        return False  # slicing the input first computes less, and moves nothing
    _compute_in(expr, 0, out, (x.mesh, computed))
    return True


def _make_local(expr: Expr, reshardings: _Reshardings) -> None:
    """Make `expr` compute from local shards: partial outputs, or (requested from
    `reshardings`) its inputs resharded. Where the outputs of an op need its inputs
    placed differently, it computes in the cheapest placement (passes.multi_output)
    and reshards each output placed otherwise after it. Each operand position is
    placed as its role needs it (matmul(x, x) may read x resharded as `b` only)."""
    if _device_reduction(expr) is None:
        if not non_local_inputs(expr):
            # Local already (its inputs placed as its outputs need them, no axis unmapped):
            # nothing to reshard before it, and computing in its input's placement is
            # computing where its output lies, so nothing after it either.
            return
        if _compute_then_reshard(expr):
            return
    users = list(expr.outputs)
    for k in range(len(expr.outputs)):
        target = _split_device_reduction(expr, k)
        if has_unmapped_sharding(expr, target):
            _compute_replicated_then_slice(expr, k)
    if len(expr.outputs) > 1 and multi_output.differs(expr):
        chosen = multi_output.choose(expr, users)
        for k, computed in enumerate(chosen.computed):
            _compute_in(expr, k, users[k], computed)
        needs = chosen.needs
    else:
        needs = tuple(needed_placement(expr, expr.output, p) for p in range(len(expr.inputs)))
    for position, producer in enumerate(expr.inputs):
        if mesh_placement(producer) != needs[position]:
            reshardings.request(expr, position, needs[position])


@register
@dataclass(frozen=True)
class InsertReshardings(Pass):
    """Insert a Set wherever an expression's inputs are sharded unlike its output."""

    name: ClassVar[str] = "insert-reshardings"
    level: ClassVar[Level] = Level.fusion

    def requires(self, fusion: Fusion) -> list[str]:
        return [f"{p}; run propagate-shardings first" for p in meshes_given(fusion)]

    def ensures(self, fusion: Fusion) -> list[str]:
        computed = [e for e in fusion.exprs() if not isinstance(e, LoadStoreOp)]
        return [
            *non_local_problems(computed, "insert a Set before it"),
            *partial_output_problems(fusion.outputs, LazyNamer(fusion)),
        ]

    def run(self, fusion: Fusion) -> None:
        new_of: dict[TensorView, TensorView] = {}  # outputs to replace
        reshardings = _Reshardings()
        for expr in fusion.exprs():
            if isinstance(expr, LoadStoreOp) or moves_data(expr):
                continue  # a Set, or a take that permutes blocks: the data movements
            after = _rewrite_if_partial(expr, new_of)
            for e in [expr, *after]:
                _make_local(e, reshardings)
        reshardings.insert()
        fusion.replace_outputs(new_of)
        _complete_outputs(fusion)
        _widen_half_partials(fusion)
