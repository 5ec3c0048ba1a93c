"""The pointwise scheduler: one reference schedule, propagated to a whole kernel.

For a kernel whose expressions are all pointwise, broadcast or Set:

1. inputs are cached into local memory (`T3 = Set( T0, cache_op=Streaming )`) and
   outputs are written from a local (the definition moves to a new local tensor,
   the output becomes `Set( local )`);
2. the reference is the output with the most logical axes that are neither
   broadcast, reduction nor device-parallel (the first on ties);
3. the reference's device-parallel axes go first and are left alone; the other
   loop axes are merged into one and split into `[blockIdx.x, US, threadIdx.x]`
   (with a trailing Vectorize axis of 4 when asked and the extent allows);
4. the schedule is propagated to every tensor (fuserlite.schedule.propagate);
   tensors produced by another segment keep the schedule they have;
5. compute-at positions: a computed tensor is inlined into its consumers
   (`ca_pos` = its loop depth) when each consumer axis that iterates real data
   comes from a data axis of the tensor, so the value a thread holds at a loop
   point is the one its consumer needs there; otherwise `ca_pos` is 0 and the
   tensor is read by index. `produce_pos` is the largest ca_pos of the producers;
6. every tensor the kernel computes must fit the one loop nest the kernel runner and
   codegen will build (`check_grid`); if one does not, scheduling fails here, with a
   ScheduleError, not at execution.

A sharding written as an outer split by D of an axis of extent D (`ideviceIdx.x{D},
iS{1}`) is the same as the axis parallelized whole (`ideviceIdx.x{D}`): the split's
inner part iterates nothing and is no loop of the grid.
"""

from __future__ import annotations

from typing import Protocol

from fuserlite.ir.domain import IterDomain, Merge, Swizzle1D, TensorDomain
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.sharding import unit_merge_source
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import MAX_THREADS, MemoryType, ParallelType
from fuserlite.ir.values import fact
from fuserlite.ops.registry import Category, positional
from fuserlite.printer import axis_text
from fuserlite.schedule.axis_maps import Pairs, axis_positions, data_axes, positional_data_pairs
from fuserlite.schedule.grid import (
    grid_positions,
    kernel_grid,
    one_per_layout,
    unbound_loop_axis,
)
from fuserlite.schedule.propagate import (
    is_device_parallel_logical,
    propagate,
    propagation_edges,
)

VECTOR_WIDTH = 4


class Segment(Protocol):
    """What the scheduler reads and writes of a compute kernel (fuserlite.program.Kernel):
    its expressions, inputs and outputs, and the schedule it records there."""

    exprs: list[Expr]
    inputs: list[TensorView]
    outputs: list[TensorView]
    scheduled: bool
    reference: TensorView | None


def unsupported_reason(kernel: Segment) -> str | None:
    """Why the pointwise scheduler cannot take this kernel (None if it can)."""
    if not kernel.exprs:
        return "the kernel has no expressions"
    for e in kernel.exprs:
        d = e.op_def
        if len(e.outputs) != 1 or d is None or d.category is not Category.POINTWISE:
            return f"{e.output.name} = {e.op_name}(...) is not a pointwise, broadcast or set"
        why = _unschedulable_output(e.outputs[0].domain)
        if why is not None:
            return why.format(out=e.output.name, op=e.op_name)
    return None


@fact
def _unschedulable_output(dom: TensorDomain) -> str | None:
    """Why a pointwise kernel cannot compute a tensor of this domain (a template of `out`
    and `op`), or None."""
    # Reduction outputs of earlier segments are read by index through their data axes;
    # only tensors this kernel writes must be free of reductions.
    if _has_reduction(dom):
        return "{out} = {op}(...) involves a reduction axis"
    if any(type(t) is Swizzle1D for t in dom.transforms):
        # The ring's steps compute ring chunks, op by op (passes/ring_streams.py).
        return "{out} has a ring's swizzled Stream axis (swizzle1d)"
    return None


@fact
def _has_reduction(dom: TensorDomain) -> bool:
    return any(ax.is_reduction for ax in dom.logical)


