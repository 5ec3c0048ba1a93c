"""Producer/consumer axis maps of one expression, by the ops' one axis map
(fuserlite.ops.registry): what transform propagation replays through, and what
the kernel runner and the CUDA generator index a producer by.

Pointwise ops (unary, binary) and Set map positionally over data (non-reduction)
axes; a broadcast maps its input's axes onto the output axes whose flag is False.
A schedule propagates only through an op that maps every data axis onto a data
axis.
"""

from __future__ import annotations

from fuserlite.ir.domain import IterDomain
from fuserlite.ir.errors import ScheduleError
from fuserlite.ir.expr import Expr
from fuserlite.ir.readonly import remembered
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import IterType
from fuserlite.ops.registry import operand_to_output


def data_axes(tv: TensorView) -> list[IterDomain]:
    """The logical axes that hold data (every axis but reductions)."""
    return tv.data_axes()


def axis_pairs(expr: Expr, producer: TensorView) -> list[tuple[IterDomain, IterDomain]]:
    """(producer logical axis, consumer logical axis) pairs of one expression."""
    p_axes, c_axes = producer.domain.logical, expr.output.domain.logical
    return [(p_axes[p], c_axes[c]) for p, c in axis_positions(expr, producer)]


def axis_positions(expr: Expr, producer: TensorView) -> tuple[tuple[int, int], ...]:
    """axis_pairs by logical positions: (producer's, consumer's)."""
    return remembered(
        ("axis_positions", id(producer)), expr, lambda: _axis_positions(expr, producer)
    )


def _axis_positions(expr: Expr, producer: TensorView) -> tuple[tuple[int, int], ...]:
    consumer = expr.output
    # The one axis map of the ops (fuserlite.ops.registry); a schedule propagates
    # through an op that maps every data axis onto a data axis. Such an op maps an
    # operand by its own axes alone, so a tensor it reads twice (mul(x, x)) maps
    # alike in each position: its first one serves.
    inputs = expr.inputs
    position = (
        0 if inputs[0] is producer else next(k for k, t in enumerate(inputs) if t is producer)
    )
    pairs = tuple(operand_to_output(expr, position).items())
    c_axes = consumer.domain.logical
    mapped = len([c for _, c in pairs if c_axes[c].iter_type is not IterType.REDUCTION])
    if mapped != len(producer.data_axes()):
        raise ScheduleError(
            f"cannot map the axes of {producer.name} ({len(producer.data_axes())} data axes) "
            f"onto {consumer.name} through {expr.op_name} ({mapped} map onto data axes); only "
            "pointwise, broadcast and set expressions are propagated through"
        )
    return pairs


def producer_coords(expr: Expr, producer: TensorView, coords: list) -> list:
    """Coordinates of `producer`'s data axes given the consumer's (per data axis).

    Coordinates may be numpy arrays (kernel runner) or index expressions (codegen)."""
    consumer = expr.output
    c_pos = {id(ax): k for k, ax in enumerate(data_axes(consumer))}
    by_producer = {id(p): coords[c_pos[id(c)]] for p, c in axis_pairs(expr, producer)}
    return [0 if ax.is_broadcast else by_producer.get(id(ax), 0) for ax in data_axes(producer)]
