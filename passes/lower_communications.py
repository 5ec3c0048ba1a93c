"""lower-communications: every resharding Set becomes the communications of its plan.

Before: a Program (segment ran); resharding Sets sit between kernels.
After: each of them is a sequence of Communications, recorded per resharding
in `program.reshardings` (with the plan and its cheapest rejected alternative).

- On one mesh, the redistribution planner (fuserlite.plan.search) plans the
  move from the input's placement to the output's: the cheapest sequence of
  collectives over the teams of groups of mesh axes (or local slices), cost being
  bytes plus `latency_bytes` per collective (plan.cost; `latency_bytes=0`: bytes
  alone), one
  Communication per step, with an intermediate tensor between two steps. On a
  1-D mesh every plan is one step, the rows of docs/design.md §5. The output may
  stay partial over some of the input's partial mesh axes (a reduction sharded over
  fewer mesh axes than its input is completed in stages): each collective combines
  in the op of the values it reads (program.partials.partial_op_of), the reduction's.
- Between two meshes, a move in the forms of the 1-D table (one device to many:
  Broadcast/Scatter; many to one: Gather/Reduce; equal meshes with one sharding:
  SendRecv) keeps that form; any other is planned over boxes
  (fuserlite.plan.cross_mesh): each destination device receives exactly what it
  lacks, and the Communication records the transfers. Only a move whose data
  cannot exist (a partial destination, a part no source holds) is a LoweringError,
  saying why.

A take of whole chunks of a sharded axis, its input and output placed alike (a
block permutation: the take's sharding rule, `Sharding.permutes`), is one
CollectivePermute: the point-to-point transfers of plan.permute, each device
sending its block to the device it is the source of (no Allgather).

A reduction of partial sums whose only use is to be sliced again is one
ReduceScatter, not an Allreduce and a slice.

A reduction (sum, max, min) whose every reduced axis is sharded over mesh axes with
one row on each device computes nothing in its partial-reduction kernel (each device
would copy its row): it is lowered to its collective alone (Allreduce, Reduce onto
one device, ReduceScatter), which reads the reduction's input and reduces those axes
itself (`reduces=(0)` on its printed line), as nvFuser lowers it. Where a device holds
more rows of a reduced axis (an outer split leaving k > 1), a reduced axis is not
sharded, a device holds no row (an axis its mesh does not divide), the partial values
would be held in another dtype than the input's (sums of float16 and bfloat16
accumulate in float32: insert-reshardings' partial_dtype; sums of narrower integers and
bools are int64), or a host loop runs it in Stream chunks, the kernel stays before the
collective. On an axis its mesh does not divide,
each collective moves its chunks padded or variable-size (`chunks=`, by default
the one that sends fewer bytes: passes/chunking.py); the choice is printed
(`chunks=padded`) with its bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.errors import LoweringError, PassOptionError, RedistributionError
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import (
    describe_sharding,
    is_partial,
    is_resharding,
    is_uneven,
    local_nbytes,
    local_shape,
    logical_placement,
    placement,
    sharded_data_axis,
)
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.common import like
from fuserlite.ops.reductions import is_reduction, reduced_axes
from fuserlite.ops.sharding import block_permutation, movement_text, moves_data
from fuserlite.passes.base import Level, Pass, register
from fuserlite.passes.chunking import Chunks, sized
from fuserlite.passes.reorder_sharded_axis import device_axis_outermost
from fuserlite.plan import StepKind
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES, check_latency
from fuserlite.plan.search import PlannedStep
from fuserlite.program.communication import (
    CommKind,
    Communication,
    Sizing,
    as_reduced,
    input_placement,
    permuted,
    planned_move,
    reduces_problem,
)
from fuserlite.program.partials import partial_op_of
from fuserlite.program.program import Kernel, Program, Resharding, Step, unlowered_steps
from fuserlite.program.reshardings import Planners
from fuserlite.program.reshardings import needed_by as needed_by_of
from fuserlite.schedule.shard import shard_as


@dataclass(frozen=True)
class TableMove:
    """A move between two 1-D meshes in one of the forms of docs/design.md §5."""

    kind: CommKind
    team: tuple[int, ...]
    root: int | None
    bytes_per_device: int


def table_move(inp: TensorView, out: TensorView) -> TableMove | None:
    """The 1-D table's communication for a Set between two meshes, or None."""
    mi, mo = inp.mesh, out.mesh
    if mi.rank > 1 or mo.rank > 1:
        return None
    a_in, a_out = sharded_data_axis(inp), sharded_data_axis(out)
    partial = is_partial(inp)
    b_in = inp.nbytes
    b_out = out.nbytes // out.dtype.itemsize * inp.dtype.itemsize  # in the dtype that moves
    # Equal meshes with one sharding are sent device to device; from {0} to {1} too (one
    # sender and one receiver: a SendRecv, as nvFuser lowers it, not a 2-device Broadcast).
    if mi.size == mo.size and not partial and a_in == a_out:
        team = tuple(dict.fromkeys(mi.devices + mo.devices))
        per = b_in // mi.size if a_in is not None else b_in
        return TableMove(CommKind.SendRecv, team, None, per)
    if mi.size == 1 and not partial:
        root = mi.devices[0]
        team = mo.devices if root in mo else (root, *mo.devices)
        if a_out is None:
            return TableMove(CommKind.Broadcast, team, root, b_in)
        kept = b_in // mo.size if root in mo else 0  # a root inside the mesh keeps its chunk
        return TableMove(CommKind.Scatter, team, root, b_in - kept)
    if mo.size == 1 and a_out is None:
        root = mo.devices[0]
        team = mi.devices if root in mi else (*mi.devices, root)
        # Every sender but a root inside the source mesh sends its part.
        if partial:
            return TableMove(CommKind.Reduce, team, root, b_out)
        if a_in is not None:
            return TableMove(CommKind.Gather, team, root, b_in // mi.size)
    return None


class _Lowering:
    """Lowers the resharding Sets of one program; plans one tensor shape on one mesh once."""

    def __init__(
        self,
        program: Program,
        chunks: Chunks = "cheaper",
        latency_bytes: int = DEFAULT_LATENCY_BYTES,
    ) -> None:
        self.program = program
        self.chunks = chunks
        self.planners = Planners(latency_bytes)

    def lower(self, expr: Expr) -> list[Communication]:
        """Replace one resharding Set (or block permutation) by its Communications."""
        inp, out = expr.input, expr.output
        if inp.mesh is None or out.mesh is None:
            raise LoweringError(
                f"cannot lower a Set between {inp.name} and {out.name}: both need a mesh"
            )
        needed_by = needed_by_of(out, self.program)
        sources = block_permutation(expr)
        try:
            if sources is not None:
                record = self._permute(expr, sources)
            elif inp.mesh == out.mesh:
                record = self._same_mesh(expr)
            else:
                record = self._between_meshes(expr)
        except RedistributionError as exc:
            raise LoweringError(
                f"cannot lower {movement_text(expr)}, needed by {needed_by}: from "
                f"{describe_sharding(inp)} to {describe_sharding(out)}: {exc}"
            ) from None
        record.needed_by = needed_by
        record.latency_bytes = self.planners.latency_bytes
        self.program.reshardings.append(record)
        return record.communications

    def _same_mesh(self, expr: LoadStoreOp) -> Resharding:
        inp, out = expr.input, expr.output
        if placement(inp).cyclic:
            return self._strided_allgather(expr)
        plan = self.planners.plan(inp, out)
        op = partial_op_of(inp) if is_partial(inp) else None
        expr.detach()
        comms, current = [], inp
        for k, planned in enumerate(plan.steps):
            last = k == len(plan.steps) - 1
            nxt = out if last else _intermediate(inp, planned.after)
            comms.append(_step_communication(planned, nxt, current, op, self.chunks))
            current = nxt
        return Resharding(inp, out, "", comms, plan=plan)

    def _strided_allgather(self, expr: LoadStoreOp) -> Resharding:
        """A cyclic shard gathered along its mesh axis: one Allgather of every device's
        rows padded to ceil(n/d), interleaved (runtime.dispatch), whole, or in each
        chunk of the outer mesh axes (which then hold blocks: Placement.gathered; even
        only); any other move of it is refused (the planner's RedistributionError)."""
        inp, out = expr.input, expr.output
        before, after = placement(inp), placement(out)
        t = before.cyclic_axis()
        *outer, a = before.shards[t]
        d, n = inp.mesh.shape[a], local_shape(out)[t]  # the rows of the outer axes' chunk
        whole = inp.domain.logical[inp.data_positions()[t]].extent
        even = whole % (math.prod(inp.mesh.shape[o] for o in outer) * d) == 0
        if after != before.gathered() or (outer and not even):
            self.planners.plan(inp, out)  # raises: no plan moves a cyclic shard otherwise
            raise AssertionError("a cyclic shard planned")  # pragma: no cover
        rows = -(-n // d)
        per_row = local_nbytes(inp) // rows if rows else 0
        expr.detach()
        comm = Communication(
            CommKind.Allgather,
            out,
            inp,
            inp.mesh.devices,
            in_axis=t,
            bytes_per_device=(d - 1) * rows * per_row,
            mesh=inp.mesh,
            group=(a,),
            before=before,
            after=after,
            axes=(t,),
            # padded where any axis is uneven (another mesh axis's too): the verifier's rule
            sizing=Sizing.padded if n % d or is_uneven(inp) else Sizing.even,
        )
        return Resharding(inp, out, "", [comm])

    def _permute(self, expr: Expr, sources: tuple[int, ...]) -> Resharding:
        """A take of whole chunks of axis 0: one CollectivePermute, the point-to-point
        transfers plan.permute plans (each device sends its block to the devices whose
        source it is)."""
        inp, out = expr.input, expr.output
        move = permuted(inp, 0, sources)[0]
        expr.detach()
        p = placement(inp)
        comm = Communication(
            CommKind.CollectivePermute,
            out,
            inp,
            inp.mesh.devices,
            sources=sources,
            in_axis=0,  # the axis whose blocks it permutes
            bytes_per_device=max(move.sent().values(), default=0),
            mesh=inp.mesh,
            group=p.shards[0],
            before=p,
            after=placement(out),
            axes=(0,),
            transfers=move.transfers,
        )
        return Resharding(inp, out, "", [comm], move=move)

    def _between_meshes(self, expr: LoadStoreOp) -> Resharding:
        inp, out = expr.input, expr.output
        mi, mo = inp.mesh, out.mesh
        move = planned_move(inp, out)
        table = table_move(inp, out)
        reducing = is_partial(inp)
        expr.detach()
        if table is not None:
            sizing, nbytes = sized(table.kind, inp, out, table.bytes_per_device, self.chunks)
            comm = Communication(
                table.kind,
                out,
                inp,
                table.team,
                root=table.root,
                op=partial_op_of(inp) if table.kind.is_allreduce_class else None,
                in_axis=sharded_data_axis(inp),
                out_axis=sharded_data_axis(out),
                bytes_per_device=nbytes,
                before=placement(inp),
                after=placement(out),
                sizing=sizing,
            )
        else:
            kind = CommKind.SendRecv if move.kind is None else move.kind
            sent = move.sent()
            comm = Communication(
                kind,
                out,
                inp,
                tuple(dict.fromkeys(mi.devices + mo.devices)),
                root=move.roots[0] if len(move.roots) == 1 else None,
                op=partial_op_of(inp) if reducing else None,
                bytes_per_device=max(sent.values(), default=0),
                before=placement(inp),
                after=placement(out),
                transfers=move.transfers,
            )
        return Resharding(inp, out, "", [comm], move=move)


def _intermediate(inp: TensorView, after: Placement) -> TensorView:
    """A new tensor like `inp` with placement `after` (partial mesh axes on the reduction
    axes that carried them in `inp`), its device axes outermost in its allocation."""
    keep = not after.is_complete
    t = like(inp, keep_reductions=keep)
    data = inp.data_positions() if keep else list(range(len(after.shards)))
    shards: list[tuple[int, ...]] = [()] * len(t.domain.logical)
    for k, axes in zip(data, after.shards):
        shards[k] = axes
    if keep:
        for li, axes in enumerate(logical_placement(inp).shards):
            if li not in data:
                shards[li] = tuple(a for a in axes if a in after.partial)
    shard_as(t, inp.mesh, Placement(after.mesh_rank, tuple(shards)))
    device_axis_outermost(t)
    return t


_AXES = {
    StepKind.LocalSlice: lambda s: (None, s.axis),
    StepKind.Allgather: lambda s: (s.axis, None),
    StepKind.AllToAll: lambda s: (s.axis, s.to_axis),
    StepKind.Allreduce: lambda s: (None, None),
    StepKind.ReduceScatter: lambda s: (None, s.axis),
}


def _step_communication(
    planned: PlannedStep, out: TensorView, inp: TensorView, op, chunks: Chunks = "cheaper"
) -> Communication:
    """One step of a plan as a Communication from `inp` to `out` (over uneven chunks,
    padded or variable-size as `chunks` says)."""
    step = planned.step
    in_axis, out_axis = _AXES[step.kind](step)
    kind = step.kind
    sizing, nbytes = sized(kind, inp, out, planned.bytes, chunks)
    return Communication(
        kind,
        out,
        inp,
        inp.mesh.devices,
        op=op if kind.is_allreduce_class else None,
        in_axis=in_axis,
        out_axis=out_axis,
        bytes_per_device=nbytes,
        mesh=inp.mesh,
        group=step.group,
        before=planned.before,
        after=planned.after,
        axes=tuple(a for a in (step.axis, step.to_axis) if a is not None),
        sizing=sizing,
    )


@register
@dataclass(frozen=True)
class LowerCommunications(Pass):
    """Lower every resharding Set to its planned steps, a Communication each (or a local slice)."""

    name: ClassVar[str] = "lower-communications"
    level: ClassVar[Level] = Level.program
    # On an axis its mesh does not divide: pad every chunk to ceil(n/d) rows, send each
    # as it is (Allgatherv, ...), or the cheaper of the two (passes/chunking.py).
    chunks: Chunks = "cheaper"
    # The planner's cost of one collective launch, in bytes-equivalent (plan.cost:
    # launches x latency_bytes + bytes); 0 plans by bytes alone.
    latency_bytes: int = DEFAULT_LATENCY_BYTES

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            check_latency(self.latency_bytes, f"pass {self.name}: option latency_bytes")
        except RedistributionError as exc:
            raise PassOptionError(str(exc)) from None

    def ensures(self, program: Program) -> list[str]:
        return unlowered_steps(program)

    def run(self, program: Program) -> None:
        steps = fuse_reduce_then_slice(program)
        lowering = _Lowering(program, self.chunks, self.latency_bytes)
        program.reshardings = []
        lowered: list[Step] = []
        for s in steps:
            lowered += lowering.lower(s) if not isinstance(s, Kernel) and moves_data(s) else [s]
        program.steps = lowered
        drop_local_reductions(program)


def drop_local_reductions(program: Program) -> None:
    """Remove each partial-reduction kernel that only copies (the module doc): its
    collectives read the reduction's input and reduce its sharded axes themselves."""
    outputs = {id(t) for t in program.outputs}
    dropped: set[int] = set()
    for s in program.steps:
        if not isinstance(s, Kernel) or len(s.exprs) != 1:
            continue
        (e,) = s.exprs
        reduces = _copying_reduction(e, outputs)
        if reduces is None:
            continue
        partial, x = e.output, e.input
        for c in list(partial.uses):
            c.replace_input(partial, x)
            c.reduces = reduces
        e.detach()
        dropped.add(id(s))
        for r in program.reshardings:
            if r.source is partial:
                r.source = x
    if dropped:
        program.steps = [s for s in program.steps if id(s) not in dropped]


def _copying_reduction(e: Expr, outputs: set[int]) -> tuple[int, ...] | None:
    """The axes reduction `e` reduces where its kernel would only copy each device's row
    into a partial tensor that communications alone read, in the input's dtype (the
    reductions' collectives can read its input instead); else None."""
    if not is_reduction(e) or len(e.inputs) != 1:
        return None
    x, partial = e.input, e.output
    if id(partial) in outputs or not is_partial(partial) or is_partial(x):
        return None
    if partial.dtype is not x.dtype:
        return None
    uses = partial.uses
    if not uses or not all(isinstance(c, Communication) and c.op is not None for c in uses):
        return None
    if x.mesh != partial.mesh or any(map(_streamed, (x, partial, *(c.output for c in uses)))):
        return None  # a host loop's chunks (lower-streams) run their kernel as written
    reduces = reduced_axes(e)
    if reduces_problem(x, reduces) is not None:
        return None  # a reduced axis is local, or a device holds more rows of it
    same = input_placement(x, reduces) == placement(partial)
    if not same or as_reduced(x, reduces, x.shape) != partial.shape:
        return None
    return reduces


def _streamed(tv: TensorView) -> bool:
    """True when a loop axis of tv is Stream-parallel (a host loop's chunks)."""
    return any(tv.domain.axes[p].parallel_type.is_stream for p in tv.domain.loop_positions)


def fuse_reduce_then_slice(program: Program) -> list[Step]:
    """partial -> replicated (Allreduce) whose only use slices it (LocalSlice) is one
    ReduceScatter: half the bytes, and the replicated tensor is never built."""
    dropped: set[int] = set()
    outputs = {id(t) for t in program.outputs}
    for s in program.steps:
        if not (is_resharding(s) and is_partial(s.input)):
            continue
        whole = s.output
        uses = whole.uses
        if id(whole) in outputs or len(uses) != 1 or not is_resharding(uses[0]):
            continue
        (slice_,) = uses
        same_mesh = slice_.output.mesh == whole.mesh == s.input.mesh
        if not (
            same_mesh
            and sharded_data_axis(whole) is None
            and sharded_data_axis(slice_.output) is not None
        ):
            continue
        slice_.replace_input(whole, s.input)
        s.detach()
        dropped.add(id(s))
    return [s for s in program.steps if id(s) not in dropped]
