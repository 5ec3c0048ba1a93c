"""A printed expression is what its op computes: checked by building it again.

The printed reader makes each expression between tensors it read from their blocks
(`OpDef.make`), which checks nothing: a `linear` that lost its weight line, a
`broadcast` renamed `squeeze`, or two output lines above one body would read and
then fail deep in the executor. `rebuild_problem` calls the op's builder (its
argument checks, shape and dtype rule) on stand-ins of the operands, with the
arguments the printed attributes say (read back as `to_fus` writes them), and
compares what it makes with the printed outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite.ir.domain import IterDomain
from fuserlite.ir.errors import FuserliteError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.sharding import is_partial
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, ReductionOpType
from fuserlite.ops.registry import OpDef, Operand, is_scalar
from fuserlite.ops.sharding import partial_dtype
from fuserlite.text.writer import read_argument


def _stand_in(fusion: Fusion, tv: TensorView) -> TensorView:
    """A tensor of `fusion` with tv's logical extents, iteration types and dtype."""
    axes = [IterDomain(ax.extent, ax.iter_type) for ax in tv.domain.logical]
    return TensorView(fusion, axes, tv.dtype)


def _logical(tv: TensorView, reductions: bool = True, dtype: DType | None = None) -> str:
    """`float[i{2}, r{16}]`: dtype (tv's, or `dtype`), iteration types and extents
    (`reductions`: with the reduction axes)."""
    logical = [ax for ax in tv.domain.logical if reductions or not ax.is_reduction]
    axes = ", ".join(f"{ax.iter_type.value}{{{ax.extent}}}" for ax in logical)
    return f"{(dtype or tv.dtype).value}[{axes}]"


def rebuild_problem(
    d: OpDef,
    outputs: Sequence[TensorView],
    operands: Sequence[Operand],
    attrs: dict[str, object],
) -> str | None:
    """None if d's builder, given stand-ins of `operands` and the arguments `attrs`
    stand for, makes outputs like `outputs` (their number, logical extents and
    iteration types, dtype) with the same attributes; else what differs."""
    scratch = Fusion()
    with scratch:
        ins = [x if is_scalar(x) else _stand_in(scratch, x) for x in operands]
        outs = [_stand_in(scratch, t) for t in outputs]
        try:
            printed = d.make(outs, ins, attrs)
        except TypeError:  # an expression class of fixed arity (Set: one output)
            return f"{d.name} does not compute {len(outputs)} tensor(s) from {len(ins)} operand(s)"
        try:
            made = d.build(**_arguments(d, printed))
        except FuserliteError as exc:
            return str(exc)
    made_outs = list(made) if isinstance(made, tuple) else [made]
    if len(made_outs) != len(outs):
        return f"{d.name} computes {len(made_outs)} tensor(s), not the {len(outs)} printed"
    for printed_out, out, real in zip(outs, made_outs, outputs):
        # A Set of partial values keeps their reduction axes (insert-reshardings' Sets,
        # completed by the communication): where the builder makes none, any may stay.
        reductions = any(ax.is_reduction for ax in out.domain.logical)
        # Partial sums of a half tensor are held in float32 once insert-reshardings has
        # run (ops.sharding.partial_dtype), and the Set that completes them rounds them to
        # the half dtype once: either dtype is what the op computes.
        dtypes = {out.dtype}
        if is_partial(real):
            dtypes.add(partial_dtype(out.dtype, d.sharding.partial))
        if _rounds_partials(d, operands, real):
            dtypes.add(real.dtype)
        printed_text = _logical(printed_out, reductions)
        if all(printed_text != _logical(out, reductions, t) for t in dtypes):
            return (
                f"{d.name} of these operands computes {_logical(out)}, but T{real.number} "
                f"is {_logical(printed_out)}"
            )
    definition = made_outs[0].definition
    if definition.attributes() != printed.attributes():
        return f"{d.name} of these operands has {_attrs(definition)}, not {_attrs(printed)}"
    return None


def _rounds_partials(d: OpDef, operands: Sequence[Operand], out: TensorView) -> bool:
    """A Set from float32 partial sums to the half tensor they complete."""
    if d.name != "set" or not isinstance(operands[0], TensorView):
        return False
    x = operands[0]
    return (
        is_partial(x) and x.dtype is partial_dtype(out.dtype, ReductionOpType.sum) is not out.dtype
    )


def _attrs(expr: Expr) -> str:
    return ", ".join(f"{k}={v}" for k, v in expr.attributes().items()) or "no attributes"


def _arguments(d: OpDef, expr: Expr) -> dict[str, object]:
    """The builder's keyword arguments that make `expr` (as fuserlite.text writes them)."""
    values = d.values(expr)
    out = {p.name: read_argument(p, expr, values) for p in d.params}
    return {name: value for name, value in out.items() if value is not None}
