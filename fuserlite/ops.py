"""User-facing builders: each creates output TensorViews and the expression defining them.

Operands align axis by axis on their data axes (reduction axes are not data).
Extents must be equal, or one side a broadcast axis. A lower-rank operand is
broadcast on its leading axes first, as numpy would.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence

import numpy as np

from fuserlite.ir import args
from fuserlite.ir.domain import IterDomain
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import (
    CACHE_OPS,
    BinaryOp,
    BinaryOpType,
    BroadcastOp,
    ExpandOp,
    LinearOp,
    LoadStoreOp,
    MatmulOp,
    ReductionOp,
    ReductionOpType,
    ReshapeOp,
    UnaryOp,
    UnaryOpType,
)
from fuserlite.ir.fusion import Fusion, active_fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType, result_type

Scalar = int | float

MAX_RANK = 64  # numpy's limit on the number of array dimensions
MAX_EXTENT = 2**63 - 1  # extents are int64, as in nvFuser (and in the emitted CUDA)


def _shape_text(tv: TensorView) -> str:
    return f"{tv.name}{list(tv.shape)}"


def data_axes(tv: TensorView) -> list[IterDomain]:
    """The logical axes that hold data (every axis but reductions)."""
    return tv.data_axes()


def _new_axis(extent: int, iter_type: IterType = IterType.ITERATION) -> IterDomain:
    return IterDomain(extent, iter_type)


def tensor(
    shape: Sequence[int],
    dtype: DType | str = DType.float32,
    contiguous: bool = True,
    fusion: Fusion | None = None,
    name: str | None = None,
) -> TensorView:
    """A concrete, contiguous input tensor; an extent-1 axis is a broadcast axis.

    `name` is the user's name for it (`w1`): messages and reports show `w1 (T0)`."""
    if fusion is None:
        fusion = active_fusion()
    args.instance(fusion, Fusion, "tensor", "fusion", "a Fusion or None (the active one)")
    check_rank(shape, "tensor", "shape")
    extents = args.integers(shape, "tensor", "shape", minimum=1, maximum=MAX_EXTENT, scalar_ok=True)
    dtype = DType.parse(dtype)
    contiguous = args.boolean(contiguous, "tensor", "contiguous")
    axes = [_new_axis(e, IterType.BROADCAST if e == 1 else IterType.ITERATION) for e in extents]
    contiguity = [None if ax.is_broadcast else contiguous for ax in axes]
    tv = TensorView(fusion, axes, dtype, contiguity)
    if name is not None:
        tv.user_name = name
    return tv


def check_rank(shape: object, who: str, arg: str) -> None:
    """A tensor has at most MAX_RANK axes (numpy cannot hold more); checked before the
    items are, so that a shape of a billion items is refused at once."""
    if args.is_sequence(shape) and len(shape) > MAX_RANK:
        raise FusionError(
            f"{who}: {arg} has {len(shape)} items; a tensor has at most {MAX_RANK} axes "
            "(as in numpy)"
        )


def _fusion_of(*operands) -> Fusion:
    fusions = {id(t.fusion): t.fusion for t in operands if isinstance(t, TensorView)}
    if not fusions:
        raise FusionError("an op needs at least one tensor operand")
    if len(fusions) > 1:
        names = ", ".join(t.name for t in operands if isinstance(t, TensorView))
        raise FusionError(f"operands {names} belong to different fusions")
    return next(iter(fusions.values()))


def _check_tensor(x, op: str, arg: str = "x") -> TensorView:
    return args.instance(x, TensorView, op, arg, "a TensorView")


def like(tv: TensorView, dtype: DType | None = None, keep_reductions: bool = False) -> TensorView:
    """A new local tensor with tv's data axes (or all logical axes), fresh IterDomains
    of the same extents and types, no mesh, no schedule."""
    source = tv.domain.logical if keep_reductions else data_axes(tv)
    axes = [_new_axis(ax.extent, ax.iter_type) for ax in source]
    return TensorView(tv.fusion, axes, dtype or tv.dtype)


