"""Stream axes: how a Stream-parallel axis cuts a tensor into chunks (a fact of its domain).

A loop axis parallelized `Stream` (nvFuser's `streamIdx`, printed `istreamIdx3{4}`) is
run as a host loop: the program computes the tensor one chunk after the other, each
chunk on its stream (passes/lower_streams.py). It is one of

    a logical axis of extent S                 chunk i is index i of the axis
    the outer part of an outer split by S      chunk i is rows [i n/S, (i+1) n/S)
      of a logical axis of extent n
    the outer part of an outer split by S      the axis is B blocks of n/B rows (one per
      of the inner part of an outer split       device where the B split is deviceIdx, the
      by B of a logical axis                    blocks of a replicated axis where it is
                                                serial); chunk i is the i-th n/(B S) rows
                                                of every block

`Chunking(axis, chunks, blocks)` names the form (the first two have one block: chunk i of
a logical axis of extent S is rows [i, i+1)). A Stream axis made by `swizzle1d(axis, DIDx)`
(nvFuser's Swizzle1D) of one of the first two forms is the ring pipeline: the chunk a
device computes at step i is chunk (i + its DIDx index) mod S, S the mesh's DIDx size
(`Chunking.swizzle`; passes/ring_streams.py lowers it, each step a CollectivePermute). A chunk has n/S rows of the axis in every
form: chunks are even, as the S-way pipelines of nvFuser's tests cut them. A Stream axis
changes no sharding and no allocation: a tensor is still held whole on each device, and a
loop's step reads and writes one chunk of it at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.domain import Split, Swizzle1D, TensorDomain
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.types import ParallelType
from fuserlite.ir.values import fact


@dataclass(frozen=True)
class Chunking:
    """A tensor's logical axis `axis` in `chunks` chunks, each the same rows of every one
    of `blocks` blocks of the axis (docs above)."""

    axis: int
    chunks: int
    blocks: int = 1
    # The ring pipeline's Swizzle1D: step i computes chunk (i + the device's index along
    # this parallel type) mod chunks (None: chunk i on every device).
    swizzle: ParallelType | None = None

    def rows(self, extent: int) -> int:
        """The rows of one chunk of an axis of `extent`."""
        return extent // self.chunks

    def text(self) -> str:
        """'axis 1 in 4 chunks', 'axis 1 in 4 chunks of 2 blocks' or 'axis 0 in 4 chunks
        swizzled by DIDx'."""
        blocks = f" of {self.blocks} blocks" if self.blocks > 1 else ""
        swizzle = f" swizzled by {self.swizzle.name}" if self.swizzle is not None else ""
        return f"axis {self.axis} in {self.chunks} chunks{blocks}{swizzle}"

    def index_text(self, index: str) -> str:
        """The chunk a device takes at step `index`: 'i', or '(i + DIDx) % 4'."""
        if self.swizzle is None:
            return index
        return f"({index} + {self.swizzle.name}) % {self.chunks}"


def stream_position(dom: TensorDomain) -> int | None:
    """The position of a domain's Stream loop axis, or None (the validator allows one)."""
    for p in dom.loop_positions:
        if dom.axes[p].parallel_type is ParallelType.Stream:
            return p
    return None


