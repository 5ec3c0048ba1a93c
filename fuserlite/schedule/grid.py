"""The kernel grid: which loop axes of a scheduled tensor a kernel's loop nest iterates.

The loop axes a kernel's grid iterates ("grid axes") are the loop axes of a
tensor that are neither device-parallel nor logical axes: the outputs of the
scheduler's merges and splits, e.g. `[iblockIdx.x, iUS, ithreadIdx.x]`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fuserlite.ir.domain import IterDomain, is_sharding_split
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.stamps import derived
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.printer import axis_text
from fuserlite.schedule.signature import one_per_signature


def _is_sharding_remainder(ax: IterDomain) -> bool:
    """True for the extent-1 inner part of a sharding split (an axis of extent D outer-split
    by D): like a logical axis of extent 1 it iterates nothing, and a tensor sharded by
    the whole axis (`ideviceIdx.x{D}`) has no such axis, so it is no loop of the grid."""
    d = ax.definition
    return d is not None and is_sharding_split(d) and ax is d.inner and ax.extent == 1


def grid_axes(tv: TensorView) -> list[IterDomain]:
    """The loop axes of `tv` bound to the kernel grid (scheduler-made, not device-parallel)."""
    return derived("grid_axes", tv, lambda: _grid_axes(tv))


def _grid_axes(tv: TensorView) -> list[IterDomain]:
    return [
        ax
        for ax in tv.domain.loop
        if not ax.is_device_parallel
        and ax.definition is not None
        and not _is_sharding_remainder(ax)
    ]


@dataclass(frozen=True)
class GridAxis:
    """One position of a kernel's loop nest: its extent and how it is executed."""

    extent: int
    parallel_type: ParallelType


def kernel_grid(tensors: list[TensorView]) -> list[GridAxis]:
    """The loop nest shared by the tensors a kernel computes: per position the largest
    extent and the (common) parallel type.

    A tensor of one element on a device (0-d, broadcast-only, or all its axes of extent
    1) asks for extent 1 at every position: each point of its loops holds that one
    element (axes of extent 1 index 0, unpredicated), so a kernel of such tensors runs
    one thread instead of a block of threads that all store the same element.

    It reads the tensors' domains and meshes only: one tensor of each domain signature
    and mesh stands for the others (the first, so a message names the same tensor)."""
    tensors = one_per_signature(tensors)
    depth = max((len(grid_axes(tv)) for tv in tensors), default=0)
    extents = [1] * depth
    types: list[ParallelType | None] = [None] * depth
    for tv in tensors:
        axes = grid_axes(tv)
        if not axes:
            continue
        if len(axes) != depth:
            raise ScheduleError(
                f"{tv.name} has {len(axes)} scheduled loop axes but the kernel has {depth}; "
                "propagate the reference schedule to every tensor of the kernel"
            )
        one = math.prod(local_shape(tv)) == 1
        for j, ax in enumerate(axes):
            extents[j] = max(extents[j], 1 if one else ax.extent)
            if ax.parallel_type is not ParallelType.Serial:
                if types[j] not in (None, ax.parallel_type):
                    raise ScheduleError(
                        f"{tv.name} loop axis {axis_text(ax)} is {ax.parallel_type.value} but "
                        f"another tensor binds position {j} to {types[j].value}"
                    )
                types[j] = ax.parallel_type
    return [GridAxis(e, t or ParallelType.Serial) for e, t in zip(extents, types)]


def unbound_loop_axis(tv: TensorView) -> IterDomain | None:
    """A loop axis of `tv` that iterates but is not on the grid (the tensor then has
    no index at a grid point), or None."""
    bound = {id(ax) for ax in grid_axes(tv)}
    for ax in tv.domain.loop:
        if id(ax) not in bound and not ax.is_device_parallel and ax.extent != 1:
            return ax
    return None
