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

from dataclasses import dataclass

from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import layout_facts
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.values import fact
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


@fact
def domain_layout(dom: TensorDomain, mesh: MeshShape | None) -> Layout:
    """The layout of a tensor of domain `dom` on a mesh of shape `mesh` (None: no mesh,
    one device)."""
    facts = layout_facts(dom, mesh)
    shape = tuple(ax.extent for ax in dom.logical if not ax.is_reduction)
    p = facts.placement
    boxes = tuple(blocks(shape, (1,) if mesh is None else mesh, p))
    return Layout(
        shape,
        any(p.shards),
        boxes,
        tuple(tuple(stop - start for start, stop in box) for box in boxes),
        tuple(tuple(slice(start, stop) for start, stop in box) for box in boxes),
    )


def layout(tv: TensorView) -> Layout:
    """tv's layout over the devices of its mesh."""
    mesh = tv.mesh
    return domain_layout(tv.domain, None if mesh is None else mesh.shape)


def device_boxes(tv: TensorView) -> tuple[Box, ...]:
    """Every device's box of tv's data, in mesh (row-major device) order."""
    return layout(tv).boxes


def is_sharded(tv: TensorView) -> bool:
    """True when some data axis of tv is cut between devices (not replicated or partial)."""
    return layout(tv).sharded


def _index(tv: TensorView, device: int) -> int:
    return tv.mesh.index(device) if tv.mesh is not None else 0


@fact
def domain_logical_boxes(dom: TensorDomain, mesh: MeshShape | None) -> tuple[Box, ...]:
    """Every device's box of the logical domain of a tensor of domain `dom` on a mesh of
    shape `mesh`: its data box, and on a reduction axis sharded over mesh axes (partial
    values) the part of the sum each device holds, the chunk of that axis a split gives."""
    shape = tuple(ax.extent for ax in dom.logical)
    return tuple(blocks(shape, (1,) if mesh is None else mesh, layout_facts(dom, mesh).logical))


def logical_start(tv: TensorView, device: int) -> tuple[int, ...]:
    """Where `device`'s block of tv's logical domain starts (domain_logical_boxes)."""
    mesh = tv.mesh
    boxes = domain_logical_boxes(tv.domain, None if mesh is None else mesh.shape)
    return tuple(start for start, _ in boxes[_index(tv, device)])


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
    """(layout, mesh) of each tensor."""
    return [(layout(tv), tv.mesh) for tv in tensors]
