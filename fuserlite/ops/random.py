"""Random numbers: rand_like (counter-based, Philox as nvFuser draws it), rand (the same
numbers for a shape, with no tensor operand: nvFuser's rand), and the composites uniform
and dropout built on them.

rand_like's number at an element is Philox's at the element's linear index in the
*global* tensor (fuserlite.numerics.philox): each device draws its own shard's
numbers, so a sharded program draws exactly the unsharded program's numbers and a
sharded dropout keeps exactly the unsharded mask, with no communication. It is a
pointwise op (`indexed`: its value is a function of the element's global linear
index), so the segmenter fuses it, and a dropout around it, into the pointwise
kernel: the kernel body computes Philox at each element's global index (its shard's
offset included) with the generator of fuserlite.numerics.philox, in C for the
compiled and CUDA targets and with numpy in the interpreter, bit-equal to the
reference on every compute path and backend.

rand(shape) draws rand_like's numbers for a tensor of that shape without reading one
(its backends' rows are rand_like's: neither reads an operand). Made from nothing, it
takes its mesh and sharding from the tensors that read it (propagate-shardings
propagates both backward), so each device draws only its own shard.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.fusion import active_fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType
from fuserlite.ops.common import MAX_EXTENT, X, check_rank, check_tensor, like, new_axis, shape_text
from fuserlite.ops.cost import elementwise
from fuserlite.ops.forms import Template
from fuserlite.ops.pointwise import add, lt, mul
from fuserlite.ops.registry import Category, LocalRule, Op, Param, composite, define, no_gradient

__all__ = ["rand_like", "rand", "uniform", "dropout"]

_U64 = 2**64 - 1
_SEED = Param("seed", "int", required=False, keyword=True)
_OFFSET = Param("offset", "int", required=False, keyword=True)


def _counter(value: object, op: str, arg: str) -> int:
    return args.integer(value, op, arg, minimum=0, maximum=_U64)


def _float_like(x: object, op: str) -> TensorView:
    x = check_tensor(x, op)
    if not x.dtype.is_float:
        raise FusionError(
            f"{op}: {shape_text(x)} is {x.dtype.name}; random numbers are floats (float16, "
            "bfloat16, float32 or float64): pass a float tensor"
        )
    return x


@define(
    Template("rng_uniform({x}, seed = {seed:int}, offset = {offset:int});"),
    (X, _SEED, _OFFSET),
    Category.POINTWISE,
    attrs=("seed", "offset"),
    indexed=True,
    vjp=no_gradient,  # its numbers do not depend on x's values
    cost=elementwise(10),
    local=LocalRule.batch,
)
def rand_like(x: TensorView, seed: int = 0, offset: int = 0) -> TensorView:
    """Uniform numbers in [0, 1) of x's shape and dtype (Philox: seed, offset)."""
    x = _float_like(x, "rand_like")
    out = like(x)
    Op(
        "rand_like",
        [out],
        [x],
        seed=_counter(seed, "rand_like", "seed"),
        offset=_counter(offset, "rand_like", "offset"),
    )
    return out


@define(
    Template("rng_uniform({shape:ints}, {dtype:dtype}, seed = {seed:int}, offset = {offset:int});"),
    (Param("shape", "ints"), Param("dtype", "dtype", required=False), _SEED, _OFFSET),
    Category.POINTWISE,
    attrs=("shape", "dtype", "seed", "offset"),
    indexed=True,
    vjp=no_gradient,  # no tensor operands
    cost=elementwise(10),
    local=LocalRule.whole,
)
def rand(
    shape: Sequence[int], dtype: DType | str = DType.float32, seed: int = 0, offset: int = 0
) -> TensorView:
    """Uniform numbers in [0, 1) of `shape` and `dtype`: rand_like's numbers of a tensor of
    that shape (Philox: seed, offset), a new tensor of the active fusion."""
    check_rank(shape, "rand", "shape")
    shape = args.integers(shape, "rand", "shape")
    if any(not 1 <= n <= MAX_EXTENT for n in shape):
        raise FusionError(f"rand: every extent of shape {shape} must be in 1..{MAX_EXTENT}")
    dtype = DType.parse(dtype)
    if not dtype.is_float:
        raise FusionError(
            f"rand: dtype {dtype.name} holds no random numbers; use float16, bfloat16, "
            "float32 or float64"
        )
    axes = [new_axis(n, IterType.BROADCAST if n == 1 else IterType.ITERATION) for n in shape]
    out = TensorView(active_fusion(), axes, dtype)
    Op(
        "rand",
        [out],
        [],
        shape=tuple(shape),
        dtype=dtype,
        seed=_counter(seed, "rand", "seed"),
        offset=_counter(offset, "rand", "offset"),
    )
    return out


@composite(
    (
        X,
        Param("low", "float", required=False),
        Param("high", "float", required=False),
        _SEED,
        _OFFSET,
    )
)
def uniform(
    x: TensorView | Sequence[int],
    low: float = 0.0,
    high: float = 1.0,
    seed: int = 0,
    offset: int = 0,
) -> TensorView:
    """Uniform numbers in [low, high) of x's shape and dtype (x a tensor), or of the shape x
    in float32 (x a list of extents, nvFuser's uniform): low + (high - low) * the draw."""
    low, high = args.real(low, "uniform", "low"), args.real(high, "uniform", "high")
    if not low <= high:
        raise FusionError(f"uniform: low {low} must not exceed high {high}")
    draw = (
        rand(x, seed=seed, offset=offset)
        if isinstance(x, (list, tuple))
        else rand_like(x, seed, offset)
    )
    return add(mul(draw, high - low), low)


@composite((X, Param("p", "float"), _SEED, _OFFSET))
def dropout(x: TensorView, p: float, seed: int = 0, offset: int = 0) -> TensorView:
    """x * mask / (1 - p), mask = rand_like(x) < 1 - p: nvFuser's dropout."""
    x = _float_like(x, "dropout")
    p = args.real(p, "dropout", "p")
    if not 0.0 <= p <= 1.0:
        raise FusionError(f"dropout: the probability p must be in [0, 1], got {p}")
    keep = lt(rand_like(x, seed, offset), 1.0 - p)
    return mul(mul(x, keep), 1.0 / (1.0 - p) if p < 1 else 1.0)
