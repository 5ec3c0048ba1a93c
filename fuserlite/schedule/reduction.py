"""The reduction scheduler: a row per block, a cross-thread reduction inside it.

For a kernel of one sum or max (nvFuser's reduction scheduler, without rFactor and
grid reductions), the output is scheduled as

    [deviceIdx..., iblockIdx.x{rows}, rS{ceil(n / T)}, rthreadIdx.x{T}]

its device-parallel axes first and untouched, its other iteration axes merged into
one, a row per block (blockIdx.x), its reduction axes merged into one of n elements
and split by T threads (threadIdx.x; T the power of two at most `block_size` that
covers n, or `block_size`). The order of the arithmetic is the schedule's, the same
on every target (fuserlite.kernel.reduction): thread t accumulates elements t,
t + T, t + 2T, ... of its row serially from the op's init, predicated off past n (an
uneven split), then the T partial results combine in a tree (t += t + T/2, then
t + T/4, ...), as a block reduction in shared memory does. So the compiled and the
interpreted kernel agree bit for bit; numpy's op-by-op sum (pairwise) differs by
rounding only, which reference/rounding.py's ORDER bounds (any order).

What it takes (`unsupported_reason` says why not): one sum or max of a float tensor
read from global memory, its reduced axes not device-parallel (a partial sum is
the Allreduce's business), no sharding uneven, no schedule of the user's.
"""

from __future__ import annotations

from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.expr import Expr
from fuserlite.ir.sharding import is_uneven, local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import MAX_THREADS, ParallelType
from fuserlite.schedule.pointwise import Segment
from fuserlite.schedule.shard import has_schedule

REDUCTION_OPS = ("sum", "max")
FLOATS = ("float16", "bfloat16", "float32", "float64")


def reduction_expr(kernel: Segment) -> Expr | None:
    """The kernel's expression if it is one sum or max (its only expression), else None."""
    if len(kernel.exprs) != 1:
        return None
    expr = kernel.exprs[0]
    return expr if expr.op_name in REDUCTION_OPS and len(expr.outputs) == 1 else None


def unsupported_reason(kernel: Segment) -> str | None:
    """Why the reduction scheduler cannot take this kernel (None if it can)."""
    expr = reduction_expr(kernel)
    if expr is None:
        return "the kernel is not one sum or max"
    (inp,), out = expr.inputs, expr.output
    name = f"{out.name} = {expr.op_name}({inp.name})"
    if inp.dtype.name not in FLOATS:
        return f"{name} reduces {inp.dtype.name}, not a float"
    if any(ax.is_reduction and ax.is_device_parallel for ax in out.domain.axes):
        return f"{name} reduces a device-parallel axis (a partial result)"
    if is_uneven(inp) or is_uneven(out):
        return f"{name} is sharded unevenly"
    if has_schedule(out):
        return f"{out.name} has a schedule of its own"
    if 0 in local_shape(inp):
        return f"{name} reduces an empty tensor"
    return None


def threads_for(n: int, block_size: int) -> int:
    """T: the smallest power of two >= n, at most block_size (itself a power of two)."""
    t = 1
    while t < n and t < block_size:
        t *= 2
    return t


def check_block_size(block_size: int) -> None:
    """A reduction's block size is a power of two in 1..MAX_THREADS (its tree halves it)."""
    if not 1 <= block_size <= MAX_THREADS or block_size & (block_size - 1):
        raise ScheduleError(
            f"schedule-reduction: block_size {block_size} must be a power of two in "
            f"1..{MAX_THREADS}"
        )


def _reduction_domain(dom: TensorDomain, block_size: int) -> TensorDomain:
    """[device axes..., iblockIdx.x{rows}, rS{ceil(n/T)}, rthreadIdx.x{T}] of a reduction
    output's domain (see the module)."""
    loop = dom.loop_positions
    pinned = [p for p in loop if dom.axes[p].is_device_parallel]
    kept = [p for p in loop if not dom.axes[p].is_device_parallel and dom.axes[p].is_iteration]
    other = [p for p in loop if p not in pinned and p not in kept]  # reductions, broadcasts
    reduced = [p for p in other if dom.axes[p].is_reduction]
    rest = [p for p in other if not dom.axes[p].is_reduction]
    dom = dom.with_loop((*pinned, *rest, *kept, *reduced))
    k = len(pinned) + len(rest)
    for _ in range(len(kept) - 1):
        dom = dom.merge(k, k + 1)
    r = k + (1 if kept else 0)
    for _ in range(len(reduced) - 1):
        dom = dom.merge(r, r + 1)
    n = dom.loop[r].extent
    dom = dom.split(r, threads_for(n, block_size))
    if kept:
        dom = dom.parallelize(dom.loop_positions[k], ParallelType.BIDx)
    return dom.parallelize(dom.loop_positions[r + 1], ParallelType.TIDx)


def schedule_reduction(kernel: Segment, block_size: int = 128) -> TensorView:
    """Schedule a kernel of one sum or max in place; returns its output (the reference)."""
    why = unsupported_reason(kernel)
    if why is not None:
        raise ScheduleError(f"schedule-reduction cannot schedule this kernel: {why}")
    check_block_size(block_size)
    out = kernel.exprs[0].output
    out.domain = _reduction_domain(out.domain, block_size)
    kernel.scheduled = True
    kernel.reference = out
    return out


def reduction_threads(tv: TensorView) -> int | None:
    """T of a tensor the reduction scheduler scheduled: the extent of its reduction axis
    bound to threadIdx.x; None for any other tensor."""
    for ax in tv.domain.loop:
        if ax.is_reduction and ax.parallel_type is ParallelType.TIDx:
            return ax.extent
    return None


__all__ = [
    "REDUCTION_OPS",
    "check_block_size",
    "reduction_expr",
    "reduction_threads",
    "schedule_reduction",
    "threads_for",
    "unsupported_reason",
]
