"""Run a scheduled kernel through its schedule, vectorized with numpy over its grid.

The grid is the kernel's loop nest (`blockIdx x Unswitch x threadIdx`, see
fuserlite.schedule.grid.kernel_grid); every grid point is one GPU thread
iteration, evaluated as numpy arrays a chunk of whole blocks at a time
(fuserlite.kernel.grid_index), so memory beyond the kernel's tensors stays a
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

import numpy as np

from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.batches import KernelPlan, Lowered, Source, plan_kernel
from fuserlite.kernel.grid_index import Grid, GridCache, Offset
from fuserlite.kernel.indexing import device_index
from fuserlite.kernel.memory import Store, gather
from fuserlite.kernel.reduction import Reduction, run_reduction
from fuserlite.program.program import Kernel, Program
from fuserlite.program.shards import device_slices
from fuserlite.reference.numpy_ops import eval_at_points, store


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

    `plan` is plan_kernel(kernel), for a caller that runs an unchanging kernel often
    (the executor plans each kernel once); without it the plan is worked out here.
    `grids` keeps the grid's index arrays for the next
    run (the executor's own cache); without it they last this run."""
    grids = grids if grids is not None else GridCache()
    plan = plan or plan_kernel(kernel, grids)
    given = _checked_inputs(kernel, local_inputs)
    if isinstance(plan, Reduction):  # a row per block: fuserlite.kernel.reduction
        return run_reduction(kernel, plan, given)
    grid = grids.grid(plan.grid)
    arrays: dict[int, np.ndarray] = {}
    written: dict[int, np.ndarray | None] = {}  # None: every element was written
    for tv, arr in given.items():
        arrays[id(tv)] = arr.reshape(-1)
        written[id(tv)] = None
    device = device_values(kernel, plan.devices, device)
    shapes: dict[int, tuple[int, ...]] = {}  # of the tensors stored, as their batch's
    for steps, dead in plan.passes:
        _run_pass(grid, steps, dead, arrays, written, shapes, device)
    grids.trim()
    result = {}
    for tv in kernel.outputs:
        if id(tv) not in arrays:
            raise ExecutionError(f"run_kernel: kernel output {tv.name} was never written")
        result[tv] = store(tv, arrays[id(tv)].reshape(shapes.get(id(tv)) or local_shape(tv)))
    return result


def _checked_inputs(
    kernel: Kernel, local_inputs: dict[TensorView, np.ndarray]
) -> dict[TensorView, np.ndarray]:
    """The kernel's input arrays, each of its tensor's local shape (an ExecutionError
    names the first one missing or of another shape)."""
    given = {}
    for tv in kernel.inputs:
        if tv not in local_inputs:
            raise ExecutionError(f"run_kernel: no array given for kernel input {tv.name}")
        arr = np.asarray(local_inputs[tv])
        if arr.shape != local_shape(tv):
            raise ExecutionError(
                f"run_kernel: input {tv.name} has local shape {list(local_shape(tv))}, "
                f"got an array of shape {list(arr.shape)}"
            )
        given[tv] = arr
    return given


def _run_pass(
    grid: Grid,
    steps: list[Lowered],
    dead: list[list[int]],
    arrays: dict,
    written: dict,
    shapes: dict,
    device: dict[str, int],
) -> None:
    """Evaluate `steps` chunk by chunk; the tensors they store join `arrays`."""
    stores = [None if p.store is None else Store(p.outputs, *p.store) for p in steps]
    for chunk in grid.chunks():
        # Registers by Lowered.register key: one value, or a batch's block of rows.
        regs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for p, drop, to in zip(steps, dead, stores):
            pred = chunk.pred(p.key, p.index, device)
            args, valid = [], pred
            for access, source in zip(p.reads, p.sources):
                if access is None:
                    value, ok = _register(source, regs)
                else:
                    value, ok = _gathered(source, chunk.offset(*access), pred, arrays, written)
                args.append(value)
                if ok is not pred and ok is not valid:
                    valid = valid & ok
            index = None if p.position is None else chunk.values(p.position, device)
            value = eval_at_points(p.expr, args, index, p.scalars)
            if p.register is not None:
                regs[p.register] = (value, valid)
            if to is not None:
                to.write(chunk, value, valid, pred)
            for key in drop:
                regs.pop(key, None)
        chunk.done()
    for p, to in zip(steps, stores):
        if to is not None:
            for tv, (data, mask) in zip(p.outputs, to.finish()):
                i = id(tv)
                arrays[i], written[i], shapes[i] = data, mask, to.shape


def _row(a: np.ndarray, row: int | None) -> np.ndarray:
    """Row `row` of a batch's block of values (a value all rows share is its own row)."""
    return a if row is None or a.ndim == 1 else a[row]


def _register(source: Source, regs) -> tuple[np.ndarray, np.ndarray]:
    """A register operand's values and where they are valid (see batches.Source)."""
    if source.rows is None:
        return regs[source.key]
    if source.key is not None:
        value, ok = regs[source.key]
        return _row(value, source.rows[0]), _row(ok, source.rows[0])
    got = [(_row(v, r), _row(ok, r)) for (v, ok), r in ((regs[k], r) for k, r in source.rows)]
    return _stacked(got)


def _gathered(
    tensors: list[TensorView], off: Offset, pred: np.ndarray, arrays, written
) -> tuple[np.ndarray, np.ndarray]:
    """An operand read at a chunk's offsets, one row per member where the members of a
    batch read different tensors."""
    got = [gather(arrays[id(t)], written[id(t)], off, pred) for t in tensors]
    return got[0] if len(got) == 1 else _stacked(got)


def _stacked(got: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The members' values as rows of one block, and where they are valid."""
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
