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

Values are computed in their compute dtype (half in float registers) and are
rounded to their storage dtype only at the kernel's outputs, where generated code
stores them to global memory; a tensor that is not inlined is held in its compute
dtype, as the CUDA kernel recomputes it in registers.

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
from fuserlite.runtime.numpy_ops import eval_expr, store
from fuserlite.schedule.indexing import (
    GridAxis,
    TensorIndex,
    evaluate,
    flat_offset,
    kernel_grid,
    loop_var,
    lower_tensor,
    schedule_signature,
)
from fuserlite.schedule.pointwise import whole_fusion_kernel
from fuserlite.schedule.propagate import axis_pairs, data_axes, producer_coords


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


MAX_GRID_POINTS = 2**28  # index arrays of this many int64 points take 2 GiB


class _Grid:
    """The kernel grid as numpy index arrays, and lowered indices cached by structure.

    Loop variables are open (broadcastable) aranges, so index arithmetic on outer
    loops costs little; results are flattened to one value per grid point.
    """

    def __init__(self, grid: list[GridAxis]) -> None:
        self.grid = grid
        self.extents = tuple(g.extent for g in grid)
        self.size = math.prod(self.extents)
        if self.size > MAX_GRID_POINTS:
            raise ExecutionError(
                f"the kernel grid {list(self.extents)} has {self.size} points; the kernel runner "
                f"evaluates at most {MAX_GRID_POINTS} at once (split by smaller factors)"
            )
        n = len(grid)
        self.env = {
            loop_var(j): np.arange(e, dtype=np.int64).reshape([1] * j + [e] + [1] * (n - j - 1))
            for j, e in enumerate(self.extents)
        }
        self._memo: dict[tuple, np.ndarray] = {}
        self._lowered: dict[tuple, TensorIndex] = {}
        self._preds: dict[tuple, np.ndarray] = {}
        self._offsets: dict[tuple, _Offset] = {}

    def flat(self, value: np.ndarray) -> np.ndarray:
        """One entry per grid point, in grid order."""
        return np.broadcast_to(value, self.extents).reshape(-1)

    def lower(self, tv: TensorView) -> tuple[tuple, TensorIndex, np.ndarray]:
        """(structure key, symbolic index, predicate array) of a tensor the kernel computes."""
        key = schedule_signature(tv)
        ti = self._lowered.get(key)
        if ti is None:
            ti = self._lowered[key] = lower_tensor(tv, self.grid)
            pred = np.ones(self.extents, dtype=bool)
            for ix, bound in ti.predicates:
                pred = pred & (evaluate(ix, self.env, self._memo) < bound)
            self._preds[key] = self.flat(pred)
        return key, ti, self._preds[key]

    def offset(self, key: tuple, shape: tuple[int, ...], coords: list) -> _Offset:
        """Flat offsets into an array of `shape` at `coords` (cached by `key`)."""
        hit = self._offsets.get(key)
        if hit is None:
            ix = flat_offset(shape, coords)
            off = self.flat(evaluate(ix, self.env, self._memo))
            hit = self._offsets[key] = _Offset(off, math.prod(shape))
        return hit


_GRIDS: dict[tuple[GridAxis, ...], _Grid] = {}


def _grid_for(grid: list[GridAxis]) -> _Grid:
    """Grids are reused across runs: everything cached in them is keyed by structure."""
    key = tuple(grid)
    hit = _GRIDS.get(key)
    if hit is None:
        if len(_GRIDS) >= 8:
            _GRIDS.pop(next(iter(_GRIDS)))
        hit = _GRIDS[key] = _Grid(grid)
    return hit


