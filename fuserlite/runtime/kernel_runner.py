"""Run a scheduled kernel through its schedule, vectorized with numpy over its grid.

The grid is the kernel's loop nest (`blockIdx x Unswitch x threadIdx`, see
fuserlite.schedule.grid.kernel_grid); every grid point is one GPU thread
iteration, evaluated as numpy arrays a chunk of whole blocks at a time
(fuserlite.runtime.kernel_grid), so memory beyond the kernel's tensors stays a
few MiB. Device-parallel loop axes take index 0: the arrays are one device's
local shards.

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
from dataclasses import dataclass

import numpy as np

from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.readonly import remembered
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.indexing import Ix, TensorIndex, device_index, device_indices, global_index
from fuserlite.ops.registry import is_indexed
from fuserlite.program.program import Kernel, Program
from fuserlite.runtime.kernel_grid import Grid, GridCache, GridChunk, Offset
from fuserlite.runtime.liveness import dead_after
from fuserlite.runtime.numpy_ops import eval_at_points, store
from fuserlite.runtime.shards import device_slices
from fuserlite.schedule.grid import GridAxis, kernel_grid
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


def _access_key(expr: Expr, producer: TensorView, consumer_key: tuple) -> tuple:
    """What the producer offsets depend on: the consumer's schedule and the axis map."""
    c_pos = {id(ax): k for k, ax in enumerate(data_axes(expr.output))}
    mapping = {id(p): c_pos[id(c)] for p, c in axis_pairs(expr, producer)}
    axes = tuple(-1 if ax.is_broadcast else mapping.get(id(ax), -1) for ax in data_axes(producer))
    return consumer_key, local_shape(producer), axes


@dataclass(eq=False)
class _Step:
    """One expression of a kernel as a pass over the grid evaluates it."""

    expr: Expr
    store: bool  # write its output to memory in this pass


def _passes(kernel: Kernel) -> list[list[_Step]]:
    """The kernel's expressions grouped into passes over the grid.

    Chunk by chunk, a pass evaluates its expressions in kernel order. A tensor read
    by index (not inlined) must be complete before it is read, as if the whole grid
    had run each expression in turn; so its readers go to a later pass than the one
    that writes it. An inlined tensor is a register: it is computed in every pass
    that reads it (its readers' chunk holds the same grid points), as generated code
    recomputes a value each thread needs."""
    inputs = {id(t) for t in kernel.inputs}
    stored = {id(t) for t in kernel.outputs}
    level: dict[int, int] = {}
    for expr in kernel.exprs:
        lv = 0
        for inp in expr.inputs:
            if id(inp) in inputs:
                continue
            if id(inp) not in level:
                raise ExecutionError(
                    f"run_kernel: {expr.output.name} reads {inp.name}, which is neither a kernel "
                    "input nor computed earlier in the kernel"
                )
            lv = max(lv, level[id(inp)] + (0 if is_inlined(inp) else 1))
        level[id(expr.output)] = lv
        if not is_inlined(expr.output):
            stored.add(id(expr.output))
    needed: dict[int, set[int]] = {}
    for expr in reversed(kernel.exprs):
        out = needed.setdefault(id(expr.output), set())
        if id(expr.output) in stored:
            out.add(level[id(expr.output)])
        for inp in expr.inputs:
            if id(inp) in level and is_inlined(inp):
                needed.setdefault(id(inp), set()).update(out)
    return [
        [
            _Step(e, id(e.output) in stored and level[id(e.output)] == lv)
            for e in kernel.exprs
            if lv in needed[id(e.output)]
        ]
        for lv in range(max(level.values(), default=-1) + 1)
    ]


def run_kernel(
    kernel: Kernel,
    local_inputs: dict[TensorView, np.ndarray],
    plan: KernelPlan | None = None,
    grids: GridCache | None = None,
    device: dict[str, int] | None = None,
) -> dict[TensorView, np.ndarray]:
    """Execute a scheduled kernel on one device's local input shards; returns local outputs.

    Shards are the buffers every device allocates (local_shape); `device`, the device's
    index along each device parallel type ({"didx": 3}, `device_indices`), is what the
    predicates of an uneven sharding and the global index of rand_like/iota read: a
    kernel that reads one needs it (an ExecutionError otherwise, never device 0's
    numbers by default).

    `plan` is plan_kernel(kernel), for a caller that runs an unchanging kernel often;
    without it the plan is worked out once per device, or once while the IR is only
    read (fuserlite.ir.readonly). `grids` keeps the grid's index arrays for the next
    run (the executor's own cache); without it they last this run."""
    grids = grids if grids is not None else GridCache()
    plan = plan or remembered("kernel plan", kernel, lambda: plan_kernel(kernel, grids))
    grid = grids.grid(plan.grid)
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
        arrays[id(tv)] = arr.reshape(-1)
        written[id(tv)] = None
    device = device_values(kernel, device_indices(kernel.tensors), device)
    for steps, dead in plan.passes:
        _run_pass(grid, steps, dead, arrays, written, device)
    grids.trim()
    result = {}
    for tv in kernel.outputs:
        if id(tv) not in arrays:
            raise ExecutionError(f"run_kernel: kernel output {tv.name} was never written")
        result[tv] = store(tv, arrays[id(tv)].reshape(local_shape(tv)))
    return result