@fact
def stream_form(dom: TensorDomain, p: int) -> Chunking | str:
    """The chunking Stream axis `p` of a domain makes, or why it is none (the text goes on
    after `<tensor> axis <k>: `)."""
    ax = dom.axes[p]
    if not ax.is_iteration:
        kind = "broadcast" if ax.is_broadcast else "reduction"
        return (
            f"streamIdx is on a {kind} axis; a Stream axis cuts data into chunks, so put it "
            "on an iteration axis"
        )
    if p < dom.n_logical:
        return Chunking(p, ax.extent)
    t = dom.transform_of(p)
    if type(t) is Swizzle1D:
        inner = _unswizzled(dom, t.input)
        if isinstance(inner, str):
            return inner
        if inner.blocks > 1:
            return (
                "swizzle1d is on a Stream axis that cuts each device's block; the ring "
                "pipeline's chunks are whole blocks: outer_split the axis by the devices "
                "(or give it an axis of extent D), swizzle1d that, parallelize it Stream"
            )
        return Chunking(inner.axis, inner.chunks, 1, t.parallel_type)
    if type(t) is not Split or p != t.outer or t.inner_split:
        return (
            "streamIdx must be on a logical axis or on the outer part of an outer split "
            "(outer_split the axis by the number of chunks, then parallelize the outer part)"
        )
    chunks, source = t.factor, t.input
    if source < dom.n_logical:
        return _even(Chunking(source, chunks), dom.axes[source].extent)
    u = dom.transform_of(source)
    if type(u) is not Split or source != u.inner or u.inner_split or u.input >= dom.n_logical:
        return (
            "streamIdx must cut a logical axis, or the inner part of one outer split of a "
            "logical axis (its blocks, one per device where that split is deviceIdx)"
        )
    if dom.axes[u.outer].parallel_type not in (ParallelType.Serial, *_DEVICE):
        return (
            f"streamIdx cuts the inner part of a split whose outer part is "
            f"{dom.axes[u.outer].parallel_type.value}; that split must be serial or deviceIdx"
        )
    return _even(Chunking(u.input, chunks, u.factor), dom.axes[u.input].extent)


_DEVICE = (ParallelType.DIDx, ParallelType.DIDy, ParallelType.DIDz)


def _unswizzled(dom: TensorDomain, q: int) -> Chunking | str:
    """The chunking a Stream axis at position q (a swizzle's input) would make."""
    if type(dom.transform_of(q)) is Swizzle1D:
        return "swizzle1d twice on one axis; one swizzle makes the ring"
    return stream_form(dom, q)


def swizzle_problems(dom: TensorDomain, mesh: DeviceMesh | None) -> list[tuple[int, str]]:
    """(position, why) for each Swizzle1D of a domain that is no ring pipeline's: its
    output must be the loop axis a Stream parallelizes, and (on a mesh) its extent the
    mesh's size along its parallel type (step i computes chunk (i + index) mod D)."""
    out = []
    for t in dom.transforms:
        if type(t) is not Swizzle1D:
            continue
        p = t.output
        ax = dom.axes[p]
        if dom.use[p] is not None or not ax.parallel_type.is_stream:
            out.append(
                (
                    p,
                    f"swizzle1d by {t.parallel_type.name} is lowered on a Stream axis only "
                    "(the ring pipeline: step i computes chunk (i + device) mod D); "
                    "parallelize the swizzled axis Stream and transform it no further",
                )
            )
            continue
        if mesh is None or t.parallel_type not in mesh.parallel_types:
            if mesh is not None:
                out.append(
                    (
                        p,
                        f"swizzle1d by {t.parallel_type.name}, which the mesh {mesh} does "
                        "not have; swizzle by one of its parallel types",
                    )
                )
            continue
        d = mesh.axis_size(t.parallel_type)
        if ax.extent != d:
            out.append(
                (
                    p,
                    f"swizzle1d by {t.parallel_type.name} on an axis of extent {ax.extent}, "
                    f"but the mesh has {d} devices along {t.parallel_type.name}; the ring "
                    f"takes one chunk per device: outer_split the axis by {d} first",
                )
            )
    return out


def _even(c: Chunking, extent: int) -> Chunking | str:
    if extent % (c.chunks * c.blocks) == 0:
        return c
    what = f"{c.blocks} blocks of {c.chunks} chunks" if c.blocks > 1 else f"{c.chunks} chunks"
    return (
        f"streamIdx cuts an axis of extent {extent} into {what}, which do not divide it; "
        "stream chunks are even: choose a number of chunks that divides the rows"
    )


def chunking(dom: TensorDomain) -> Chunking | None:
    """The chunking of a domain's Stream axis (None: it has none, or an invalid one)."""
    p = stream_position(dom)
    if p is None:
        return None
    form = stream_form(dom, p)
    return form if isinstance(form, Chunking) else None


def stream_problem(dom: TensorDomain, p: int) -> str | None:
    """Why Stream axis `p` of a domain is not a valid chunking (None if it is)."""
    form = stream_form(dom, p)
    return None if isinstance(form, Chunking) else form
