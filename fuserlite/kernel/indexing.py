"""Index lowering: from a point of a tensor's loop domain back to its logical coordinates.

The recorded splits and merges are inverted, last first:

    Split(in -> outer, inner):  in    = outer * extent(inner) + inner
    Merge(outer, inner -> out): outer = out / extent(inner),  inner = out % extent(inner)

A split whose input extent is not a multiple of the factor has a tail: its
predicate `in < extent(in)` guards the points past the end. Broadcast logical
axes always index 0 and are never predicated. Device-parallel loop axes index 0
(a kernel runs on one device's local shard), so an outer split by D of a
sharded axis yields the local coordinate; where D does not divide the extent n,
a chunk holds ceil(n/D) rows and the device's own rows are predicated as nvFuser
does, `didx * ceil(n/D) + inner < n`, with `didx` the device's index (a kernel
parameter, `device_index`), so the trailing devices' short or empty chunks
compute only their rows.

Indices are small symbolic expressions (`Ix`) so that one lowering serves both
the numpy kernel runner (`evaluate`) and the CUDA printer (`c_expr`). Every
index is non-negative, so the simplifications of floor division and modulo
below hold; the row-major offset of coordinates that came from merges folds
back into the merged index, an expression a C compiler can vectorize.

The loop axes a kernel's grid iterates are fuserlite.schedule.grid's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fuserlite.ir.domain import Split, is_sharding_split
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.signature import domain_signature
from fuserlite.ir.stamps import domain_derived
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ops.registry import is_indexed
from fuserlite.printer import axis_text
from fuserlite.schedule.grid import GridAxis, grid_axes, unbound_loop_axis


@dataclass(frozen=True, eq=False)
class Ix:
    """An integer index expression: var, const, add, mul, div or mod; `ub` is an exclusive
    upper bound of its value (used to drop predicates that always hold)."""

    op: str
    args: tuple
    ub: int


def const(value: int) -> Ix:
    return Ix("const", (int(value),), int(value) + 1)


def var(name: str, extent: int) -> Ix:
    return Ix("var", (name,), int(extent))


def _is_const(a: Ix, value: int | None = None) -> bool:
    return a.op == "const" and (value is None or a.args[0] == value)


def add(a: Ix, b: Ix) -> Ix:
    if _is_const(a, 0):
        return b
    if _is_const(b, 0):
        return a
    if _is_const(a) and _is_const(b):
        return const(a.args[0] + b.args[0])
    if _is_div_mod_pair(a, b):  # (x / n) * n + x % n == x: re-linearizing a merge
        return b.args[0]
    if _is_mod_div_mod(a, b):  # ((x / n) % m) * n + x % n == x % (n * m): a merge of merges
        return mod(b.args[0], b.args[1] * a.args[0].args[1])
    return Ix("add", (a, b), a.ub + b.ub - 1)


def _is_div_mod_pair(a: Ix, b: Ix) -> bool:
    return (
        a.op == "mul"
        and a.args[0].op == "div"
        and b.op == "mod"
        and a.args[0].args[0] is b.args[0]
        and a.args[1] == a.args[0].args[1] == b.args[1]
    )


def _is_mod_div_mod(a: Ix, b: Ix) -> bool:
    return (
        a.op == "mul"
        and a.args[0].op == "mod"
        and a.args[0].args[0].op == "div"
        and b.op == "mod"
        and a.args[0].args[0].args[0] is b.args[0]
        and a.args[1] == a.args[0].args[0].args[1] == b.args[1]
    )


def mul(a: Ix, n: int) -> Ix:
    if n == 1:
        return a
    if n == 0 or _is_const(a, 0):
        return const(0)
    if _is_const(a):
        return const(a.args[0] * n)
    return Ix("mul", (a, n), (a.ub - 1) * n + 1)


def div(a: Ix, n: int) -> Ix:
    if n == 1:
        return a
    if _is_const(a):
        return const(a.args[0] // n)
    if a.ub <= n:
        return const(0)
    if a.op == "div":  # (x / m) / n == x / (m * n)
        return div(a.args[0], a.args[1] * n)
    return Ix("div", (a, n), (a.ub - 1) // n + 1)


def mod(a: Ix, n: int) -> Ix:
    if n == 1:
        return const(0)
    if _is_const(a):
        return const(a.args[0] % n)
    if a.ub <= n:
        return a
    return Ix("mod", (a, n), min(a.ub, n))


def structure(ix: Ix) -> tuple:
    """A hashable key equal for two structurally identical index expressions."""
    if ix.op in ("const", "var"):
        return (ix.op, ix.args[0])
    other = ix.args[1]
    return (ix.op, structure(ix.args[0]), structure(other) if isinstance(other, Ix) else other)


def evaluate(ix: Ix, env: dict[str, np.ndarray], memo: dict[tuple, np.ndarray]) -> np.ndarray:
    """The value of `ix` for numpy arrays of loop indices (`env`: variable -> int64 array,
    broadcastable against each other); `memo` shares equal subexpressions."""
    key = structure(ix)
    hit = memo.get(key)
    if hit is not None:
        return hit
    if ix.op == "const":
        out = np.int64(ix.args[0])
    elif ix.op == "var":
        out = env[ix.args[0]]
    elif ix.op == "add":
        out = evaluate(ix.args[0], env, memo) + evaluate(ix.args[1], env, memo)
    elif ix.op == "mul":
        out = evaluate(ix.args[0], env, memo) * ix.args[1]
    elif ix.op == "div":
        out = evaluate(ix.args[0], env, memo) // ix.args[1]
    else:
        out = evaluate(ix.args[0], env, memo) % ix.args[1]
    memo[key] = out
    return out


def c_expr(ix: Ix) -> str:
    """The index as a C expression over the loop variables."""
    if ix.op == "const":
        return str(ix.args[0])
    if ix.op == "var":
        return ix.args[0]
    a = c_expr(ix.args[0])
    if ix.op == "add":
        return f"({a} + {c_expr(ix.args[1])})"
    symbol = {"mul": "*", "div": "/", "mod": "%"}[ix.op]
    return f"({a} {symbol} {ix.args[1]})"


@dataclass
class TensorIndex:
    """Logical coordinates of one tensor at a loop point, and when they are valid."""

    logical: list[Ix]  # one per logical axis; broadcast axes are const(0)
    predicates: list[tuple[Ix, int]] = field(default_factory=list)  # each: index < bound
    devices: tuple[str, ...] = ()  # the device indices the predicates read (device_index)


def flat_offset(shape: tuple[int, ...], coords: list) -> Ix:
    """Row-major offset of `coords` (Ix or 0 per axis) into a contiguous array of `shape`."""
    total = const(0)
    stride = 1
    for c, n in reversed(list(zip(coords, shape))):
        if n > 1:
            total = add(mul(const(c) if isinstance(c, int) else c, stride), total)
        stride *= n
    return total


def loop_var(position: int) -> str:
    """Name of the loop index variable of grid position `position`."""
    return f"l{position}"


def device_index(parallel_type: ParallelType) -> str:
    """The kernel parameter holding this device's index along a device parallel type:
    `didx` for deviceIdx.x (its position in a 1-D mesh)."""
    return "did" + parallel_type.name[-1].lower()


def device_indices(tensors: list[TensorView]) -> list[str]:
    """The device index parameters the tensors' indices read: one per device parallel
    type that shards an axis its mesh does not divide (chunks of ceil(n/d) rows), and
    those of the shardings nested inside such a one, whose rows its predicate counts;
    and one per device parallel type that shards a tensor whose values depend on their
    global index (`global_index`)."""
    used: set[str] = set()
    for tv in tensors:
        used.update(_sharding_devices(tv))
        used.update(_global_index_devices(tv))
    return sorted(used)


def _sharding_devices(tv: TensorView) -> set[str]:
    """The device indices of tv's uneven shardings' predicates: its domain's alone."""
    used: set[str] = set()
    for t in tv.domain.transforms:
        if is_sharding_split(t) and not t.divisible and not t.input.is_broadcast:
            used.update(device_index(s.outer.parallel_type) for s in _nested(tv, t))
    return used


