"""Transform propagation: replay a reference tensor's loop transforms onto other tensors.

The replay walks producer/consumer maps between logical axes:

- pointwise ops (unary, binary) and Set: positional over data (non-reduction) axes;
- broadcast: the input's axes map to the output axes whose flag is False.

Every logical axis of a target tensor that maps to a reference logical axis
receives the reference's splits and merges in the reference's order. Where a
reference merge has only one input present in the target (an axis the target
lacks, e.g. a broadcast inserted later), the present input stands for the merge
output ("forwarding", as in nvFuser's replay).

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

import heapq
import itertools
from collections.abc import Iterable

from fuserlite.ir.domain import IterDomain, Merge, Split, is_sharding_split
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.expr import Expr
from fuserlite.ir.signature import domain_signature
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ops.registry import definition, positional
from fuserlite.printer import axis_text
from fuserlite.schedule.axis_maps import axis_positions
from fuserlite.schedule.signature import Before, Replayed


def is_device_parallel_logical(tv: TensorView, ax: IterDomain) -> bool:
    """True if logical axis `ax` is device-parallel itself or sharded by an outer DID split."""
    if ax.is_device_parallel:
        return True
    return any(is_sharding_split(t) and t.input is ax for t in tv.domain.transforms)


def _describe(tv: TensorView, ax: IterDomain) -> str:
    return f"{tv.name} axis {axis_text(ax)}"


def _consumer_of(tv: TensorView, ax: IterDomain) -> Split | Merge | None:
    """The transform of tv's domain that takes `ax` as an input, if any."""
    for t in tv.domain.transforms:
        if ax in t.inputs:
            return t
    return None


def _same_sharding_split(tr: Split, ax: IterDomain) -> bool:
    """True if `tr` shards an axis of extent D by an outer split by D and `ax` is an axis
    of extent D sharded whole by the same parallel type: one sharding written two ways
    (the split's inner part has extent 1)."""
    return (
        not tr.inner_split
        and tr.outer.parallel_type is ax.parallel_type
        and tr.factor == ax.extent == tr.input.extent
    )


def replay(reference: TensorView, target: TensorView, to_target: dict) -> None:
    """Replay `reference`'s transforms onto `target`; `to_target` maps reference logical
    axes to target logical axes. Existing transforms of the target must agree."""
    m: dict[int, IterDomain] = {id(r): t for r, t in to_target.items()}
    ref_of: dict[int, IterDomain] = {}

    def get(ax: IterDomain) -> IterDomain | None:
        x = m.get(id(ax))
        return None if x is None or x.is_device_parallel else x

    for tr in reference.domain.transforms:
        if isinstance(tr, Split):
            x = m.get(id(tr.input))
            if x is None:
                continue
            existing = _consumer_of(target, x)
            if existing is not None:
                if not (
                    isinstance(existing, Split)
                    and existing.factor == tr.factor
                    and existing.inner_split == tr.inner_split
                ):
                    raise ScheduleError(
                        f"cannot propagate the schedule of {reference.name} to {target.name}: "
                        f"{_describe(reference, tr.input)} is split by {tr.factor} but "
                        f"{_describe(target, x)} is already transformed differently; remove the "
                        f"schedule of {target.name} or give it the same split"
                    )
                m[id(tr.outer)], m[id(tr.inner)] = existing.outer, existing.inner
                continue
            if x.is_device_parallel:
                if x.is_broadcast:
                    continue  # bDIDx is pinned; never copied onto split outputs
                if _same_sharding_split(tr, x):
                    continue  # x{D} sharded whole is the split's outer part; no inner
                raise ScheduleError(
                    f"cannot propagate the schedule of {reference.name} to {target.name}: "
                    f"{_describe(target, x)} is sharded ({x.parallel_type.value}) but "
                    f"{_describe(reference, tr.input)} is not; a kernel computes on local "
                    "shards only, insert a resharding (insert-reshardings) between them"
                )
            if is_sharding_split(tr):  # the reference shards this axis
                if x.is_broadcast:
                    m[id(tr.inner)] = x
                    continue
                raise ScheduleError(
                    f"cannot propagate the schedule of {reference.name} to {target.name}: "
                    f"{_describe(reference, tr.input)} is sharded "
                    f"({tr.outer.parallel_type.value}) but {_describe(target, x)} is not; "
                    "propagate shardings (propagate-shardings) or insert a resharding first"
                )
            target.split(target.domain.loop.index(x), tr.factor, tr.inner_split)
            made = target.domain.transforms[-1]
            m[id(tr.outer)], m[id(tr.inner)] = made.outer, made.inner
        else:
            xo, xi = get(tr.outer), get(tr.inner)
            if xo is None or xi is None:
                if xo is not None or xi is not None:
                    m[id(tr.output)] = xo if xo is not None else xi
                continue
            existing = _consumer_of(target, xo) or _consumer_of(target, xi)
            if existing is not None:
                if not (
                    isinstance(existing, Merge) and existing.outer is xo and existing.inner is xi
                ):
                    raise ScheduleError(
                        f"cannot propagate the schedule of {reference.name} to {target.name}: "
                        f"{reference.name} merges {axis_text(tr.outer)} and {axis_text(tr.inner)} "
                        f"but {_describe(target, xo)} / {axis_text(xi)} are already transformed "
                        f"differently; remove the schedule of {target.name}"
                    )
                m[id(tr.output)] = existing.output
                continue
            loop = target.domain.loop
            target.merge(loop.index(xo), loop.index(xi))
            m[id(tr.output)] = target.domain.transforms[-1].output
    for r_ax in reference.domain.loop:
        x = m.get(id(r_ax))
        if x is not None and x in target.domain.loop:
            ref_of[id(x)] = r_ax
    _order_and_parallelize(reference, target, ref_of)


