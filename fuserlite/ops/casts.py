"""cast: a tensor converted to another dtype, printed with nvFuser's conversion names.

nvFuser prints a cast as the conversion function its kernel calls, named after both
dtypes: `__float2bfloat(T0)`, `__bfloat2float(T0)`, `__half2int(T0)`, `__to_double(T0)`
(between float, double, the integers and bool), `__int2half(T0)`. The name alone says
the target dtype, so the printed form reads back. Values round once, to nearest even;
a float becomes an integer by truncation toward zero, saturating, NaN to 0 (CUDA's
cvt.rzi), see fuserlite.numerics.casts.

Sharding: a cast is pointwise, its shardings pass through. Partial values are summed
after the cast (insert-reshardings completes partial values before any pointwise op
reads them), so rounding never meets an incomplete sum.
"""

from __future__ import annotations

import re

from fuserlite.ir.errors import FusionError, ParseError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.ops.common import X, check_tensor, like, shape_text
from fuserlite.ops.cost import MOVES_DATA
from fuserlite.ops.forms import TENSOR, TensorText
from fuserlite.ops.registry import Category, LocalRule, Op, Param, define
from fuserlite.ops.views import set as set_

__all__ = ["cast"]  # the builders of its ops

_HALVES = (DType.float16, DType.bfloat16)
# The dtype words in nvFuser's conversion names (type.cpp, supported_casts2string).
_FROM = {
    DType.float32: "float",
    DType.float64: "double",
    DType.float16: "half",
    DType.bfloat16: "bfloat",
    DType.int32: "int32",
    DType.int64: "int",
    DType.bool: "bool",
}
_TO = {**_FROM, DType.int64: "int64"}  # `__to_int64`, but `__half2int`


def cast_name(src: DType, dst: DType) -> str:
    """nvFuser's name of the conversion from `src` to `dst` (two different dtypes)."""
    if dst in _HALVES:
        word = "int" if src in (DType.int32, DType.int64) else _FROM[src]
        return f"__{word}2{_FROM[dst]}"
    if src in _HALVES:
        return f"__{_FROM[src]}2{_FROM[dst]}"
    return f"__to_{_TO[dst]}"


def _targets() -> dict[str, DType]:
    """{conversion name: its target dtype}; each name has one target."""
    out: dict[str, DType] = {}
    for src in DType:
        for dst in DType:
            if src is not dst:
                name = cast_name(src, dst)
                assert out.setdefault(name, dst) is dst, name
    return out


_TARGETS = _targets()
_PRINTED = re.compile(rf"(__\w+)\(({TENSOR})\);", re.DOTALL)


class CastForm:
    """`__float2bfloat(T0);`: the conversion's name carries the target dtype."""

    fields = frozenset({"x", "dtype"})

    def print(self, values: dict[str, object], expr: Expr, tensor: TensorText) -> str:
        """The printed body: the conversion's name, from the operand's dtype to `dtype`."""
        x = values["x"]
        return f"{cast_name(x.dtype, values['dtype'])}({tensor(x)});"

    def match(self, text: str) -> dict[str, object] | None:
        """{x: the operand's text, dtype: the target} of a printed cast, or None."""
        m = _PRINTED.fullmatch(text)
        if m is None or not text.startswith("__"):
            return None
        if m.group(1) not in _TARGETS:
            raise ParseError(f"{m.group(1)!r} is no conversion fuserlite knows")
        return {"x": m.group(2), "dtype": _TARGETS[m.group(1)]}


def _cast_vjp(expr, operands, outputs, grads):
    """The cotangent in the input's dtype (none for an integer or bool input)."""
    x = operands[0]
    return [cast(grads[0], x.dtype) if x.dtype.is_float else None]


@define(
    CastForm(),
    (X, Param("dtype", "dtype")),
    Category.POINTWISE,
    attrs=("dtype",),
    converts=True,
    vjp=_cast_vjp,
    cost=MOVES_DATA,
    local=LocalRule.same,
)
def cast(x: TensorView, dtype: DType | str) -> TensorView:
    """x converted to `dtype` (rounded to nearest even; float to integer truncates)."""
    x = check_tensor(x, "cast")
    try:
        target = DType.parse(dtype)
    except FusionError:
        names = ", ".join(dt.name for dt in DType)
        raise FusionError(
            f"cast: cannot cast {shape_text(x)} ({x.dtype.name}) to unknown dtype {dtype!r}; "
            f"expected one of {names}"
        ) from None
    if target is x.dtype:  # as nvFuser's castOp: a copy
        return set_(x)
    out = like(x, target)
    Op("cast", [out], [x], dtype=target)
    return out
