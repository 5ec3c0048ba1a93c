"""Stream chunkings on tensors: give one, carry one through an axis map, make a chunk.

    stream_parallelize(y, Chunking(0, 4))       # outer_split y axis 0 by 4, Stream on it
    stream_parallelize(z, Chunking(1, 4, 2))    # axis 1's 2 blocks (its DIDx split, or a
                                                # serial one) each in 4 chunks
    chunking_through(expr, position, Chunking)  # the operand's chunking its output's implies
    chunk_of(whole, chunking)                   # a tensor shaped as one chunk of `whole`
    without_streams(tv)                         # tv's domain with its Stream split undone

The forms are fuserlite.ir.streams'; a chunk tensor is an ordinary tensor (the chunked
axis n/S long, the whole tensor's placement), so every later pass and the executor
treat a loop's steps as any other.
"""

from __future__ import annotations

from fuserlite.ir.domain import IterDomain, Split, TensorDomain
from fuserlite.ir.errors import LoweringError
from fuserlite.ir.expr import Expr
from fuserlite.ir.sharding import logical_placement, shardings
from fuserlite.ir.streams import Chunking, stream_position
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ops.registry import is_rowwise, operand_to_output
from fuserlite.schedule.shard import shard_as


def stream_parallelize(tv: TensorView, c: Chunking) -> None:
    """Give `tv` (no Stream axis yet; its chunked axis unsplit, or split once by its
    sharding into `c.blocks` blocks) the Stream axis of chunking `c`, by the schedule
    primitives nvFuser's users call (outer_split, then parallelize)."""
    dom = tv.domain
    a = c.axis
    if c.blocks == 1:
        pos = dom.loop_index(a)
        if pos is None:
            raise LoweringError(
                f"{tv.name}: axis {a} is split already; a Stream chunking of it needs it whole"
            )
        if dom.axes[a].extent != c.chunks:
            tv.outer_split(pos, c.chunks)
        tv.axis(pos).parallelize(ParallelType.Stream)
        return
    k = dom.use[a]
    split = None if k is None else dom.transforms[k]
    if split is None:  # unsharded: the blocks are a serial split of its own
        pos = dom.loop_index(a)
        tv.outer_split(pos, c.blocks)
        inner = tv.domain.loop_positions[pos + 1]
    elif not isinstance(split, Split):
        raise LoweringError(
            f"{tv.name}: axis {a} is merged with another by its schedule; a Stream "
            "chunking of it needs it whole or split by its devices"
        )
    elif split.factor == c.blocks and not split.inner_split:
        inner = split.inner
    else:
        raise LoweringError(
            f"{tv.name}: axis {a} is split by {split.factor}, not into the {c.blocks} blocks "
            f"of {c.text()}"
        )
    pos = tv.domain.loop_index(inner)
    if pos is None:
        raise LoweringError(f"{tv.name}: the blocks of axis {a} are split further already")
    tv.outer_split(pos, c.chunks)
    tv.axis(pos).parallelize(ParallelType.Stream)


def device_count(tv: TensorView, axis: int) -> int:
    """How many blocks of logical axis `axis` the devices of tv's mesh hold (1: none)."""
    n = 1
    for s in shardings(tv).values():
        if s.logical_index == axis:
            n *= s.num_devices
    return n


def chunking_problem(tv: TensorView, c: Chunking) -> str | None:
    """Why `tv` cannot be cut by chunking `c` (None: it can): the chunks must be even,
    and where devices shard the axis each must hold whole blocks."""
    n = tv.domain.logical[c.axis].extent
    if n % (c.chunks * c.blocks):
        return f"its axis {c.axis} of {n} rows is not {c.text()} of equal rows"
    d = device_count(tv, c.axis)
    if c.blocks % d:
        blocks = f"{c.blocks} block{'s' * (c.blocks > 1)}"
        return (
            f"its axis {c.axis} is sharded over {d} devices, which do not hold whole "
            f"blocks of the {blocks} the chunks cut ({c.text()}); chunk each device's "
            f"block (blocks={d})"
        )
    return None


def chunking_through(expr: Expr, position: int, out: TensorView, c: Chunking) -> Chunking | None:
    """The chunking of operand `position` of `expr` that computing chunk i of its output
    `out` (cut by `c`) reads: the operand axis mapped onto the chunked one; None where
    no data axis maps there (the operand is read whole: a weight, a broadcast)."""
    operand = expr.inputs[position]
    for li, target in operand_to_output(expr, position, out).items():
        if target == c.axis:
            ax = operand.domain.logical[li]
            if ax.is_broadcast or ax.extent != out.domain.logical[c.axis].extent:
                return None
            return Chunking(li, c.chunks, c.blocks)
    return None


def chunk_problem(expr: Expr) -> str | None:
    """Why `expr` cannot compute one chunk of its output from chunks (None: it can)."""
    if is_rowwise(expr):
        return None
    return (
        f"{expr.output.name} = {expr.op_name}(...) does not compute its rows from its "
        "operands' rows alone (its values or attributes depend on where a row lies)"
    )


def chunk_of(whole: TensorView, c: Chunking, fusion=None) -> TensorView:
    """A new tensor shaped as one chunk of `whole` (cut by `c`): its axes, the chunked
    one n/S long, its mesh and placement, no Stream axis, and the user's name."""
    source = whole.domain.logical
    axes = [
        IterDomain(c.rows(ax.extent) if i == c.axis else ax.extent, ax.iter_type)
        for i, ax in enumerate(source)
    ]
    chunk = TensorView(fusion or whole.fusion, axes, whole.dtype)
    shard_as(chunk, whole.mesh, logical_placement(whole))
    chunk.user_name = whole.user_name
    chunk.origin = whole.origin
    return chunk


def without_streams(tv: TensorView) -> None:
    """Undo tv's Stream split: its logical axes sharded as its placement says (its
    allocation order, where it has one, by its device axes first)."""
    dom = tv.domain
    if stream_position(dom) is None:
        return
    logical = [
        ax if ax.is_broadcast else ax.with_parallel_type(ParallelType.Serial) for ax in dom.logical
    ]
    placed = logical_placement(tv)
    tv.domain = TensorDomain(logical, dom.contiguity if dom.allocation is None else None)
    shard_as(tv, tv.mesh, placed)


def data_index(tv: TensorView, logical: int) -> int:
    """The position of logical axis `logical` among tv's data axes (reductions left out):
    the axis of its local array."""
    return sum(1 for ax in tv.domain.logical[:logical] if not ax.is_reduction)


class ChunkMapping(dict):
    """A loop body's view of tensors: a tensor's chunk where the loop cuts it (by id),
    else the tensor itself (read whole)."""

    def __init__(self, chunks: dict[int, TensorView]) -> None:
        super().__init__()
        self.chunks = chunks

    def __getitem__(self, t: TensorView) -> TensorView:
        return self.chunks.get(id(t), t)
