"""Creation ops: tensors made from nothing. iota (nvFuser's iota, torch.arange).

iota has no tensor operands: its value at element i is start + step * i, with i the
element's index in the *global* tensor. It is an indexed pointwise op
(OpDef.indexed, as rand_like): every compute path (numpy, the kernel runner, compiled
C++, CUDA) gets each element's global index, so a sharded iota computes its own shard's
values on each device with no communication, as rand_like draws at global indices.
Its sharding is what the user (or shard_map's axis_index) gives it, or else its readers'
(propagate-shardings propagates backward); a tensor made
from nothing belongs to the active fusion (`with fl.Fusion():`).
"""

from __future__ import annotations

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.fusion import active_fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType
from fuserlite.ops.common import MAX_EXTENT, new_axis
from fuserlite.ops.forms import Template
from fuserlite.ops.registry import Category, LocalRule, Op, Param, Scalar, define, no_gradient

__all__ = ["iota"]


def _number(value: object, dtype: DType, arg: str) -> Scalar:
    """start or step as the Python number of the output's kind (nvFuser: of its dtype)."""
    if dtype.is_float:
        return args.real(value, "iota", arg)
    if isinstance(value, TensorView):
        raise FusionError(f"iota: {arg} must be a number, not the tensor {value.name}")
    return args.integer(value, "iota", arg)


def _check_range(n: int, dtype: DType, start: Scalar, step: Scalar) -> None:
    """An integer iota's values, and step * i on the way, must fit its dtype: C's signed
    overflow is undefined and numpy's wraps, so a value past it would differ by path."""
    if dtype.is_float:
        return
    last, span = start + step * (n - 1), step * (n - 1)
    lo, hi = dtype.lowest, dtype.largest
    if not all(lo <= v <= hi for v in (start, last, span)):
        raise FusionError(
            f"iota: {n} values from {start} by {step} (to {last}) do not fit {dtype.name} "
            f"({lo}..{hi}); use int64 or a float dtype, or fewer values"
        )


@define(
    Template("iota({n:int}, {start:operand}, {step:operand}, {dtype:dtype});"),
    (
        Param("n", "int"),
        Param("dtype", "dtype", required=False),
        Param("start", "operand", required=False),
        Param("step", "operand", required=False),
    ),
    Category.POINTWISE,
    attrs=("n", "dtype"),
    indexed=True,
    vjp=no_gradient,  # no tensor operands
    local=LocalRule.same,
)
def iota(
    n: int, dtype: DType | str = DType.int64, start: Scalar = 0, step: Scalar = 1
) -> TensorView:
    """[start, start + step, ..., start + step * (n - 1)], a new 1-D tensor of `dtype`."""
    n = args.integer(n, "iota", "n (the number of values)", minimum=1, maximum=MAX_EXTENT)
    dtype = DType.parse(dtype)
    if dtype is DType.bool:
        raise FusionError("iota: dtype bool holds no counts; use an integer or a float dtype")
    start, step = _number(start, dtype, "start"), _number(step, dtype, "step")
    _check_range(n, dtype, start, step)
    axis = new_axis(n, IterType.BROADCAST if n == 1 else IterType.ITERATION)
    out = TensorView(active_fusion(), [axis], dtype)
    Op("iota", [out], [start, step], n=n, dtype=dtype)
    return out
