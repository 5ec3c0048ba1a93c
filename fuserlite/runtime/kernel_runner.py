"""Run a scheduled kernel through its schedule, vectorized with numpy over the whole grid.

The grid is the kernel's loop nest (`blockIdx x Unswitch x threadIdx`, see
fuserlite.schedule.indexing.kernel_grid); every grid point is one GPU thread
iteration, and all of them are evaluated at once as numpy arrays. Device-parallel
loop axes take index 0: the arrays are one device's local shards.

Per expression, in kernel order, for its output O at every grid point:
- O's logical coordinates and predicate come from inverting O's own splits and
  merges (index lowering);
- an operand that is inlined (ca_pos > 0) is the register it holds at the same
  grid point, as in generated code; an operand read by index (a kernel input,
  or a tensor not inlined) is gathered at the coordinates mapped from O's;
- a value is valid where O's predicate holds and its operands were valid;
- kernel outputs and tensors that are not inlined are scattered to their
  coordinates where O's predicate holds (invalid values as NaN / a poison value).

So a schedule whose tensors disagree about which element a grid point holds,
or that does not cover every element, gives wrong numbers.
"""

from __future__ import annotations

import math

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import BroadcastOp, Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.program import Kernel
from fuserlite.ir.sharding import local_shape, shardings
from fuserlite.ir.tensor import TensorView
from fuserlite.runtime.numpy_ops import eval_expr
from fuserlite.schedule.indexing import (
    GridAxis,
    evaluate,
    kernel_grid,
    loop_var,
    lower_tensor,
    schedule_signature,
)
from fuserlite.schedule.pointwise import whole_fusion_kernel
from fuserlite.schedule.propagate import producer_coords


def poison(dtype: np.dtype) -> object:
    """The value of an element no valid grid point wrote."""
    if dtype.kind == "f":
        return np.nan
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return True


def is_inlined(tv: TensorView) -> bool:
    """True if consumers read `tv`'s register at their own grid point."""
    return tv.compute_at_pos > 0


class _Lowered:
    """Index arrays and predicate of one tensor, evaluated over the grid."""

    def __init__(self, tv: TensorView, grid: list[GridAxis], env: dict, size: int) -> None:
        ti = lower_tensor(tv, grid)
        memo: dict[int, np.ndarray] = {}
        data = [ix for ix, ax in zip(ti.logical, tv.domain.logical) if not ax.is_reduction]
        self.coords = [np.broadcast_to(evaluate(ix, env, memo), (size,)) for ix in data]
        pred = np.ones(size, dtype=bool)
        for ix, bound in ti.predicates:
            pred &= evaluate(ix, env, memo) < bound
        self.pred = pred


