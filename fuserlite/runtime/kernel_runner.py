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
from fuserlite.kernel.indexing import (
    Ix,
    TensorIndex,
    device_index,
    device_indices,
    global_index,
    schedule_signature,
)
from fuserlite.ops.registry import compute_dtype, definition, is_indexed
from fuserlite.program.program import Kernel, Program
from fuserlite.runtime.kernel_grid import Grid, GridCache, Offset
from fuserlite.runtime.kernel_memory import Store, gather, rows
from fuserlite.runtime.liveness import dead_after
from fuserlite.runtime.numpy_ops import eval_at_points, store
from fuserlite.runtime.shards import device_slices
from fuserlite.schedule.grid import GridAxis, grid_axes, kernel_grid
from fuserlite.schedule.propagate import axis_pairs, data_axes, producer_coords


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
    device = device_values(kernel, plan.devices, device)
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
    """A batch of steps with what their evaluation needs on every chunk: expressions
    that lower alike (`_batch_key`), evaluated as one numpy step of one row each."""

    batch: list[Expr]  # in kernel order; one, unless several lower alike
    key: tuple
    index: TensorIndex
    # Per operand: None for a register, else (offsets key, shape, coordinates) to gather.
    reads: list[tuple[tuple, tuple[int, ...], list] | None]
    # Per operand, each member's tensor (one tensor where every member reads the same).
    operands: list[list[TensorView]]
    # Per scalar position, a column of the members' scalars (None: the expression's own).
    scalars: dict[int, np.ndarray] | None
    register: bool  # consumers read its values at their own grid point
    store: tuple[tuple, list] | None  # (offsets key, coordinates) where it is written
    position: Ix | None  # an indexed op's global linear index (OpDef.indexed), else None

    @property
    def expr(self) -> Expr:
        return self.batch[0]


Pass = tuple[list[_Lowered], list[list[TensorView]]]  # steps, registers dead after each


@dataclass(eq=False)
class KernelPlan:
    """What running a kernel takes that depends on its IR alone."""

    grid: list[GridAxis]
    passes: list[Pass]
    devices: list[str]  # the device indices the kernel's tensors read (device_indices)


def plan_kernel(kernel: Kernel, grids: GridCache) -> KernelPlan:
    """The kernel's grid and passes, lowered in batches, with the registers each batch
    is the last to read."""
    computed = [e.output for e in kernel.exprs]
    axes = kernel_grid(_grid_representatives(computed))
    grid = grids.grid(axes)
    registers = {id(t) for t in computed if is_inlined(t)}
    plan = KernelPlan(axes, [], device_indices([*kernel.inputs, *computed]))
    for steps in _passes(kernel):
        lowered = [_lower(grid, batch, registers) for batch in _batches(steps, registers)]
        # A register is dropped after its last reader in the pass: a chunk holds a few.
        dead = dead_after(
            lowered,
            lambda p: [t for ts, access in zip(p.operands, p.reads) if access is None for t in ts],
            lambda p: [e.output for e in p.batch] if p.register else [],
        )
        plan.passes.append((lowered, dead))
    return plan


def _grid_representatives(tensors: list[TensorView]) -> list[TensorView]:
    """The first tensor of each distinct grid binding: kernel_grid reads a tensor's grid
    axes (extent, parallel type) and whether it holds one element, so the others add
    nothing to its grid and pass its checks as their representative did."""
    first: dict[tuple, TensorView] = {}
    for tv in tensors:
        key = (
            tuple((ax.extent, ax.parallel_type) for ax in grid_axes(tv)),
            math.prod(local_shape(tv)) == 1,
        )
        first.setdefault(key, tv)
    return list(first.values())


def _batch_key(step: _Step, registers: set[int]) -> tuple | None:
    """Everything a step's lowering and numpy row depend on but its operands' values and
    its scalars; None for a step evaluated alone (an indexed op, one of several
    outputs, unhashable attributes)."""
    expr, out = step.expr, step.expr.output
    d = definition(expr)
    if d is None or d.indexed or len(expr.outputs) != 1:
        return None
    try:
        attrs = tuple(sorted(expr.attributes().items()))
        hash(attrs)
    except TypeError:
        return None
    sig = schedule_signature(out)
    reads = tuple(
        (inp.dtype, None if id(inp) in registers else _access_key(expr, inp, sig))
        for inp in expr.inputs
    )
    scalars = tuple(getattr(expr, "scalars", {}))
    where = (step.store, id(out) in registers, local_shape(out))
    return (
        expr.op_name,
        type(expr),
        attrs,
        scalars,
        compute_dtype(expr),
        out.dtype,
        sig,
        where,
        reads,
    )