def _order_and_parallelize(reference: TensorView, target: TensorView, ref_of: dict) -> None:
    """Loop order: device axes, leftover broadcast axes, then the reference's order."""
    pinned = [ax for ax in target.domain.loop if ax.is_device_parallel]
    mapped = [ax for ax in target.domain.loop if id(ax) in ref_of and ax not in pinned]
    rest = [ax for ax in target.domain.loop if ax not in pinned and ax not in mapped]
    for ax in rest:
        if not ax.is_broadcast and ax.extent != 1:
            raise ScheduleError(
                f"cannot propagate the schedule of {reference.name} to {target.name}: "
                f"{_describe(target, ax)} has no counterpart in {reference.name}; schedule "
                f"{target.name} separately or make it a broadcast axis"
            )
    for ax in mapped:
        r_ax = ref_of[id(ax)]
        if r_ax.is_device_parallel and not r_ax.is_broadcast and not ax.is_broadcast:
            raise ScheduleError(
                f"cannot propagate the schedule of {reference.name} to {target.name}: "
                f"{_describe(reference, r_ax)} is sharded ({r_ax.parallel_type.value}) but "
                f"{_describe(target, ax)} is not; a kernel computes on local shards only, "
                "propagate shardings or insert a resharding first"
            )
    ref_pos = {id(ax): k for k, ax in enumerate(reference.domain.loop)}
    mapped.sort(key=lambda ax: ref_pos[id(ref_of[id(ax)])])
    target.domain.loop = pinned + rest + mapped
    for ax in mapped:
        pt = ref_of[id(ax)].parallel_type
        if not pt.is_device and pt is not ax.parallel_type:
            ax.parallelize(pt)


class Edges:
    """The propagation graph of a kernel's expressions: each tensor's neighbours
    (neighbour, expression, neighbour is the consumer), and each expression's axis
    map by positions, asked once per expression and operand: while a kernel is
    scheduled its logical domains and its expressions' operands do not change."""

    def __init__(self, exprs: Iterable[Expr]) -> None:
        neighbours: dict[int, list[tuple[TensorView, Expr, bool]]] = {}
        for e in exprs:
            out = e.outputs[0]
            for p in e.inputs:
                if id(p) in neighbours:
                    neighbours[id(p)].append((out, e, True))
                else:
                    neighbours[id(p)] = [(out, e, True)]
                if id(out) in neighbours:
                    neighbours[id(out)].append((p, e, False))
                else:
                    neighbours[id(out)] = [(p, e, False)]
        self._neighbours = neighbours
        self._positions: dict[tuple[int, int], tuple[tuple[int, int], ...]] = {}
        self._positional: dict[tuple, tuple[tuple[int, int], ...]] = {}

    def of(self, tv: TensorView) -> list[tuple[TensorView, Expr, bool]]:
        """tv's neighbours: (neighbour, expression, neighbour is the consumer)."""
        return self._neighbours.get(id(tv), [])

    def positions(self, expr: Expr, producer: TensorView) -> tuple[tuple[int, int], ...]:
        """axis_positions(expr, producer), computed once."""
        key = (id(expr), id(producer))
        hit = self._positions.get(key)
        if hit is None:
            hit = self._positions[key] = self._mapped(expr, producer)
        return hit

    def _mapped(self, expr: Expr, producer: TensorView) -> tuple[tuple[int, int], ...]:
        # A positional map reads the operand's data positions and the output's rank, and
        # the check the output's reduction axes: one answer per (op, class) and pair of
        # domain signatures (the 20 000 `x + k` of one kernel: one). Kept per graph,
        # while its tensors live.
        key = (
            expr.op_name,
            type(expr),
            domain_signature(producer),
            domain_signature(expr.outputs[0]),
        )
        hit = self._positional.get(key)
        if hit is None:
            hit = axis_positions(expr, producer)
            op = definition(expr)  # which the op name and class decide
            if op is not None and op.axis_map is positional and op.outputs_axis_map is None:
                self._positional[key] = hit
        return hit