def free_axes(tv: TensorView) -> list[IterDomain]:
    """Logical axes that are neither broadcast, reduction nor device-parallel."""
    dom = tv.domain
    return [dom.logical[li] for li in _free_positions(dom)]


@fact
def _free_positions(dom: TensorDomain) -> tuple[int, ...]:
    return tuple(
        li
        for li, ax in enumerate(dom.logical)
        if ax.is_iteration and not is_device_parallel_logical(dom, li)
    )


@fact
def _reference_key(dom: TensorDomain) -> tuple[int, int]:
    data = dom.data_positions()
    return len(_free_positions(dom)), sum(not dom.logical[li].is_broadcast for li in data)


def choose_reference(candidates: list[TensorView]) -> TensorView:
    """The candidate with the most free logical axes; on ties the one with more
    non-broadcast axes (a broadcast-only tensor reaches nothing), then the first."""
    return max(candidates, key=lambda tv: _reference_key(tv.domain))  # first on ties


def _by_preference(candidates: list[TensorView]) -> list[TensorView]:
    """Candidates in the order choose_reference would pick them one after the other."""
    return sorted(candidates, key=lambda tv: _reference_key(tv.domain), reverse=True)


@fact
def local_domain(dom: TensorDomain) -> TensorDomain:
    """The domain of a new local copy of a tensor of domain `dom`: its logical axes
    (b == bDIDx, so a device type on a broadcast axis is dropped; a Set drops reduction
    axes, so a reduction output of an earlier segment is cached as its data axes only)
    and its sharding splits, nothing else of its schedule."""
    new_of: dict[int, int] = {}  # dom's position -> the local's
    axes = []
    for li, ax in enumerate(dom.logical):
        if ax.is_reduction:
            continue
        new_of[li] = len(axes)
        axes.append(ax.with_parallel_type(ParallelType.Serial) if ax.is_broadcast else ax)
    local = TensorDomain(axes)
    for t in dom.transforms:  # copy the sharding splits, nothing else
        if type(t) is Merge and (other := unit_merge_source(dom, t)) in new_of:
            new_of[t.output] = new_of[other]  # a merge with an extent-1 broadcast axis
        elif dom.is_sharding_split(t) and t.input in new_of:
            pos = local.loop_positions.index(new_of[t.input])
            n = len(local.axes)
            local = local.split(pos, t.factor, t.inner_split)
            local = local.parallelize(n, dom.axes[t.outer].parallel_type)
            # a nested sharding splits the part one device holds of the outer one
            new_of[t.inner] = n + 1
        elif dom.is_cyclic_split(t) and t.input in new_of:  # a cyclic shard
            pos = local.loop_positions.index(new_of[t.input])
            n = len(local.axes)
            local = local.split(pos, t.factor, t.inner_split)
            new_of[t.outer] = n  # its periods, which outer mesh axes may chunk
            if dom.cyclic_device(t)[1] == 1:
                local = local.parallelize(n + 1, dom.axes[t.inner].parallel_type)
            else:  # block-cyclic: the sharding split of the inner part comes next
                new_of[t.inner] = n + 1
    return local


def local_like(tv: TensorView) -> TensorView:
    """A new local tensor with tv's logical axes and sharding splits (local_domain)."""
    local = TensorView(tv.fusion, local_domain(tv.domain), tv.dtype, None, MemoryType.LOCAL)
    local.mesh = tv.mesh
    return local


def _users_in(tv: TensorView, position: dict[int, int]) -> list[Expr]:
    """The expressions of a kernel (`position`: id -> index in it) that read `tv`, in order."""
    if not tv.uses:
        return []
    users = {id(e): e for e in tv.uses if id(e) in position}
    return sorted(users.values(), key=lambda e: position[id(e)])


