"""Ring chunks: what one step of a ring pipeline (a swizzled Stream axis) holds.

`y.swizzle1d(0, DIDx); y.axis(0).parallelize(Stream)` (nvFuser's ring-based pipeline)
makes step i of the host loop compute, on the device of DIDx index t, chunk
(i + t) mod D of y's axis 0 (D: the mesh's DIDx size, one chunk per device). Across the
mesh, step i computes every chunk once: in fuserlite's global view the chunks of one
step are one tensor, the *ring chunk*, shaped as the whole with that axis sharded over
DIDx (block t: chunk (i + t) mod D of the whole):

    ring_chunk_of(y, c)          # [D m, n] -> [D m, n], axis 0 split by D over DIDx
    ring_chunk_problem(y, r, c)  # why r is not that (None: it is)

A ring chunk of a replicated tensor is a view of it (each device takes its own chunk);
of a tensor sharded over DIDx along the axis (each device holds one block) it is that
tensor's blocks rotated by i, which a CollectivePermute makes (block r from block
(r + i) mod D): the step's communication (passes/ring_streams.py).
"""

from __future__ import annotations

from fuserlite.ir.domain import IterDomain
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import logical_placement
from fuserlite.ir.streams import Chunking
from fuserlite.ir.tensor import TensorView
from fuserlite.schedule.shard import shard_as


def ring_placement(whole: TensorView, c: Chunking) -> Placement | str:
    """The logical placement of `whole`'s ring chunk (its own, with axis `c.axis` over
    the swizzle's mesh axis), or why it has none."""
    mesh = whole.mesh
    if mesh is None or c.swizzle is None or not mesh.has(c.swizzle):
        return f"{whole.name} is on no mesh with {c.swizzle and c.swizzle.name}"
    a = mesh.axis_of(c.swizzle)
    d = mesh.axis_size(c.swizzle)
    if c.chunks != d:
        return (
            f"the ring takes one chunk of {whole.name} per device: {c.chunks} chunks on "
            f"{d} devices along {c.swizzle.name}"
        )
    p = logical_placement(whole)
    shards = list(p.shards)
    if p.cyclic:
        return (
            f"{whole.name} axis {p.cyclic_axis()} is sharded cyclically (rows i, i + d, ...); "
            "a ring chunk is a block of its axis: outer_split the axis and parallelize the "
            "outer part"
        )
    if shards[c.axis] not in ((), (a,)):
        return (
            f"{whole.name} axis {c.axis} is sharded over mesh axes {shards[c.axis]}; a ring "
            f"chunk shards it over {c.swizzle.name} alone"
        )
    if any(a in axes for k, axes in enumerate(shards) if k != c.axis) or a in p.partial:
        return f"{whole.name} uses {c.swizzle.name} on another axis; the ring needs it"
    shards[c.axis] = (a,)
    return Placement(p.mesh_rank, tuple(shards), p.partial)


def ring_chunk_of(whole: TensorView, c: Chunking, fusion=None) -> TensorView:
    """A new tensor, the ring chunk of `whole` (module doc): its axes and dtype, axis
    `c.axis` sharded over the swizzle's devices, and the user's name."""
    wanted = ring_placement(whole, c)
    if isinstance(wanted, str):
        raise AssertionError(wanted)  # the lowering checked ring_placement first
    axes = [IterDomain(ax.extent, ax.iter_type) for ax in whole.domain.logical]
    chunk = TensorView(fusion or whole.fusion, axes, whole.dtype)
    shard_as(chunk, whole.mesh, wanted)
    chunk.user_name = whole.user_name
    chunk.origin = whole.origin
    return chunk


def ring_chunk_problem(whole: TensorView, chunk: TensorView, c: Chunking) -> str | None:
    """Why `chunk` is not the ring chunk of `whole` cut by the swizzled chunking `c`
    (None: it is): the same extents, dtype and mesh, axis `c.axis` over the swizzle."""
    wanted = ring_placement(whole, c)
    if isinstance(wanted, str):
        return wanted
    if c.blocks != 1:
        return f"a ring chunk is one whole block of {whole.name}, not {c.text()}"
    have = [ax.extent for ax in chunk.domain.logical]
    want = [ax.extent for ax in whole.domain.logical]
    if (
        have != want
        or chunk.dtype != whole.dtype
        or chunk.mesh != whole.mesh
        or logical_placement(chunk) != wanted
    ):
        return (
            f"{chunk.name} is not a ring chunk of {whole.name} ({c.text()}): it has "
            f"{whole.name}'s extents {want}, dtype and mesh, axis {c.axis} sharded over "
            f"{c.swizzle.name} ({wanted})"
        )
    return None