class _Offset:
    """Flat offsets of one access, with the two layouts that need no gather."""

    def __init__(self, off: np.ndarray, n: int) -> None:
        self.off = off
        self.n = n
        self.in_bounds = bool(off.size == 0 or (off.min() >= 0 and off.max() < n))
        # Grid point k < n reads element k and every later point falls past the end.
        self.identity = (
            n <= off.size and np.array_equal(off[:n], np.arange(n)) and bool((off[n:] >= n).all())
        )
        # Grid point k reads element k % n (a broadcast over outer axes).
        self.periodic = (
            not self.identity
            and 0 < n < off.size
            and off.size % n == 0
            and np.array_equal(
                off.reshape(-1, n), np.broadcast_to(np.arange(n), (off.size // n, n))
            )
        )


def _access_key(expr: Expr, producer: TensorView, consumer_key: tuple) -> tuple:
    """What the producer offsets depend on: the consumer's schedule and the axis map."""
    c_pos = {id(ax): k for k, ax in enumerate(data_axes(expr.output))}
    mapping = {id(p): c_pos[id(c)] for p, c in axis_pairs(expr, producer)}
    axes = tuple(-1 if ax.is_broadcast else mapping.get(id(ax), -1) for ax in data_axes(producer))
    return consumer_key, local_shape(producer), axes


def run_kernel(
    kernel: Kernel, local_inputs: dict[TensorView, np.ndarray]
) -> dict[TensorView, np.ndarray]:
    """Execute a scheduled kernel on one device's local input shards; returns local outputs."""
    grid = _grid_for(kernel_grid([e.output for e in kernel.exprs]))
    arrays: dict[int, np.ndarray] = {}
    written: dict[int, np.ndarray | None] = {}  # None: every element was written
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
        written[id(tv)] = None
    regs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    outputs = {id(t) for t in kernel.outputs}
    for expr in kernel.exprs:
        out = expr.output
        key, ti, pred = grid.lower(out)
        coords = [ix for ix, ax in zip(ti.logical, out.domain.logical) if not ax.is_reduction]
        args, valid = [], pred
        for inp in expr.inputs:
            if id(inp) in regs:
                value, ok = regs[id(inp)]
            elif id(inp) in arrays:
                off = grid.offset(
                    _access_key(expr, inp, key),
                    local_shape(inp),
                    producer_coords(expr, inp, coords),
                )
                value, ok = _gather(arrays[id(inp)], written[id(inp)], off, pred)
            else:
                raise ExecutionError(
                    f"run_kernel: {out.name} reads {inp.name}, which is neither a kernel input "
                    "nor computed earlier in the kernel"
                )
            args.append(value)
            if ok is not pred and ok is not valid:
                valid = valid & ok
        is_copy = isinstance(expr, BroadcastOp)
        value = args[0] if is_copy else eval_expr(expr, args, (grid.size,))
        if is_inlined(out):
            regs[id(out)] = (value, valid)
        if id(out) in outputs or not is_inlined(out):
            off = grid.offset((key, local_shape(out), "self"), local_shape(out), coords)
            arrays[id(out)], written[id(out)] = _scatter(out, value, valid, pred, off)
    result = {}
    for tv in kernel.outputs:
        if id(tv) not in arrays:
            raise ExecutionError(f"run_kernel: kernel output {tv.name} was never written")
        result[tv] = store(tv, arrays[id(tv)])
    return result


def _gather(
    arr: np.ndarray, written: np.ndarray | None, off: _Offset, pred: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The array's elements at the offsets, and where they are valid."""
    flat = arr.reshape(-1)
    ok = pred
    if off.identity and written is None and off.n == pred.size:
        return flat, ok  # the grid is the array: read it in place
    if off.identity:  # grid point k reads element k: a slice, no gather
        value = np.empty(pred.shape, dtype=arr.dtype)
        value[: off.n] = flat
        value[off.n :] = flat[0] if off.n else 0
        if written is not None:
            ok = ok & np.concatenate([written.reshape(-1), np.zeros(pred.size - off.n, bool)])
        return value, ok
    if off.periodic and written is None:
        return np.tile(flat, off.off.size // off.n), ok
    value = np.take(flat, off.off, mode="clip")
    if not off.in_bounds:
        ok = ok & (off.off >= 0) & (off.off < off.n)
    if written is not None:
        ok = ok & np.take(written.reshape(-1), off.off, mode="clip")
    return value, ok


def _scatter(
    tv: TensorView, value: np.ndarray, valid: np.ndarray, pred: np.ndarray, off: _Offset
) -> tuple[np.ndarray, np.ndarray | None]:
    """Write the values (in tv's compute dtype) where the predicate holds; returns
    (array, written mask or None)."""
    shape = local_shape(tv)
    dtype = tv.dtype.compute.numpy
    value = value.astype(dtype, copy=False)
    if valid is not pred:
        value = np.where(valid, value, poison(dtype))
    if off.identity and pred[: off.n].all() and not pred[off.n :].any():
        return value[: off.n].reshape(shape).copy(), None
    sel = off.off[pred]
    if sel.size and (sel.min() < 0 or sel.max() >= off.n):
        raise ExecutionError(
            f"run_kernel: {tv.name} is written out of bounds (flat index {sel.max()} of "
            f"{off.n}); its schedule does not match its shape"
        )
    out = np.full(off.n, poison(dtype), dtype=dtype)
    written = np.zeros(off.n, dtype=bool)
    out[sel] = value[pred]
    written[sel] = valid[pred]
    if written.all():  # e.g. a broadcast row every block writes: readers take the fast paths
        return out.reshape(shape), None
    return out.reshape(shape), written.reshape(shape)


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
