"""Which device holds which block of a tensor, as a grid of cells to draw.

The boxes come from the one block model (fuserlite.plan.blocks), so uneven
shards (torch.chunk's) draw at their true sizes. A tensor of rank 1 or 2 is
drawn whole; a higher rank is drawn over two of its axes: the sharded ones,
else the outermost. Each cell of the grid lists the devices whose block covers
it; a partial tensor's devices each hold an addend of the cell.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import shardings
from fuserlite.ir.tensor import TensorView
from fuserlite.plan.blocks import blocks, cyclic_indices
from fuserlite.plan.placement import Placement


@dataclass(frozen=True)
class Cell:
    """One region of the grid: rows [r0, r1) of the first drawn axis, columns [c0, c1)
    of the second, and the devices that hold it."""

    rows: tuple[int, int]
    cols: tuple[int, int]
    devices: tuple[int, ...]


@dataclass(frozen=True)
class Sheet:
    """A tensor's picture: what is drawn and the cells."""

    title: str  # `t1 (T0) float32[8192] on DeviceMesh{0 1}`
    placement: str  # `axis 0 sharded over DIDx`, `replicated`, `partial sums over DIDx`
    axes: tuple[int | None, int | None]  # the tensor axes drawn as rows, columns
    extents: tuple[int, int]
    row_bounds: tuple[int, ...]  # the interval boundaries along each drawn axis
    col_bounds: tuple[int, ...]
    cells: tuple[Cell, ...]  # row-major
    partial: bool
    devices: tuple[int, ...]  # every device of the mesh

    @property
    def empty(self) -> tuple[int, ...]:
        """Devices of the mesh that hold no element (a trailing chunk of an uneven split)."""
        held = {d for c in self.cells for d in c.devices}
        return tuple(d for d in self.devices if d not in held) if self.cells else ()

    @property
    def shape(self) -> tuple[int, int]:
        """Cells per column and per row of the grid."""
        return len(self.row_bounds) - 1, len(self.col_bounds) - 1


def placement_of(tv: TensorView) -> Placement:
    """tv's sharding as a placement on its mesh (nested shardings outer first)."""
    mesh = tv.mesh
    rank = len(tv.shape)
    shards: list[list[tuple[int, int]]] = [[] for _ in range(rank)]
    partial = []
    for pt, s in shardings(tv).items():
        axis = mesh.axis_of(pt)
        if s.is_partial:
            partial.append(axis)
        else:
            loop = next(k for k, ax in enumerate(tv.domain.loop) if ax.parallel_type is pt)
            shards[s.data_index].append((loop, axis))
    nested = tuple(tuple(a for _, a in sorted(axes)) for axes in shards)
    cyclic = sorted((mesh.axis_of(pt), s.block) for pt, s in shardings(tv).items() if s.cyclic)
    return Placement(
        mesh.rank,
        nested,
        tuple(sorted(partial)),
        tuple(a for a, _ in cyclic),
        tuple(b for _, b in cyclic),
    )


def _drawn_axes(shape: tuple[int, ...], p: Placement) -> tuple[int | None, int | None]:
    """The two tensor axes to draw: the sharded ones first, then the outermost."""
    if len(shape) <= 2:
        return (0 if len(shape) == 2 else None, len(shape) - 1 if shape else None)
    sharded = [d for d, axes in enumerate(p.shards) if axes]
    chosen = sorted((sharded + [d for d in range(len(shape)) if d not in sharded])[:2])
    return chosen[0], chosen[1]


def _cyclic_text(mesh: DeviceMesh, p: Placement, axes: tuple[int, ...]) -> str:
    """How a cyclic tensor axis lies: its mesh axis, its rows, the outer mesh axes'."""
    *outer, a = axes
    d, b, label = mesh.shape[a], p.block_of(a), mesh.axis_label
    rows = (
        f"device i holds rows i, i + {d}, ..."
        if b == 1
        else f"device i holds blocks of {b} rows, rows i*{b} to i*{b} + {b - 1}, then those "
        f"+ {d * b}, ..."
    )
    within = (
        f" of the periods of {d * b} rows each chunk of {', then '.join(label(o) for o in outer)} holds"
        if outer
        else ""
    )
    return f"{label(a)}: {rows}{within}"


