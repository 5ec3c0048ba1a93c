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

from fuserlite.ir.domain import IterDomain, is_sharding_split
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.readonly import reading_only
from fuserlite.ir.signature import Signature, domain_signature, remember_signature
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import MAX_THREADS, MemoryType, ParallelType
from fuserlite.ops.registry import is_pointwise
from fuserlite.printer import axis_text
from fuserlite.schedule.axis_maps import data_axes
from fuserlite.schedule.grid import grid_axes, kernel_grid, unbound_loop_axis
from fuserlite.schedule.propagate import (
    Edges,
    is_device_parallel_logical,
    propagate,
    propagation_edges,
)
from fuserlite.schedule.signature import one_per_signature

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
    # The answer reads the op (its name and class), the number of outputs and the
    # output's logical axes: once per (op, class, output signature).
    taken: set[tuple] = set()
    for e in kernel.exprs:
        if len(e.outputs) != 1:
            return f"{e.output.name} = {e.op_name}(...) is not a pointwise, broadcast or set"
        key = (e.op_name, type(e), domain_signature(e.outputs[0]))
        if key in taken:
            continue
        if not is_pointwise(e):
            return f"{e.output.name} = {e.op_name}(...) is not a pointwise, broadcast or set"
        # Reduction outputs of earlier segments are read by index through their
        # data axes; only tensors this kernel writes must be free of reductions.
        if any(ax.is_reduction for ax in e.output.domain.logical):
            return f"{e.output.name} = {e.op_name}(...) involves a reduction axis"
        taken.add(key)
    return None


def free_axes(tv: TensorView) -> list[IterDomain]:
    """Logical axes that are neither broadcast, reduction nor device-parallel."""
    return [
        ax for ax in tv.domain.logical if ax.is_iteration and not is_device_parallel_logical(tv, ax)
    ]


def _reference_key(tv: TensorView) -> tuple[int, int]:
    return len(free_axes(tv)), sum(not ax.is_broadcast for ax in tv.data_axes())


def choose_reference(candidates: list[TensorView]) -> TensorView:
    """The candidate with the most free logical axes; on ties the one with more
    non-broadcast axes (a broadcast-only tensor reaches nothing), then the first."""
    return max(candidates, key=_reference_key)  # max keeps the first on ties


def _by_preference(candidates: list[TensorView], keys: dict[tuple, tuple]) -> list[TensorView]:
    """Candidates in the order choose_reference would pick them one after the other
    (`keys`: reference keys by domain signature, which is all they read; filled as
    needed)."""

    def key(tv: TensorView) -> tuple:
        sig = domain_signature(tv)
        hit = keys.get(sig)
        if hit is None:
            hit = keys[sig] = _reference_key(tv)
        return hit

    return sorted(candidates, key=key, reverse=True)  # stable: first on ties


def _local_like(tv: TensorView) -> TensorView:
    """A new local tensor with tv's logical axes (b == bDIDx, so a device type on a
    broadcast axis is dropped) and tv's sharding splits, nothing else of its schedule."""
    # A Set drops reduction axes: a reduction output of an earlier segment is
    # cached as its data axes only.
    new_of: dict[int, IterDomain] = {}
    for ax in tv.domain.logical:
        if ax.is_reduction:
            continue
        new = ax.clone()
        if new.is_broadcast:
            new.parallel_type = ParallelType.Serial
        new_of[id(ax)] = new
    axes = list(new_of.values())
    contiguity = [None if ax.is_broadcast else True for ax in axes]
    local = TensorView(tv.fusion, axes, tv.dtype, contiguity, MemoryType.LOCAL)
    local.mesh = tv.mesh
    for t in tv.domain.transforms:  # copy the sharding splits, nothing else
        if is_sharding_split(t) and id(t.input) in new_of:
            pos = local.domain.loop.index(new_of[id(t.input)])
            local.split(pos, t.factor, t.inner_split)
            local.axis(pos).parallelize(t.outer.parallel_type)
            # a nested sharding splits the part one device holds of the outer one
            new_of[id(t.inner)] = local.domain.transforms[-1].inner
    return local


