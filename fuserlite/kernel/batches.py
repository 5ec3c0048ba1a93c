"""Planning a scheduled kernel for the kernel runner: its grid, its passes over the
grid, and each pass's steps lowered to index expressions (fuserlite.kernel.runner
runs them).

A step is a batch: consecutive expressions of a pass that lower alike (the same op,
attributes, dtypes, output domain and mesh, operand accesses; `_batch_key`) and read none
of each other's outputs are lowered once and evaluated as one numpy step, one row per
expression, each with its own operands and scalars: N outputs `x + k` are two steps
(the adds, the stores), not 2N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.liveness import dead_after
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.grid_index import Grid, GridCache
from fuserlite.kernel.indexing import (
    Ix,
    TensorIndex,
    device_indices,
    global_index,
    lowering_key,
)
from fuserlite.kernel.reduction import Reduction, reduction_of
from fuserlite.ops.registry import compute_dtype, is_indexed
from fuserlite.program.program import Kernel
from fuserlite.schedule.axis_maps import axis_positions, producer_coords, producer_positions
from fuserlite.schedule.grid import GridAxis, kernel_grid


def is_inlined(tv: TensorView) -> bool:
    """True if consumers read `tv`'s register at their own grid point."""
    return tv.compute_at_pos > 0


def _access_key(expr: Expr, producer: TensorView, consumer_key: tuple) -> tuple:
    """What the producer offsets depend on: the consumer's lowering, the producer's
    local shape and which consumer coordinate indexes each of its data axes."""
    pairs = axis_positions(expr, producer)
    at = producer_positions(pairs, producer.domain, expr.output.domain)
    return consumer_key, local_shape(producer), at


@dataclass(eq=False)
class Step:
    """One expression of a kernel as a pass over the grid evaluates it."""

    expr: Expr
    store: bool  # write its output to memory in this pass


def _passes(kernel: Kernel) -> list[list[Step]]:
    """The kernel's expressions grouped into passes over the grid.

    Chunk by chunk, a pass evaluates its expressions in kernel order. A tensor read
    by index (not inlined) must be complete before it is read, as if the whole grid
    had run each expression in turn; so its readers go to a later pass than the one
    that writes it. An inlined tensor is a register: it is computed in every pass
    that reads it (its readers' chunk holds the same grid points), as generated code
    recomputes a value each thread needs."""
    inputs = {id(t) for t in kernel.inputs}
    outputs = {id(t) for t in kernel.outputs}
    level: dict[int, int] = {}
    inlined: dict[int, bool] = {}
    read: set[int] = set()  # the tensors computed here that an expression reads
    stored: list[bool] = []  # per expression, in a single pass: its output is written
    for expr in kernel.exprs:
        lv = 0
        for inp in expr.inputs:
            i = id(inp)
            if i in inputs:
                continue
            at = level.get(i)
            if at is None:
                raise ExecutionError(
                    f"run_kernel: {expr.output.name} reads {inp.name}, which is neither a kernel "
                    "input nor computed earlier in the kernel"
                )
            read.add(i)
            if not inlined[i]:
                at += 1
            if at > lv:
                lv = at
        out = expr.outputs[0]
        o = id(out)
        level[o] = lv
        register = inlined[o] = is_inlined(out)
        stored.append(not register or o in outputs)
    deepest = max(level.values(), default=-1)
    if deepest == 0 and all(o in read or o in outputs or not r for o, r in inlined.items()):
        # One pass, and every register feeds another expression: each is in it (a
        # forward path from it ends at a tensor no one reads, which is stored).
        return [list(map(Step, kernel.exprs, stored))]
    # Bit lv of needed[t]: t is computed in pass lv. A stored tensor (a kernel output,
    # or not inlined) in its own pass; an inlined one in every pass that reads it.
    needed: dict[int, int] = {}
    for expr in reversed(kernel.exprs):
        out = id(expr.output)
        bits = needed.get(out, 0)
        if out in outputs or not inlined[out]:
            bits |= 1 << level[out]
        needed[out] = bits
        for inp in expr.inputs:
            if bits and inlined.get(id(inp)):
                needed[id(inp)] = needed.get(id(inp), 0) | bits
    return [
        [
            Step(
                e,
                (id(e.output) in outputs or not inlined[id(e.output)])
                and level[id(e.output)] == lv,
            )
            for e in kernel.exprs
            if needed[id(e.output)] >> lv & 1
        ]
        for lv in range(deepest + 1)
    ]