def _global_index_devices(tv: TensorView) -> set[str]:
    """The device indices an indexed op's global index reads (none for another tensor)."""
    if tv.definition is None or not is_indexed(tv.definition):
        return set()
    return {name for start in shard_start(tv) for name in variables(start)}


def _nested(tv: TensorView, split: Split) -> list[Split]:
    """`split` and the sharding splits of its inner part, and of theirs (in order)."""
    chain, inside = [split], {id(split.inner)}
    for t in tv.domain.transforms:
        if is_sharding_split(t) and id(t.input) in inside:
            chain.append(t)
            inside.add(id(t.inner))
    return chain


def variables(ix: Ix) -> set[str]:
    """The names of the variables an index expression reads."""
    if ix.op == "var":
        return {ix.args[0]}
    return set().union(*(variables(a) for a in ix.args if isinstance(a, Ix)))


def shard_start(tv: TensorView) -> list[Ix]:
    """Per logical axis, the global coordinate of the first element of this device's part
    (the device indices as variables): the sum, over the sharding splits nested on the
    axis, of device index * chunk size; the device index itself for an axis parallelized
    whole; 0 for a broadcast or an unsharded axis."""
    start: dict[int, Ix] = {}
    origin: dict[int, int] = {}
    for ax in tv.domain.logical:
        if ax.is_broadcast:
            continue
        origin[id(ax)] = id(ax)
        start[id(ax)] = const(0)
        if ax.is_device_parallel:
            start[id(ax)] = var(device_index(ax.parallel_type), ax.extent)
    for t in tv.domain.transforms:  # sharding splits come first, outer meshes outermost
        if is_sharding_split(t) and id(t.input) in origin:
            axis = origin[id(t.input)]
            here = var(device_index(t.outer.parallel_type), t.outer.extent)
            start[axis] = add(start[axis], mul(here, t.inner.extent))
            origin[id(t.inner)] = axis
    return [start.get(id(ax), const(0)) for ax in tv.domain.logical]