def _batches(steps: list[_Step], registers: set[int]) -> list[list[_Step]]:
    """Runs of consecutive steps of one batch key none of which reads another's output."""
    batches: list[list[_Step]] = []
    last, made = None, set()
    for step in steps:
        key = _batch_key(step, registers)
        if key is not None and key == last and not any(id(t) in made for t in step.expr.inputs):
            batches[-1].append(step)
        else:
            batches.append([step])
            last, made = key, set()
        made.add(id(step.expr.output))
    return batches


def _lower(grid: Grid, batch: list[_Step], registers: set[int]) -> _Lowered:
    step = batch[0]
    expr, out = step.expr, step.expr.output
    key, ti = grid.lower(out)
    coords = [ix for ix, ax in zip(ti.logical, out.domain.logical) if not ax.is_reduction]
    reads = [
        None
        if id(inp) in registers
        else (_access_key(expr, inp, key), local_shape(inp), producer_coords(expr, inp, coords))
        for inp in expr.inputs
    ]
    exprs = [s.expr for s in batch]
    operands = []
    for k, inp in enumerate(expr.inputs):
        tensors = [e.inputs[k] for e in exprs]
        operands.append([inp] if all(t is inp for t in tensors) else tensors)
    scalars = None
    if len(exprs) > 1 and getattr(expr, "scalars", None):
        dtype = compute_dtype(expr).numpy  # as numpy_ops converts each expression's own
        scalars = {
            k: np.asarray([e.scalars[k] for e in exprs], dtype).reshape(-1, 1) for k in expr.scalars
        }
    store = ((key, local_shape(out), "self"), coords) if step.store else None
    position = global_index(out, coords) if is_indexed(expr) else None
    return _Lowered(exprs, key, ti, reads, operands, scalars, id(out) in registers, store, position)


def _run_pass(
    grid: Grid,
    steps: list[_Lowered],
    dead: list[list[TensorView]],
    arrays: dict,
    written: dict,
    device: dict[str, int],
) -> None:
    """Evaluate `steps` chunk by chunk; the tensors they store join `arrays`."""
    stores = [
        None if p.store is None else Store([e.output for e in p.batch], *p.store) for p in steps
    ]
    for chunk in grid.chunks():
        regs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for p, drop, to in zip(steps, dead, stores):
            pred = chunk.pred(p.key, p.index, device)
            args, valid = [], pred
            for access, tensors in zip(p.reads, p.operands):
                off = None if access is None else chunk.offset(*access)
                value, ok = _operand(tensors, off, pred, regs, arrays, written)
                args.append(value)
                if ok is not pred and ok is not valid:
                    valid = valid & ok
            index = None if p.position is None else chunk.values(p.position, device)
            value = eval_at_points(p.expr, args, index, p.scalars)
            if p.register:
                if len(p.batch) == 1:
                    regs[id(p.expr.output)] = (value, valid)
                else:
                    count = len(p.batch)
                    for e, v, ok in zip(p.batch, rows(value, count), rows(valid, count)):
                        regs[id(e.output)] = (v, ok)
            if to is not None:
                to.write(chunk, value, valid, pred)
            for t in drop:
                regs.pop(id(t), None)
        chunk.done()
    for p, to in zip(steps, stores):
        if to is not None:
            for e, (data, mask) in zip(p.batch, to.finish()):
                arrays[id(e.output)], written[id(e.output)] = data, mask


def _operand(
    tensors: list[TensorView], off: Offset | None, pred: np.ndarray, regs, arrays, written
) -> tuple[np.ndarray, np.ndarray]:
    """An operand's values at a chunk's points and where they are valid: its register
    (`off` None) or its elements at `off`; for a batch whose members read different
    tensors, one row per member."""
    got = [
        regs[id(t)] if off is None else gather(arrays[id(t)], written[id(t)], off, pred)
        for t in tensors
    ]
    if len(got) == 1:
        return got[0]
    oks = [ok for _, ok in got]
    first = oks[0]
    ok = first if all(o is first for o in oks) else np.stack(oks)
    return np.stack([v for v, _ in got]), ok


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