# -- pointwise ----------------------------------------------------------------
def _unary(op: UnaryOpType, x: TensorView) -> TensorView:
    x = _check_tensor(x, op.value)
    if op is UnaryOpType.neg and x.dtype is DType.bool:
        raise FusionError(f"neg: {x.name} is bool; negate a number type (cast is not supported)")
    dtype = (
        x.dtype
        if x.dtype.is_float or op in (UnaryOpType.neg, UnaryOpType.abs, UnaryOpType.relu)
        else DType.float32
    )
    out = like(x, dtype)
    UnaryOp(op, out, x)
    return out


def neg(x: TensorView) -> TensorView:
    """-x"""
    return _unary(UnaryOpType.neg, x)


def exp(x: TensorView) -> TensorView:
    """e**x"""
    return _unary(UnaryOpType.exp, x)


def tanh(x: TensorView) -> TensorView:
    """tanh(x)"""
    return _unary(UnaryOpType.tanh, x)


def relu(x: TensorView) -> TensorView:
    """max(x, 0)"""
    return _unary(UnaryOpType.relu, x)


def abs(x: TensorView) -> TensorView:  # noqa: A001 - mirrors the op name
    """|x|"""
    return _unary(UnaryOpType.abs, x)


def gelu(x: TensorView) -> TensorView:
    """GELU, tanh approximation."""
    return _unary(UnaryOpType.gelu, x)


def sqrt(x: TensorView) -> TensorView:
    """square root"""
    return _unary(UnaryOpType.sqrt, x)


def log(x: TensorView) -> TensorView:
    """natural logarithm"""
    return _unary(UnaryOpType.log, x)


def _promote(a: TensorView | Scalar, b: TensorView | Scalar, op: BinaryOpType) -> DType:
    tensors = [t.dtype for t in (a, b) if isinstance(t, TensorView)]
    dtype = result_type(tensors, [x for x in (a, b) if not isinstance(x, TensorView)])
    if op is BinaryOpType.div and not dtype.is_float:
        dtype = DType.float32  # true division of integers or bools, as in torch
    return dtype


_INF = float("inf")


def _fits(value: int | float, dtype: DType) -> bool:
    """True if a Python scalar converts to `dtype` without overflow."""
    if isinstance(value, bool) or dtype is DType.bool:
        return True
    if dtype.is_float:
        try:
            f = float(value)
        except OverflowError:
            return False
        return f != f or builtins.abs(f) <= dtype.largest or f in (_INF, -_INF)
    info = np.iinfo(dtype.numpy)
    return isinstance(value, int) and info.min <= value <= info.max


def _check_broadcastable(op: BinaryOpType, a: TensorView, b: TensorView) -> None:
    """Compare trailing-aligned axes before anything is added to the fusion."""
    xs, ys = data_axes(a), data_axes(b)
    n = builtins.min(len(xs), len(ys))
    for k in range(1, n + 1):
        x, y = xs[-k], ys[-k]
        if not (x.is_broadcast or y.is_broadcast or x.extent == y.extent):
            raise FusionError(
                f"{op.value}: shapes {_shape_text(a)} and {_shape_text(b)} do not broadcast: "
                f"axis {len(xs) - k} of {a.name} has extent {x.extent} and axis {len(ys) - k} of "
                f"{b.name} has extent {y.extent}; make one of them a broadcast axis (extent 1) "
                "or use equal extents"
            )


def _align_ranks(a: TensorView, b: TensorView) -> tuple[TensorView, TensorView]:
    ra, rb = len(a.shape), len(b.shape)
    if ra < rb:
        a = broadcast(a, [True] * (rb - ra) + [False] * ra)
    elif rb < ra:
        b = broadcast(b, [True] * (ra - rb) + [False] * rb)
    return a, b


# The builder of each binary op where its name differs from the op's (messages say it).
_BUILDER_NAMES = {BinaryOpType.max: "maximum", BinaryOpType.min: "minimum"}


def builder_name(op: BinaryOpType) -> str:
    """`maximum` for BinaryOpType.max: the function a user calls."""
    return _BUILDER_NAMES.get(op, op.value)


