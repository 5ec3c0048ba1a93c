"""Pointwise builders: a result's axes are a fact of its operands' domains
(ops.pointwise.broadcast_shape) and its dtype of their dtypes and the op: operands alike
but for one detail each get their own."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite.ir.domain import IterDomain
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import IterType


def _axes(tv):
    return [(ax.extent, ax.iter_type) for ax in tv.domain.logical]


def test_extents_decide_the_output_axes():
    with fl.Fusion():
        a, b = fl.tensor([8, 16]), fl.tensor([8, 4])
        assert _axes(a + 1.0) == [(8, IterType.ITERATION), (16, IterType.ITERATION)]
        assert _axes(b + 1.0) == [(8, IterType.ITERATION), (4, IterType.ITERATION)]


@pytest.mark.parametrize("broadcast_first", [True, False])
def test_an_extent_1_iteration_axis_is_not_a_broadcast(broadcast_first):
    """[b1, i16] + [i8, i16] broadcasts; [i1, i16] + [i8, i16], alike but for one axis's
    type, does not: asked in either order, each gets its own answer."""
    with fl.Fusion() as f:
        y = fl.tensor([8, 16])
        bcast = fl.tensor([1, 16])
        iterating = TensorView(f, [IterDomain(1, IterType.ITERATION), IterDomain(16)])
        for _ in range(2):
            if broadcast_first:
                assert _axes(bcast + y) == [(8, IterType.ITERATION), (16, IterType.ITERATION)]
            with pytest.raises(fl.FusionError, match="do not broadcast: axis 0 of T2"):
                fl.add(iterating, y)
            if not broadcast_first:
                assert _axes(bcast + y) == [(8, IterType.ITERATION), (16, IterType.ITERATION)]


def test_a_lower_rank_operand_is_broadcast_every_time():
    """x[8, 16] + v[16] twice: each sum reads its own broadcast of v (an expression of
    the fusion, made per op), not one decided for the first."""
    with fl.Fusion():
        x, v = fl.tensor([8, 16]), fl.tensor([16])
        first, second = x + v, x + v
    reads = [y.definition.inputs[1] for y in (first, second)]
    assert reads[0] is not reads[1]
    for t in reads:
        assert t.definition.op_name == "broadcast" and t.definition.inputs[0] is v
        assert _axes(t) == [(1, IterType.BROADCAST), (16, IterType.ITERATION)]


@pytest.mark.parametrize(
    "dtype, op, scalar, result",
    [
        ("int32", fl.add, 1, "int32"),
        ("int32", fl.add, 1.5, "float32"),  # the scalar's type, not the tensor's
        ("int32", fl.add, True, "int32"),
        ("int32", fl.div, 1, "float32"),  # the op: true division
        ("bool", fl.add, True, "bool"),
        ("bool", fl.add, 1, "int64"),  # the tensor's dtype
        ("float16", fl.mul, 2, "float16"),
    ],
)
def test_dtypes_are_promoted_per_op_dtype_and_scalar_type(dtype, op, scalar, result):
    with fl.Fusion():
        for x in (fl.tensor([4], dtype), fl.tensor([4], dtype)):  # the second: kept
            assert op(x, scalar).dtype.name == result
            assert op(scalar, x).dtype.name == result
