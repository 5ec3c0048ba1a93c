"""A fusion evaluated a block of rows at a time, where its rows are independent.

Validation's rounding bounds (rounding.py) carry three float64 sigmas per element through
every expression: 384 MiB a tensor for a fusion on a 64 MiB float32 tensor, several of
them live at once. Most fusions a user validates at such sizes are row-wise: every
output element in row r depends only on row r of the tensors that have rows, and on
whole tensors that have none (a bias, a weight). Then the fusion evaluated on rows
[a, b) of its inputs gives rows [a, b) of every output and of every sigma, and bounds
take a few MiB at a time (`Rows.spans`).

The rows are the leading data axis of the tensors `rows_of` finds, all of one extent:
the fusion inputs whose leading extent is the first output's, and every tensor an
expression makes from them with that axis leading (`_carried`). A fusion is row-wise
only if every output has rows and no expression mixes rows: none reduces, contracts,
moves or reshapes that axis, and no tensor without rows meets one with rows along it
unless it is broadcast there (extent 1). Anything else is evaluated whole, as before.
Attention carries batch rows (each its own; its dropout mask drawn at the block's start),
a reshape rows whose leading extents it keeps. Where one row is wider than a block
(x[batch, seq, hidden] at batch 8), the rows are the two leading axes (`depth` 2: batch
and sequence), if no expression mixes those.

The blocks evaluate to the same bits as the whole: pointwise ops and sums along other
axes go row by row in numpy, GEMMs run in calls of a fixed number of rows whatever m is
(numpy_ops.gemm_rows), and ops that depend on an element's position (rand_like, iota)
are given the block's global start (tests/test_rows.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.registry import Category, definition_of, operand_to_output

BLOCK = 1 << 18  # elements of the widest tensor with rows in one block

# Expressions that carry rows through their axis map (besides pointwise ops): a copy, a
# view that keeps the leading axes where they map, a reduction or contraction over others.
CARRIERS = frozenset(
    {"set", "broadcast", "permute", "expand", "squeeze", "sum", "max", "min", "matmul", "linear"}
    | {"sdpa"}  # attention of each batch row alone; its dropout mask drawn at the block's start
)

Span = tuple[slice, ...]  # a block: a range of each leading axis that is rows


@dataclass(frozen=True)
class Rows:
    """The tensors whose leading `len(extent)` data axes are the fusion's rows."""

    extent: tuple[int, ...]
    tensors: frozenset[TensorView]

    def spans(self, block: int | None = None) -> list[Span]:
        """Blocks of about `block` (None: BLOCK) elements of the widest tensor with rows
        each: ranges of the first axis; with two axes of rows, one row of the first and
        ranges of the second."""
        depth = len(self.extent)
        width = max((math.prod(t.shape[depth:]) for t in self.tensors), default=1)
        step = max(1, (BLOCK if block is None else block) // max(width, 1))
        last = self.extent[-1]
        ranges = [slice(a, min(a + step, last)) for a in range(0, last, step)]
        if depth == 1:
            return [(r,) for r in ranges]
        return [(slice(i, i + 1), r) for i in range(self.extent[0]) for r in ranges]

    def shape(self, t: TensorView, span: Span) -> tuple[int, ...]:
        """t's shape in the block `span`: its rows' extents the span's, if it has rows."""
        if t not in self.tensors:
            return t.shape
        return (*(s.stop - s.start for s in span), *t.shape[len(span) :])

    def start(self, t: TensorView, span: Span) -> tuple[int, ...] | None:
        """Where the block of t lies in t (None: at the origin)."""
        if t not in self.tensors or not any(s.start for s in span):
            return None
        return (*(s.start for s in span), *(0,) * (len(t.shape) - len(span)))


def row_blocks(fusion: Fusion) -> Rows | None:
    """The fusion's rows where blocks of them help: where some input or output holds
    more than BLOCK elements (else one block is all of it: None, and rows_of's walk over
    the expressions is not paid); two axes of rows where one row holds more."""
    largest = max((math.prod(t.shape) for t in (*fusion.inputs, *fusion.outputs)), default=0)
    if largest <= BLOCK:
        return None
    rows = rows_of(fusion)
    if rows is not None and max(math.prod(t.shape[1:]) for t in rows.tensors) > BLOCK:
        return rows_of(fusion, depth=2) or rows
    return rows


def rows_of(fusion: Fusion, depth: int = 1) -> Rows | None:
    """The fusion's rows, its leading `depth` data axes (module doc), or None where its
    outputs are not row-wise along them."""
    if not fusion.outputs or len(fusion.outputs[0].shape) < depth:
        return None
    extent = fusion.outputs[0].shape[:depth]
    if math.prod(extent) <= 1:
        return None
    rows = {t for t in fusion.inputs if t.shape[:depth] == extent}
    for expr in fusion.exprs():
        carried = _carried(expr, rows, extent)
        if carried is None:
            return None
        rows.update(carried)
    if not all(t in rows for t in fusion.outputs):
        return None
    return Rows(extent, frozenset(rows))


def _carried(expr: Expr, rows: set[TensorView], extent: tuple[int, ...]) -> list | None:
    """The outputs of `expr` that have rows, or None if it mixes rows (module doc)."""
    reads = [k for k, t in enumerate(expr.inputs) if t in rows]
    d = definition_of(expr)
    depth = len(extent)
    if expr.op_name == "reshape":  # within each row only (C order): its leading extents kept
        if not reads:
            return []
        return [expr.output] if expr.output.shape[:depth] == expr.inputs[0].shape[:depth] else None
    if d.category is not Category.POINTWISE and expr.op_name not in CARRIERS:
        return None if reads else []  # an op on whole tensors only: evaluated whole
    if any(len(o.shape) < depth for o in expr.outputs) or (
        len(expr.outputs) != 1 and expr.op_name not in CARRIERS
    ):
        return None if reads else []
    for out in expr.outputs:
        lead = list(out.data_positions()[:depth])
        for k, t in enumerate(expr.inputs):
            amap = operand_to_output(expr, k, out)
            data = t.data_positions()
            if k in reads:
                if [amap.get(li) for li in data[:depth]] != lead:
                    return None  # its rows are reduced, contracted or moved
            elif any(amap.get(li) in lead and n != 1 for li, n in zip(data, t.shape)):
                return None  # a whole tensor along the rows: each block would need all of it
    if reads:
        return list(expr.outputs)
    out = expr.output
    # An expand of a tensor without rows to the rows' extent (a bias made a matrix): the
    # same values in every row, so a block is the expand to the block's rows; random
    # numbers or positions made at the rows' extent: a block's are those at its start.
    if (expr.op_name == "expand" or d.indexed) and out.shape[: len(extent)] == extent:
        return [out]
    return []
