"""IterDomain, the Split/Merge transforms between them, and TensorDomain.

IterDomains are IR nodes: compared by identity, numbered only by the printer.
A transform records how loop IterDomains were derived from logical ones, so the
TransformPrinter can show it and index lowering can invert it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from fuserlite.ir import args
from fuserlite.ir.errors import FuserliteError, ScheduleError
from fuserlite.ir.stamps import TrackedList, stamp, tick, tracked
from fuserlite.ir.types import DEVICE_PARALLEL_TYPES, MAX_THREADS, IterType, ParallelType

if TYPE_CHECKING:
    from fuserlite.ir.tensor import TensorView


def _parallel_type(value: object) -> ParallelType:
    """A ParallelType or its name, or a ScheduleError saying what was given."""
    if type(value) is ParallelType:
        return value
    if isinstance(value, str):
        try:
            return ParallelType.parse(value)
        except FuserliteError as exc:
            raise ScheduleError(f"parallelize: parallel_type: {exc}") from None
    return args.instance(
        value,
        ParallelType,
        "parallelize",
        "parallel_type",
        "a ParallelType or its name (DIDx, deviceIdx.x, TIDx, ...)",
        ScheduleError,
    )


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _AxisFields:
    __slots__ = ("extent", "iter_type", "parallel_type", "definition", "owner")


# The slots' own setters: IterDomain.__init__ fills a new axis without stamping anything
# (hundreds of thousands are made while scheduling a wide fusion).
_SET = {name: getattr(_AxisFields, name).__set__ for name in _AxisFields.__slots__}
_SET_EXTENT, _SET_ITER, _SET_PT, _SET_DEF, _SET_OWNER = _SET.values()
_NEW = object.__new__  # a node whose fields are set directly


class IterDomain(_AxisFields):
    """One axis: extent, iteration type and parallel type.

    Every change to an axis stamps the domain of the tensor that owns it (ir.stamps),
    so what was derived from that tensor or its domain, or checked about it, is
    computed again."""

    __slots__ = ()

    def __init__(
        self,
        extent: int,
        iter_type: IterType = IterType.ITERATION,
        parallel_type: ParallelType = ParallelType.Serial,
    ) -> None:
        _SET_EXTENT(self, int(extent))
        _SET_ITER(self, iter_type)
        _SET_PT(self, parallel_type)
        _SET_DEF(self, None)
        _SET_OWNER(self, None)

    def __setattr__(self, name: str, value: object) -> None:
        setter = _SET.get(name)
        if setter is None:
            raise AttributeError(f"IterDomain has no attribute {name!r}")
        if name == "owner" and self.owner is not None:
            stamp(self.owner.domain)  # it may still hold this axis: check it again
        setter(self, value)
        if self.owner is not None:
            stamp(self.owner.domain)

    @property
    def is_broadcast(self) -> bool:
        return self.iter_type is IterType.BROADCAST

    @property
    def is_reduction(self) -> bool:
        return self.iter_type is IterType.REDUCTION

    @property
    def is_iteration(self) -> bool:
        return self.iter_type is IterType.ITERATION

    @property
    def is_device_parallel(self) -> bool:
        return self.parallel_type in DEVICE_PARALLEL_TYPES  # asked millions of times

    def parallelize(self, parallel_type: ParallelType | str) -> IterDomain:
        """Bind this loop axis to a parallel type; no tensor may carry one type on two
        loop axes, and a thread axis holds at most MAX_THREADS."""
        pt = _parallel_type(parallel_type)
        tv = self.owner
        if tv is not None:
            loop = tv.domain.loop
            if self not in loop:
                raise ScheduleError(
                    f"parallelize: {tv.name}: {pt.value} is given to an axis that is not in "
                    "the loop domain"
                )
            if pt is not ParallelType.Serial:
                for k, other in enumerate(loop):
                    if other is not self and other.parallel_type is pt:
                        mesh_axis = (
                            f"; {pt.name} names one mesh axis, which shards at most one "
                            "tensor axis: use another DID type for another mesh axis"
                            if pt.is_device
                            else ""
                        )
                        raise ScheduleError(
                            f"parallelize: {tv.name} axis {loop.index(self)}: loop axis {k} "
                            f"already has parallel type {pt.value}; a tensor carries each "
                            f"parallel type on at most one loop axis{mesh_axis}"
                        )
        if pt.is_thread and self.extent > MAX_THREADS:
            where = f"{tv.name} axis {tv.domain.loop.index(self)}" if tv is not None else "axis"
            raise ScheduleError(
                f"parallelize: {where}: {pt.value} extent {self.extent} exceeds {MAX_THREADS}"
            )
        self.parallel_type = pt
        return self

    def clone(self) -> IterDomain:
        """A fresh IterDomain with the same extent and types, no definition or owner."""
        return IterDomain(self.extent, self.iter_type, self.parallel_type)

    def __repr__(self) -> str:
        return f"<IterDomain {self.iter_type.value}{self.parallel_type.value}{{{self.extent}}}>"


def _axis(
    extent: int,
    iter_type: IterType,
    parallel_type: ParallelType,
    definition: Split | Merge | None,
    owner: TensorView,
) -> IterDomain:
    """A new axis, its fields and owner set directly (IterDomain.__init__'s and no
    stamp: a new axis has nothing derived from it yet)."""
    ax = _NEW(IterDomain)
    _SET_EXTENT(ax, extent)
    _SET_ITER(ax, iter_type)
    _SET_PT(ax, parallel_type)
    _SET_DEF(ax, definition)
    _SET_OWNER(ax, owner)
    return ax


def adopt(axes: Iterable[IterDomain], tv: TensorView) -> None:
    """Make `tv` the owner of `axes`: a new axis is given its owner directly (the
    tensor's own change, a new domain or loop list, stamps it), another one through
    its attribute, which stamps its former owner too."""
    for ax in axes:
        if ax.owner is None:
            _SET_OWNER(ax, tv)
        else:
            ax.owner = tv


class Split:
    """in -> (outer, inner). Inner split: inner extent = factor; outer split: outer = factor."""

    __slots__ = ("input", "factor", "inner_split", "outer", "inner")

    def __init__(self, input: IterDomain, factor: int, inner_split: bool = True) -> None:
        self.input = input
        self.factor = int(factor)
        self.inner_split = inner_split
        if inner_split:
            outer_extent, inner_extent = ceil_div(input.extent, factor), factor
        else:
            outer_extent, inner_extent = factor, ceil_div(input.extent, factor)
        self.outer = IterDomain(outer_extent, input.iter_type)
        self.inner = IterDomain(inner_extent, input.iter_type)
        _SET_DEF(self.outer, self)  # new axes: no owner to stamp yet
        _SET_DEF(self.inner, self)

    @property
    def inputs(self) -> tuple[IterDomain, ...]:
        return (self.input,)

    @property
    def outputs(self) -> tuple[IterDomain, ...]:
        return (self.outer, self.inner)

    @property
    def divisible(self) -> bool:
        """True when the split needs no tail predicate."""
        return self.input.extent % self.factor == 0


def merged_iter_type(a: IterType, b: IterType) -> IterType:
    """Iteration type of merge(a, b); reduction with iteration is rejected earlier."""
    if a is b:
        return a
    if IterType.BROADCAST in (a, b):
        return b if a is IterType.BROADCAST else a
    return IterType.ITERATION


class Merge:
    """(outer, inner) -> out with extent outer * inner."""

    __slots__ = ("outer", "inner", "output")

    def __init__(self, outer: IterDomain, inner: IterDomain) -> None:
        self.outer = outer
        self.inner = inner
        self.output = IterDomain(
            outer.extent * inner.extent, merged_iter_type(outer.iter_type, inner.iter_type)
        )
        _SET_DEF(self.output, self)

    @property
    def inputs(self) -> tuple[IterDomain, ...]:
        return (self.outer, self.inner)

    @property
    def outputs(self) -> tuple[IterDomain, ...]:
        return (self.output,)


Transform = Split | Merge
# A transform by positions in a domain's growing axis list (TensorDomain.extend_for):
# (kind, input or outer, factor or inner, inner_split or None, its outputs' (extent,
# iter type, parallel type)).
Step = tuple[str, int, int, bool | None, tuple[tuple[int, IterType, ParallelType], ...]]


def is_sharding_split(t: Transform) -> bool:
    """A split whose outer part is device-parallel: the way a tensor's logical axis is
    sharded over a mesh (the inner part is what one device holds)."""
    return isinstance(t, Split) and t.outer.is_device_parallel


class TensorDomain:
    """Logical, loop and optional allocation domains of one TensorView.

    Its lists are TrackedLists: assigning or changing one in place stamps the domain."""

    __slots__ = ("logical", "loop", "allocation", "contiguity", "transforms", "_stamp")
    in_graph = False  # its changes are its tensor's, never the graph's

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, tracked(self, value))
        object.__setattr__(self, "_stamp", tick())

    def __init__(self, logical: list[IterDomain], contiguity: list[bool | None] | None = None):
        if contiguity is None:
            contiguity = [None if not ax.is_iteration else True for ax in logical]
        init = object.__setattr__  # a new domain: one stamp, not one per list
        init(self, "logical", TrackedList(self, logical))
        init(self, "loop", TrackedList(self, logical))
        init(self, "allocation", None)
        init(self, "contiguity", TrackedList(self, contiguity))
        init(self, "transforms", TrackedList(self, ()))
        init(self, "_stamp", tick())
        self.logical: list[IterDomain]
        self.loop: list[IterDomain]
        self.allocation: list[IterDomain] | None
        self.contiguity: list[bool | None]
        self.transforms: list[Transform]

    def copy_for(self, owner: TensorView, mapping: dict) -> TensorDomain:
        """A copy of this domain owned by `owner`: fresh axes of the same extents and
        types, the same transforms between them, and `mapping` given each old axis's
        copy (its new axes are filled directly and the domain stamped once: a fusion
        of 20 000 tensors is copied before every pipeline run)."""
        dom = TensorDomain.__new__(TensorDomain)
        logical = []
        for ax in self.logical:
            new = _axis(ax.extent, ax.iter_type, ax.parallel_type, None, owner)
            mapping[ax] = new
            logical.append(new)
        transforms: list[Transform] = []
        for t in self.transforms:
            if type(t) is Split:
                nt = Split(mapping[t.input], t.factor, t.inner_split)
            else:
                nt = Merge(mapping[t.outer], mapping[t.inner])
            for a, b in zip(t.outputs, nt.outputs):
                _SET_PT(b, a.parallel_type)
                _SET_OWNER(b, owner)
                mapping[a] = b
            transforms.append(nt)
        init = object.__setattr__
        init(dom, "logical", TrackedList(dom, logical))
        # An unscheduled domain's loop is its logical axes (most of a wide fusion's are).
        loop = logical if not transforms and self.loop == self.logical else None
        init(dom, "loop", TrackedList(dom, loop or [mapping[a] for a in self.loop]))
        allocation = self.allocation
        if allocation is not None:
            allocation = TrackedList(dom, [mapping[a] for a in allocation])
        init(dom, "allocation", allocation)
        init(dom, "contiguity", TrackedList(dom, self.contiguity))
        init(dom, "transforms", TrackedList(dom, transforms))
        init(dom, "_stamp", tick())
        return dom

    def extend_for(self, owner: TensorView, steps: Iterable[Step], loop: Iterable[int]) -> None:
        """Append the transforms `steps` describe, owned by `owner`, then set the loop
        domain by positions; both by positions in ids_between_logical_and_loop(), which
        the new axes extend. A split step is ("split", input, factor, inner_split,
        (outer axis, inner axis)), a merge ("merge", outer, inner, None, (output axis,)),
        each new axis as (extent, iter type, parallel type). No check: the steps were
        taken from a domain of the same structure, where split and merge checked them;
        the axes are built directly and the domain stamped once (a schedule replayed onto
        20 000 tensors alike)."""
        ids = self.ids_between_logical_and_loop()
        made: list[Transform] = []
        for kind, a, b, inner_split, axes in steps:
            if kind == "split":
                t = _NEW(Split)
                t.input, t.factor, t.inner_split = ids[a], b, inner_split
                (e, it, pt), (e2, it2, pt2) = axes
                t.outer, t.inner = _axis(e, it, pt, t, owner), _axis(e2, it2, pt2, t, owner)
                ids += (t.outer, t.inner)
            else:
                t = _NEW(Merge)
                t.outer, t.inner = ids[a], ids[b]
                ((e, it, pt),) = axes
                t.output = _axis(e, it, pt, t, owner)
                ids.append(t.output)
            made.append(t)
        # In place, untracked: one stamp for the whole change.
        list.extend(self.transforms, made)
        list.__setitem__(self.loop, slice(None), [ids[k] for k in loop])
        object.__setattr__(self, "_stamp", tick())

    def ids_between_logical_and_loop(self) -> list[IterDomain]:
        """Every IterDomain of this domain: logical ones first, then transform outputs."""
        out = list(self.logical)
        for t in self.transforms:
            out.extend(t.outputs)
        return out