def global_index(tv: TensorView, coords: list) -> Ix:
    """The row-major linear index in the global tensor of the element of `tv` at the
    local data coordinates `coords` (Ix or 0, one per data axis) on this device."""
    starts = [s for s, ax in zip(shard_start(tv), tv.domain.logical) if not ax.is_reduction]
    local = [c if isinstance(c, Ix) else const(c) for c in coords]
    return flat_offset(tv.shape, [add(c, s) for c, s in zip(local, starts)])


def lower_tensor(tv: TensorView, grid: list[GridAxis]) -> TensorIndex:
    """Logical coordinates of `tv` at the grid point (l0, l1, ...), with tail predicates."""
    axes = grid_axes(tv)
    if axes and len(axes) != len(grid):
        raise ScheduleError(
            f"{tv.name} has {len(axes)} scheduled loop axes but the kernel grid has {len(grid)}"
        )
    unbound = unbound_loop_axis(tv)
    if unbound is not None:
        raise ScheduleError(
            f"{tv.name} loop axis {axis_text(unbound)} is neither device-parallel nor bound to "
            "the kernel grid; schedule the kernel first (schedule-pointwise)"
        )
    env: dict[int, Ix] = {}
    preds: list[tuple[Ix, int]] = []
    position = {id(ax): j for j, ax in enumerate(axes)}
    for ax in tv.domain.loop:
        j = position.get(id(ax))
        if j is None:  # device-parallel or of extent 1
            env[id(ax)] = const(0)
            continue
        env[id(ax)] = var(loop_var(j), grid[j].extent)
        if ax.extent < grid[j].extent:
            preds.append((env[id(ax)], ax.extent))
    # Global coordinates of the axes sharding splits cut (device axes at the device's
    # index, not 0): a nested chunk's rows are checked against its enclosing chunk's.
    glob: dict[int, Ix] = {}
    for tr in reversed(tv.domain.transforms):
        if isinstance(tr, Split):
            if tr.input.extent == 1:
                # An axis of extent 1, broadcast or not (the remainder of an outer split
                # by the whole extent, merged into a broadcast), has one element: every
                # grid point of its split holds it, unpredicated. A predicate here but not
                # on a consumer whose axis is broadcast would leave the consumer reading a
                # register that only the first point computed.
                env[id(tr.input)] = const(0)
                continue
            idx = add(mul(env[id(tr.outer)], tr.inner.extent), env[id(tr.inner)])
            env[id(tr.input)] = idx
            if not tr.input.is_broadcast and idx.ub > tr.input.extent:
                preds.append((idx, tr.input.extent))
            if is_sharding_split(tr):
                here = var(device_index(tr.outer.parallel_type), tr.outer.extent)
                inner = glob.get(id(tr.inner), env[id(tr.inner)])
                glob[id(tr.input)] = add(mul(here, tr.inner.extent), inner)
                if not tr.divisible and not tr.input.is_broadcast:
                    # This device's rows of an uneven sharding: didx * c + row < n.
                    preds.append((glob[id(tr.input)], tr.input.extent))
        else:
            out = env[id(tr.output)]
            env[id(tr.outer)] = div(out, tr.inner.extent)
            env[id(tr.inner)] = mod(out, tr.inner.extent)
    logical = []
    for ax in tv.domain.logical:
        if ax.is_broadcast:
            logical.append(const(0))
        elif id(ax) in env:
            logical.append(env[id(ax)])
        else:
            raise ScheduleError(
                f"{tv.name}: logical axis {axis_text(ax)} is not reachable from its loop domain"
            )
    return TensorIndex(logical, preds, tuple(device_indices([tv])))


def schedule_signature(tv: TensorView) -> tuple:
    """A key equal for two tensors whose index lowering is identical and whose axes are
    parallelized alike: on one mesh they also have one grid binding (grid_axes) and one
    local shape, which the kernel runner plans once per key (fuserlite.kernel.batches).

    Its domain's part is kept per stamp of the domain, so it outlives the inline position
    the scheduler gives 40 000 tensors after their domains are done; the definition is
    the tensor's own, read each time."""
    structure = domain_derived("schedule_signature", tv, _structure, tv)
    if tv.definition is None or not is_indexed(tv.definition):
        return structure
    # An iota's values read the device indices of its sharding, even an even one.
    return (*structure, tuple(sorted(_global_index_devices(tv))))


def _structure(tv: TensorView) -> tuple:
    # The domain's structure (every axis's extent, iteration and parallel type: an
    # uneven sharding's predicate reads that mesh axis's index, and the grid binds
    # blockIdx and threadIdx axes to its positions) and whether each logical axis has
    # a definition (from a root domain it would be bound to the grid). The device
    # indices its shardings' predicates read (_sharding_devices) follow from the
    # structure: two tensors of one key read the same ones.
    return domain_signature(tv), tuple([ax.definition is None for ax in tv.domain.logical])