def cache_inputs(kernel: Segment) -> list[Expr]:
    """`cache = Set( input )` for each kernel input; the kernel's reads use the cache."""
    new = []
    position = {id(e): k for k, e in enumerate(kernel.exprs)}
    for inp in kernel.inputs:
        users = _users_in(inp, position)
        if not users:
            continue
        cache = local_like(inp)
        Expr.replace_uses(inp, cache, users)
        all_broadcast = all(ax.is_broadcast for ax in data_axes(inp))
        new.append(LoadStoreOp(cache, inp, "AllLevels" if all_broadcast else "Streaming"))
    return new


def cache_outputs(kernel: Segment) -> list[Expr]:
    """Each kernel output computed here is written from a new local: `out = Set( local )`."""
    new = []
    position = {id(e): k for k, e in enumerate(kernel.exprs)}
    for out in kernel.outputs:
        d = out.definition
        if d is None or id(d) not in position:
            continue
        local = local_like(out)
        d.outputs = [local if t is out else t for t in d.outputs]
        local.definition = d
        out.definition = None
        users = _users_in(out, position)
        if users:
            Expr.replace_uses(out, local, users)
        new.append(LoadStoreOp(out, local, "Streaming"))
    return new


def pointwise_options(reference: TensorView | None) -> tuple[int, bool]:
    """(block_size, vectorize) of a kernel the pointwise scheduler scheduled with this
    reference: its threadIdx.x axis's extent and whether an axis is vectorized (the
    defaults, 128 and False, where it has none)."""
    loop = reference.domain.loop if reference is not None else ()
    block = next((ax.extent for ax in loop if ax.parallel_type is ParallelType.TIDx), 128)
    return block, any(ax.parallel_type is ParallelType.Vectorize for ax in loop)


def uncached(kernel: Segment) -> None:
    """Undo cache_inputs and cache_outputs in a copy of a scheduled kernel (a Stream
    chunk's, fuserlite.passes.lower_streams): the readers of an input's cache read the
    input, each output is written by the expression that wrote its local, and those
    Sets are gone, so that the scheduler can schedule the copy afresh."""
    inputs = {id(t) for t in kernel.inputs}
    outputs = {id(t) for t in kernel.outputs}
    inside = {id(e) for e in kernel.exprs}
    kept = []
    for e in kernel.exprs:
        if isinstance(e, LoadStoreOp) and e.cache_op is not None:
            src, dst = e.input, e.output
            if id(src) in inputs and id(dst) not in outputs:  # a load: dst = Set(input)
                e.detach()
                Expr.replace_uses(dst, src, list(dst.uses))
                continue
            d = src.definition
            local = id(src) not in inputs and id(src) not in outputs
            if id(dst) in outputs and local and d is not None and id(d) in inside:
                e.detach()  # a store: output = Set(local); the local's writer writes it
                d.outputs = [dst if t is src else t for t in d.outputs]
                dst.definition, src.definition = d, None
                Expr.replace_uses(src, dst, list(src.uses))
                continue
        kept.append(e)
    kernel.exprs = kept


def schedule_reference(ref: TensorView, block_size: int = 128, vectorize: bool = False) -> None:
    """Device axes first and untouched; the rest merged, then split into
    [blockIdx.x, US, threadIdx.x] (and Vectorize when asked and divisible)."""
    dom = ref.domain
    pinned = [p for p in dom.loop_positions if dom.axes[p].is_device_parallel]
    rest = [p for p in dom.loop_positions if not dom.axes[p].is_device_parallel]
    ref.domain = dom.with_loop((*pinned, *rest))
    if not rest:
        return
    k = len(pinned)
    while ref.ndim > k + 1:
        ref.merge(k, k + 1)
    types = [ParallelType.BIDx, ParallelType.Unswitch, ParallelType.TIDx]
    if vectorize and ref.domain.loop[k].extent % VECTOR_WIDTH == 0:
        ref.split(k, VECTOR_WIDTH)
        types.append(ParallelType.Vectorize)
    ref.split(k, block_size).split(k, 1)
    for j, pt in enumerate(types):
        ref.axis(k + j).parallelize(pt)


