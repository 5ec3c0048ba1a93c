"""Transform propagation: replay a reference tensor's loop transforms onto other tensors.

The replay walks producer/consumer maps between logical axes:

- pointwise ops (unary, binary) and Set: positional over data (non-reduction) axes;
- broadcast: the input's axes map to the output axes whose flag is False.

Every logical axis of a target tensor that maps to a reference logical axis
receives the reference's splits and merges in the reference's order. Where a
reference merge has only one input present in the target (an axis the target
lacks, e.g. a broadcast inserted later), the present input stands for the merge
output ("forwarding", as in nvFuser's replay).

The replay is a function of the reference's domain, the target's and the axis map
between them (`replayed`): tensors alike are given one result, once.

Device-parallel axes are pinned: they stay in front of the loop domain and are
never split, merged or re-parallelized. In particular a device parallel type on
a broadcast axis (`bDIDx`) is never copied onto the outputs of a split, the
cause of the three `deviceIdx.x` axes of `T1` in seed 004. A reference split
that produces a device axis (sharding an axis by an outer split) is replayed
only onto a target that already has the same split; on a broadcast axis it is
skipped; on an unsharded iteration axis it means the two tensors are sharded
differently and cannot be computed in one kernel, so it raises ScheduleError.

    reference T2: [iS7{2}] -> split 128 -> split 1 -> [iblockIdx.x, iUS, ithreadIdx.x]
    target    T1: [bdeviceIdx.x1{1}]   stays [bdeviceIdx.x1{1}] (pinned; one DIDx)
    target    T4: [bS6{1}]             -> [bblockIdx.x{1}, bUS{1}, bthreadIdx.x{128}]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from fuserlite.ir.domain import Merge, Split, Swizzle1D, TensorDomain
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.expr import Expr
from fuserlite.ir.sharding import unit_merge_source
from fuserlite.ir.tensor import Axis, TensorView, parallelize_problem
from fuserlite.ir.types import ParallelType
from fuserlite.ir.values import fact
from fuserlite.printer import axis_text
from fuserlite.schedule.axis_maps import Pairs, axis_positions


def is_device_parallel_logical(dom: TensorDomain, li: int) -> bool:
    """True if logical axis `li` is device-parallel itself or sharded by an outer DID split."""
    if dom.axes[li].is_device_parallel:
        return True
    k = dom.use[li]
    while k is not None and type(m := dom.transforms[k]) is Merge:
        if unit_merge_source(dom, m) != li:  # the merged axis is li, laid out alike
            return False
        li, k = m.output, dom.use[m.output]
    return k is not None and (
        dom.is_sharding_split(dom.transforms[k]) or dom.is_cyclic_split(dom.transforms[k])
    )


def _same_split(ref: TensorDomain, tr: Split, dom: TensorDomain, existing: Split) -> bool:
    """True if `existing` (of `dom`) splits as `tr` (of `ref`) does: by the same factor
    from the same side, or both exactly into parts of the same extents (split(n, n/k)
    is outer_split(n, k) where k divides n)."""
    if existing.factor == tr.factor and existing.inner_split == tr.inner_split:
        return True
    return (
        ref.divisible(tr)
        and dom.divisible(existing)
        and ref.axes[tr.outer].extent == dom.axes[existing.outer].extent
        and ref.axes[tr.inner].extent == dom.axes[existing.inner].extent
    )


def _consumer_of(dom: TensorDomain, p: int) -> Split | Merge | None:
    """The transform of the domain that takes axis `p` as an input, if any."""
    k = dom.use[p]
    return None if k is None else dom.transforms[k]


def _same_sharding_split(ref: TensorDomain, tr: Split, ax_extent: int, pt: ParallelType) -> bool:
    """True if `tr` shards an axis of extent D by an outer split by D and the target axis
    (of `ax_extent`, parallel type `pt`) is an axis of extent D sharded whole by the same
    parallel type: one sharding written two ways (the split's inner part has extent 1)."""
    return (
        not tr.inner_split
        and ref.axes[tr.outer].parallel_type is pt
        and tr.factor == ax_extent == ref.axes[tr.input].extent
    )


# For a reached tensor, per logical axis: the position of the reference logical axis
# it maps to, or -1.
RefMap = tuple[int, ...]


class _Unnamed(Exception):
    """A replay problem found without the tensors at hand to name it (replayed())."""


class _Names:
    """How a replay's messages name the reference, the target and their axes; the
    target shows the domain the replay has made of it so far."""

    def __init__(self, reference: TensorView, target: TensorView) -> None:
        self.reference = reference
        self.target = target

    def ref(self, p: int) -> str:
        return f"{self.reference.name} axis {axis_text(Axis(self.reference, p))}"

    def ref_axis(self, p: int) -> str:
        return axis_text(Axis(self.reference, p))

    def tgt(self, p: int) -> str:
        return f"{self.target.name} axis {axis_text(Axis(self.target, p))}"

    def tgt_axis(self, p: int) -> str:
        return axis_text(Axis(self.target, p))


def _problem(names: _Names | None, now: TensorDomain, text: Callable[[_Names], str]) -> Exception:
    """The error a replay raises: named when the tensors are at hand, else _Unnamed
    (the caller replays again with them, to say it)."""
    if names is None:
        return _Unnamed()
    names.target.domain = now  # the message shows the target as the replay left it
    return ScheduleError(text(names))


def replay(reference: TensorView, target: TensorView, ref_map: RefMap) -> None:
    """Replay `reference`'s transforms onto `target`; `ref_map` gives, per target
    logical axis, the reference logical axis it maps to (-1: none). Existing
    transforms of the target must agree. A function of the two domains and the map
    (`replayed`), so tensors alike are given one result."""
    try:
        target.domain = replayed(reference.domain, target.domain, ref_map)
    except _Unnamed:
        _replay(reference.domain, target.domain, ref_map, _Names(reference, target))
        raise AssertionError("a replay failed once and not again") from None


@fact
def replayed(ref: TensorDomain, target: TensorDomain, ref_map: RefMap) -> TensorDomain:
    """The target domain with the reference domain's transforms replayed onto it."""
    return _replay(ref, target, ref_map, None)


def _replay(
    ref: TensorDomain, dom: TensorDomain, ref_map: RefMap, names: _Names | None
) -> TensorDomain:
    m: dict[int, int] = {r: t for t, r in enumerate(ref_map) if r >= 0}  # ref pos -> target pos

    def get(p: int) -> int | None:
        x = m.get(p)
        return None if x is None or dom.axes[x].is_device_parallel else x

    for tr in ref.transforms:
        if type(tr) is Swizzle1D:  # a host loop's order (a ring): producers keep theirs
            if tr.input in m:
                m[tr.output] = m[tr.input]
            continue
        if type(tr) is Split:
            x = m.get(tr.input)
            if x is None:
                continue
            existing = _consumer_of(dom, x)
            if type(existing) is Merge and unit_merge_source(dom, existing) == x:
                # the target merged an extent-1 broadcast axis into x: the merged axis is
                # x laid out alike (ir.sharding.sharding_chain), the broadcast unmapped
                other = existing.inner if existing.outer == x else existing.outer
                m = {r: t for r, t in m.items() if t != other}
                x = existing.output
                existing = _consumer_of(dom, x)
            if existing is not None:
                if not (type(existing) is Split and _same_split(ref, tr, dom, existing)):
                    raise _problem(
                        names,
                        dom,
                        lambda n, tr=tr, x=x: (
                            f"cannot propagate the schedule of {n.reference.name} to "
                            f"{n.target.name}: {n.ref(tr.input)} is split by {tr.factor} but "
                            f"{n.tgt(x)} is already transformed differently; remove the "
                            f"schedule of {n.target.name} or give it the same split"
                        ),
                    )
                m[tr.outer], m[tr.inner] = existing.outer, existing.inner
                continue
            ax = dom.axes[x]
            if ax.is_device_parallel:
                if ax.is_broadcast:
                    continue  # bDIDx is pinned; never copied onto split outputs
                if _same_sharding_split(ref, tr, ax.extent, ax.parallel_type):
                    continue  # x{D} sharded whole is the split's outer part; no inner
                raise _problem(
                    names,
                    dom,
                    lambda n, tr=tr, x=x, ax=ax: (
                        f"cannot propagate the schedule of {n.reference.name} to "
                        f"{n.target.name}: {n.tgt(x)} is sharded ({ax.parallel_type.value}) "
                        f"but {n.ref(tr.input)} is not; a kernel computes on local "
                        "shards only, insert a resharding (insert-reshardings) between them"
                    ),
                )
            if ref.is_cyclic_split(tr) and ax.is_broadcast:
                m[tr.outer] = x  # a broadcast against a cyclic shard: its iterated part
                continue
            if ref.is_sharding_split(tr):  # the reference shards this axis
                if ax.is_broadcast:
                    m[tr.inner] = x
                    continue
                raise _problem(
                    names,
                    dom,
                    lambda n, tr=tr, x=x: (
                        f"cannot propagate the schedule of {n.reference.name} to "
                        f"{n.target.name}: {n.ref(tr.input)} is sharded "
                        f"({ref.axes[tr.outer].parallel_type.value}) but {n.tgt(x)} is not; "
                        "propagate shardings (propagate-shardings) or insert a resharding first"
                    ),
                )
            n_axes = len(dom.axes)
            dom = dom.split(dom.loop_positions.index(x), tr.factor, tr.inner_split)
            m[tr.outer], m[tr.inner] = n_axes, n_axes + 1
        else:
            xo, xi = get(tr.outer), get(tr.inner)
            if xo is None or xi is None:
                if xo is not None or xi is not None:
                    m[tr.output] = xo if xo is not None else xi
                continue
            existing = _consumer_of(dom, xo) or _consumer_of(dom, xi)
            if existing is not None:
                if not (type(existing) is Merge and existing.outer == xo and existing.inner == xi):
                    raise _problem(
                        names,
                        dom,
                        lambda n, tr=tr, xo=xo, xi=xi: (
                            f"cannot propagate the schedule of {n.reference.name} to "
                            f"{n.target.name}: {n.reference.name} merges "
                            f"{n.ref_axis(tr.outer)} and {n.ref_axis(tr.inner)} but {n.tgt(xo)}"
                            f" / {n.tgt_axis(xi)} are already transformed differently; remove "
                            f"the schedule of {n.target.name}"
                        ),
                    )
                m[tr.output] = existing.output
                continue
            loop = dom.loop_positions
            n_axes = len(dom.axes)
            dom = dom.merge(loop.index(xo), loop.index(xi))
            m[tr.output] = n_axes
    ref_of: dict[int, int] = {}  # target loop position -> reference loop axis
    loop = set(dom.loop_positions)
    for r in ref.loop_positions:
        x = m.get(r)
        if x is not None and x in loop:
            ref_of[x] = r
    return _order_and_parallelize(ref, dom, ref_of, names)


def _order_and_parallelize(
    ref: TensorDomain, dom: TensorDomain, ref_of: dict[int, int], names: _Names | None
) -> TensorDomain:
    """Loop order: device axes, leftover broadcast axes, then the reference's order."""
    loop = dom.loop_positions
    pinned = [p for p in loop if dom.axes[p].is_device_parallel]
    mapped = [p for p in loop if p in ref_of and p not in pinned]
    rest = [p for p in loop if p not in pinned and p not in mapped]
    for p in rest:
        ax = dom.axes[p]
        if not ax.is_broadcast and ax.extent != 1:
            raise _problem(
                names,
                dom,
                lambda n, p=p: (
                    f"cannot propagate the schedule of {n.reference.name} to {n.target.name}: "
                    f"{n.tgt(p)} has no counterpart in {n.reference.name}; schedule "
                    f"{n.target.name} separately or make it a broadcast axis"
                ),
            )
    for p in mapped:
        r_ax = ref.axes[ref_of[p]]
        if r_ax.is_device_parallel and not r_ax.is_broadcast and not dom.axes[p].is_broadcast:
            raise _problem(
                names,
                dom,
                lambda n, p=p, r=ref_of[p], r_ax=r_ax: (
                    f"cannot propagate the schedule of {n.reference.name} to {n.target.name}: "
                    f"{n.ref(r)} is sharded ({r_ax.parallel_type.value}) but "
                    f"{n.tgt(p)} is not; a kernel computes on local shards only, "
                    "propagate shardings or insert a resharding first"
                ),
            )
    ref_pos = {p: k for k, p in enumerate(ref.loop_positions)}
    mapped.sort(key=lambda p: ref_pos[ref_of[p]])
    dom = dom.with_loop((*pinned, *rest, *mapped))
    for p in mapped:
        pt = ref.axes[ref_of[p]].parallel_type
        if not pt.is_device and pt is not dom.axes[p].parallel_type:
            _check_parallelize(dom, p, pt, names)
            dom = dom.parallelize(p, pt)
    return dom


def _check_parallelize(dom: TensorDomain, p: int, pt: ParallelType, names: _Names | None) -> None:
    """What Axis.parallelize checks: one parallel type per loop axis, thread extents."""
    problem = parallelize_problem(dom, p, pt)
    if problem is not None:
        raise _problem(names, dom, lambda n: f"parallelize: {n.target.name}{problem}")


class Edges:
    """The propagation graph of a kernel's expressions: each tensor's neighbours
    (neighbour, expression, neighbour is the consumer), read from the tensor's own links
    (its definition and uses) as it is reached: first the producers of its expression,
    then, in kernel order, one entry per operand it is of each reader."""

    def __init__(self, exprs: Iterable[Expr]) -> None:
        self._at = {id(e): k for k, e in enumerate(exprs)}

    def of(self, tv: TensorView) -> list[tuple[TensorView, Expr, bool]]:
        """tv's neighbours: (neighbour, expression, neighbour is the consumer)."""
        at = self._at
        out: list[tuple[TensorView, Expr, bool]] = []
        # Loops, not comprehensions: asked once per tensor, of one or two neighbours.
        d = tv.definition
        if d is not None and id(d) in at and d.outputs[0] is tv:
            for p in d.inputs:
                out.append((p, d, False))
        uses = tv.uses
        if len(uses) == 1:  # most tensors: one reader, nothing to order
            readers = uses if id(uses[0]) in at else ()
        else:
            unique = {id(e): e for e in uses if id(e) in at}
            readers = sorted(unique.values(), key=lambda e: at[id(e)])
        for e in readers:
            consumer = e.outputs[0]
            for p in e.inputs:
                if p is tv:
                    out.append((consumer, e, True))
        return out


def propagation_edges(exprs: Iterable[Expr]) -> Edges:
    """The propagation graph of `exprs`."""
    return Edges(exprs)


def propagate(
    reference: TensorView, exprs: list[Expr], edges: Edges | None = None
) -> list[TensorView]:
    """Replay `reference`'s loop transforms onto every tensor connected to it through
    `exprs` (`edges`: their propagation_edges, when known); returns the tensors reached,
    the reference first.

    Tensors are reached best-first: each next tensor is the one whose path from the
    reference maps the most of its logical axes (nvFuser's maximum-information
    spanning tree), so a broadcast on one path cannot hide an axis another path maps.
    """
    edges = propagation_edges(exprs) if edges is None else edges
    to_ref: dict[int, RefMap] = {}
    order: list[TensorView] = []
    start = tuple(range(reference.domain.n_logical))
    # A queue by priority, the number of axes mapped (a small integer): the tensor of
    # most, the first reached on ties, as a heap of (-mapped, arrival) gives it.
    # Each entry: the tensor, its map, and the tensor and expression it was reached from
    # where the way back maps that tensor as it is mapped (moved's third answer): going
    # back there checks nothing, and is skipped (a chain's every other step).
    queues: dict[int, deque[tuple[TensorView, RefMap, object, object]]] = {len(start): deque()}
    queues[len(start)].append((reference, start, None, None))
    top = len(start)
    neighbours = edges.of  # the loop runs once per tensor
    while True:
        while top >= 0 and not queues.get(top):
            top -= 1
        if top < 0:
            break
        tv, ref_map, came_from, via = queues[top].popleft()
        if id(tv) in to_ref:
            _check_agrees(reference, tv, to_ref[id(tv)], ref_map)
            continue
        to_ref[id(tv)] = ref_map
        if tv is not reference:
            replay(reference, tv, ref_map)
        order.append(tv)
        for other, expr, other_is_consumer in neighbours(tv):
            if other is came_from and expr is via:
                continue
            pairs = axis_positions(expr, tv) if other_is_consumer else axis_positions(expr, other)
            reached, mapped, back = moved(ref_map, pairs, other_is_consumer, other.domain.n_logical)
            if id(other) in to_ref:
                _check_agrees(reference, other, to_ref[id(other)], reached)
                continue
            queue = queues.get(mapped)
            if queue is None:
                queue = queues[mapped] = deque()
            queue.append((other, reached, tv, expr) if back else (other, reached, None, None))
            if mapped > top:
                top = mapped
    check_parallel_types(order)
    return order


@fact
def moved(ref_map: RefMap, pairs: Pairs, to_consumer: bool, rank: int) -> tuple[RefMap, int, bool]:
    """The map onto the reference of a neighbour of rank `rank` reached through an
    expression (`pairs`: its axis positions, producer's and consumer's) from a tensor
    mapped by `ref_map`, how many of the neighbour's axes it maps, and whether moving
    that map back through the expression agrees with `ref_map` (what propagate would
    check on the way back; false only where two axes map onto one)."""
    other_map = [-1] * rank
    for p, c in pairs:
        if to_consumer and ref_map[p] >= 0:
            other_map[c] = ref_map[p]
        elif not to_consumer and ref_map[c] >= 0:
            other_map[p] = ref_map[c]
    back = list(ref_map)
    for p, c in pairs:
        here, there = (p, c) if to_consumer else (c, p)
        if other_map[there] >= 0 and back[here] >= 0 and other_map[there] != back[here]:
            return tuple(other_map), rank - other_map.count(-1), False
    return tuple(other_map), rank - other_map.count(-1), True


def _check_agrees(reference: TensorView, tv: TensorView, got: RefMap, other: RefMap) -> None:
    """A tensor reached again must map onto the reference as it did the first time: one
    read directly and through a permute (x.T + x) is read at two element orders, which
    one loop schedule computed at its consumers cannot give (it computed x.T as x)."""
    if got == other:
        return
    for g, o in zip(got, other):
        if g >= 0 and o >= 0 and g != o:
            raise ScheduleError(
                f"cannot propagate the schedule of {reference.name} to {tv.name}: it is read "
                "through two axis maps (one of them permuted), which one schedule cannot serve"
            )


@fact
def repeated_parallel_type(dom: TensorDomain) -> tuple[int, int] | None:
    """Two loop axes (positions) of one parallel type other than Serial, or None."""
    seen: dict[ParallelType, int] = {}
    for p in dom.loop_positions:
        pt = dom.axes[p].parallel_type
        if pt is ParallelType.Serial:
            continue
        if pt in seen:
            return seen[pt], p
        seen[pt] = p
    return None


def check_parallel_types(tensors: Iterable[TensorView]) -> None:
    """No tensor may carry one parallel type on two loop axes."""
    for tv in tensors:
        twice = repeated_parallel_type(tv.domain)
        if twice is not None:
            a, b = Axis(tv, twice[0]), Axis(tv, twice[1])
            raise ScheduleError(
                f"{tv.name}: loop axes {axis_text(a)} and {axis_text(b)} both have "
                f"parallel type {a.parallel_type.value}"
            )
