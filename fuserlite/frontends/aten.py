"""The ATen op table: how each op of a torch.export graph becomes fuserlite ops.

One row per ATen overload (`aten.linear.default`, as `str(node.target)` spells it):
its builder takes the node's arguments with tensors already fuserlite TensorViews
(torch dtypes as DTypes, torch's None as None) and returns what the node returns
(a tensor, a tuple of tensors, or None). The rows build only public ops
(`fuserlite.ops`), so an imported fusion is an ordinary one: it shards, lowers,
explains and runs as any. docs/torch.md shows this table (`markdown_table`, checked
by tests/test_torch_frontend.py), and an op outside it is a FuserliteError naming
the op, the module it came from and these rows (fuserlite.frontends.torch).

Numerics follow torch's CPU kernels: where torch computes a half or bfloat16
normalization, softmax or mean in float32 and rounds once (its "opmath" type), the
row does too (`_in_float`), so the imported fusion rounds where torch does. Pointwise
chains round less often than torch (fuserlite rounds at kernel outputs only).

Nothing here imports torch: the table reads without it (docs, error messages).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fuserlite import ops
from fuserlite.ir.errors import FusionError
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.ops.gradients import full

_HALF = (DType.float16, DType.bfloat16)
INF = float("inf")


@dataclass
class Importing:
    """What a row may need beyond its arguments, for one import: the Philox seed of
    train-mode dropout and the offset of the next one (one per dropout, in graph order)."""

    seed: int = 0
    next_offset: int = 0

    def offset(self) -> int:
        """A fresh Philox offset: each random op draws its own numbers."""
        self.next_offset += 1
        return self.next_offset - 1


Builder = Callable[..., object]  # (importing, *node args, **node kwargs) -> its value


@dataclass(frozen=True)
class AtenRow:
    """One ATen overload and what it becomes."""

    name: str  # "aten.linear.default"
    build: Builder
    becomes: str  # what it becomes, for docs/torch.md
    # A 0-d constant tensor argument may be given as a Python number (torch's own
    # promotion treats it as one against a dimensioned tensor of its category).
    scalars: bool = False


TABLE: dict[str, AtenRow] = {}

# Ops of no data: the graph's own checks (torch.export inserts them), dropped.
IGNORED = frozenset({"aten._assert_tensor_metadata.default", "aten._assert_scalar.default"})

# Creation ops and math torch evaluates at import time when no input reaches them
# (constant subgraphs: a causal mask's tril, a rotary table's arange and outer);
# besides, any op of the table is folded when its arguments are all constants.
FOLDABLE = frozenset(
    {
        "aten.arange.default",
        "aten.arange.start",
        "aten.arange.start_step",
        "aten.ones.default",
        "aten.zeros.default",
        "aten.full.default",
        "aten.eye.default",
        "aten.scalar_tensor.default",
        "aten.tril.default",
        "aten.triu.default",
        "aten.outer.default",
        "aten.repeat_interleave.self_int",
        "aten.repeat.default",
        "aten.lift_fresh_copy.default",
        "aten.logical_and.default",
        "aten.logical_or.default",
    }
)


def aten(*names: str, becomes: str, scalars: bool = False) -> Callable[[Builder], Builder]:
    """Decorator: the builder is the row of each of these overloads."""

    def register(build: Builder) -> Builder:
        for name in names:
            if name in TABLE:
                raise FusionError(f"the ATen table has {name} twice")
            TABLE[name] = AtenRow(name, build, becomes, scalars)
        return build

    return register


def markdown_table() -> str:
    """The table as docs/torch.md shows it: one line per row, sorted by op."""
    lines = ["| ATen op | becomes |", "|---|---|"]
    lines += [f"| `{r.name}` | {r.becomes} |" for r in sorted(TABLE.values(), key=_key)]
    return "\n".join(lines)


def _key(row: AtenRow) -> str:
    return row.name


# -- helpers ---------------------------------------------------------------------------
def _in_float(x: TensorView) -> TensorView:
    """x in float32 where it is half or bfloat16 (torch's opmath type), else x."""
    return ops.cast(x, DType.float32) if x.dtype in _HALF else x


def _back(y: TensorView, dtype: DType) -> TensorView:
    """y rounded back to `dtype` once, where _in_float widened it."""
    return ops.cast(y, dtype) if y.dtype is not dtype else y


def _dims(x: TensorView, dims: object) -> list[int]:
    """torch's dim argument (None, an int or a list; [] is every axis) as axes of x."""
    n = len(x.shape)
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return list(range(n))
    given = [dims] if isinstance(dims, int) else list(dims)
    return sorted({d % n if n else 0 for d in given})


def _not(cond: TensorView) -> TensorView:
    return ops.where(cond, False, True)


def _is_nan(x: object) -> TensorView | bool:
    """x != x, from comparisons: a NaN is neither below +inf nor above -inf."""
    if not isinstance(x, TensorView):
        return x != x
    return ops.where(ops.lt(x, INF), False, _not(ops.lt(-INF, x)))


def _unordered(a: object, b: object) -> TensorView | bool:
    """a or b NaN (every comparison of them is false but !=): a tensor, or a Python bool
    where both are numbers or one is a NaN number."""
    na, nb = _is_nan(a), _is_nan(b)
    if isinstance(na, bool) and isinstance(nb, bool):
        return na or nb
    if isinstance(na, bool):
        return True if na else nb
    if isinstance(nb, bool):
        return True if nb else na
    return ops.where(na, True, nb)


# -- contractions ------------------------------------------------------------------------
@aten("aten.linear.default", becomes="`linear(x, weight, bias)`")
def _linear(imp: Importing, x, weight, bias=None):
    return ops.linear(x, weight, bias)


@aten("aten.matmul.default", "aten.mm.default", "aten.bmm.default", becomes="`matmul(a, b)`")
def _matmul(imp: Importing, a, b):
    return ops.matmul(a, b)


@aten(
    "aten.addmm.default",
    "aten.baddbmm.default",
    becomes="`add(mul(bias, beta), mul(matmul(a, b), alpha))`",
)
def _addmm(imp: Importing, bias, a, b, beta=1, alpha=1):
    product = ops.matmul(a, b)
    product = product if alpha == 1 else ops.mul(product, alpha)
    return ops.add(bias if beta == 1 else ops.mul(bias, beta), product)


@aten("aten.t.default", becomes="`transpose(x, 0, 1)` (a 1-D x as it is)")
def _t(imp: Importing, x):
    return x if len(x.shape) < 2 else ops.transpose(x, 0, 1)


# -- pointwise ---------------------------------------------------------------------------
def _unary(op: Callable[[TensorView], TensorView]) -> Builder:
    return lambda imp, x: op(x)


# ATen's unary ops of fuserlite's names, each the op of its name
_UNARY = ("neg", "exp", "tanh", "relu", "abs", "sqrt", "log", "sigmoid", "silu", "erf")
for _name in (*_UNARY, "sin", "cos", "rsqrt"):
    aten(f"aten.{_name}.default", becomes=f"`{_name}(x)`")(_unary(getattr(ops, _name)))


@aten("aten.square.default", becomes="`mul(x, x)`")
def _square(imp: Importing, x):
    return ops.mul(x, x)


@aten(
    "aten.clamp.default",
    "aten.clamp.Tensor",
    becomes="`minimum(maximum(x, min), max)` (a NaN stays NaN, as torch's)",
    scalars=True,
)
def _clamp(imp: Importing, x, min=None, max=None):  # noqa: A002 - torch's argument names
    out = x if min is None else ops.maximum(x, min)
    return out if max is None else ops.minimum(out, max)


@aten("aten.clamp_min.default", becomes="`maximum(x, min)`", scalars=True)
def _clamp_min(imp: Importing, x, min):  # noqa: A002
    return ops.maximum(x, min)


@aten("aten.clamp_max.default", becomes="`minimum(x, max)`", scalars=True)
def _clamp_max(imp: Importing, x, max):  # noqa: A002
    return ops.minimum(x, max)


@aten(
    "aten.pow.Tensor_Scalar",
    "aten.pow.Tensor_Tensor",
    "aten.pow.Scalar",
    becomes="`pow(a, b)`",
    scalars=True,
)
def _pow(imp: Importing, a, b):
    return ops.pow(a, b)


@aten("aten.reciprocal.default", becomes="`div(1.0, x)`")
def _reciprocal(imp: Importing, x):
    return ops.div(1.0, x)


@aten("aten.gelu.default", becomes="`gelu(x)` (tanh) or its exact form from `erf`")
def _gelu(imp: Importing, x, approximate="none"):
    return ops.gelu(x, approximate=approximate)


def _with_alpha(b, alpha):
    return b if alpha == 1 else ops.mul(b, alpha) if isinstance(b, TensorView) else b * alpha


@aten("aten.add.Tensor", "aten.add.Scalar", becomes="`add(a, b)` (`b * alpha`)", scalars=True)
def _add(imp: Importing, a, b, alpha=1):
    return ops.add(a, _with_alpha(b, alpha))


@aten("aten.sub.Tensor", "aten.sub.Scalar", becomes="`sub(a, b)` (`b * alpha`)", scalars=True)
def _sub(imp: Importing, a, b, alpha=1):
    return ops.sub(a, _with_alpha(b, alpha))


@aten("aten.rsub.Scalar", "aten.rsub.Tensor", becomes="`sub(b, a)` (`a * alpha`)", scalars=True)
def _rsub(imp: Importing, a, b, alpha=1):
    return ops.sub(b, _with_alpha(a, alpha))


for _names, _op in (
    (("aten.mul.Tensor", "aten.mul.Scalar"), ops.mul),
    (("aten.maximum.default",), ops.maximum),
    (("aten.minimum.default",), ops.minimum),
):
    aten(*_names, becomes=f"`{_op.__name__}(a, b)`", scalars=True)(
        lambda imp, a, b, op=_op: op(a, b)
    )


@aten(
    "aten.div.Tensor",
    "aten.div.Scalar",
    "aten.div.Tensor_mode",
    becomes="`div(a, b)` (true division; a rounding_mode is refused)",
    scalars=True,
)
def _div(imp: Importing, a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise FusionError(
            f"div with rounding_mode={rounding_mode!r}: fuserlite has no floor or trunc; "
            "divide without a rounding mode"
        )
    return ops.div(a, b)


@aten(
    "aten.where.self",
    "aten.where.ScalarOther",
    "aten.where.ScalarSelf",
    "aten.where.Scalar",
    becomes="`where(cond, a, b)`",
    scalars=True,
)
def _where(imp: Importing, cond, a, b):
    return ops.where(cond, a, b)


@aten(
    "aten.masked_fill.Scalar",
    "aten.masked_fill.Tensor",
    becomes="`where(mask, value, x)`",
    scalars=True,
)
def _masked_fill(imp: Importing, x, mask, value):
    out = ops.where(mask, value, x)
    return ops.cast(out, x.dtype) if out.dtype is not x.dtype else out


def _eq(a, b) -> TensorView:
    return _ordered_not(ops.where(ops.lt(a, b), True, ops.lt(b, a)), a, b)


# name -> (what it becomes, its builder): comparisons from lt and where (NaN as torch)
_COMPARISONS = {
    "lt": ("`lt(a, b)`", ops.lt),
    "gt": ("`lt(b, a)`", lambda a, b: ops.lt(b, a)),
    "le": (
        "not `lt(b, a)`, false where either is NaN",
        lambda a, b: _ordered_not(ops.lt(b, a), a, b),
    ),
    "ge": (
        "not `lt(a, b)`, false where either is NaN",
        lambda a, b: _ordered_not(ops.lt(a, b), a, b),
    ),
    "eq": ("neither `lt(a, b)` nor `lt(b, a)`, false where either is NaN", _eq),
    "ne": ("not eq (true where either is NaN)", lambda a, b: _not(_eq(a, b))),
}
for _name, (_becomes, _compare) in _COMPARISONS.items():
    aten(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar", becomes=_becomes, scalars=True)(
        lambda imp, a, b, compare=_compare: compare(a, b)
    )


def _ordered_not(cond: TensorView, a, b) -> TensorView:
    """not cond, and false where a or b is NaN (comparisons with NaN are false)."""
    nan = _unordered(a, b)
    negated = _not(cond)
    if nan is True:
        return ops.where(negated, False, False)
    return negated if nan is False else ops.where(nan, False, negated)


@aten(
    "aten.logical_not.default",
    "aten.bitwise_not.default",
    becomes="`where(x, false, true)` (a bool x)",
)
def _logical_not(imp: Importing, x):
    if x.dtype is not DType.bool:
        raise FusionError(f"not of {x.name} ({x.dtype.name}): only bool tensors")
    return _not(x)


# -- normalizations, softmax -------------------------------------------------------------
@aten("aten.layer_norm.default", becomes="`layer_norm` (half and bfloat16 in float32)")
def _layer_norm(imp: Importing, x, normalized_shape, weight=None, bias=None, eps=1e-5, *_):
    w, b = (None if t is None else _in_float(t) for t in (weight, bias))
    y = ops.layer_norm(_in_float(x), list(normalized_shape), w, b, eps=eps)
    return _back(y, x.dtype)


@aten("aten.rms_norm.default", becomes="`rms_norm` (half and bfloat16 in float32)")
def _rms_norm(imp: Importing, x, normalized_shape, weight=None, eps=None):
    # torch's default eps is its opmath type's epsilon: float32's for half inputs too
    eps = _eps(_in_float(x).dtype) if eps is None else eps
    w = None if weight is None else _in_float(weight)
    return _back(ops.rms_norm(_in_float(x), list(normalized_shape), w, eps=eps), x.dtype)


def _eps(dtype: DType) -> float:
    return {DType.float64: 2.220446049250313e-16}.get(dtype, 1.1920928955078125e-07)


@aten("aten.softmax.int", "aten._softmax.default", becomes="`softmax` (half in float32)")
def _softmax(imp: Importing, x, dim, dtype_or_half=None):
    return _normalized(ops.softmax, x, dim, dtype_or_half)


@aten(
    "aten.log_softmax.int", "aten._log_softmax.default", becomes="`log_softmax` (half in float32)"
)
def _log_softmax(imp: Importing, x, dim, dtype_or_half=None):
    return _normalized(ops.log_softmax, x, dim, dtype_or_half)


def _normalized(op, x: TensorView, dim: int, dtype_or_half) -> TensorView:
    """softmax.int's dtype (the result's) or _softmax's half_to_float (float32 out)."""
    if isinstance(dtype_or_half, DType):
        x = ops.cast(x, dtype_or_half) if x.dtype is not dtype_or_half else x
        out_dtype = x.dtype
    else:
        out_dtype = DType.float32 if dtype_or_half and x.dtype in _HALF else x.dtype
    return _back(op(_in_float(x), dim), out_dtype)


# -- attention ---------------------------------------------------------------------------
@aten(
    "aten.scaled_dot_product_attention.default",
    becomes="`sdpa` (causal or not; dropout by fuserlite's Philox); with an attn_mask (bool or"
    " additive) `softmax(q k^T * scale, masked) v` from `matmul`, `where`/`add`, `softmax`",
)
def _sdpa(
    imp: Importing,
    q,
    k,
    v,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    *,
    scale=None,
    enable_gqa=False,
):
    if q.shape[:-3] == k.shape[:-3] and len(q.shape) >= 3 and q.shape[-3] != k.shape[-3]:
        if not enable_gqa:
            raise FusionError(
                f"scaled_dot_product_attention: query has {q.shape[-3]} heads, key "
                f"{k.shape[-3]}; pass enable_gqa=True for grouped-query attention"
            )
        k, v = (_repeat_heads(t, q.shape[-3]) for t in (k, v))
    seed = imp.seed
    if attn_mask is None:
        offset = imp.offset() if dropout_p > 0 else 0
        out, _ = ops.sdpa(
            q, k, v, dropout_p=dropout_p, is_causal=is_causal, scale=scale, seed=seed, offset=offset
        )
        return out
    if is_causal:
        raise FusionError(
            "scaled_dot_product_attention: attn_mask and is_causal together (torch refuses "
            "them too); put the causal mask into attn_mask"
        )
    return _masked_attention(imp, q, k, v, attn_mask, dropout_p, scale)


def _repeat_heads(t: TensorView, heads: int) -> TensorView:
    """[..., Hkv, S, E] -> [..., heads, S, E], each kv head serving heads / Hkv query
    heads in order (torch's enable_gqa)."""
    *batch, hkv, s, e = t.shape
    group = heads // hkv
    grown = ops.expand(ops.unsqueeze(t, -3), [*batch, hkv, group, s, e])
    return ops.reshape(grown, [*batch, heads, s, e])


def _masked_attention(imp: Importing, q, k, v, mask, dropout_p, scale) -> TensorView:
    """softmax(q k^T scale + mask) v in float32 for half inputs, as torch's math path."""
    dtype = q.dtype
    q, k, v = (_in_float(t) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = ops.mul(ops.matmul(q, ops.transpose(k, -1, -2)), scale)
    if mask.dtype is DType.bool:
        scores = ops.where(mask, scores, -INF)
    else:
        scores = ops.add(scores, _in_float(mask))
    p = ops.softmax(scores, -1)
    if dropout_p > 0:
        p = ops.dropout(p, dropout_p, seed=imp.seed, offset=imp.offset())
    return _back(ops.matmul(p, v), dtype)


# -- dropout -------------------------------------------------------------------------------
@aten(
    "aten.dropout.default",
    becomes="nothing in eval mode (train=False or p=0); else `dropout` (fuserlite's Philox "
    "mask, not torch's)",
)
def _dropout(imp: Importing, x, p, train):
    if not train or p == 0:
        return x
    return ops.dropout(x, p, seed=imp.seed, offset=imp.offset())


# -- views and movement ------------------------------------------------------------------
@aten(
    "aten.view.default",
    "aten.reshape.default",
    "aten._unsafe_view.default",
    becomes="`reshape(x, shape)`",
)
def _view(imp: Importing, x, shape):
    return ops.reshape(x, list(shape))


@aten("aten.transpose.int", becomes="`transpose(x, dim0, dim1)` (a permute)")
def _transpose(imp: Importing, x, dim0, dim1):
    return ops.transpose(x, dim0, dim1)


@aten("aten.permute.default", becomes="`permute(x, dims)`")
def _permute(imp: Importing, x, dims):
    return ops.permute(x, list(dims))


@aten(
    "aten.contiguous.default",
    "aten.clone.default",
    "aten.alias.default",
    "aten.detach.default",
    "aten.lift_fresh_copy.default",
    becomes="x itself (fuserlite's tensors are values: no layout, no aliasing)",
)
def _same(imp: Importing, x, *_, **__):
    return x


@aten("aten.unsqueeze.default", becomes="`unsqueeze(x, dim)` (a broadcast)")
def _unsqueeze(imp: Importing, x, dim):
    return ops.unsqueeze(x, dim)


@aten(
    "aten.squeeze.dim",
    "aten.squeeze.dims",
    "aten.squeeze.default",
    becomes="`squeeze(x, dims)` of the dims of extent 1",
)
def _squeeze(imp: Importing, x, dims=None):
    axes = [d for d in _dims(x, dims) if x.shape[d] == 1]
    return ops.squeeze(x, axes) if axes else x


@aten("aten.expand.default", becomes="`expand(x, shape)` (new leading axes broadcast first)")
def _expand(imp: Importing, x, size, implicit=False):
    size = list(size)
    extra = len(size) - len(x.shape)
    if extra:
        x = ops.broadcast(x, [True] * extra + [False] * len(x.shape))
    want = [x.shape[k] if s == -1 else s for k, s in enumerate(size)]
    return x if want == list(x.shape) else ops.expand(x, want)


@aten("aten.flatten.using_ints", becomes="`flatten(x, start_dim, end_dim)`")
def _flatten(imp: Importing, x, start_dim=0, end_dim=-1):
    return ops.flatten(x, start_dim, end_dim)


@aten("aten.unflatten.int", becomes="`reshape` of one axis into `sizes`")
def _unflatten(imp: Importing, x, dim, sizes):
    d = dim % len(x.shape)
    sizes = list(sizes)
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = x.shape[d] // known
    return ops.reshape(x, [*x.shape[:d], *sizes, *x.shape[d + 1 :]])


@aten("aten.split.Tensor", becomes="`split(x, sizes, dim)` (slices)")
def _split(imp: Importing, x, split_size, dim=0):
    extent = x.shape[dim % len(x.shape)]
    sizes = [min(split_size, extent - s) for s in range(0, extent, split_size)]
    return ops.split(x, sizes, dim)


@aten("aten.split_with_sizes.default", becomes="`split(x, sizes, dim)` (slices)")
def _split_sizes(imp: Importing, x, sizes, dim=0):
    return ops.split(x, list(sizes), dim)


@aten("aten.chunk.default", becomes="`chunk(x, chunks, dim)` (slices)")
def _chunk(imp: Importing, x, chunks, dim=0):
    return ops.chunk(x, chunks, dim)


@aten("aten.unbind.int", becomes="`select` of each index")
def _unbind(imp: Importing, x, dim=0):
    d = dim % len(x.shape)
    return tuple(ops.select(x, d, i) for i in range(x.shape[d]))


@aten("aten.cat.default", becomes="`cat(tensors, dim)`")
def _cat(imp: Importing, tensors, dim=0):
    return ops.cat(list(tensors), dim)


@aten("aten.stack.default", becomes="`cat` of each tensor unsqueezed at dim")
def _stack(imp: Importing, tensors, dim=0):
    return ops.cat([ops.unsqueeze(t, dim) for t in tensors], dim)


@aten("aten.slice.Tensor", becomes="`slice` on one axis (the whole axis: x itself)")
def _slice(imp: Importing, x, dim=0, start=None, end=None, step=1):
    d = dim % len(x.shape)
    n = x.shape[d]
    lo = 0 if start is None else (start + n if start < 0 else start)
    hi = n if end is None else (end + n if end < 0 else end)
    lo, hi = max(0, min(lo, n)), max(0, min(hi, n))
    if (lo, hi, step) == (0, n, 1):
        return x
    if lo >= hi:
        raise FusionError(
            f"slice of {x.name} axis {d} [{start}:{end}] is empty; fuserlite has no empty tensors"
        )
    starts = [lo if k == d else 0 for k in range(len(x.shape))]
    stops = [hi if k == d else e for k, e in enumerate(x.shape)]
    steps = [step if k == d else 1 for k in range(len(x.shape))]
    return ops.slice(x, starts, stops, steps)


@aten("aten.select.int", becomes="`select(x, dim, index)`")
def _select(imp: Importing, x, dim, index):
    return ops.select(x, dim, index)


@aten("aten.embedding.default", becomes="`embedding(weight, indices)`")
def _embedding(imp: Importing, weight, indices, padding_idx=-1, scale_grad_by_freq=False, *_):
    if padding_idx is not None and padding_idx >= 0:
        raise FusionError(
            f"embedding with padding_idx={padding_idx}: padding_idx changes only the gradient "
            "(torch gives that row none), and fuserlite's embedding has no padding row, so "
            "fl.grad would give it one; construct the Embedding without padding_idx"
        )
    if scale_grad_by_freq:
        raise FusionError("embedding with scale_grad_by_freq=True: fuserlite has no such gradient")
    return ops.embedding(weight, indices)


@aten("aten.index_select.default", becomes="`embedding` of x's axis dim (a permute around it)")
def _index_select(imp: Importing, x, dim, index):
    d = dim % len(x.shape)
    if d == 0:
        return ops.embedding(x, index)
    order = [d, *[k for k in range(len(x.shape)) if k != d]]
    picked = ops.embedding(ops.permute(x, order), index)  # [index, the rest in order]
    back = [*range(1, d + 1), 0, *range(d + 1, len(x.shape))]
    return ops.permute(picked, back)


# -- casts ---------------------------------------------------------------------------------
def _to(x: TensorView, dtype) -> TensorView:
    return x if dtype is None or dtype is x.dtype else ops.cast(x, dtype)


@aten("aten.to.dtype", becomes="`cast(x, dtype)` (to its own dtype: x)")
def _to_dtype(imp: Importing, x, dtype, *_, **__):
    return _to(x, dtype)


@aten(
    "aten._to_copy.default",
    "aten.to.dtype_layout",
    becomes="`cast(x, dtype)` (no dtype: x; devices and layouts are fuserlite's own)",
)
def _to_copy(imp: Importing, x, *, dtype=None, **__):
    return _to(x, dtype)


@aten("aten.to.device", becomes="`cast(x, dtype)`")
def _to_device(imp: Importing, x, device, dtype, *_, **__):
    return _to(x, dtype)


@aten("aten.type_as.default", becomes="`cast(x, other's dtype)`")
def _type_as(imp: Importing, x, other):
    return _to(x, other.dtype)


# -- reductions ----------------------------------------------------------------------------
@aten("aten.sum.dim_IntList", "aten.sum.default", becomes="`sum(x, dims, keepdim)`")
def _sum(imp: Importing, x, dim=None, keepdim=False, *, dtype=None):
    return ops.sum(_to(x, dtype), _dims(x, dim), keepdim=keepdim)


@aten(
    "aten.mean.dim",
    "aten.mean.default",
    becomes="`sum` times 1/n (half and bfloat16 in float32)",
)
def _mean(imp: Importing, x, dim=None, keepdim=False, *, dtype=None):
    x = _to(x, dtype)
    axes = _dims(x, dim)
    n = math.prod(x.shape[a] for a in axes)
    total = ops.sum(_in_float(x), axes, keepdim=keepdim)
    return _back(ops.mul(total, 1.0 / n), x.dtype)


@aten("aten.amax.default", becomes="`max(x, dims, keepdim)`")
def _amax(imp: Importing, x, dim=(), keepdim=False):
    return ops.max(x, _dims(x, dim), keepdim=keepdim)


@aten(
    "aten.var_mean.correction",
    becomes="`var_mean(x, dims, correction)` (half and bfloat16 in float32)",
)
def _var_mean(imp: Importing, x, dim=None, *, correction=None, keepdim=False):
    correction = 1 if correction is None else correction
    var, mean = ops.var_mean(_in_float(x), _dims(x, dim), correction=correction, keepdim=keepdim)
    return _back(var, x.dtype), _back(mean, x.dtype)


@aten("aten.var.correction", becomes="the variance of `var_mean`")
def _var(imp: Importing, x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(imp, x, dim, correction=correction, keepdim=keepdim)[0]


@aten("aten.var.dim", becomes="the variance of `var_mean` (unbiased: correction 1)")
def _var_dim(imp: Importing, x, dim=None, unbiased=True, keepdim=False):
    return _var(imp, x, dim, correction=int(unbiased), keepdim=keepdim)


# -- made from a tensor's shape ------------------------------------------------------------
@aten("aten.zeros_like.default", becomes="zeros of x's shape (an iota of step 0, expanded)")
def _zeros_like(imp: Importing, x, *, dtype=None, **__):
    return full(x, x.shape, 0.0, dtype or x.dtype)


@aten("aten.ones_like.default", becomes="ones of x's shape (an iota of step 0, expanded)")
def _ones_like(imp: Importing, x, *, dtype=None, **__):
    return full(x, x.shape, 1.0, dtype or x.dtype)


@aten("aten.full_like.default", becomes="`value` of x's shape (an iota of step 0, expanded)")
def _full_like(imp: Importing, x, fill_value, *, dtype=None, **__):
    return full(x, x.shape, fill_value, dtype or x.dtype)


def _new_filled(value: float) -> Builder:
    return lambda imp, x, size, *, dtype=None, **__: full(x, list(size), value, dtype or x.dtype)


for _name, _value in (("new_zeros", 0.0), ("new_ones", 1.0)):
    aten(
        f"aten.{_name}.default",
        becomes=f"{_value:g} in a tensor of `size`, in x's dtype (an iota of step 0, expanded)",
    )(_new_filled(_value))


@aten("aten.new_full.default", becomes="`fill_value` in a tensor of `size` (an iota of step 0)")
def _new_full(imp: Importing, x, size, fill_value, *, dtype=None, **__):
    return full(x, list(size), fill_value, dtype or x.dtype)


def outputs_of(value: object) -> Sequence[object]:
    """A row's value as a sequence (a tuple's items, or the one value)."""
    return value if isinstance(value, tuple) else (value,)