@dataclass(eq=False)
class _Lowered:
    """A step with what its evaluation needs on every chunk."""

    expr: Expr
    key: tuple
    index: TensorIndex
    # Per operand: None for a register, else (offsets key, shape, coordinates) to gather.
    reads: list[tuple[TensorView, tuple[tuple, tuple[int, ...], list] | None]]
    register: bool  # consumers read its value at their own grid point
    store: tuple[tuple, list] | None  # (offsets key, coordinates) where it is written
    position: Ix | None  # an indexed op's global linear index (OpDef.indexed), else None


Pass = tuple[list[_Lowered], list[list[TensorView]]]  # steps, registers dead after each


@dataclass(eq=False)
class KernelPlan:
    """What running a kernel takes that depends on its IR alone."""

    grid: list[GridAxis]
    passes: list[Pass]


def plan_kernel(kernel: Kernel, grids: GridCache) -> KernelPlan:
    """The kernel's grid and passes, lowered, with the registers each step is the last
    to read."""
    axes = kernel_grid([e.output for e in kernel.exprs])
    grid = grids.grid(axes)
    registers = {id(e.output) for e in kernel.exprs if is_inlined(e.output)}
    plan = KernelPlan(axes, [])
    for steps in _passes(kernel):
        lowered = [_lower(grid, step, registers) for step in steps]
        # A register is dropped after its last reader in the pass: a chunk holds a few.
        dead = dead_after(
            lowered,
            lambda p: [inp for inp, access in p.reads if access is None],
            lambda p: [p.expr.output] if p.register else [],
        )
        plan.passes.append((lowered, dead))
    return plan


def _lower(grid: Grid, step: _Step, registers: set[int]) -> _Lowered:
    expr, out = step.expr, step.expr.output
    key, ti = grid.lower(out)
    coords = [ix for ix, ax in zip(ti.logical, out.domain.logical) if not ax.is_reduction]
    reads = [
        (inp, None)
        if id(inp) in registers
        else (
            inp,
            (_access_key(expr, inp, key), local_shape(inp), producer_coords(expr, inp, coords)),
        )
        for inp in expr.inputs
    ]
    store = ((key, local_shape(out), "self"), coords) if step.store else None
    position = global_index(out, coords) if is_indexed(expr) else None
    return _Lowered(expr, key, ti, reads, id(out) in registers, store, position)


def _run_pass(
    grid: Grid,
    steps: list[_Lowered],
    dead: list[list[TensorView]],
    arrays: dict,
    written: dict,
    device: dict[str, int],
) -> None:
    """Evaluate `steps` chunk by chunk; the tensors they store join `arrays`."""
    stores = [None if p.store is None else _Store(p.expr.output, *p.store) for p in steps]
    for chunk in grid.chunks():
        regs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for p, drop, to in zip(steps, dead, stores):
            expr = p.expr
            pred = chunk.pred(p.key, p.index, device)
            args, valid = [], pred
            for inp, access in p.reads:
                if access is None:
                    value, ok = regs[id(inp)]
                else:
                    off = chunk.offset(*access)
                    value, ok = _gather(arrays[id(inp)], written[id(inp)], off, pred)
                args.append(value)
                if ok is not pred and ok is not valid:
                    valid = valid & ok
            index = None if p.position is None else chunk.values(p.position, device)
            value = eval_at_points(expr, args, index)
            if p.register:
                regs[id(expr.output)] = (value, valid)
            if to is not None:
                to.write(chunk, value, valid, pred)
            for t in drop:
                regs.pop(id(t), None)
        chunk.done()
    for p, to in zip(steps, stores):
        if to is not None:
            arrays[id(p.expr.output)], written[id(p.expr.output)] = to.finish()


