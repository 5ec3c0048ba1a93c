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
a logical axis of extent S is rows [i, i+1)). A chunk has n/S rows of the axis in every
form: chunks are even, as the S-way pipelines of nvFuser's tests cut them. A Stream axis
changes no sharding and no allocation: a tensor is still held whole on each device, and a
loop's step reads and writes one chunk of it at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuserlite.ir.domain import Split, TensorDomain
from fuserlite.ir.types import ParallelType
from fuserlite.ir.values import fact


@dataclass(frozen=True)
class Chunking:
    """A tensor's logical axis `axis` in `chunks` chunks, each the same rows of every one
    of `blocks` blocks of the axis (docs above)."""

    axis: int
    chunks: int
    blocks: int = 1

    def rows(self, extent: int) -> int:
        """The rows of one chunk of an axis of `extent`."""
        return extent // self.chunks

    def text(self) -> str:
        """'axis 1 in 4 chunks' or 'axis 1 in 4 chunks of 2 blocks'."""
        blocks = f" of {self.blocks} blocks" if self.blocks > 1 else ""
        return f"axis {self.axis} in {self.chunks} chunks{blocks}"


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
