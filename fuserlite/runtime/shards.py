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

from fuserlite.ir.sharding import placement
from fuserlite.ir.stamps import derived
from fuserlite.ir.tensor import TensorView
from fuserlite.plan.blocks import Box, blocks
from fuserlite.plan.mesh_axes import MeshShape


def mesh_shape(tv: TensorView) -> MeshShape:
    """The shape of tv's mesh (a tensor without a mesh lives on one device)."""
    return tuple(tv.mesh.shape) if tv.mesh is not None else (1,)


def device_boxes(tv: TensorView) -> list[Box]:
    """Every device's box of tv's data, in mesh (row-major device) order."""
    return derived("device boxes", tv, lambda: blocks(tv.shape, mesh_shape(tv), placement(tv)))


def is_sharded(tv: TensorView) -> bool:
    """True when some data axis of tv is cut between devices (not replicated or partial)."""
    return any(placement(tv).shards)


def device_box(tv: TensorView, device: int) -> Box:
    """The box of tv's global data that `device` holds."""
    index = tv.mesh.index(device) if tv.mesh is not None else 0
    return device_boxes(tv)[index]


def device_shape(tv: TensorView, device: int) -> tuple[int, ...]:
    """The shape of the rows `device` holds of tv (0 rows on an empty chunk)."""
    return tuple(stop - start for start, stop in device_box(tv, device))


def device_slices(tv: TensorView, device: int) -> tuple[slice, ...]:
    """numpy slices of tv's global data that `device` holds."""
    return tuple(slice(start, stop) for start, stop in device_box(tv, device))
