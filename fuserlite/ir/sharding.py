"""Queries on the sharding of a TensorView (IR semantics, no passes).

The sharding of a tensor is, for each device parallel type, the loop axis that
carries it. A device-parallel iteration axis holds 1/D of a logical axis per
device: either the logical axis itself (extent D), or the outer output of a
split of a logical axis whose outer extent is D. A device-parallel broadcast
axis holds no data, so `b` and `bDIDx` are the same sharding: it is ignored
here. A device-parallel reduction axis (rDIDx) marks partial results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fuserlite.ir.domain import IterDomain, Split
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.readonly import remembered
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DEVICE_PARALLEL_TYPES, ParallelType


@dataclass(frozen=True)
class AxisSharding:
    """Which logical axis a device parallel type splits, and how many ways."""

    parallel_type: ParallelType
    logical_index: int  # position in tv.domain.logical
    data_index: int | None  # position among data (non-reduction) axes; None when partial
    num_devices: int

    @property
    def is_partial(self) -> bool:
        """True for rDIDx: each device holds a partial result over this axis."""
        return self.data_index is None


def logical_origin(tv: TensorView, ax: IterDomain) -> IterDomain | None:
    """The logical axis a device-parallel loop axis shards, or None if unsupported."""
    if ax in tv.domain.logical:
        return ax
    d = ax.definition
    if isinstance(d, Split) and ax is d.outer and d.input in tv.domain.logical:
        return d.input
    return None


def sharding_problem(tv: TensorView, ax: IterDomain) -> str | None:
    """Why a device-parallel loop axis is not a valid sharding (None if it is)."""
    pt = ax.parallel_type
    if ax.is_broadcast:
        return None
    if tv.mesh is None:
        return f"{pt.value} is used but the tensor has no device mesh; call set_device_mesh"
    if not tv.mesh.has(pt):
        names = ", ".join(p.name for p in tv.mesh.parallel_types)
        return (
            f"{pt.name} is not an axis of {tv.mesh}, whose mesh axes are {names} (DIDx the "
            f"last); use one of those, or a mesh of rank {DEVICE_PARALLEL_TYPES.index(pt) + 1}"
        )
    if tv.mesh.rank > 1:
        return f"sharding over the {tv.mesh.rank}-D {tv.mesh} is not supported yet; use a 1-D mesh"
    d = tv.mesh.axis_size(pt)
    origin = logical_origin(tv, ax)
    if origin is None:
        return (
            f"{pt.value} must be on a logical axis or on the outer part of a split of one; "
            "parallelize before further splits"
        )
    if origin.extent % d:
        return (
            f"the sharded axis has extent {origin.extent}, not divisible by the {d} devices of "
            f"{tv.mesh}; pad the tensor or use a mesh whose size divides {origin.extent}"
        )
    if ax.extent != d:
        fix = (
            f"outer_split the axis by {d} and parallelize the outer part"
            if origin is ax
            else f"use an outer split by {d}"
        )
        return f"{pt.value} axis has extent {ax.extent} but the mesh has {d} devices; {fix}"
    return None


def shardings(tv: TensorView) -> dict[ParallelType, AxisSharding]:
    """The valid device shardings of a tensor (broadcast DIDs ignored)."""
    return remembered("shardings", tv, lambda: _shardings(tv))


def _shardings(tv: TensorView) -> dict[ParallelType, AxisSharding]:
    out: dict[ParallelType, AxisSharding] = {}
    data_pos: dict[int, int] | None = None
    for ax in tv.domain.loop:
        if ax.parallel_type not in DEVICE_PARALLEL_TYPES or ax.is_broadcast:
            continue
        if sharding_problem(tv, ax) is not None:
            continue
        origin = logical_origin(tv, ax)
        li = tv.domain.logical.index(origin)
        if data_pos is None:
            data_pos = {i: k for k, i in enumerate(tv.data_positions())}
        out[ax.parallel_type] = AxisSharding(ax.parallel_type, li, data_pos.get(li), tv.mesh.size)
    return out


def sharded_data_axis(tv: TensorView, pt: ParallelType = ParallelType.DIDx) -> int | None:
    """Index of the data axis sharded by `pt`, or None if replicated or partial."""
    s = shardings(tv).get(pt)
    return None if s is None else s.data_index


def is_partial(tv: TensorView) -> bool:
    """True if the tensor holds partial results over a device-parallel reduction axis."""
    return any(s.is_partial for s in shardings(tv).values())


def local_shape(tv: TensorView) -> tuple[int, ...]:
    """Shape of one device's shard of the data."""
    return remembered("local_shape", tv, lambda: _local_shape(tv))


def _local_shape(tv: TensorView) -> tuple[int, ...]:
    shape = list(tv.shape)
    for s in shardings(tv).values():
        if s.data_index is not None:
            shape[s.data_index] //= s.num_devices
    return tuple(shape)


def local_nbytes(tv: TensorView) -> int:
    """Bytes of one device's shard of the data."""
    return math.prod(local_shape(tv)) * tv.dtype.itemsize


def same_sharding(a: TensorView, b: TensorView) -> bool:
    """Same mesh and same sharded data axis for every device type (b == bDIDx)."""
    if a.mesh != b.mesh:
        return False
    sa = {pt: (s.data_index, s.is_partial) for pt, s in shardings(a).items()}
    sb = {pt: (s.data_index, s.is_partial) for pt, s in shardings(b).items()}
    return sa == sb


def describe_sharding(tv: TensorView) -> str:
    """`T3 on DeviceMesh{0 1}, sharded on axis 0 (deviceIdx.x)`, `replicated`, or `partial`."""
    where = f"{tv.name} on {tv.mesh}" if tv.mesh is not None else f"{tv.name} (no mesh)"
    parts = []
    for pt, s in shardings(tv).items():
        if s.is_partial:
            parts.append(f"partial sums over reduction axis {s.logical_index} ({pt.value})")
        else:
            parts.append(f"sharded on axis {s.data_index} ({pt.value})")
    return f"{where}, " + (", ".join(parts) if parts else "replicated")


# -- placement: where a tensor's values are ------------------------------------
Placement = tuple[DeviceMesh | None, dict[ParallelType, int]]


def placement(tv: TensorView) -> Placement:
    """Mesh and {parallel type: logical axis} of every sharding, partial ones included."""
    return tv.mesh, {pt: s.logical_index for pt, s in shardings(tv).items()}


def completed_placement(tv: TensorView) -> Placement:
    """tv's placement once its partial values are reduced: its data shardings only."""
    return tv.mesh, {pt: s.logical_index for pt, s in shardings(tv).items() if not s.is_partial}


def is_resharding(expr: Expr) -> bool:
    """A Set whose input and output are sharded differently (b == bDIDx)."""
    return isinstance(expr, LoadStoreOp) and not same_sharding(expr.input, expr.output)
