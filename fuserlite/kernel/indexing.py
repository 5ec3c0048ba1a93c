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

from fuserlite.ir.domain import Merge, Split, TensorDomain
from fuserlite.ir.errors import LoweringError, ScheduleError
from fuserlite.ir.sharding import unit_merge_source
from fuserlite.ir.tensor import Axis, TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ir.values import fact
from fuserlite.ops.registry import is_indexed
from fuserlite.printer import axis_text
from fuserlite.schedule.grid import GridAxis, grid_positions, unbound_loop_axis


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


def _multiple_plus_less(a: Ix, n: int) -> tuple[Ix, int, Ix] | None:
    """(x, m, y) where `a` is x * m + y (in either order) with y < m and m dividing n;
    else None. Then x * m + y never crosses a multiple of n that x * m does not reach
    (x * m is a multiple of m, and so is every multiple of n), so

        (x * m + y) / n == x / (n / m)   and   (x * m + y) % n == (x % (n / m)) * m + y."""
    if a.op != "add":
        return None
    for high, low in ((a.args[0], a.args[1]), (a.args[1], a.args[0])):
        if high.op == "mul" and low.ub <= high.args[1] and n % high.args[1] == 0:
            return high.args[0], high.args[1], low
    return None


def _block_div(a: Ix, n: int) -> Ix:
    found = _multiple_plus_less(a, n)
    if found is None:
        return div(a, n)
    x, m, _ = found
    return _block_div(x, n // m) if n > m else x


def _block_mod(a: Ix, n: int) -> Ix:
    found = _multiple_plus_less(a, n)
    if found is None:
        return mod(a, n)
    x, m, y = found
    return add(mul(_block_mod(x, n // m), m), y)


def block_form(ix: Ix) -> Ix:
    """`ix` with every (x * m + y) / n and % n whose y is below m, m dividing n, written
    x / (n / m) and (x % (n / m)) * m + y (_multiple_plus_less): the same value at every
    point. A grid point's index is (block * threads + thread): a broadcast row's element
    (a layer norm's mean) is then the block's alone and a repeated row's (a bias) the
    thread's own, which a C compiler vectorizes over the threads; the division of the
    whole point's index made each a gather. Applied to a finished index (c_expr), after
    the merges have folded back into the loop index (add), which dividing the parts
    first would have kept apart."""
    if ix.op in ("const", "var"):
        return ix
    a = block_form(ix.args[0])
    if ix.op == "add":
        return add(a, block_form(ix.args[1]))
    if ix.op == "mul":
        return mul(a, ix.args[1])
    return _block_div(a, ix.args[1]) if ix.op == "div" else _block_mod(a, ix.args[1])


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
    """The index as a C expression over the loop variables (in its block_form)."""
    return _c_text(block_form(ix))


def _c_text(ix: Ix) -> str:
    if ix.op == "const":
        return str(ix.args[0])
    if ix.op == "var":
        return ix.args[0]
    a = _c_text(ix.args[0])
    if ix.op == "add":
        return f"({a} + {_c_text(ix.args[1])})"
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
    domains: set[TensorDomain] = set()  # values: tensors of one domain are asked once
    for tv in tensors:
        dom = tv.domain
        if dom not in domains:
            domains.add(dom)
            used.update(_sharding_devices(dom))
        if tv.definition is not None and is_indexed(tv.definition):
            used.update(_start_devices(dom))
    return sorted(used)


@fact
def _sharding_devices(dom: TensorDomain) -> frozenset[str]:
    """The device indices of a domain's uneven shardings' predicates."""
    used: set[str] = set()
    for t in dom.transforms:
        if dom.is_sharding_split(t) and not dom.divisible(t) and not dom.axes[t.input].is_broadcast:
            used.update(device_index(dom.axes[s.outer].parallel_type) for s in _nested(dom, t))
        elif dom.is_cyclic_split(t) and not dom.divisible(t):
            used.add(device_index(dom.axes[dom.cyclic_device(t)[0]].parallel_type))
            k = dom.use[t.outer]  # the mesh axes chunking its periods: the global period
            if k is not None and dom.is_sharding_split(periods := dom.transforms[k]):
                used.update(
                    device_index(dom.axes[s.outer].parallel_type) for s in _nested(dom, periods)
                )
    return frozenset(used)


def _global_index_devices(tv: TensorView) -> frozenset[str]:
    """The device indices an indexed op's global index reads (none for another tensor)."""
    if tv.definition is None or not is_indexed(tv.definition):
        return frozenset()
    _refuse_cyclic(tv)
    return _start_devices(tv.domain)


def _refuse_cyclic(tv: TensorView) -> None:
    """A LoweringError where tv, whose values depend on their global index, is a cyclic
    shard: its rows' global indices are not a start plus the local ones."""
    dom = tv.domain
    for t in dom.transforms:
        if dom.is_cyclic_split(t):
            raise LoweringError(
                f"{tv.name} = {tv.definition.op_name}(...) computes values from their global "
                f"index, but its axis {axis_text(Axis(tv, t.input))} is sharded cyclically "
                f"(by {dom.axes[dom.cyclic_device(t)[0]].parallel_type.value}"
                "), whose rows are no block: outer_split the axis and parallelize the outer "
                "part instead"
            )


@fact
def _start_devices(dom: TensorDomain) -> frozenset[str]:
    return frozenset(name for start in _shard_start(dom) for name in variables(start))


def _nested(dom: TensorDomain, split: Split) -> list[Split]:
    """`split` and the sharding splits of its inner part, and of theirs (in order)."""
    chain, inside = [split], {split.inner}
    for t in dom.transforms:
        if type(t) is Merge and unit_merge_source(dom, t) in inside:
            inside.add(t.output)
        elif dom.is_sharding_split(t) and t.input in inside:
            chain.append(t)
            inside.add(t.inner)
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
    return list(_shard_start(tv.domain))


@fact
def _shard_start(dom: TensorDomain) -> tuple[Ix, ...]:
    start: dict[int, Ix] = {}
    origin: dict[int, int] = {}
    for li, ax in enumerate(dom.logical):
        if ax.is_broadcast:
            continue
        origin[li] = li
        start[li] = const(0)
        if ax.is_device_parallel:
            start[li] = var(device_index(ax.parallel_type), ax.extent)
    for t in dom.transforms:  # sharding splits come first, outer meshes outermost
        if type(t) is Merge and (other := unit_merge_source(dom, t)) in origin:
            origin[t.output] = origin[other]  # the merged axis is the other axis
        elif dom.is_sharding_split(t) and t.input in origin:
            axis = origin[t.input]
            outer = dom.axes[t.outer]
            here = var(device_index(outer.parallel_type), outer.extent)
            start[axis] = add(start[axis], mul(here, dom.axes[t.inner].extent))
            origin[t.inner] = axis
    return tuple(start.get(li, const(0)) for li in range(dom.n_logical))


def global_index(tv: TensorView, coords: list) -> Ix:
    """The row-major linear index in the global tensor of the element of `tv` at the
    local data coordinates `coords` (Ix or 0, one per data axis) on this device."""
    dom = tv.domain
    _refuse_cyclic(tv)
    starts = [_shard_start(dom)[li] for li in dom.data_positions()]
    local = [c if isinstance(c, Ix) else const(c) for c in coords]
    return flat_offset(tv.shape, [add(c, s) for c, s in zip(local, starts)])


def lower_tensor(tv: TensorView, grid: list[GridAxis]) -> TensorIndex:
    """Logical coordinates of `tv` at the grid point (l0, l1, ...), with tail predicates."""
    dom = tv.domain
    positions = grid_positions(dom)
    if positions and len(positions) != len(grid):
        raise ScheduleError(
            f"{tv.name} has {len(positions)} scheduled loop axes but the kernel grid has "
            f"{len(grid)}"
        )
    unbound = unbound_loop_axis(tv)
    if unbound is not None:
        raise ScheduleError(
            f"{tv.name} loop axis {axis_text(unbound)} is neither device-parallel nor bound to "
            "the kernel grid; schedule the kernel first (schedule-pointwise)"
        )
    lowered = lower_domain(dom, tuple(grid))
    if isinstance(lowered, int):
        raise ScheduleError(
            f"{tv.name}: logical axis {axis_text(Axis(tv, lowered))} is not reachable from its "
            "loop domain"
        )
    logical, preds = lowered
    return TensorIndex(list(logical), list(preds), tuple(device_indices([tv])))


@fact
def lower_domain(
    dom: TensorDomain, grid: tuple[GridAxis, ...]
) -> tuple[tuple[Ix, ...], tuple[tuple[Ix, int], ...]] | int:
    """(logical coordinates, predicates) of a domain at the grid point (l0, l1, ...), or
    the logical axis that no loop axis reaches."""
    env: dict[int, Ix] = {}
    preds: list[tuple[Ix, int]] = []
    position = {p: j for j, p in enumerate(grid_positions(dom))}
    for p in dom.loop_positions:
        j = position.get(p)
        if j is None:  # device-parallel or of extent 1
            env[p] = const(0)
            continue
        env[p] = var(loop_var(j), grid[j].extent)
        if dom.axes[p].extent < grid[j].extent:
            preds.append((env[p], dom.axes[p].extent))
    # Global coordinates of the axes sharding splits cut (device axes at the device's
    # index, not 0): a nested chunk's rows are checked against its enclosing chunk's.
    glob: dict[int, Ix] = {}
    for tr in reversed(dom.transforms):
        if type(tr) is Split:
            source = dom.axes[tr.input]
            if source.extent == 1:
                # An axis of extent 1, broadcast or not (the remainder of an outer split
                # by the whole extent, merged into a broadcast), has one element: every
                # grid point of its split holds it, unpredicated. A predicate here but not
                # on a consumer whose axis is broadcast would leave the consumer reading a
                # register that only the first point computed.
                env[tr.input] = const(0)
                continue
            inner_extent = dom.axes[tr.inner].extent
            if dom.is_cyclic_split(tr):
                # A (block-)cyclic shard: this device's blocks of b rows (k d + didx) b + j
                # are its local rows k b + j (the outer part's k, the inner part's j of its
                # block; b = 1: rows didx, didx + d, ... are 0, 1, ...); its row exists
                # where o (d b) + didx b + j < n.
                device, b = dom.cyclic_device(tr)
                env[tr.input] = (
                    env[tr.outer] if b == 1 else add(mul(env[tr.outer], b), env[tr.inner])
                )
                if not dom.divisible(tr):
                    here = glob.get(
                        tr.inner, var(device_index(dom.axes[device].parallel_type), inner_extent)
                    )
                    outer = glob.get(tr.outer, env[tr.outer])  # the period, DIDy's chunk's
                    preds.append((add(mul(outer, inner_extent), here), source.extent))
                continue
            idx = add(mul(env[tr.outer], inner_extent), env[tr.inner])
            env[tr.input] = idx
            if not source.is_broadcast and idx.ub > source.extent:
                preds.append((idx, source.extent))
            if dom.is_sharding_split(tr):
                outer = dom.axes[tr.outer]
                here = var(device_index(outer.parallel_type), outer.extent)
                inner = glob.get(tr.inner, env[tr.inner])
                glob[tr.input] = add(mul(here, inner_extent), inner)
                if not dom.divisible(tr) and not source.is_broadcast:
                    # This device's rows of an uneven sharding: didx * c + row < n.
                    preds.append((glob[tr.input], source.extent))
        else:
            out = env[tr.output]
            inner_extent = dom.axes[tr.inner].extent
            env[tr.outer] = div(out, inner_extent)
            env[tr.inner] = mod(out, inner_extent)
    logical = []
    for li, ax in enumerate(dom.logical):
        if ax.is_broadcast:
            logical.append(const(0))
        elif li in env:
            logical.append(env[li])
        else:
            return li
    return tuple(logical), tuple(preds)


def lowering_key(tv: TensorView) -> tuple:
    """What a tensor's index lowering reads: its domain, and for a tensor whose values
    depend on their global index (iota, rand_like) the device indices that reads. Two
    tensors of one key lower alike, bind the grid alike and, on one mesh, allocate
    alike (fuserlite.kernel.batches plans them once)."""
    devices = _global_index_devices(tv)
    return (tv.domain, devices) if devices else (tv.domain,)
