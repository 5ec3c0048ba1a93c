"""Shards: the box of a TensorView's global data each device of its mesh holds.

A tensor's sharding as a Placement on its mesh shape (`ir.sharding.placement`, on
meshes of any rank, nested shardings outer first), so that plan.blocks, torch.chunk's
rule, is the one definition of a device's box: the executor's scatter of inputs and
gather of outputs, its local buffers and the communications' counts all read it here (lower-communications' bytes read
plan.blocks' chunks directly). The buffer a device allocates is `local_shape`
(ceil(n/d) rows, the split's inner extent); a device's own rows are
`device_shape`, fewer on trailing devices.

A cyclic shard (the inner part of a split by d, nvFuser's strided layout) is no box:
device r holds rows r, r + d, r + 2d, ... of its axis, the slice `r::d`. Its layout has
slices and shapes but no boxes: `device_box` and `device_boxes`, which the
collectives, the library kernels and logical_start read, refuse it with an error
naming the tensor and the axis (an ExecutionError), so that nothing
that indexes boxes computes a wrong value on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import layout_facts
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.values import fact
from fuserlite.plan.blocks import Box, blocks, cyclic_indices
from fuserlite.plan.mesh_axes import MeshShape


def mesh_shape(tv: TensorView) -> MeshShape:
    """The shape of tv's mesh (a tensor without a mesh lives on one device)."""
    return tuple(tv.mesh.shape) if tv.mesh is not None else (1,)


@dataclass(frozen=True)
class Layout:
    """Every device's part of a tensor's data, in mesh (row-major device) order."""

    shape: tuple[int, ...]  # the global shape
    sharded: bool  # some data axis is cut between devices (not replicated or partial)
    boxes: tuple[Box, ...] | None  # None: a cyclic shard, which no box holds
    shapes: tuple[tuple[int, ...], ...]
    slices: tuple[tuple[slice | tuple[int, ...], ...], ...]  # a numpy index per axis
    cyclic: int | None = None  # the data axis sharded cyclically, if any


@fact
def domain_layout(dom: TensorDomain, mesh: MeshShape | None) -> Layout:
    """The layout of a tensor of domain `dom` on a mesh of shape `mesh` (None: no mesh,
    one device)."""
    facts = layout_facts(dom, mesh)
    shape = tuple(ax.extent for ax in dom.logical if not ax.is_reduction)
    p = facts.placement
    if p.cyclic:
        return _cyclic_layout(shape, mesh, p)
    boxes = tuple(blocks(shape, (1,) if mesh is None else mesh, p))
    return Layout(
        shape,
        any(p.shards),
        boxes,
        tuple(tuple(stop - start for start, stop in box) for box in boxes),
        tuple(tuple(slice(start, stop) for start, stop in box) for box in boxes),
    )


def _cyclic_layout(shape: tuple[int, ...], mesh: MeshShape, p) -> Layout:
    """Every device's rows of its (block-)cyclic axis (plan.blocks.cyclic_indices),
    torch.chunk's chunks of the axes the other mesh axes shard."""
    slices = tuple(cyclic_indices(shape, mesh, p))
    shapes = tuple(
        tuple(len(s) if type(s) is tuple else len(range(n)[s]) for n, s in zip(shape, where))
        for where in slices
    )
    return Layout(shape, True, None, shapes, slices, p.cyclic_axis())


def cyclic_problem(tv: TensorView, who: str) -> ExecutionError:
    """The error a reader of boxes (`who`) raises on a cyclic shard of tv."""
    lay = layout(tv)
    p = layout_facts(tv.domain, tv.mesh.shape).placement
    d, b = tv.mesh.shape[p.cyclic[0]], p.block[0]
    how = (
        f"the inner part of a split by {d}: device i holds rows i, i + {d}, ..."
        if b == 1
        else f"in blocks of {b}: device i holds rows i*{b} to i*{b} + {b - 1}, then those "
        f"+ {d * b}, ..."
    )
    return ExecutionError(
        f"{who} cannot read {tv.name}: its data axis {lay.cyclic} is sharded cyclically "
        f"({how}), which no "
        f"box holds; only pointwise kernels between tensors sharded alike read it: "
        f"outer_split the axis by {d} and parallelize the outer part instead"
    )


def layout(tv: TensorView) -> Layout:
    """tv's layout over the devices of its mesh."""
    mesh = tv.mesh
    return domain_layout(tv.domain, None if mesh is None else mesh.shape)


def device_boxes(tv: TensorView) -> tuple[Box, ...]:
    """Every device's box of tv's data, in mesh (row-major device) order (ExecutionError
    on a cyclic shard)."""
    boxes = layout(tv).boxes
    if boxes is None:
        raise cyclic_problem(tv, "a reader of device boxes")
    return boxes


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
    if layout(tv).boxes is None:
        raise cyclic_problem(tv, "an op whose values depend on their global index")
    boxes = domain_logical_boxes(tv.domain, None if mesh is None else mesh.shape)
    return tuple(start for start, _ in boxes[_index(tv, device)])


def device_box(tv: TensorView, device: int) -> Box:
    """The box of tv's global data that `device` holds (ExecutionError on a cyclic shard)."""
    return device_boxes(tv)[_index(tv, device)]


def device_shape(tv: TensorView, device: int) -> tuple[int, ...]:
    """The shape of the rows `device` holds of tv (0 rows on an empty chunk)."""
    return layout(tv).shapes[_index(tv, device)]


def device_slices(tv: TensorView, device: int) -> tuple[slice | tuple[int, ...], ...]:
    """numpy indices (slices, or a block-cyclic axis's rows) of tv's global data that
    `device` holds."""
    return layout(tv).slices[_index(tv, device)]


def layouts_of(tensors: list[TensorView]) -> list[tuple[Layout, DeviceMesh | None]]:
    """(layout, mesh) of each tensor."""
    return [(layout(tv), tv.mesh) for tv in tensors]