def _description(mesh: DeviceMesh, p: Placement) -> str:
    label = mesh.axis_label  # DIDx, or DIDx (tp) where the user named the axis
    parts = [
        f"axis {d} sharded over {', then '.join(label(a) for a in axes)}"
        if not set(axes) & set(p.cyclic)
        else f"axis {d} cyclic over {_cyclic_text(mesh, p, axes)}"
        for d, axes in enumerate(p.shards)
        if axes
    ]
    if p.partial:
        over = ", ".join(label(a) for a in p.partial)
        parts.append(f"partial over {over}: each device holds an addend")
    return "; ".join(parts) if parts else "replicated"


def sheet(tv: TensorView) -> Sheet:
    """The picture of where tv's data is."""
    title = f"{tv.name} {tv.dtype.value}{list(tv.shape)}"
    if tv.mesh is None:  # nothing to draw yet
        unplaced = "no mesh yet: propagate-shardings places it (show --after propagate-shardings)"
        return Sheet(title, unplaced, (None, None), (1, 1), (0, 1), (0, 1), (), False, ())
    return layout(title, tuple(tv.shape), tv.mesh, placement_of(tv))


def _held(shape: tuple[int, ...], mesh: DeviceMesh, p: Placement) -> list[tuple[int, tuple]]:
    """(device, box) for each box a device holds: its one box, or on a cyclic axis one
    box per row it holds (r, r + d, ...; in blocks, (k d + r) b + j), the rows of the
    other axes' box."""
    if not shape:
        return [(device, ()) for device in mesh.devices]
    t = p.cyclic_axis()
    if t is None:
        return list(zip(mesh.devices, blocks(shape, mesh.shape, p)))
    held = []
    for device, where in zip(mesh.devices, cyclic_indices(shape, mesh.shape, p)):
        rows = where[t] if type(where[t]) is tuple else range(shape[t])[where[t]]
        for row in rows:  # the other axes' slices are their boxes
            box = ((row, row + 1) if k == t else (s.start, s.stop) for k, s in enumerate(where))
            held.append((device, tuple(box)))
    return held


def layout(title: str, shape: tuple[int, ...], mesh: DeviceMesh, p: Placement) -> Sheet:
    """The picture of a tensor of `shape` placed by `p` on `mesh`."""
    axes = _drawn_axes(shape, p)
    extents = tuple(1 if a is None else shape[a] for a in axes)
    # A device's region on the drawn axes (its box there); empty chunks hold nothing.
    regions = []
    for device, box in _held(shape, mesh, p):
        span = [(0, 1) if a is None else box[a] for a in axes]
        if all(lo < hi for lo, hi in span):
            regions.append((device, span[0], span[1]))
    row_bounds = sorted({b for _, r, _ in regions for b in r} | {0, extents[0]})
    col_bounds = sorted({b for _, _, c in regions for b in c} | {0, extents[1]})
    cells = []
    for r0, r1 in zip(row_bounds, row_bounds[1:]):
        for c0, c1 in zip(col_bounds, col_bounds[1:]):
            held = tuple(
                d
                for d, (a0, a1), (b0, b1) in regions
                if a0 <= r0 and r1 <= a1 and b0 <= c0 and c1 <= b1
            )
            cells.append(Cell((r0, r1), (c0, c1), held))
    return Sheet(
        f"{title} on {mesh}",
        _description(mesh, p),
        axes,
        extents,
        tuple(row_bounds),
        tuple(col_bounds),
        tuple(cells),
        bool(p.partial),
        mesh.devices,
    )