def _operands(op: BinaryOpType, a: object, b: object) -> tuple[TensorView | Scalar, ...]:
    """Tensors as they are, Python/numpy numbers as Python numbers; one must be a tensor."""
    who = builder_name(op)
    a, b = (
        x if isinstance(x, TensorView) else args.scalar(x, who, n) for x, n in ((a, "a"), (b, "b"))
    )
    if not isinstance(a, TensorView) and not isinstance(b, TensorView):
        raise FusionError(f"{who}: a and b are both numbers ({a!r}, {b!r}); one must be a tensor")
    return a, b


def _binary(op: BinaryOpType, a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    a, b = _operands(op, a, b)
    _fusion_of(a, b)
    dtype = _promote(a, b, op)
    if op is BinaryOpType.sub and dtype is DType.bool:
        raise FusionError(f"sub: both operands are bool; {op.value} needs numbers")
    for x in (a, b):
        if isinstance(x, (int, float)) and not _fits(x, dtype):
            raise FusionError(f"{op.value}: the scalar {x!r} does not fit the {dtype.name} result")
    if isinstance(a, TensorView) and isinstance(b, TensorView):
        _check_broadcastable(op, a, b)
        a, b = _align_ranks(a, b)
        axes = []
        for x, y in zip(data_axes(a), data_axes(b)):
            if x.is_broadcast and y.is_broadcast:
                axes.append(_new_axis(builtins.max(x.extent, y.extent), IterType.BROADCAST))
            else:
                axes.append(_new_axis(y.extent if x.is_broadcast else x.extent))
        out = TensorView(a.fusion, axes, dtype)
    else:
        ref = a if isinstance(a, TensorView) else b
        out = like(ref, dtype)
    BinaryOp(op, out, a, b)
    return out


def add(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a + b"""
    return _binary(BinaryOpType.add, a, b)


def sub(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a - b"""
    return _binary(BinaryOpType.sub, a, b)


def mul(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a * b"""
    return _binary(BinaryOpType.mul, a, b)


def div(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """a / b (true division)"""
    return _binary(BinaryOpType.div, a, b)


def maximum(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """Elementwise max(a, b)."""
    return _binary(BinaryOpType.max, a, b)


def minimum(a: TensorView | Scalar, b: TensorView | Scalar) -> TensorView:
    """Elementwise min(a, b)."""
    return _binary(BinaryOpType.min, a, b)


def set(x: TensorView, cache_op: str | None = None) -> TensorView:  # noqa: A001 - nvFuser's name
    """A copy of x; between different shardings, a resharding. `cache_op` is nvFuser's
    load cache hint (Unspecified, AllLevels, Streaming, Global)."""
    x = _check_tensor(x, "set")
    if cache_op is not None and cache_op not in CACHE_OPS:
        raise args.fail("set", "cache_op", f"None or one of {', '.join(CACHE_OPS)}", cache_op)
    out = like(x)
    LoadStoreOp(out, x, cache_op)
    return out


# -- broadcast, reductions, views --------------------------------------------
def broadcast(x: TensorView, flags: Sequence[bool]) -> TensorView:
    """Insert broadcast axes where flags are True; False flags consume x's axes in order."""
    x = _check_tensor(x, "broadcast")
    check_rank(flags, "broadcast", "flags")
    flags = args.booleans(flags, "broadcast", "flags")
    src = data_axes(x)
    if flags.count(False) != len(src):
        raise FusionError(
            f"broadcast: {_shape_text(x)} has {len(src)} axes but flags {flags} keep "
            f"{flags.count(False)}; give one False per input axis"
        )
    it = iter(src)
    axes = []
    for f in flags:
        if f:
            axes.append(_new_axis(1, IterType.BROADCAST))
        else:
            ax = next(it)
            axes.append(_new_axis(ax.extent, ax.iter_type))
    out = TensorView(x.fusion, axes, x.dtype)
    BroadcastOp(out, x, flags)
    return out


def _normalize_axes(x: TensorView, axes, op: str) -> list[int]:
    n = len(x.shape)
    check_rank(axes, op, "axes")
    axes = list(range(n)) if axes is None else args.integers(axes, op, "axes", scalar_ok=True)
    out = []
    for a in axes:
        if not -n <= a < n:
            raise FusionError(f"{op}: {_shape_text(x)} has {n} axes; axis {a!r} is out of range")
        out.append(a % n)
    if len(out) != len(builtins.set(out)):
        raise FusionError(f"{op}: axis listed twice in {list(axes)}")
    return sorted(out)


def _reduction(op: ReductionOpType, x: TensorView, axes, keepdim: bool) -> TensorView:
    name = "sum" if op is ReductionOpType.sum else "max"
    x = _check_tensor(x, name)
    red = _normalize_axes(x, axes, name)
    keepdim = args.boolean(keepdim, name, "keepdim")
    src = data_axes(x)
    out_axes = [
        _new_axis(ax.extent, IterType.REDUCTION if k in red else ax.iter_type)
        for k, ax in enumerate(src)
    ]
    # As in torch, a sum of bools or integers is an int64 count or total; max keeps the dtype.
    sums_to_int64 = op is ReductionOpType.sum and not x.dtype.is_float
    out = TensorView(x.fusion, out_axes, DType.int64 if sums_to_int64 else x.dtype)
    init = 0.0 if op is ReductionOpType.sum else out.dtype.lowest
    ReductionOp(op, out, x, red, init)
    if keepdim:
        return broadcast(out, [k in red for k in range(len(src))])
    return out


def sum(
    x: TensorView, axes: int | Sequence[int] | None = None, keepdim: bool = False
) -> TensorView:  # noqa: A001
    """Sum over `axes` (all axes by default)."""
    return _reduction(ReductionOpType.sum, x, axes, keepdim)


def max(
    x: TensorView, axes: int | Sequence[int] | None = None, keepdim: bool = False
) -> TensorView:  # noqa: A001
    """Max over `axes` (all by default); for an elementwise max use `maximum`."""
    if isinstance(axes, TensorView):
        raise FusionError(
            "max(x, axes) is a reduction; use fl.maximum(a, b) for an elementwise max"
        )
    return _reduction(ReductionOpType.max, x, axes, keepdim)


def expand(x: TensorView, shape: Sequence[int]) -> TensorView:
    """Materialize broadcast axes to `shape` (-1 keeps an axis); other axes must match."""
    x = _check_tensor(x, "expand")
    src = data_axes(x)
    check_rank(shape, "expand", "shape")
    shape = args.integers(shape, "expand", "shape", scalar_ok=True)
    if len(shape) != len(src):
        raise FusionError(
            f"expand: {_shape_text(x)} has {len(src)} axes, shape {shape} has {len(shape)}"
        )
    axes = []
    for k, (ax, s) in enumerate(zip(src, shape)):
        if s == -1 or s == ax.extent:
            axes.append(_new_axis(ax.extent, ax.iter_type))
        elif ax.is_broadcast and s >= 1:
            axes.append(_new_axis(s))
        else:
            raise FusionError(
                f"expand: {_shape_text(x)} axis {k} has extent {ax.extent} and is not a broadcast "
                f"axis; it cannot be expanded to {s}"
            )
    out = TensorView(x.fusion, axes, x.dtype)
    ExpandOp(out, x, [a.extent for a in axes])
    return out


def reshape(x: TensorView, shape: Sequence[int]) -> TensorView:
    """View x's data with another shape (one -1 is inferred)."""
    x = _check_tensor(x, "reshape")
    total = 1
    for e in x.shape:
        total *= e
    check_rank(shape, "reshape", "shape")
    shape = args.integers(shape, "reshape", "shape", scalar_ok=True)
    if shape.count(-1) > 1:
        raise FusionError(f"reshape: at most one -1 in {shape}")
    known = 1
    for s in shape:
        if s != -1:
            known *= s
    if -1 in shape:
        if known == 0 or total % known:
            raise FusionError(f"reshape: cannot view {_shape_text(x)} as {shape}")
        shape[shape.index(-1)] = total // known
    if _prod(shape) != total or any(s < 1 for s in shape):
        raise FusionError(f"reshape: cannot view {_shape_text(x)} ({total} elements) as {shape}")
    axes = [_new_axis(s, IterType.BROADCAST if s == 1 else IterType.ITERATION) for s in shape]
    out = TensorView(x.fusion, axes, x.dtype)
    ReshapeOp(out, x, shape)
    return out


def _prod(shape: Sequence[int]) -> int:
    p = 1
    for s in shape:
        p *= s
    return p


# -- matmul / linear ------------------------------------------------------------
def _check_contraction(
    what: str, a: TensorView, a_arg: str, w: TensorView, w_arg: str, k_axis: int
) -> None:
    """a[..., k] against a 2-D w whose axis `k_axis` is k: say which of these fails."""
    layout = "[k, n]" if k_axis == 0 else "[n, k]"
    if len(a.shape) < 1:
        raise FusionError(f"{what}: {a_arg} is 0-d; it needs a last axis k to contract")
    if len(w.shape) != 2:
        raise FusionError(
            f"{what}: {w_arg} must be 2-D {layout}, it has {len(w.shape)} axes; a batched "
            f"(or 1-D) {w_arg} is not supported, reshape it to 2-D"
        )
    if a.shape[-1] != w.shape[k_axis]:
        raise FusionError(
            f"{what}: the contracted extents differ: {a_arg}'s last axis has {a.shape[-1]}, "
            f"axis {k_axis} of {w_arg} ({layout}) has {w.shape[k_axis]}"
        )


def matmul(a: TensorView, b: TensorView) -> TensorView:
    """a[..., m, k] @ b[k, n] -> [..., m, n] (with a trailing reduction axis rk)."""
    a, b = _check_tensor(a, "matmul", "a"), _check_tensor(b, "matmul", "b")
    _fusion_of(a, b)
    what = f"matmul: {_shape_text(a)} @ {_shape_text(b)}"
    _check_contraction(what, a, "a", b, "b", k_axis=0)
    axes = [_new_axis(ax.extent, ax.iter_type) for ax in data_axes(a)[:-1]]
    axes += [_new_axis(b.shape[1]), _new_axis(a.shape[-1], IterType.REDUCTION)]
    out = TensorView(a.fusion, axes, _promote(a, b, BinaryOpType.mul))
    MatmulOp([a, b], [out])
    return out


def linear(x: TensorView, weight: TensorView, bias: TensorView | None = None) -> TensorView:
    """x[..., k] @ weight[n, k]^T (+ bias[n]) -> [..., n]; the product keeps a trailing rk axis."""
    x, weight = _check_tensor(x, "linear"), _check_tensor(weight, "linear", "weight")
    _fusion_of(x, weight, *([_check_tensor(bias, "linear", "bias")] if bias is not None else []))
    what = f"linear: {_shape_text(x)} and weight {_shape_text(weight)}"
    _check_contraction(what, x, "x", weight, "weight", k_axis=1)
    n = weight.shape[0]
    if bias is not None and bias.shape != (n,):
        raise FusionError(f"linear: bias {_shape_text(bias)} must have shape [{n}]")
    axes = [_new_axis(ax.extent, ax.iter_type) for ax in data_axes(x)[:-1]]
    axes += [_new_axis(n), _new_axis(x.shape[-1], IterType.REDUCTION)]
    out = TensorView(x.fusion, axes, _promote(x, weight, BinaryOpType.mul))
    if bias is not None:  # the type of the product plus the bias
        out.dtype = _promote(out, bias, BinaryOpType.add)
    # One op with the bias, so that sharding sees one linear; where the contraction
    # axis is sharded, insert-reshardings adds the bias once, after the reduction.
    LinearOp([x, weight] + ([bias] if bias is not None else []), [out])
    return out


def install_operators() -> None:
    """`x + y`, `2 * x`, `x / y`, `-x` on TensorViews: the ops side installs the sugar
    (as torch.fx installs Proxy's magic methods); the IR imports no ops."""
    for builder, name in ((add, "add"), (sub, "sub"), (mul, "mul"), (div, "truediv")):
        setattr(TensorView, f"__{name}__", lambda a, b, f=builder: f(a, b))
        setattr(TensorView, f"__r{name}__", lambda a, b, f=builder: f(b, a))
    TensorView.__neg__ = neg  # type: ignore[method-assign]


install_operators()
