"""Shards: the box of a TensorView's global data each device of its mesh holds.

A tensor's sharding as a Placement on its mesh shape (`ir.sharding.placement`, on
meshes of any rank, nested shardings outer first), so that plan.blocks, torch.chunk's
rule, is the one definition of a device's box: the executor's scatter of inputs and
gather of outputs, its local buffers and the communications' counts all read it here (lower-communications' bytes read
plan.blocks' chunks directly). The buffer a device allocates is `local_shape`
(ceil(n/d) rows, the split's inner extent); a device's own rows are
`device_shape`, fewer on trailing devices.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import placement
from fuserlite.ir.signature import domain_signature
from fuserlite.ir.stamps import derived
from fuserlite.ir.tensor import TensorView
from fuserlite.plan.blocks import Box, blocks
from fuserlite.plan.mesh_axes import MeshShape


def mesh_shape(tv: TensorView) -> MeshShape:
    """The shape of tv's mesh (a tensor without a mesh lives on one device)."""
    return tuple(tv.mesh.shape) if tv.mesh is not None else (1,)


@dataclass(frozen=True)
class Layout:
    """Every device's part of a tensor's data, in mesh (row-major device) order."""

    shape: tuple[int, ...]  # the global shape
    sharded: bool  # some data axis is cut between devices (not replicated or partial)
    boxes: tuple[Box, ...]
    shapes: tuple[tuple[int, ...], ...]
    slices: tuple[tuple[slice, ...], ...]


@functools.lru_cache(maxsize=4096)
def _layout(shape: tuple[int, ...], mesh: MeshShape, p: Placement) -> Layout:
    """A function of its (immutable) arguments alone: the tensors of one shape and
    placement on one mesh shape (20000 outputs of a kernel) share one."""
    boxes = tuple(blocks(shape, mesh, p))
    return Layout(
        shape,
        any(p.shards),
        boxes,
        tuple(tuple(stop - start for start, stop in box) for box in boxes),
        tuple(tuple(slice(start, stop) for start, stop in box) for box in boxes),
    )


def layout(tv: TensorView) -> Layout:
    """tv's layout over the devices of its mesh."""
    return derived("layout", tv, lambda: _layout(tuple(tv.shape), mesh_shape(tv), placement(tv)))


def device_boxes(tv: TensorView) -> tuple[Box, ...]:
    """Every device's box of tv's data, in mesh (row-major device) order."""
    return layout(tv).boxes


def is_sharded(tv: TensorView) -> bool:
    """True when some data axis of tv is cut between devices (not replicated or partial)."""
    return layout(tv).sharded


def _index(tv: TensorView, device: int) -> int:
    return tv.mesh.index(device) if tv.mesh is not None else 0


def device_box(tv: TensorView, device: int) -> Box:
    """The box of tv's global data that `device` holds."""
    return layout(tv).boxes[_index(tv, device)]


def device_shape(tv: TensorView, device: int) -> tuple[int, ...]:
    """The shape of the rows `device` holds of tv (0 rows on an empty chunk)."""
    return layout(tv).shapes[_index(tv, device)]


def device_slices(tv: TensorView, device: int) -> tuple[slice, ...]:
    """numpy slices of tv's global data that `device` holds."""
    return layout(tv).slices[_index(tv, device)]


def layouts_of(tensors: list[TensorView]) -> list[tuple[Layout, DeviceMesh | None]]:
    """(layout, mesh) of each tensor. A layout reads a tensor's shape and placement, both
    its domain's structure on its mesh's shape, so tensors of one (domain signature,
    mesh) share the first one's: 20 000 outputs `x + k` ask once, not each its sharding."""
    found: dict[tuple, tuple[Layout, DeviceMesh | None]] = {}
    entries = []
    last: tuple | None = None
    for tv in tensors:
        key = (domain_signature(tv), id(tv.mesh))
        if key != last:  # neighbours share one mostly: comparing costs less than hashing
            entry = found.get(key)
            if entry is None:
                entry = found[key] = (layout(tv), tv.mesh)
            last = key
        entries.append(entry)
    return entries