def propagation_edges(exprs: Iterable[Expr]) -> Edges:
    """The propagation graph of `exprs`."""
    return Edges(exprs)


# For a reached tensor, per logical axis: the position of the reference logical axis
# it maps to, or -1.
RefMap = tuple[int, ...]


def propagate(
    reference: TensorView, exprs: list[Expr], edges: Edges | None = None
) -> list[TensorView]:
    """Replay `reference`'s loop transforms onto every tensor connected to it through
    `exprs` (`edges`: their propagation_edges, when known); returns the tensors reached,
    the reference first.

    Tensors are reached best-first: each next tensor is the one whose path from the
    reference maps the most of its logical axes (nvFuser's maximum-information
    spanning tree), so a broadcast on one path cannot hide an axis another path maps.
    The replay is decided once per domain signature and axis map (`_replay_once`).
    """
    edges = propagation_edges(exprs) if edges is None else edges
    to_ref: dict[int, RefMap] = {}
    order: list[TensorView] = []
    replays: dict[tuple, Replayed] = {}
    copies: set[int] = set()  # tensors given a replay made for another
    heap: list[tuple[int, int, TensorView, RefMap]] = []
    counter = itertools.count()
    start = tuple(range(len(reference.domain.logical)))
    heapq.heappush(heap, (-len(start), next(counter), reference, start))
    neighbours, positions = edges.of, edges.positions  # the loop runs once per tensor
    # What crossing an expression does to a map onto the reference reads only the map,
    # the expression's axis map (shared per signatures), the direction and the rank.
    moves: dict[tuple, tuple[RefMap, int]] = {}
    while heap:
        _, _, tv, ref_map = heapq.heappop(heap)
        if id(tv) in to_ref:
            _check_agrees(reference, tv, to_ref[id(tv)], ref_map)
            continue
        to_ref[id(tv)] = ref_map
        if tv is not reference and _replay_once(reference, tv, ref_map, replays):
            copies.add(id(tv))
        order.append(tv)
        for other, expr, other_is_consumer in neighbours(tv):
            pairs = positions(expr, tv) if other_is_consumer else positions(expr, other)
            key = (ref_map, pairs, other_is_consumer, len(other.domain.logical))
            move = moves.get(key)
            if move is None:
                move = moves[key] = _moved(*key)
            reached, mapped = move
            if id(other) in to_ref:
                _check_agrees(reference, other, to_ref[id(other)], reached)
                continue
            heapq.heappush(heap, (-mapped, next(counter), other, reached))
    # A tensor given a replay made for another has its parallel types: check the first.
    check_parallel_types(t for t in order if id(t) not in copies)
    return order


def _moved(
    ref_map: RefMap, pairs: tuple[tuple[int, int], ...], to_consumer: bool, rank: int
) -> tuple[RefMap, int]:
    """The map onto the reference of a neighbour of rank `rank` reached through an
    expression (`pairs`: its axis positions, producer's and consumer's) from a tensor
    mapped by `ref_map`, and how many of the neighbour's axes it maps."""
    other_map = [-1] * rank
    for p, c in pairs:
        if to_consumer and ref_map[p] >= 0:
            other_map[c] = ref_map[p]
        elif not to_consumer and ref_map[c] >= 0:
            other_map[p] = ref_map[c]
    return tuple(other_map), rank - other_map.count(-1)


def _replay_once(
    reference: TensorView, tv: TensorView, ref_map: RefMap, replays: dict[tuple, Replayed]
) -> bool:
    """replay(reference, tv, ...), decided once per (tv's domain signature, axis map): it
    reads nothing else of tv, so a tensor like one replayed before is given the same.
    True if it was (tv is a copy)."""
    key = (domain_signature(tv), ref_map)
    done = replays.get(key)
    if done is not None:
        done.apply(tv)
        return True
    before = Before.of(tv)
    ref_axes, axes = reference.domain.logical, tv.domain.logical
    replay(reference, tv, {ref_axes[r]: axes[k] for k, r in enumerate(ref_map) if r >= 0})
    replays[key] = Replayed.taken(tv, before)
    return False


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


def check_parallel_types(tensors: Iterable[TensorView]) -> None:
    """No tensor may carry one parallel type on two loop axes."""
    for tv in tensors:
        seen: dict[ParallelType, IterDomain] = {}
        for ax in tv.domain.loop:
            pt = ax.parallel_type
            if pt is ParallelType.Serial:
                continue
            if pt in seen:
                raise ScheduleError(
                    f"{tv.name}: loop axes {axis_text(seen[pt])} and {axis_text(ax)} both have "
                    f"parallel type {pt.value}"
                )
            seen[pt] = ax
