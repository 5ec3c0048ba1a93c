"""IterDomain, the Split/Merge transforms between axes, and TensorDomain: values.

An IterDomain is an extent, an iteration type and a parallel type; a TensorDomain is
a tensor's axes (its logical ones first, then each transform's outputs in order), the
transforms by the positions of their axes in that list, the loop domain and the
optional allocation domain as positions, and the contiguity. Both are frozen and
interned (fuserlite.ir.values): alike means the same object. An axis is named by its
position in its domain, which a transform never moves (it only appends), so
`Axis(tensor, position)` (fuserlite.ir.tensor) names the same axis before and after
any schedule primitive.

A schedule primitive is a function from a domain to a new one (`split`, `merge`,
`with_loop`, `parallelize`), computed once per distinct arguments; the checks that
name a tensor are TensorView's. The TransformPrinter numbers axes (the printer), and
index lowering inverts the transforms.

    d = TensorDomain([IterDomain(8)])   # [iS{8}]
    d.split(0, 2, inner_split=False)    # [iS{2}, iS{4}]: Split(0, 2, False, 1, 2)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from fuserlite.ir.types import DEVICE_PARALLEL_TYPES, IterType, ParallelType
from fuserlite.ir.values import fact, interned

_set = object.__setattr__


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class IterDomain:
    """One axis: extent, iteration type, parallel type. A value: IterDomain(4) is
    IterDomain(4); a parallel type is given by making another (`with_parallel_type`)."""

    __slots__ = ("extent", "iter_type", "parallel_type", "is_device_parallel", "__weakref__")

    def __new__(
        cls,
        extent: int,
        iter_type: IterType = IterType.ITERATION,
        parallel_type: ParallelType = ParallelType.Serial,
    ) -> IterDomain:
        if type(extent) is not int:
            extent = int(extent)
        key = (cls, extent, iter_type, parallel_type)
        return interned(key, cls._made, extent, iter_type, parallel_type)

    @classmethod
    def _made(cls, extent: int, iter_type: IterType, parallel_type: ParallelType) -> IterDomain:
        ax = object.__new__(cls)
        _set(ax, "extent", extent)
        _set(ax, "iter_type", iter_type)
        _set(ax, "parallel_type", parallel_type)
        _set(ax, "is_device_parallel", parallel_type in DEVICE_PARALLEL_TYPES)
        return ax

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"IterDomain is a value; give the tensor a new domain instead (tv.axis(i)."
            f"parallelize(...), tv.split(...)), not {name} = {value!r}"
        )

    def __reduce__(self) -> tuple:
        return IterDomain, (self.extent, self.iter_type, self.parallel_type)

    def __copy__(self) -> IterDomain:
        return self

    def __deepcopy__(self, memo: dict) -> IterDomain:
        return self

    @property
    def is_broadcast(self) -> bool:
        return self.iter_type is IterType.BROADCAST

    @property
    def is_reduction(self) -> bool:
        return self.iter_type is IterType.REDUCTION

    @property
    def is_iteration(self) -> bool:
        return self.iter_type is IterType.ITERATION

    def with_parallel_type(self, parallel_type: ParallelType) -> IterDomain:
        """This axis with another parallel type."""
        return IterDomain(self.extent, self.iter_type, parallel_type)

    def __repr__(self) -> str:
        return f"<IterDomain {self.iter_type.value}{self.parallel_type.value}{{{self.extent}}}>"


class Split(NamedTuple):
    """Axis `input` split into `outer` and `inner` (positions in the domain's axes).
    Inner split: the inner extent is `factor`; outer split: the outer extent is."""

    input: int
    factor: int
    inner_split: bool
    outer: int
    inner: int

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    @property
    def outputs(self) -> tuple[int, ...]:
        return (self.outer, self.inner)


class Merge(NamedTuple):
    """Axes `outer` and `inner` merged into `output` (positions), extent outer * inner."""

    outer: int
    inner: int
    output: int

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.outer, self.inner)

    @property
    def outputs(self) -> tuple[int, ...]:
        return (self.output,)


class Swizzle1D(NamedTuple):
    """Axis `input` re-indexed by the device's index along `parallel_type` into `output`
    (the same extent): nvFuser's Swizzle1D, out = (in + deviceIdx) mod extent. It reorders
    iteration only (the data and its sharding are those of `input`): on a Stream axis, the
    chunk a device computes at step i is chunk (i + its index) mod extent (the ring
    pipeline, fuserlite.ir.streams)."""

    input: int
    parallel_type: ParallelType
    output: int

    @property
    def inputs(self) -> tuple[int, ...]:
        return (self.input,)

    @property
    def outputs(self) -> tuple[int, ...]:
        return (self.output,)


Transform = Split | Merge | Swizzle1D


def split_extents(extent: int, factor: int, inner_split: bool) -> tuple[int, int]:
    """(outer, inner) extents of a split of an axis of `extent` by `factor`."""
    if inner_split:
        return ceil_div(extent, factor), factor
    return factor, ceil_div(extent, factor)


def merged_iter_type(a: IterType, b: IterType) -> IterType:
    """Iteration type of merge(a, b); reduction with iteration is rejected earlier."""
    if a is b:
        return a
    if IterType.BROADCAST in (a, b):
        return b if a is IterType.BROADCAST else a
    return IterType.ITERATION


def default_contiguity(axes: Sequence[IterDomain]) -> tuple[bool | None, ...]:
    """None for a broadcast or reduction axis, True for an iteration axis."""
    return tuple(None if not ax.is_iteration else True for ax in axes)


class TensorDomain:
    """A tensor's domains as one value: `axes` (logical first, then each transform's
    outputs), `transforms` by positions in it, `loop_positions`, `allocation_positions`
    (None: none) and `contiguity`. `logical`, `loop` and `allocation` are the axes
    themselves; `definition[p]` / `use[p]` the index of the transform that makes /
    consumes axis p (None: a logical axis / a loop axis)."""

    __slots__ = (
        "axes",
        "n_logical",
        "transforms",
        "loop_positions",
        "allocation_positions",
        "contiguity",
        "logical",
        "loop",
        "allocation",
        "definition",
        "use",
        "__weakref__",
    )

    def __new__(
        cls, logical: Sequence[IterDomain], contiguity: Sequence[bool | None] | None = None
    ) -> TensorDomain:
        """The unscheduled domain of `logical` axes (loop = logical)."""
        return _unscheduled(tuple(logical), None if contiguity is None else tuple(contiguity))

    @classmethod
    def made(
        cls,
        axes: tuple[IterDomain, ...],
        n_logical: int,
        transforms: tuple[Transform, ...],
        loop: tuple[int, ...],
        allocation: tuple[int, ...] | None,
        contiguity: tuple[bool | None, ...],
    ) -> TensorDomain:
        """The domain of these parts (interned; the caller made them consistent)."""
        key = (cls, axes, n_logical, transforms, loop, allocation, contiguity)
        return interned(key, cls._build, axes, n_logical, transforms, loop, allocation, contiguity)

    @classmethod
    def _build(cls, axes, n_logical, transforms, loop, allocation, contiguity) -> TensorDomain:
        dom = object.__new__(cls)
        definition: list[int | None] = [None] * len(axes)
        use: list[int | None] = [None] * len(axes)
        for k, t in enumerate(transforms):
            for p in t.outputs:
                definition[p] = k
            for p in t.inputs:
                use[p] = k
        for name, value in (
            ("axes", axes),
            ("n_logical", n_logical),
            ("transforms", transforms),
            ("loop_positions", loop),
            ("allocation_positions", allocation),
            ("contiguity", contiguity),
            ("logical", axes[:n_logical]),
            ("loop", tuple(axes[p] for p in loop)),
            ("allocation", None if allocation is None else tuple(axes[p] for p in allocation)),
            ("definition", tuple(definition)),
            ("use", tuple(use)),
        ):
            _set(dom, name, value)
        return dom

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"TensorDomain is a value; give the tensor a new domain instead, not {name} = ..."
        )

    def __reduce__(self) -> tuple:
        return TensorDomain.made, (
            self.axes,
            self.n_logical,
            self.transforms,
            self.loop_positions,
            self.allocation_positions,
            self.contiguity,
        )

    def __copy__(self) -> TensorDomain:
        return self

    def __deepcopy__(self, memo: dict) -> TensorDomain:
        return self

    def _with(self, **parts: object) -> TensorDomain:
        fields = {
            "axes": self.axes,
            "n_logical": self.n_logical,
            "transforms": self.transforms,
            "loop": self.loop_positions,
            "allocation": self.allocation_positions,
            "contiguity": self.contiguity,
        }
        fields.update(parts)
        return TensorDomain.made(**fields)

    # -- schedule primitives: a new domain each, once per distinct arguments -------
    @fact
    def split(self, loop_index: int, factor: int, inner_split: bool = True) -> TensorDomain:
        """Loop axis `loop_index` split by `factor` (its outputs take its place)."""
        p = self.loop_positions[loop_index]
        ax = self.axes[p]
        outer, inner = split_extents(ax.extent, factor, inner_split)
        n = len(self.axes)
        axes = (*self.axes, IterDomain(outer, ax.iter_type), IterDomain(inner, ax.iter_type))
        loop = self.loop_positions
        return self._with(
            axes=axes,
            transforms=(*self.transforms, Split(p, factor, inner_split, n, n + 1)),
            loop=(*loop[:loop_index], n, n + 1, *loop[loop_index + 1 :]),
        )

    @fact
    def merge(self, outer_index: int, inner_index: int) -> TensorDomain:
        """Loop axes `outer_index` and `inner_index` merged into one at the outer's place."""
        loop = self.loop_positions
        o, i = loop[outer_index], loop[inner_index]
        a, b = self.axes[o], self.axes[i]
        n = len(self.axes)
        merged = IterDomain(a.extent * b.extent, merged_iter_type(a.iter_type, b.iter_type))
        rest = [p for k, p in enumerate(loop) if k not in (outer_index, inner_index)]
        at = outer_index if outer_index < inner_index else outer_index - 1
        rest.insert(at, n)
        return self._with(
            axes=(*self.axes, merged),
            transforms=(*self.transforms, Merge(o, i, n)),
            loop=tuple(rest),
        )

    @fact
    def swizzle1d(self, loop_index: int, parallel_type: ParallelType) -> TensorDomain:
        """Loop axis `loop_index` swizzled by `parallel_type` (its output takes its place)."""
        p = self.loop_positions[loop_index]
        ax = self.axes[p]
        n = len(self.axes)
        loop = self.loop_positions
        return self._with(
            axes=(*self.axes, IterDomain(ax.extent, ax.iter_type)),
            transforms=(*self.transforms, Swizzle1D(p, parallel_type, n)),
            loop=(*loop[:loop_index], n, *loop[loop_index + 1 :]),
        )

    @fact
    def with_loop(self, positions: tuple[int, ...]) -> TensorDomain:
        """The same axes and transforms, the loop domain `positions` (a reorder)."""
        return self._with(loop=tuple(positions))

    @fact
    def parallelize(self, position: int, parallel_type: ParallelType) -> TensorDomain:
        """Axis `position` with `parallel_type` (no check: TensorView's primitives check)."""
        axes = list(self.axes)
        axes[position] = axes[position].with_parallel_type(parallel_type)
        return self._with(axes=tuple(axes))

    @fact
    def with_allocation(
        self, positions: tuple[int, ...] | None, contiguity: tuple[bool | None, ...]
    ) -> TensorDomain:
        """The allocation domain `positions` (None: none) with its contiguity."""
        return self._with(allocation=positions, contiguity=tuple(contiguity))

    # -- reading ------------------------------------------------------------------
    def ids_between_logical_and_loop(self) -> tuple[IterDomain, ...]:
        """Every axis: the logical ones first, then the transforms' outputs."""
        return self.axes

    @property
    def is_unscheduled(self) -> bool:
        """No transforms and the loop domain is the logical one."""
        return not self.transforms and self.loop_positions == tuple(range(self.n_logical))

    def loop_index(self, position: int) -> int | None:
        """Where axis `position` is in the loop domain, or None."""
        try:
            return self.loop_positions.index(position)
        except ValueError:
            return None

    def transform_of(self, position: int) -> Transform | None:
        """The transform that made axis `position` (None for a logical axis)."""
        k = self.definition[position]
        return None if k is None else self.transforms[k]

    def divisible(self, split: Split) -> bool:
        """True when the split needs no tail predicate."""
        return self.axes[split.input].extent % split.factor == 0

    def is_sharding_split(self, t: Transform) -> bool:
        """A split whose outer part is device-parallel: the way a tensor's logical axis is
        sharded over a mesh (the inner part is what one device holds)."""
        return type(t) is Split and self.axes[t.outer].is_device_parallel

    def is_cyclic_split(self, t: Transform) -> bool:
        """A split whose inner part is sharded, itself or by a sharding split of it, and
        whose outer part is not device-parallel: a (block-)cyclic shard of its input
        (`cyclic_device`; ir.sharding.cyclic_chain)."""
        return self.cyclic_device(t) is not None

    def cyclic_device(self, t: Transform) -> tuple[int, int] | None:
        """(device axis, block size) of a (block-)cyclic split `t`, else None: its inner
        part device-parallel (not broadcast), block 1, device r holding rows r, r + d, ...;
        or its outer part serial and its inner part split by a sharding split whose outer
        part is that device axis, block b its inner extent, device r holding rows
        (k * d + r) * b + j of its input."""
        if type(t) is not Split:
            return None
        inner = self.axes[t.inner]
        if inner.is_device_parallel:
            return None if inner.is_broadcast else (t.inner, 1)
        k = self.use[t.inner]
        s = None if k is None else self.transforms[k]
        if (
            self.axes[t.outer].is_device_parallel
            or self.axes[t.outer].parallel_type.is_stream
            or not self.is_sharding_split(s)
            or self.axes[s.outer].is_broadcast
        ):
            return None
        return s.outer, self.axes[s.inner].extent

    def data_positions(self) -> tuple[int, ...]:
        """Positions of the logical axes that hold data (every axis but reductions)."""
        return _data_positions(self)

    def __repr__(self) -> str:
        def text(p: int) -> str:
            ax = self.axes[p]
            return f"{ax.iter_type.value}{ax.parallel_type.value}{p}{{{ax.extent}}}"

        return f"<TensorDomain [{', '.join(map(text, self.loop_positions))}]>"


@fact
def _unscheduled(
    axes: tuple[IterDomain, ...], contiguity: tuple[bool | None, ...] | None
) -> TensorDomain:
    contiguity = default_contiguity(axes) if contiguity is None else contiguity
    return TensorDomain.made(axes, len(axes), (), tuple(range(len(axes))), None, contiguity)


@fact
def _data_positions(dom: TensorDomain) -> tuple[int, ...]:
    return tuple(i for i, ax in enumerate(dom.logical) if not ax.is_reduction)


def is_sharding_split(dom: TensorDomain, t: Transform) -> bool:
    """`dom.is_sharding_split(t)`: the split shards a logical axis over a mesh."""
    return dom.is_sharding_split(t)