def _gather(
    flat: np.ndarray, written: np.ndarray | None, off: Offset, pred: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The array's elements at a chunk's offsets, and where they are valid."""
    ok = pred
    if off.identity:  # grid point k reads element k: a slice, no gather
        lo, m = off.start, off.within
        if m == pred.size:
            value = flat[lo : lo + m]  # read in place
        else:
            value = np.empty(pred.shape, dtype=flat.dtype)
            value[:m] = flat[lo : lo + m]
            value[m:] = flat[0] if off.n else 0
            ok = ok & (np.arange(pred.size) < m)  # past the end: nothing to read
        if written is not None:
            ok = ok & np.concatenate([written[lo : lo + m], np.zeros(pred.size - m, bool)])
        return value, ok
    if off.periodic and written is None:
        return np.tile(flat, pred.size // off.n), ok
    value = np.take(flat, off.off, mode="clip")
    if not off.in_bounds:
        ok = ok & (off.off >= 0) & (off.off < off.n)
    if written is not None:
        ok = ok & np.take(written, off.off, mode="clip")
    return value, ok


class _Store:
    """A tensor the kernel writes to memory, filled chunk by chunk in grid order.

    While every chunk so far wrote the elements of its own grid points in order (the
    identity layout: grid point k writes element k) the elements written are a
    prefix and no mask is kept; the first chunk that writes otherwise fills the rest
    with poison and starts a mask of the elements written (and valid). Values are
    held in the tensor's compute dtype (see fuserlite.runtime.numpy_ops.store)."""

    def __init__(self, tv: TensorView, key: tuple, coords: list) -> None:
        self.tv = tv
        self.key = key
        self.coords = coords
        self.shape = local_shape(tv)
        self.dtype = tv.dtype.compute.numpy
        self.n = math.prod(self.shape)
        self.data = np.empty(self.n, dtype=self.dtype)
        self.prefix = 0  # while `mask` is None: elements [0, prefix) are written
        self.invalid: list[np.ndarray] = []  # ... of which these flat indices are not valid
        self.mask: np.ndarray | None = None

    def write(self, chunk: GridChunk, value: np.ndarray, valid: np.ndarray, pred) -> None:
        """Store the chunk's values where the predicate holds (invalid ones as poison)."""
        off = chunk.offset(self.key, self.shape, self.coords)
        value = value.astype(self.dtype, copy=False)
        if valid is not pred:
            value = np.where(valid, value, poison(self.dtype))
        lo, m = off.start, off.within
        if off.identity and pred[:m].all() and not pred[m:].any():
            self.data[lo : lo + m] = value[:m]
            if self.mask is not None:
                self.mask[lo : lo + m] = valid[:m]
                return
            if valid is not pred and not valid[:m].all():
                self.invalid.append(lo + np.flatnonzero(~valid[:m]))
            if m:
                self.prefix = lo + m
            return
        self._start_mask()
        sel = off.at(pred)  # a broadcast row: the first chunk holds all its points
        if sel.size and (sel.min() < 0 or sel.max() >= off.n):
            raise ExecutionError(
                f"run_kernel: {self.tv.name} is written out of bounds (flat index {sel.max()} of "
                f"{off.n}); its schedule does not match its shape"
            )
        self.data[sel] = value[pred]
        self.mask[sel] = valid[pred]

    def _start_mask(self) -> None:
        if self.mask is not None:
            return
        self.mask = np.zeros(self.n, dtype=bool)
        self.mask[: self.prefix] = True
        for where in self.invalid:
            self.mask[where] = False
        self.data[self.prefix :] = poison(self.dtype)

    def finish(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(flat data, mask of the valid elements, or None when every element was written)."""
        if self.mask is None and self.prefix < self.n:
            self._start_mask()  # a grid smaller than the tensor
        if self.mask is None or self.mask.all():
            return self.data, None
        return self.data, self.mask


def run_scheduled(
    program: Program, local_inputs: list[np.ndarray], grids: GridCache | None = None
) -> list[np.ndarray]:
    """Run a program of one scheduled kernel (a pointwise fusion after segment and
    schedule-pointwise) on local input shards; returns its outputs (`grids`: see
    run_kernel)."""
    if len(program.steps) != 1 or not program.kernels:
        raise ExecutionError(
            f"run_scheduled runs a program of one kernel, not {program!r}; "
            "run the program with FusionExecutor"
        )
    (kernel,) = program.kernels
    out = run_kernel(kernel, dict(zip(program.inputs, local_inputs)), grids=grids)
    return [out[t] for t in program.outputs]


def shard_slices(tv: TensorView, position: int) -> tuple[slice, ...]:
    """The slice of `tv`'s global data held by the device at `position` of its mesh."""
    return device_slices(tv, tv.mesh.devices[position]) if tv.mesh else ()


def device_values(
    kernel: Kernel, names: list[str], device: dict[str, int] | None
) -> dict[str, int]:
    """The device indices `names` a kernel reads, from `device`; ExecutionError when one is
    missing (a sharded kernel's values depend on which device runs it)."""
    missing = [n for n in names if n not in (device or {})]
    if missing:
        raise ExecutionError(
            f"the kernel writing {abbreviate(t.name for t in kernel.outputs)} reads the device index {', '.join(missing)} (its tensors "
            "are sharded unevenly or draw values at global indices): pass device= with this "
            "device's index along each parallel type (device_coordinates(mesh, device))"
        )
    return {n: device[n] for n in names}


def device_coordinates(mesh: DeviceMesh, device: int) -> dict[str, int]:
    """A device's index along each device parallel type of its mesh: {"didx": 2, ...},
    what a kernel's uneven-sharding predicates read."""
    coords = mesh.coordinates(device)
    return {device_index(pt): coords[mesh.axis_of(pt)] for pt in mesh.parallel_types}