@fact
def _iterated(dom: TensorDomain) -> frozenset[int]:
    """Positions of the logical axes of a domain that hold more than one element of a
    device's shard."""
    per_device = [ax.extent for ax in dom.logical]
    origin = {li: li for li in range(dom.n_logical)}  # a sharded part: its logical axis
    for t in dom.transforms:  # a sharding split leaves extent / D per device
        if type(t) is Merge and (other := unit_merge_source(dom, t)) in origin:
            origin[t.output] = origin[other]  # a merge with an extent-1 broadcast axis
        elif dom.is_sharding_split(t) and t.input in origin:  # nested splits split it again
            per_device[origin[t.input]] = dom.axes[t.inner].extent
            origin[t.inner] = origin[t.input]
        elif dom.is_cyclic_split(t) and t.input in origin:  # a cyclic shard: its outer part
            per_device[origin[t.input]] = dom.axes[t.outer].extent * dom.cyclic_device(t)[1]
    return frozenset(
        k
        for k, ax in enumerate(dom.logical)
        if ax.is_iteration and not ax.is_device_parallel and per_device[k] > 1
    )


@fact
def inlinable(producer: TensorDomain, consumer: TensorDomain, pairs: Pairs) -> bool:
    """True if every axis the consumer iterates comes from an axis the producer iterates
    (`pairs`: the expression's axis_positions for the producer)."""
    if len(grid_positions(producer)) != len(grid_positions(consumer)):
        return False
    iterated_p = _iterated(producer)
    return _iterated(consumer) <= {c for p, c in pairs if p in iterated_p}


@fact
def _inlinable_positional(producer: TensorDomain, consumer: TensorDomain) -> bool | None:
    """inlinable through a positional op between these domains (one fact of two values,
    asked for every tensor of a kernel); None where the op's map misses a data axis."""
    pairs = positional_data_pairs(producer, consumer)
    return None if pairs is None else inlinable(producer, consumer, pairs)


def _inlines_into(tv: TensorView, dom: TensorDomain, use: Expr) -> bool:
    """True if `tv` (of domain `dom`) inlines into the expression `use` that reads it."""
    consumer = use.outputs[0].domain
    d = use.op_def
    if d is not None and d.axis_map is positional and d.outputs_axis_map is None:
        answer = _inlinable_positional(dom, consumer)
        if answer is not None:
            return answer
    return inlinable(dom, consumer, axis_positions(use, tv))


@fact
def inline_position(dom: TensorDomain, at_global: bool) -> int:
    """As nvFuser's pointwise scheduler: loads from and stores to global memory
    (`at_global`) are computed at the Unswitch axis (so they are unswitched together),
    the rest at the innermost loop."""
    if at_global:
        for pos, ax in enumerate(dom.loop):
            if ax.parallel_type is ParallelType.Unswitch:
                return pos + 1
    return len(dom.loop_positions)


def compute_inline_positions(kernel: Segment) -> None:
    """Set ca_pos and produce_pos of every tensor the kernel computes: whether a tensor
    inlines into a consumer reads their domains and the axis map between them only,
    and where, its domain and whether it is a load or a store."""
    exprs = kernel.exprs
    computed_ids = {id(e.outputs[0]) for e in exprs}
    expr_ids = {id(e) for e in exprs}
    inputs = {id(t) for t in kernel.inputs}
    outputs = {id(t) for t in kernel.outputs}
    for e in exprs:
        tv = e.outputs[0]
        dom = tv.domain
        inline = True
        for use in tv.uses:  # a loop, not a generator: it runs once per tensor
            if id(use) in expr_ids and not _inlines_into(tv, dom, use):
                inline = False
                break
        pos = 0
        if inline:
            at_global = id(tv) in outputs or not inputs.isdisjoint(map(id, e.inputs))
            pos = inline_position(tv.domain, at_global)
        if tv.compute_at_pos != pos:
            tv.compute_at_pos = pos
    for e in exprs:
        produce = 0
        for t in e.inputs:
            if id(t) in computed_ids and t.compute_at_pos > produce:
                produce = t.compute_at_pos
        out = e.outputs[0]
        if out.produce_pos != produce:
            out.produce_pos = produce