@dataclass(frozen=True)
class Source:
    """Where a step reads a register operand: the register under `key` as it is (`rows`
    None: one value every member reads, or the block of rows of the batch that wrote
    it, whose members the step's members read in order), its row `rows[0]` for every
    member, or (`key` None) per member the (key, row) of its own register, stacked."""

    key: int | None
    rows: tuple | None


@dataclass(eq=False)
class Lowered:
    """A batch of steps with what their evaluation needs on every chunk: expressions
    that lower alike (`_batch_key`), evaluated as one numpy step of one row each."""

    batch: list[Expr]  # in kernel order; one, unless several lower alike
    outputs: list[TensorView]  # the batch's outputs, in its order (a run reads them often)
    key: tuple
    index: TensorIndex
    # Per operand: None for a register, else (offsets key, shape, coordinates) to gather.
    reads: list[tuple[tuple, tuple[int, ...], list] | None]
    # Per operand: a register's Source, or each member's tensor to gather (one tensor
    # where every member reads the same).
    sources: list[Source | list[TensorView]]
    # Per scalar position, a column of the members' scalars (None: the expression's own).
    scalars: dict[int, np.ndarray] | None
    register: int | None  # its register's key, if consumers read its values in registers
    store: tuple[tuple, list] | None  # (offsets key, coordinates) where it is written
    position: Ix | None  # an indexed op's global linear index (OpDef.indexed), else None

    @property
    def expr(self) -> Expr:
        return self.batch[0]


Pass = tuple[list[Lowered], list[list[int]]]  # steps, register keys dead after each

# A batch's values on a chunk are [members, chunk points], its stores [members, elements]:
# at most these many, so that batches of large tensors stay a few MiB.
MAX_BATCH_POINTS = 2**20
MAX_BATCH_ELEMENTS = 2**22


@dataclass(eq=False)
class KernelPlan:
    """What running a kernel takes that depends on its IR alone."""

    grid: list[GridAxis]
    passes: list[Pass]
    devices: list[str]  # the device indices the kernel's tensors read (device_indices)


def plan_kernel(kernel: Kernel, grids: GridCache) -> KernelPlan | Reduction:
    """The kernel's grid and passes, lowered in batches, with the registers each batch
    is the last to read; a scheduled reduction's plan is its Reduction
    (fuserlite.kernel.reduction)."""
    reduction = reduction_of(kernel)
    if reduction is not None:
        return reduction
    computed = [e.outputs[0] for e in kernel.exprs]
    layouts = _layouts(computed)
    firsts = list(dict.fromkeys(first for first, _ in layouts.values()))
    axes = kernel_grid(firsts)
    grid = grids.grid(axes)
    points = min(grid.size, grid.chunk_points)
    registers = {id(t) for t in computed if is_inlined(t)}
    # a tensor's device indices follow from its lowering key: its layout's first has them
    plan = KernelPlan(axes, [], device_indices([*kernel.inputs, *firsts]))
    for steps in _passes(kernel):
        owner: dict[int, tuple[int, int | None, int]] = {}  # register: (key, row, rows)
        lowered = []
        for batch in _batches(steps, registers, layouts, points):
            p = _lower(grid, batch, registers, owner)
            lowered.append(p)
            if p.register is not None:
                for row, e in enumerate(p.batch):
                    owner[id(e.output)] = (
                        p.register,
                        None if len(p.batch) == 1 else row,
                        len(p.batch),
                    )
        # A register is dropped after its last reader in the pass: a chunk holds a few.
        plan.passes.append((lowered, dead_after(lowered, _register_reads, _register_writes)))
    return plan


def _register_reads(p: Lowered) -> list[int]:
    keys = []
    for source, access in zip(p.sources, p.reads):
        if access is None:
            keys.extend([source.key] if source.key is not None else [k for k, _ in source.rows])
    return keys


def _register_writes(p: Lowered) -> list[int]:
    return [] if p.register is None else [p.register]


