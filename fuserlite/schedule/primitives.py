"""Schedule primitives on a TensorView's loop domain: split, merge, reorder, parallelize.

Each primitive records its transform in the TensorDomain so the TransformPrinter
shows it and index lowering can invert it. Illegal requests raise ScheduleError
naming the tensor and the axis.

    split(T0, 0, 128)            [iS0{1000}]          -> [iS1{8}, iS2{128}]
    split(T0, 0, 2, outer)       [iS0{8}]             -> [iS1{2}, iS2{4}]
    merge(T0, 0, 1)              [iS0{2}, iS1{3}]     -> [iS2{6}]
    reorder(T0, {0: 1})          [iS0{2}, iS1{3}]     -> [iS1{3}, iS0{2}]
"""

from __future__ import annotations

from fuserlite.ir import args
from fuserlite.ir.domain import IterDomain, Merge, Split
from fuserlite.ir.errors import FuserliteError, ScheduleError
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import IterType, ParallelType

MAX_FACTOR = 2**31 - 1  # loop extents are 32-bit in CUDA's grid


def _tensor(tv: object, what: str) -> TensorView:
    return args.instance(tv, TensorView, what, "tv", "a TensorView", ScheduleError)


def axis_index(tv: TensorView, axis: int, what: str) -> int:
    """Loop position `axis` of tv (negative counts from the end), or a ScheduleError."""
    n = len(tv.domain.loop)
    axis = args.integer(axis, what, "axis", error=ScheduleError)
    if not -n <= axis < n:
        raise ScheduleError(f"{what}: {tv.name} has {n} loop axes; axis {axis} is out of range")
    return axis % n


def split(
    tv: TensorView, axis: int, factor: int, inner_split: bool = True
) -> tuple[IterDomain, IterDomain]:
    """Split loop axis `axis` of `tv` by `factor`; returns (outer, inner)."""
    kind = "split" if inner_split else "outer_split"
    i = axis_index(_tensor(tv, kind), axis, kind)
    factor = args.integer(
        factor,
        f"{kind}: {tv.name} axis {axis}",
        "factor",
        minimum=1,
        maximum=MAX_FACTOR,
        error=ScheduleError,
    )
    ax = tv.domain.loop[i]
    if ax.is_device_parallel and not ax.is_broadcast:
        raise ScheduleError(
            f"{kind}: {tv.name} axis {axis} is device-parallel ({ax.parallel_type.value}); "
            "split the axis before parallelizing it"
        )
    t = Split(ax, factor, inner_split)
    for out in t.outputs:
        out.owner = tv
    tv.domain.transforms.append(t)
    tv.domain.loop[i : i + 1] = [t.outer, t.inner]
    return t.outer, t.inner


def merge(tv: TensorView, axis_o: int, axis_i: int) -> IterDomain:
    """Merge loop axes axis_o and axis_i of `tv` into one axis at axis_o's position."""
    o = axis_index(_tensor(tv, "merge"), axis_o, "merge")
    i = axis_index(tv, axis_i, "merge")
    if o == i:
        raise ScheduleError(f"merge: {tv.name}: cannot merge axis {axis_o} with itself")
    outer, inner = tv.domain.loop[o], tv.domain.loop[i]
    kinds = {outer.iter_type, inner.iter_type}
    if IterType.REDUCTION in kinds and IterType.ITERATION in kinds:
        raise ScheduleError(
            f"merge: {tv.name}: axis {axis_o} and axis {axis_i} mix a reduction and an "
            "iteration axis; reorder so that reductions are merged with reductions"
        )
    for pos, ax in ((axis_o, outer), (axis_i, inner)):
        if ax.is_device_parallel and not ax.is_broadcast:
            raise ScheduleError(
                f"merge: {tv.name} axis {pos} is device-parallel ({ax.parallel_type.value}); "
                "device axes are never merged"
            )
    t = Merge(outer, inner)
    t.output.owner = tv
    tv.domain.transforms.append(t)
    loop = [ax for k, ax in enumerate(tv.domain.loop) if k not in (o, i)]
    loop.insert(min(o, i) if o < i else o - 1, t.output)
    tv.domain.loop = loop
    return t.output


def reorder(tv: TensorView, order: dict[int, int]) -> None:
    """Move loop axes: `order` maps old positions to new ones; the rest keep their order."""
    n = len(_tensor(tv, "reorder").domain.loop)
    if not isinstance(order, dict):
        raise args.fail(f"reorder: {tv.name}", "order", "a dict {old: new}", order, ScheduleError)
    pairs = [(axis_index(tv, k, "reorder"), axis_index(tv, v, "reorder")) for k, v in order.items()]
    src = dict(pairs)
    if len(src) != len(pairs):
        raise ScheduleError(f"reorder: {tv.name}: one axis is listed twice in {order}")
    if len(set(src.values())) != len(src):
        raise ScheduleError(f"reorder: {tv.name}: two axes moved to the same position in {order}")
    new: list[IterDomain | None] = [None] * n
    for old, pos in src.items():
        new[pos] = tv.domain.loop[old]
    rest = iter(ax for k, ax in enumerate(tv.domain.loop) if k not in src)
    tv.domain.loop = [ax if ax is not None else next(rest) for ax in new]


def parallelize_axis(ax: IterDomain, parallel_type: ParallelType | str) -> None:
    """Give loop axis `ax` a parallel type; no tensor may carry one type on two loop axes."""
    args.instance(
        ax, IterDomain, "parallelize", "axis", "an IterDomain (tv.axis(i))", ScheduleError
    )
    if isinstance(parallel_type, str):
        try:
            pt = ParallelType.parse(parallel_type)
        except FuserliteError as exc:
            raise ScheduleError(f"parallelize: parallel_type: {exc}") from None
    else:
        pt = args.instance(
            parallel_type,
            ParallelType,
            "parallelize",
            "parallel_type",
            "a ParallelType or its name (DIDx, deviceIdx.x, TIDx, ...)",
            ScheduleError,
        )
    tv = ax.owner
    if tv is not None:
        if ax not in tv.domain.loop:
            raise ScheduleError(
                f"parallelize: {tv.name}: {pt.value} is given to an axis that is not in the loop domain"
            )
        if pt is not ParallelType.Serial:
            for k, other in enumerate(tv.domain.loop):
                if other is not ax and other.parallel_type is pt:
                    raise ScheduleError(
                        f"parallelize: {tv.name} axis {tv.domain.loop.index(ax)}: loop axis {k} "
                        f"already has parallel type {pt.value}; a tensor carries each parallel "
                        "type on at most one loop axis"
                    )
    if pt.is_thread and ax.extent > 1024:
        where = f"{tv.name} axis {tv.domain.loop.index(ax)}" if tv is not None else "axis"
        raise ScheduleError(f"parallelize: {where}: {pt.value} extent {ax.extent} exceeds 1024")
    ax.parallel_type = pt


def parallelize(tv: TensorView, axis: int, parallel_type: ParallelType | str) -> None:
    """parallelize(tv, axis, type): tv.axis(axis).parallelize(type)."""
    parallelize_axis(
        tv.domain.loop[axis_index(_tensor(tv, "parallelize"), axis, "parallelize")], parallel_type
    )