def check_grid(kernel: Segment) -> None:
    """Every tensor the kernel computes (those made from another segment's tensors
    included) must fit one loop nest, as the kernel runner and codegen will need."""
    # Both read the tensors' domains (and kernel_grid their meshes) only.
    computed = one_per_layout([e.output for e in kernel.exprs])
    kernel_grid(computed)
    for tv in computed:  # what else index lowering would reject
        ax = unbound_loop_axis(tv)
        if ax is not None:
            raise ScheduleError(
                f"{tv.name} loop axis {axis_text(ax)} is on no loop of the kernel grid; "
                "the reference schedule does not reach it"
            )


@fact
def serial_made_axes(dom: TensorDomain) -> TensorDomain:
    """The domain with its scheduler-made loop axes serial (device axes kept)."""
    for p in dom.loop_positions:
        ax = dom.axes[p]
        if not ax.is_device_parallel and dom.definition[p] is not None:
            dom = dom.parallelize(p, ParallelType.Serial)
    return dom


def check_block_size(block_size: int) -> None:
    """The block size is the threadIdx.x extent: 1..MAX_THREADS, or a ScheduleError."""
    if not 1 <= block_size <= MAX_THREADS:
        raise ScheduleError(
            f"schedule-pointwise: threadIdx.x extent (block_size) {block_size} must be in "
            f"1..{MAX_THREADS}; choose a block size of at most {MAX_THREADS}"
        )


def schedule_pointwise(
    kernel: Segment, block_size: int = 128, vectorize: bool = False
) -> TensorView:
    """Schedule a pointwise kernel in place; returns its reference tensor."""
    why = unsupported_reason(kernel)
    if why is not None:
        raise ScheduleError(f"schedule-pointwise cannot schedule this kernel: {why}")
    check_block_size(block_size)
    return schedule_supported(kernel, block_size, vectorize)


def frozen_inputs(kernel: Segment) -> set[int]:
    """The ids of a kernel's inputs that keep their schedule: those another segment
    produces or reads too (only fusion inputs this kernel alone reads are replayed)."""
    inside = {id(e) for e in kernel.exprs}
    return {
        id(t)
        for t in kernel.inputs
        if t.definition is not None or any(id(u) not in inside for u in t.uses)
    }


def schedule_supported(
    kernel: Segment, block_size: int, vectorize: bool, frozen: set[int] | None = None
) -> TensorView:
    """schedule_pointwise of a kernel unsupported_reason accepts, with a block size
    check_block_size accepts (the pass asked both already). `frozen`: the ids of the
    inputs whose schedule is kept (by default frozen_inputs')."""
    if frozen is None:
        frozen = frozen_inputs(kernel)
    loads = cache_inputs(kernel)
    stores = cache_outputs(kernel)
    kernel.exprs = loads + list(kernel.exprs) + stores
    exprs = [e for e in kernel.exprs if frozen.isdisjoint(map(id, e.inputs))]
    # One reference per connected part: the best kernel output not yet reached, then
    # (for parts that reach no output) the best tensor not yet reached.
    produced = {id(e.outputs[0]) for e in exprs}
    outputs = [t for t in kernel.outputs if id(t) in produced]
    edges = propagation_edges(exprs)
    reached: set[int] = set()
    reference = None
    for part in (outputs, None):
        if part is None:  # every output was reached: only what they did not reach is left
            part = [t for e in exprs if id(t := e.outputs[0]) not in reached]
        for ref in _by_preference(part):
            if id(ref) in reached:
                continue
            schedule_reference(ref, block_size, vectorize)
            reached.update(id(t) for t in propagate(ref, exprs, edges))
            reference = reference or ref
    for inp in kernel.inputs:  # nvFuser leaves global inputs unparallelized
        if id(inp) not in frozen:
            inp.domain = serial_made_axes(inp.domain)
    check_grid(kernel)
    compute_inline_positions(kernel)
    kernel.scheduled = True
    kernel.reference = reference
    return reference