def _layouts(tensors: list[TensorView]) -> dict[int, tuple[TensorView, tuple]]:
    """Per tensor (by id): the first tensor of its layout, and the layout, its lowering
    key on its mesh. Tensors of one layout lower, bind the grid and allocate alike, so
    kernel_grid and local_shape ask only the first: the others add nothing to the grid
    and pass its checks as that one did."""
    first: dict[tuple, tuple[TensorView, tuple]] = {}  # layout: (its first tensor, it)
    layouts = {}
    for tv in tensors:
        key = (lowering_key(tv), tv.mesh)
        layouts[id(tv)] = first.setdefault(key, (tv, key))
    return layouts


def _batch_key(step: Step, registers: set[int], layouts: dict) -> tuple | None:
    """Everything a step's lowering and numpy row depend on but its operands' values and
    its scalars; None for a step evaluated alone (an indexed op, or one of several
    outputs)."""
    expr = step.expr
    d = expr.op_def
    if d is None or d.indexed or len(expr.outputs) != 1:
        return None
    out = expr.outputs[0]
    layout = layouts[id(out)][1]
    reads = tuple(
        [
            (inp.dtype, None if id(inp) in registers else _access_key(expr, inp, layout[0]))
            for inp in expr.inputs
        ]
    )
    return (
        expr.op_name,
        type(expr),
        tuple(expr.attributes().items()),
        tuple(getattr(expr, "scalars", ())),  # their positions; the values are each its own
        None if d.compute is None else d.compute(expr),  # else the output's dtype's
        out.dtype,
        layout,
        step.store,
        id(out) in registers,
        reads,
    )


def _batches(
    steps: list[Step], registers: set[int], layouts: dict, points: int
) -> list[list[Step]]:
    """Runs of consecutive steps of one batch key none of which reads another's output,
    of at most MAX_BATCH_POINTS values per chunk and MAX_BATCH_ELEMENTS stored."""
    batches: list[list[Step]] = []
    last, made, most = None, set(), 1
    for step in steps:
        key = _batch_key(step, registers, layouts)
        if (
            key is not None
            and _equal(key, last)
            and len(batches[-1]) < most
            and not any(id(t) in made for t in step.expr.inputs)
        ):
            batches[-1].append(step)
        else:
            batches.append([step])
            last, made = key, set()
            most = MAX_BATCH_POINTS // max(points, 1)
            if step.store:
                stored = math.prod(local_shape(layouts[id(step.expr.output)][0]))
                most = min(most, MAX_BATCH_ELEMENTS // max(stored, 1))
        made.add(id(step.expr.output))
    return batches


def _equal(a: tuple, b: tuple | None) -> bool:
    """a == b, False where an attribute does not compare as one value (an array)."""
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _lower(grid: Grid, batch: list[Step], registers: set[int], owner: dict) -> Lowered:
    """A batch lowered (its first step's lowering serves all): `owner` says which
    register key and row holds each register written so far in the pass."""
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
    sources: list[Source | list[TensorView]] = []
    for k, inp in enumerate(expr.inputs):
        tensors = [e.inputs[k] for e in exprs]
        same = all(t is inp for t in tensors)
        if reads[k] is not None:
            sources.append([inp] if same else tensors)
        else:
            sources.append(_source(tensors, same, owner))
    scalars = None
    if len(exprs) > 1 and getattr(expr, "scalars", None):
        dtype = compute_dtype(expr).numpy  # as numpy_ops converts each expression's own
        scalars = {
            k: np.asarray([e.scalars[k] for e in exprs], dtype).reshape(-1, 1) for k in expr.scalars
        }
    store = ((key, local_shape(out), "self"), coords) if step.store else None
    position = global_index(out, coords) if is_indexed(expr) else None
    register = id(out) if id(out) in registers else None
    outputs = [e.outputs[0] for e in exprs]
    return Lowered(exprs, outputs, key, ti, reads, sources, scalars, register, store, position)


def _source(tensors: list[TensorView], same: bool, owner: dict) -> Source:
    """Where a batch reads a register operand (`tensors`: each member's)."""
    try:
        owners = [owner[id(t)] for t in tensors]
    except KeyError:
        missing = next(t for t in tensors if id(t) not in owner)
        raise ExecutionError(
            f"run_kernel: {missing.name} is read as a register before the kernel computes it"
        ) from None
    key, row, rows = owners[0]
    if same:
        return Source(key, None if row is None else (row,))
    if rows == len(tensors) and all(o[0] == key and o[1] == g for g, o in enumerate(owners)):
        return Source(key, None)  # the block of the batch that wrote them, in order
    return Source(None, tuple((k, r) for k, r, _ in owners))