class _Locals:
    """Makes the locals of a kernel's tensors: _local_like reads a tensor's domain,
    fusion, dtype and mesh only, so the first local of each (domain signature, dtype,
    mesh) is made by it and the others are copies of that one's domain, each its own
    tensor (20 000 `x + k` outputs: one decision, 20 000 direct builds)."""

    def __init__(self) -> None:
        self._made: dict[tuple, tuple[TensorView, Signature]] = {}

    def like(self, tv: TensorView) -> TensorView:
        """A new local like `tv`, as _local_like makes it."""
        key = (domain_signature(tv), tv.dtype, tv.mesh, tv.fusion)
        done = self._made.get(key)
        if done is None:
            local = _local_like(tv)
            self._made[key] = (local, domain_signature(local))
            return local
        first, sig = done
        local = first.copy_into(first.fusion, {})  # unlinked, nothing derived
        local.number = first.fusion.register_tensor(local)
        remember_signature(local, sig)  # a copy: the first one's structure
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
    locals_ = _Locals()
    for inp in kernel.inputs:
        users = _users_in(inp, position)
        if not users:
            continue
        cache = locals_.like(inp)
        Expr.replace_uses(inp, cache, users)
        all_broadcast = all(ax.is_broadcast for ax in data_axes(inp))
        new.append(LoadStoreOp(cache, inp, "AllLevels" if all_broadcast else "Streaming"))
    return new


def cache_outputs(kernel: Segment) -> list[Expr]:
    """Each kernel output computed here is written from a new local: `out = Set( local )`."""
    new = []
    position = {id(e): k for k, e in enumerate(kernel.exprs)}
    locals_ = _Locals()
    for out in kernel.outputs:
        d = out.definition
        if d is None or id(d) not in position:
            continue
        local = locals_.like(out)
        d.outputs = [local if t is out else t for t in d.outputs]
        local.definition = d
        out.definition = None
        users = _users_in(out, position)
        if users:
            Expr.replace_uses(out, local, users)
        new.append(LoadStoreOp(out, local, "Streaming"))
    return new


def schedule_reference(ref: TensorView, block_size: int = 128, vectorize: bool = False) -> None:
    """Device axes first and untouched; the rest merged, then split into
    [blockIdx.x, US, threadIdx.x] (and Vectorize when asked and divisible)."""
    pinned = [ax for ax in ref.domain.loop if ax.is_device_parallel]
    rest = [ax for ax in ref.domain.loop if not ax.is_device_parallel]
    ref.domain.loop = pinned + rest
    if not rest:
        return
    k = len(pinned)
    while len(ref.domain.loop) > k + 1:
        ref.merge(k, k + 1)
    types = [ParallelType.BIDx, ParallelType.Unswitch, ParallelType.TIDx]
    if vectorize and ref.domain.loop[k].extent % VECTOR_WIDTH == 0:
        ref.split(k, VECTOR_WIDTH)
        types.append(ParallelType.Vectorize)
    ref.split(k, block_size).split(k, 1)
    for j, pt in enumerate(types):
        ref.domain.loop[k + j].parallelize(pt)


def _iterated(tv: TensorView) -> set[int]:
    """Positions of the logical axes of `tv` that hold more than one element of a
    device's shard."""
    per_device = {id(ax): ax.extent for ax in tv.domain.logical}
    origin = {id(ax): id(ax) for ax in tv.domain.logical}  # a sharded part: its logical axis
    for t in tv.domain.transforms:  # a sharding split leaves extent / D per device
        if is_sharding_split(t) and id(t.input) in origin:  # nested splits split it again
            per_device[origin[id(t.input)]] = t.inner.extent
            origin[id(t.inner)] = origin[id(t.input)]
    return {
        k
        for k, ax in enumerate(tv.domain.logical)
        if ax.is_iteration and not ax.is_device_parallel and per_device[id(ax)] > 1
    }


def _inlinable(producer: TensorView, expr: Expr, pairs: tuple[tuple[int, int], ...]) -> bool:
    """True if every axis the consumer iterates comes from an axis the producer iterates
    (`pairs`: the expression's axis_positions for `producer`)."""
    consumer = expr.output
    if len(grid_axes(producer)) != len(grid_axes(consumer)):
        return False
    iterated_p, iterated_c = _iterated(producer), _iterated(consumer)
    return iterated_c <= {c for p, c in pairs if p in iterated_p}


