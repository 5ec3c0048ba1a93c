"""What every op's builder shares: input tensors, new outputs, argument checks."""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite.ir import args
from fuserlite.ir.domain import IterDomain, TensorDomain
from fuserlite.ir.errors import FusionError
from fuserlite.ir.fusion import Fusion, active_fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType
from fuserlite.ir.values import fact
from fuserlite.ops.registry import Param

MAX_RANK = 64  # numpy's limit on the number of array dimensions
MAX_EXTENT = 2**63 - 1  # extents are int64, as in nvFuser (and in the emitted CUDA)

# Parameters many ops share.
X = Param("x", "tensor")
UNARY = (X,)
BINARY = (Param("a", "operand"), Param("b", "operand"))


def shape_text(tv: TensorView) -> str:
    """`x[4, 8]`: a tensor and its shape, for messages."""
    return f"{tv.name}{list(tv.shape)}"


def data_axes(tv: TensorView) -> list[IterDomain]:
    """The logical axes that hold data (every axis but reductions)."""
    return tv.data_axes()


def new_axis(extent: int, iter_type: IterType = IterType.ITERATION) -> IterDomain:
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
    axes = [new_axis(e, IterType.BROADCAST if e == 1 else IterType.ITERATION) for e in extents]
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


def fusion_of(*operands) -> Fusion:
    """The one fusion the tensor operands belong to."""
    fusion = None
    for t in operands:  # a loop, no set: every op of a builder asks
        if isinstance(t, TensorView):
            if fusion is None:
                fusion = t.fusion
            elif t.fusion is not fusion:
                names = ", ".join(t.name for t in operands if isinstance(t, TensorView))
                raise FusionError(f"operands {names} belong to different fusions")
    if fusion is None:
        raise FusionError("an op needs at least one tensor operand")
    return fusion


def check_tensor(x, op: str, arg: str = "x") -> TensorView:
    """x, which must be a TensorView (argument `arg` of `op`)."""
    return args.instance(x, TensorView, op, arg, "a TensorView")


def like(tv: TensorView, dtype: DType | None = None, keep_reductions: bool = False) -> TensorView:
    """A new local tensor with tv's data axes (or all logical axes), fresh IterDomains
    of the same extents and types, no mesh, no schedule."""
    return TensorView(tv.fusion, _like_domain(tv.domain, keep_reductions), dtype or tv.dtype)


@fact
def _like_domain(dom: TensorDomain, keep_reductions: bool) -> TensorDomain:
    """The unscheduled domain `like` gives a tensor of `dom`: a fact (a builder's every op)."""
    source = dom.logical if keep_reductions else [ax for ax in dom.logical if not ax.is_reduction]
    return TensorDomain([new_axis(ax.extent, ax.iter_type) for ax in source])