def run_kernel(
    kernel: Kernel, local_inputs: dict[TensorView, np.ndarray]
) -> dict[TensorView, np.ndarray]:
    """Execute a scheduled kernel on one device's local input shards; returns local outputs."""
    computed = [e.output for e in kernel.exprs]
    grid = kernel_grid(computed)
    extents = [g.extent for g in grid]
    size = math.prod(extents)
    env = {loop_var(j): a.reshape(-1) for j, a in enumerate(np.indices(extents, dtype=np.int64))}
    arrays: dict[int, np.ndarray] = {}
    written: dict[int, np.ndarray] = {}
    for tv in kernel.inputs:
        if tv not in local_inputs:
            raise ExecutionError(f"run_kernel: no array given for kernel input {tv.name}")
        arr = np.asarray(local_inputs[tv])
        if arr.shape != local_shape(tv):
            raise ExecutionError(
                f"run_kernel: input {tv.name} has local shape {list(local_shape(tv))}, "
                f"got an array of shape {list(arr.shape)}"
            )
        arrays[id(tv)] = arr
    regs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    lowered: dict[tuple, _Lowered] = {}
    outputs = {id(t) for t in kernel.outputs}
    for expr in kernel.exprs:
        out = expr.output
        key = schedule_signature(out)
        low = lowered.get(key)
        if low is None:
            low = lowered[key] = _Lowered(out, grid, env, size)
        args, valids = [], []
        for inp in expr.inputs:
            if id(inp) in regs:
                value, ok = regs[id(inp)]
            elif id(inp) in arrays:
                value, ok = _gather(expr, inp, arrays[id(inp)], written.get(id(inp)), low)
            else:
                raise ExecutionError(
                    f"run_kernel: {out.name} reads {inp.name}, which is neither a kernel input "
                    "nor computed earlier in the kernel"
                )
            args.append(value)
            valids.append(ok)
        value = args[0] if isinstance(expr, BroadcastOp) else eval_expr(expr, args, (size,))
        valid = low.pred
        for ok in valids:
            if ok is not low.pred:
                valid = valid & ok
        if is_inlined(out):
            regs[id(out)] = (value, valid)
        if id(out) in outputs or not is_inlined(out):
            arrays[id(out)], written[id(out)] = _scatter(out, value, valid, low)
    result = {}
    for tv in kernel.outputs:
        if id(tv) not in arrays:
            raise ExecutionError(f"run_kernel: kernel output {tv.name} was never written")
        result[tv] = arrays[id(tv)]
    return result


def _gather(
    expr: Expr, inp: TensorView, arr: np.ndarray, written: np.ndarray | None, low: _Lowered
) -> tuple[np.ndarray, np.ndarray]:
    coords = producer_coords(expr, inp, low.coords)
    ok = low.pred
    clipped = []
    for c, n in zip(coords, arr.shape):
        if isinstance(c, int):
            clipped.append(c)
            continue
        inside = (c >= 0) & (c < n)
        if not inside.all():
            ok = ok & inside
        clipped.append(np.clip(c, 0, n - 1))
    key = tuple(clipped)
    value = np.broadcast_to(arr[key], low.pred.shape) if arr.ndim else np.full(low.pred.shape, arr)
    if written is not None:
        ok = ok & np.broadcast_to(written[key], low.pred.shape)
    return value, ok


def _scatter(
    tv: TensorView, value: np.ndarray, valid: np.ndarray, low: _Lowered
) -> tuple[np.ndarray, np.ndarray]:
    shape = local_shape(tv)
    dtype = tv.dtype.numpy
    out = np.full(shape, poison(dtype), dtype=dtype)
    written = np.zeros(shape, dtype=bool)
    sel = low.pred
    coords = [np.broadcast_to(c, sel.shape)[sel] for c in low.coords]
    for k, (c, n) in enumerate(zip(coords, shape)):
        if c.size and (c.min() < 0 or c.max() >= n):
            raise ExecutionError(
                f"run_kernel: {tv.name} is written out of bounds on axis {k} (index {c.max()} "
                f"of {n}); its schedule does not match its shape"
            )
    vals = np.where(valid, value, poison(dtype)).astype(dtype, copy=False)[sel]
    out[tuple(coords)] = vals
    written[tuple(coords)] = valid[sel]
    return out, written


def run_scheduled(
    fusion: Fusion, local_inputs: list[np.ndarray], kernel: Kernel | None = None
) -> list[np.ndarray]:
    """Run the whole fusion (scheduled in place) as one kernel on local input shards."""
    kernel = kernel or whole_fusion_kernel(fusion)
    out = run_kernel(kernel, dict(zip(fusion.inputs, local_inputs)))
    return [out[t] for t in fusion.outputs]


def shard_slices(tv: TensorView, device_index: int) -> tuple[slice, ...]:
    """The slice of `tv`'s global data held by the device at `device_index` of its mesh."""
    slices = [slice(None)] * len(tv.shape)
    for s in shardings(tv).values():
        if s.data_index is not None:
            n = tv.shape[s.data_index] // s.num_devices
            slices[s.data_index] = slice(device_index * n, (device_index + 1) * n)
    return tuple(slices)