def _inline_position(tv: TensorView, at_global: bool) -> int:
    """As nvFuser's pointwise scheduler: loads from and stores to global memory
    (`at_global`) are computed at the Unswitch axis (so they are unswitched together),
    the rest at the innermost loop."""
    if at_global:
        for pos, ax in enumerate(tv.domain.loop):
            if ax.parallel_type is ParallelType.Unswitch:
                return pos + 1
    return len(tv.domain.loop)


def compute_inline_positions(kernel: Segment, edges: Edges | None = None) -> None:
    """Set ca_pos and produce_pos of every tensor the kernel computes (`edges`: a
    propagation graph whose axis maps are known, when there is one).

    Whether a tensor inlines into a consumer reads their domains and the axis map
    between them only, and where, its domain and whether it is a load or a store:
    each is decided once per signature(s)."""
    edges = Edges(()) if edges is None else edges
    positions = edges.positions
    exprs = kernel.exprs
    computed_ids = {id(e.outputs[0]) for e in exprs}
    expr_ids = {id(e) for e in exprs}
    inputs = {id(t) for t in kernel.inputs}
    outputs = {id(t) for t in kernel.outputs}
    inlinable: dict[tuple, bool] = {}
    position: dict[tuple, int] = {}
    for e in exprs:  # once per tensor: a lookup per decision
        tv = e.outputs[0]
        sig = domain_signature(tv)
        inline = True
        for use in tv.uses:
            if id(use) not in expr_ids:
                continue
            key = (sig, domain_signature(use.outputs[0]), positions(use, tv))
            ok = inlinable.get(key)
            if ok is None:
                ok = inlinable[key] = _inlinable(tv, use, key[2])
            if not ok:
                inline = False
                break
        pos = 0
        if inline:
            at_global = id(tv) in outputs or not inputs.isdisjoint(map(id, e.inputs))
            pos = position.get((sig, at_global), -1)
            if pos < 0:
                pos = position[sig, at_global] = _inline_position(tv, at_global)
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
    computed = one_per_signature([e.output for e in kernel.exprs])
    kernel_grid(computed)
    for tv in computed:  # what else index lowering would reject
        ax = unbound_loop_axis(tv)
        if ax is not None:
            raise ScheduleError(
                f"{tv.name} loop axis {axis_text(ax)} is on no loop of the kernel grid; "
                "the reference schedule does not reach it"
            )


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


def schedule_supported(kernel: Segment, block_size: int, vectorize: bool) -> TensorView:
    """schedule_pointwise of a kernel unsupported_reason accepts, with a block size
    check_block_size accepts (the pass asked both already)."""
    loads = cache_inputs(kernel)
    stores = cache_outputs(kernel)
    kernel.exprs = loads + list(kernel.exprs) + stores
    # Tensors produced by another segment, or read by another segment too, keep their
    # schedule: only fusion inputs this kernel alone reads are replayed.
    inside = {id(e) for e in kernel.exprs}
    frozen = {
        id(t)
        for t in kernel.inputs
        if t.definition is not None or any(id(u) not in inside for u in t.uses)
    }
    exprs = [e for e in kernel.exprs if frozen.isdisjoint(map(id, e.inputs))]
    # One reference per connected part: the best kernel output not yet reached, then
    # (for parts that reach no output) the best tensor not yet reached.
    produced = {id(e.outputs[0]) for e in exprs}
    outputs = [t for t in kernel.outputs if id(t) in produced]
    keys: dict[Signature, tuple] = {}
    edges = propagation_edges(exprs)
    reached: set[int] = set()
    reference = None
    for part in (outputs, None):
        if part is None:  # every output was reached: only what they did not reach is left
            part = [t for e in exprs if id(t := e.outputs[0]) not in reached]
        for ref in _by_preference(part, keys):
            if id(ref) in reached:
                continue
            schedule_reference(ref, block_size, vectorize)
            reached.update(id(t) for t in propagate(ref, exprs, edges))
            reference = reference or ref
    for inp in kernel.inputs:  # nvFuser leaves global inputs unparallelized
        if id(inp) in frozen:
            continue
        for ax in inp.domain.loop:
            if not ax.is_device_parallel and ax.definition is not None:
                ax.parallel_type = ParallelType.Serial
    with reading_only():  # the domains are final: grid axes and axis maps are asked once
        check_grid(kernel)
        compute_inline_positions(kernel, edges)
    kernel.scheduled = True
    kernel.reference = reference
    return reference
