"""Which logical axis of a consumer each logical axis of a producer becomes."""

from __future__ import annotations

from fuserlite.ir.expr import (
    BroadcastOp,
    Expr,
    LinearOp,
    MatmulOp,
    ReshapeOp,
)
from fuserlite.ir.readonly import remembered
from fuserlite.ir.tensor import TensorView


def producer_to_consumer(expr: Expr, producer: TensorView) -> dict[int, int]:
    """{producer logical index: consumer logical index} for the axes the expression maps.

    Pointwise ops, sets, reductions and expands map data axes position by
    position; a broadcast skips its new axes; linear/matmul map batch axes,
    the output-feature axis and the contraction axis (to the consumer's
    trailing reduction axis); a reshape maps the outermost axis of each group
    of axes it splits or merges (so an outer sharding of a group stays local).
    """
    return remembered(("axis map", id(producer)), expr, lambda: _axis_map(expr, producer))


def _axis_map(expr: Expr, producer: TensorView) -> dict[int, int]:
    consumer = expr.output
    p_data = producer.data_positions()
    c_all = list(range(len(consumer.domain.logical)))
    if isinstance(expr, ReshapeOp):
        groups = reshape_groups(producer.shape, consumer.shape)
        return {p_data[i[0]]: o[0] for i, o in groups if i and o}
    if isinstance(expr, BroadcastOp):
        kept = [c for c, f in zip(c_all, expr.flags) if not f]
        return dict(zip(p_data, kept))
    if isinstance(expr, (LinearOp, MatmulOp)):
        return _contraction_map(expr, producer, p_data, c_all)
    return dict(zip(p_data, c_all))


def _contraction_map(
    expr: Expr, producer: TensorView, p: list[int], c: list[int]
) -> dict[int, int]:
    # consumer logical: [*batch, n, rk]
    *batch, n, rk = c
    which = [i for i, t in enumerate(expr.inputs) if t is producer]
    if not which:
        return {}
    k = which[0]
    linear = isinstance(expr, LinearOp)
    if k == 0:  # x[..., k] or a[..., m, k]
        return {**dict(zip(p[:-1], batch)), p[-1]: rk}
    if k == 1 and linear:  # weight[n, k]
        return {p[0]: n, p[1]: rk}
    if k == 1:  # b[k, n]
        return {p[0]: rk, p[1]: n}
    return {p[0]: n}  # bias[n]


def reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Pair runs of source and destination axes whose extents multiply to the same size."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        gi, gj = [], []
        pi = pj = 1
        while True:
            if (pi <= pj or j >= len(dst)) and i < len(src):
                pi *= src[i]
                gi.append(i)
                i += 1
            elif j < len(dst):
                pj *= dst[j]
                gj.append(j)
                j += 1
            else:
                break
            if pi == pj:
                break
        groups.append((gi, gj))
    return groups
