"""Producer/consumer axis maps of one expression, by the ops' one axis map
(fuserlite.ops.registry): what transform propagation replays through, and what
the kernel runner and the CUDA generator index a producer by.

Pointwise ops (unary, binary) and Set map positionally over data (non-reduction)
axes; a broadcast maps its input's axes onto the output axes whose flag is False.
A schedule propagates only through an op that maps every data axis onto a data
axis. Axes are logical positions.
"""

from __future__ import annotations

from fuserlite.ir.domain import IterDomain, TensorDomain
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.values import fact
from fuserlite.ops.registry import operand_to_output, positional, positional_map

Pairs = tuple[tuple[int, int], ...]  # (producer's logical position, consumer's)


def data_axes(tv: TensorView) -> list[IterDomain]:
    """The logical axes that hold data (every axis but reductions)."""
    return tv.data_axes()


def axis_positions(expr: Expr, producer: TensorView) -> Pairs:
    """(producer logical position, consumer logical position) pairs of one expression."""
    consumer = expr.output
    # The one axis map of the ops (fuserlite.ops.registry); a schedule propagates
    # through an op that maps every data axis onto a data axis. Such an op maps an
    # operand by its own axes alone, so a tensor it reads twice (mul(x, x)) maps
    # alike in each position: its first one serves.
    d = expr.op_def
    if d is not None and d.axis_map is positional and d.outputs_axis_map is None:
        pairs = positional_data_pairs(producer.domain, consumer.domain)
        if pairs is not None:  # one fact for both questions: asked for every edge
            return pairs
        pairs = positional_pairs(producer.domain, consumer.domain)
    else:
        inputs = expr.inputs
        position = (
            0 if inputs[0] is producer else next(k for k, t in enumerate(inputs) if t is producer)
        )
        pairs = tuple(operand_to_output(expr, position).items())
    if not _maps_data(pairs, producer.domain, consumer.domain):
        data = len(producer.domain.data_positions())
        mapped = len([c for _, c in pairs if not consumer.domain.logical[c].is_reduction])
        raise ScheduleError(
            f"cannot map the axes of {producer.name} ({data} data axes) "
            f"onto {consumer.name} through {expr.op_name} ({mapped} map onto data axes); only "
            "pointwise, broadcast and set expressions are propagated through"
        )
    return pairs


@fact
def positional_pairs(producer: TensorDomain, consumer: TensorDomain) -> Pairs:
    """A positional op's axis positions between operand and output domains."""
    return tuple(positional_map(producer, consumer).items())


@fact
def positional_data_pairs(producer: TensorDomain, consumer: TensorDomain) -> Pairs | None:
    """positional_pairs where they map every data axis onto a data axis, else None."""
    pairs = positional_pairs(producer, consumer)
    return pairs if _maps_data(pairs, producer, consumer) else None


@fact
def _maps_data(pairs: Pairs, producer: TensorDomain, consumer: TensorDomain) -> bool:
    """Every data axis of the producer maps onto a data axis of the consumer."""
    mapped = len([c for _, c in pairs if not consumer.logical[c].is_reduction])
    return mapped == len(producer.data_positions())


def producer_coords(expr: Expr, producer: TensorView, coords: list) -> list:
    """Coordinates of `producer`'s data axes given the consumer's (per data axis).

    Coordinates may be numpy arrays (kernel runner) or index expressions (codegen)."""
    at = producer_positions(axis_positions(expr, producer), producer.domain, expr.output.domain)
    return [0 if k is None else coords[k] for k in at]


@fact
def producer_positions(
    pairs: Pairs, producer: TensorDomain, consumer: TensorDomain
) -> tuple[int | None, ...]:
    """Per data axis of the producer, the consumer data axis whose coordinate indexes it
    (None: index 0, a broadcast or an axis the map leaves out)."""
    c_pos = {li: k for k, li in enumerate(consumer.data_positions())}
    by_producer = {p: c_pos[c] for p, c in pairs}
    logical = producer.logical
    return tuple(
        None if logical[p].is_broadcast else by_producer.get(p) for p in producer.data_positions()
    )
