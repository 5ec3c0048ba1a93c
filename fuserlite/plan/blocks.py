"""The block model: which box of the global tensor each device of a mesh holds.

This is the one definition of "which device holds which block". Chunking
follows torch.chunk: a tensor axis of extent n split over d devices gives
chunks of ceil(n/d), the trailing devices short or empty. A tensor axis
sharded by several mesh axes is chunked by the outermost first, then each
chunk again by the next, as the IR's nested splits cut it (nvFuser's): the
inner chunks of every outer chunk have ceil(c/d) rows of its c = ceil(n/d)
allocated rows, cut off at the outer chunk's end (9 over 2 then 4: 2 2 1 0 and
2 2 0 0; DTensor would chunk the short outer chunk's own 4 rows, 1 1 1 1). A
partial placement holds addends of the same boxes.

A cyclic placement (C<t>, C<t>/<b>) holds no box: `cyclic_indices` gives each device's
rows of its cyclic axis, blocks of b rows (k d + r) b + j for the periods k its
chunk of the axis's ceil(n / (d b)) periods holds (the mesh axes nested outside the
cyclic one chunk the periods as torch.chunk does; none: every period).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fuserlite.ir.errors import RedistributionError
from fuserlite.plan.mesh_axes import MeshShape, coords
from fuserlite.plan.placement import Placement

Interval = tuple[int, int]  # [start, stop)
Box = tuple[Interval, ...]  # one interval per tensor axis


def chunk_bounds(n: int, d: int, i: int) -> Interval:
    """[start, stop) of chunk i when torch.chunk splits n elements into d chunks."""
    size = -(-n // d)  # ceil(n / d): torch.chunk's chunk size
    return min(i * size, n), min((i + 1) * size, n)


def axis_rows(n: int, parts: int) -> list[int]:
    """Rows of each of `parts` chunks of an axis of extent n (13, 4 -> 4 4 4 1)."""
    return [hi - lo for lo, hi in (chunk_bounds(n, parts, i) for i in range(parts))]


def device_box(shape: Sequence[int], mesh: MeshShape, p: Placement, coord: Sequence[int]) -> Box:
    """The box the device at mesh coordinates `coord` holds under placement `p`
    (RedistributionError for a cyclic placement, which no box holds)."""
    if p.cyclic:
        raise RedistributionError(
            f"placement {p} shards tensor axis {p.cyclic_axis()} cyclically (device i holds "
            "rows i, i + d, ...), which no box holds: only a pointwise kernel between "
            "tensors sharded alike reads it; outer_split the axis instead (a block shard)"
        )
    box = []
    for n, axes in zip(shape, p.shards):
        start, stop, size = 0, n, n  # size: the rows the enclosing chunk is allocated
        for a in axes:
            size = -(-size // mesh[a])
            lo = min(start + coord[a] * size, stop)
            start, stop = lo, min(lo + size, stop)
        box.append((start, stop))
    return tuple(box)


def blocks(shape: Sequence[int], mesh: MeshShape, p: Placement) -> list[Box]:
    """Every device's box, in device-index (row-major mesh coordinate) order."""
    return [device_box(shape, mesh, p, c) for c in coords(mesh)]


Index = slice | tuple[int, ...]  # a numpy index of one axis: a slice or the rows held


def cyclic_indices(shape: Sequence[int], mesh: MeshShape, p: Placement) -> list[tuple[Index, ...]]:
    """Every device's numpy index (mesh order) of a tensor of `shape` placed `p`, whose
    tensor axis t is cyclic: on t, device r of the cyclic mesh axis's d holds rows
    (k d + r) b + j of the periods k its outer mesh axes' chunk holds (a slice where b
    is 1; else the rows, an index array that copies when read); the other axes'
    torch.chunk slices."""
    t = p.cyclic_axis()
    *outer, a = p.shards[t]
    d, b, n = mesh[a], p.block_of(a), shape[t]
    rest = Placement(p.mesh_rank, tuple(() if k == t else s for k, s in enumerate(p.shards)))
    periods = blocks((-(-n // (d * b)),), mesh, Placement(p.mesh_rank, (tuple(outer),)))
    out = []
    for coord, box, ((k0, k1),) in zip(coords(mesh), blocks(shape, mesh, rest), periods):
        where: list[Index] = [slice(lo, hi) for lo, hi in box]
        r = coord[a]
        if b == 1:
            where[t] = slice(k0 * d + r, min(k1 * d, n), d)
        else:
            rows = range(k0 * d * b, min(k1 * d * b, n))
            where[t] = tuple(i for i in rows if (i // b) % d == r)
        out.append(tuple(where))
    return out


def volume(box: Box) -> int:
    """Elements in a box."""
    return math.prod(stop - start for start, stop in box)


def intersect(a: Box, b: Box) -> Box | None:
    """The common part of two boxes, or None when they do not overlap."""
    out = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def contains(outer: Box, inner: Box) -> bool:
    """True when `inner` lies inside `outer`."""
    return all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner))


def box_text(box: Box) -> str:
    """A box as numpy slices: [0:4, 2:8]."""
    return "[" + ", ".join(f"{lo}:{hi}" for lo, hi in box) + "]"
