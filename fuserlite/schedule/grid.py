"""The kernel grid: which loop axes of a scheduled tensor a kernel's loop nest iterates.

The loop axes a kernel's grid iterates ("grid axes") are the loop axes of a
tensor that are neither device-parallel nor logical axes: the outputs of the
scheduler's merges and splits, e.g. `[iblockIdx.x, iUS, ithreadIdx.x]`. Each is a
fact of the tensor's domain (positions in it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fuserlite.ir.domain import Split, TensorDomain
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import Axis, TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ir.values import fact
from fuserlite.printer import axis_text


def _is_sharding_remainder(dom: TensorDomain, p: int) -> bool:
    """True for the extent-1 inner part of a sharding split (an axis of extent D outer-split
    by D): like a logical axis of extent 1 it iterates nothing, and a tensor sharded by
    the whole axis (`ideviceIdx.x{D}`) has no such axis, so it is no loop of the grid."""
    d = dom.transform_of(p)
    return (
        type(d) is Split and dom.is_sharding_split(d) and p == d.inner and dom.axes[p].extent == 1
    )


@fact
def grid_positions(dom: TensorDomain) -> tuple[int, ...]:
    """The loop axes of a domain bound to the kernel grid (scheduler-made, not
    device-parallel), as positions."""
    return tuple(
        p
        for p in dom.loop_positions
        if not dom.axes[p].is_device_parallel
        and dom.definition[p] is not None
        and not _is_sharding_remainder(dom, p)
    )


def grid_axes(tv: TensorView) -> list[Axis]:
    """The loop axes of `tv` bound to the kernel grid, as handles."""
    return [Axis(tv, p) for p in grid_positions(tv.domain)]


@dataclass(frozen=True)
class GridAxis:
    """One position of a kernel's loop nest: its extent and how it is executed."""

    extent: int
    parallel_type: ParallelType


def one_per_layout(tensors: list[TensorView]) -> list[TensorView]:
    """The first tensor of each (domain, mesh), in order: all that a check reading only
    the tensors' domains and meshes needs to see (it names the same tensor: the first
    that fails)."""
    first: dict[tuple, TensorView] = {}
    for tv in tensors:
        first.setdefault((tv.domain, tv.mesh), tv)
    return list(first.values())


def kernel_grid(tensors: list[TensorView]) -> list[GridAxis]:
    """The loop nest shared by the tensors a kernel computes: per position the largest
    extent and the (common) parallel type.

    A tensor of one element on a device (0-d, broadcast-only, or all its axes of extent
    1) asks for extent 1 at every position: each point of its loops holds that one
    element (axes of extent 1 index 0, unpredicated), so a kernel of such tensors runs
    one thread instead of a block of threads that all store the same element.

    It reads the tensors' domains and meshes only: one tensor of each (domain, mesh)
    stands for the others (the first, so a message names the same tensor)."""
    tensors = one_per_layout(tensors)
    depth = max((len(grid_positions(tv.domain)) for tv in tensors), default=0)
    extents = [1] * depth
    types: list[ParallelType | None] = [None] * depth
    for tv in tensors:
        dom = tv.domain
        positions = grid_positions(dom)
        if not positions:
            continue
        if len(positions) != depth:
            raise ScheduleError(
                f"{tv.name} has {len(positions)} scheduled loop axes but the kernel has "
                f"{depth}; propagate the reference schedule to every tensor of the kernel"
            )
        one = math.prod(local_shape(tv)) == 1
        for j, p in enumerate(positions):
            ax = dom.axes[p]
            extents[j] = max(extents[j], 1 if one else ax.extent)
            if ax.parallel_type is not ParallelType.Serial:
                if types[j] not in (None, ax.parallel_type):
                    raise ScheduleError(
                        f"{tv.name} loop axis {axis_text(Axis(tv, p))} is "
                        f"{ax.parallel_type.value} but another tensor binds position {j} to "
                        f"{types[j].value}"
                    )
                types[j] = ax.parallel_type
    return [GridAxis(e, t or ParallelType.Serial) for e, t in zip(extents, types)]


@fact
def unbound_position(dom: TensorDomain) -> int | None:
    """A loop axis of a domain that iterates but is not on the grid (the tensor then
    has no index at a grid point), or None."""
    bound = set(grid_positions(dom))
    for p in dom.loop_positions:
        ax = dom.axes[p]
        if p not in bound and not ax.is_device_parallel and ax.extent != 1:
            return p
    return None


def unbound_loop_axis(tv: TensorView) -> Axis | None:
    """unbound_position of tv's domain, as a handle."""
    p = unbound_position(tv.domain)
    return None if p is None else Axis(tv, p)
