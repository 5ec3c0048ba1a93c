"""Ops that move data between axes: permute (and transpose, a composite of it).

permute is pointwise: output element (i0, i1, ...) is the input element at the
permuted coordinates, which its axis map says (output axis k reads input axis
dims[k]); so the pointwise scheduler, the kernel runner and the CUDA fuse it with
its neighbours, and a sharded axis moves with its logical axis: no communication.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.common import (
    X,
    check_rank,
    check_tensor,
    data_axes,
    new_axis,
    shape_text,
)
from fuserlite.ops.forms import Template
from fuserlite.ops.registry import Category, Op, Param, composite, define

__all__ = ["permute", "transpose"]  # the builders of its ops and composites


def _axis(x: TensorView, axis: object, op: str, arg: str) -> int:
    """An axis of x (negative counts from the end) as 0..rank-1, or a clear error."""
    n = len(x.shape)
    k = args.integer(axis, op, arg)
    if not -n <= k < n:
        raise FusionError(f"{op}: {shape_text(x)} has {n} axes; {arg} {k} is out of range")
    return k % n


def _permute_axes(expr: Expr, producer: TensorView) -> dict[int, int]:
    """Input axis dims[k] onto output axis k."""
    p = producer.data_positions()
    return {p[src]: k for k, src in enumerate(expr.attrs["dims"])}


@define(
    # nvFuser prints Set.Permute and keeps the order in the root -> logical domain; the
    # dims are printed too, so that the text alone reads back.
    Template("Set.Permute( {x}, dims = {dims:ints} )"),
    (X, Param("dims", "ints")),
    Category.POINTWISE,
    attrs=("dims",),
    axis_map=_permute_axes,
)
def permute(x: TensorView, dims: Sequence[int]) -> TensorView:
    """x with its axes reordered: output axis k is x's axis dims[k] (negative from the end)."""
    x = check_tensor(x, "permute")
    check_rank(dims, "permute", "dims")
    src = data_axes(x)
    n = len(src)
    given = args.integers(dims, "permute", "dims", scalar_ok=False)
    order = [d % n if -n <= d < n else None for d in given] if n else list(given)
    if len(given) != n or None in order or sorted(order) != list(range(n)):
        raise FusionError(
            f"permute: dims {given} is not a permutation of the {n} axes of {shape_text(x)}; "
            f"give each of 0..{n - 1} once"
        )
    out = TensorView(x.fusion, [new_axis(src[d].extent, src[d].iter_type) for d in order], x.dtype)
    Op("permute", [out], [x], dims=tuple(order))
    return out


@composite((X, Param("dim0", "int"), Param("dim1", "int")))
def transpose(x: TensorView, dim0: int, dim1: int) -> TensorView:
    """x with axes dim0 and dim1 swapped (a permute)."""
    x = check_tensor(x, "transpose")
    a, b = _axis(x, dim0, "transpose", "dim0"), _axis(x, dim1, "transpose", "dim1")
    order = list(range(len(x.shape)))
    order[a], order[b] = order[b], order[a]
    return permute(x, order)
