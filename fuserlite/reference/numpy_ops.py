"""numpy semantics of every compute expression, shared by the reference evaluator,
the per-device executor (which passes local shapes) and the kernel runner.

Values are computed in their dtype's compute dtype (DType.compute: half in
float, as nvFuser's kernels do) and rounded to the storage dtype only where they
are stored (`store`): at kernel outputs in the executor, at the fusion's outputs
in the reference.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ReductionOpType
from fuserlite.numerics import attention, casts, nn, philox
from fuserlite.numerics.casts import identity
from fuserlite.numerics.erf import erf
from fuserlite.numerics.philox import Block
from fuserlite.ops.reductions import reduced_axes
from fuserlite.ops.registry import (
    Category,
    compute_dtype,
    definition_of,
    operand_to_output,
    positional,
)

BLOCK = 1 << 18  # elements a pass over a whole array takes at a time


def blocks(size: int, block: int = BLOCK) -> Iterator[slice]:
    """Slices of `block` elements covering range(size): a pass over an array of GiBs
    that needs temporaries (float64 copies, random draws) keeps them a few MiB."""
    return (slice(start, start + block) for start in range(0, size, block))


def _gelu(x: np.ndarray) -> np.ndarray:
    c = np.asarray(math.sqrt(2.0 / math.pi), dtype=x.dtype)
    return 0.5 * x * (1.0 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x * x * x)))


GEMM_ROWS = 256  # rows of each BLAS call of a product with long rows (gemm_rows)
SHORT_GEMM_ROWS = 32  # ... and of one with short rows
SHORT_ROW = 1 << 14  # k * n below which a product's rows are short


def rows_per_call(k: int, n: int) -> int:
    """The rows of every BLAS call of an [m, k] @ [k, n] product, whatever m: a function of
    the row's shape alone, so that a chunk of the rows makes calls of the shape the whole
    makes. Long rows amortise BLAS's packing of b over 256 rows (32-row calls cost 1.8x
    at 4096 x 4096 x 1024); short ones (a device's 32 x 64 x 8 in the example block)
    pad a few rows to 32, not 256 (a 256-row call cost 3-7x the plain product there)."""
    return GEMM_ROWS if k * n >= SHORT_ROW else SHORT_GEMM_ROWS


def gemm_rows(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """a[..., m, k] @ b[..., k, n] (the leading axes broadcast, as np.matmul's) as BLAS
    calls of exactly rows_per_call(k, n) rows each, the last of each product padded with
    zero rows: a row's value does not depend on how many rows are computed with it, so a
    chunk of rows (a Stream loop's, a device's) has the bits of the same rows of the whole
    product. Every product's calls are made by one np.matmul (a call per leading index
    and block of rows), its tails by one more: no Python loop over the products.

    numpy's BLAS picks its kernel by the call's shape (a matrix-vector one for one row,
    a small-matrix one below a size, a threaded one above), and those round a row's sum
    differently; a call of one shape always takes one path, whatever rows it holds
    (tests/test_gemm_rows.py). `out`: an array to write into, of the broadcast shape or
    with more leading axes (each then gets the product: the executor's devices that
    share both operands); each [m, n] product of it BLAS-writable (unit stride along n,
    as a C-contiguous array's)."""
    *_, m, k = a.shape
    n = b.shape[-1]
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if out is None:
        out = np.empty((*lead, m, n), np.result_type(a, b))
    rows = rows_per_call(k, n)
    full = m - m % rows
    per = b[..., None, :, :]  # the same b for every block of a product's rows
    if full:  # splitting the row axis into blocks: a view, of a and of out
        blocks = a[..., :full, :].reshape(*a.shape[:-2], full // rows, rows, k)
        into = out[..., :full, :].reshape(*out.shape[:-2], full // rows, rows, n)
        np.matmul(blocks, per, out=into)
    if full < m:
        tail = np.zeros((*a.shape[:-2], rows, k), a.dtype)
        tail[..., : m - full, :] = a[..., full:, :]
        out[..., full:, :] = np.matmul(tail, b)[..., : m - full, :]
    return out


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b, each product's rows in BLAS calls of rows_per_call rows (gemm_rows).

    numpy runs [..., m, k] @ [k, n] as one GEMM per leading index; one
    [(...) * m, k] @ [k, n] product is faster, most of all on a device's small shards.
    A vector b is one column and a vector a one row, in the same calls (numpy's
    matrix-vector ones round otherwise)."""
    if b.ndim == 1:
        return _matmul(a, b[:, None])[..., 0]
    if a.ndim == 1:
        return _matmul(a[None], b)[..., 0, :]
    k = a.shape[-1]
    if b.ndim == 2:
        rows = math.prod(a.shape[:-1])  # not -1: a device's empty chunk of k has no rows to infer
        return gemm_rows(a.reshape(rows, k), b).reshape(*a.shape[:-1], b.shape[-1])
    return gemm_rows(a, b)  # a batch of products: each one's rows in blocks of rows_per_call


def _linear(x: np.ndarray, w: np.ndarray, *bias: np.ndarray) -> np.ndarray:
    """x[..., k] @ w[wbatch..., n, k]^T (+ bias[wbatch..., n]) -> [wbatch..., ..., n]:
    one GEMM against all the weight's rows, its batch axes then moved to the front."""
    wbatch, n = w.shape[:-2], w.shape[-2]
    rows = math.prod(w.shape[:-1])  # not -1: an empty chunk of k has no rows to infer
    out = _matmul(x, w.reshape(rows, w.shape[-1]).T).reshape(*x.shape[:-1], *wbatch, n)
    xb = x.ndim - 1
    if wbatch:  # np.moveaxis costs microseconds even when it moves nothing
        out = np.moveaxis(out, range(xb, xb + len(wbatch)), range(len(wbatch)))
    return out + bias[0].reshape(*wbatch, *[1] * xb, n) if bias else out


def _same(x: np.ndarray) -> np.ndarray:
    return x


def _cast(expr: Expr, x: np.ndarray) -> np.ndarray:
    """x (in its own dtype) converted to the cast's dtype, rounded once."""
    return casts.cast(x, expr.attrs["dtype"].numpy)


def _rand_like(expr: Expr, index: np.ndarray) -> np.ndarray:
    """rand_like's Philox numbers at the given global linear indices."""
    return philox.uniform(expr.attrs["seed"], expr.attrs["offset"], index, expr.output.dtype.numpy)


def _iota(expr: Expr, index: np.ndarray) -> np.ndarray:
    """iota's start + step * i at the given global indices, in its compute dtype."""
    dtype = expr.output.dtype.compute.numpy
    start, step = (np.asarray(x, dtype) for x in expr.operands())
    return start + step * index.astype(dtype)


def _row_indices(expr: Expr, indices: np.ndarray, rows: int) -> np.ndarray:
    """Integer indices as int64, each checked to name one of `rows` rows (torch's
    IndexError), on every device: a shard's rows are not all the tensor's."""
    idx = np.asarray(indices).astype(np.int64, copy=False)
    bad = idx[(idx < 0) | (idx >= rows)] if idx.size else idx
    if bad.size:
        raise ExecutionError(
            f"{expr.op_name}: index {int(bad.flat[0])} of {expr.inputs[1].name} is out of range "
            f"for {rows} rows (0..{rows - 1})"
        )
    return idx


def _embedding(expr: Expr, operands, shape: tuple[int, ...], start: tuple[int, ...]):
    """The rows of this device's block of weight at the indices (zeros for the rows
    other devices hold: a partial sum over rV, whose global start is start[-1])."""
    weight, indices = operands
    idx = _row_indices(expr, indices, expr.inputs[0].shape[0])
    first = start[-1] if len(start) == len(expr.output.domain.logical) else 0
    local = idx - first
    held = (local >= 0) & (local < weight.shape[0])
    dtype = expr.output.dtype.compute.numpy
    if not weight.shape[0]:  # an empty chunk of the vocabulary: no row here
        return np.zeros(shape, dtype)
    out = np.take(weight, np.where(held, local, 0), axis=0).astype(dtype, copy=False)
    return np.where(held.reshape(held.shape + (1,) * (weight.ndim - 1)), out, dtype.type(0))


def _embedding_backward(expr: Expr, operands, shape: tuple[int, ...]):
    """Each row v of the output: the sum of the gradient rows whose index is v."""
    grad, indices = operands
    idx = _row_indices(expr, indices, expr.attrs["num_weights"])
    dtype = expr.output.dtype.compute.numpy
    out = np.zeros((expr.attrs["num_weights"], *grad.shape[1:]), dtype)
    np.add.at(out, idx, grad.astype(dtype, copy=False))
    return out


def _flags(expr: Expr) -> dict:
    a = expr.attrs
    return {"dropout_p": a["dropout_p"], "is_causal": a["is_causal"], "scale": a["scale"]}


def probabilities_block(expr: Expr, start: tuple[int, ...]) -> Block:
    """The block of the [..., L, S] probabilities a device computes: its batch and query
    rows (from its first output's start), every key."""
    q, k = expr.inputs[1:3] if expr.op_name == "sdpa_bwd" else expr.inputs[:2]
    return Block((*q.shape[:-1], k.shape[-2]), (*start[:-1], 0))


def _grouped_mm(expr: Expr, operands, shape: tuple[int, ...], start: tuple[int, ...]):
    """This device's block of grouped_mm: each of its rows (global row start[0] + r) by
    its group's matrix, or each group's k range; rows past the last offset are 0."""
    a, b, offsets = operands
    ends = offsets.astype(np.int64)
    extent = expr.inputs[0].shape[0] if b.ndim == 3 else expr.inputs[0].shape[1]
    if np.any(np.diff(ends) < 0) or (ends.size and (ends[0] < 0 or ends[-1] > extent)):
        raise ExecutionError(
            f"{expr!r}: offsets {ends.tolist()} must be non-decreasing ends of the groups "
            f"in 0..{extent}"
        )
    out = np.zeros(shape, np.result_type(a, b))
    if b.ndim == 3:
        group = np.searchsorted(ends, start[0] + np.arange(a.shape[0]), side="right")
        for g in np.unique(group[group < len(ends)]):
            rows = group == g
            out[rows] = a[rows] @ b[g]
        return out
    for g, (lo, hi) in enumerate(zip([0, *ends[:-1]], ends)):
        out[g] = a[:, lo:hi] @ b[lo:hi]
    return out


def _sdpa(expr: Expr, operands, shape: tuple[int, ...], start: tuple[int, ...]):
    """(output, logsumexp) of this device's query rows."""
    return sdpa_block(expr, operands, start)


def sdpa_block(
    expr: Expr,
    operands: list[np.ndarray],
    start: tuple[int, ...],
    dropout: philox.Dropout | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(output, logsumexp) of an sdpa expression on the query rows whose output starts at
    global `start`; `dropout` applies its mask (default: numpy's, philox.apply_dropout)."""
    a = expr.attrs
    out, lse, _, _ = attention.sdpa_fwd(
        *operands,
        **_flags(expr),
        seed=a["seed"],
        offset=a["offset"],
        block=probabilities_block(expr, start),
        dropout=dropout,
    )
    return out, lse


def _sdpa_bwd(expr: Expr, operands, shape: tuple[int, ...], start: tuple[int, ...]):
    """The gradients of this device's query rows (grad_key, grad_value: their partial sums)."""
    rng = np.array([expr.attrs["seed"], expr.attrs["offset"]], np.uint64)
    return attention.sdpa_bwd(
        *operands, **_flags(expr), philox_seed=rng, block=probabilities_block(expr, start)
    )


# One row per op. A pointwise op's row computes elementwise from operands that are
# already laid out on its output's points (operands() order, scalars as 0-d arrays),
# in the output's compute dtype; a conversion's row (OpDef.converts) takes
# (expr, operands in their own dtypes); an indexed pointwise op's row (OpDef.indexed)
# takes (expr, the global linear index of each point); any other op's row takes (expr,
# operand arrays, output shape), an indexed one's (sdpa's) also the global coordinates
# of its first output's first element.
Row = Callable[..., np.ndarray]
NUMPY: dict[str, Row] = {
    "set": _same,
    "broadcast": _same,  # its operand is laid out on the output's axes: a copy
    "permute": _same,  # likewise, transposed by its axis map
    "neg": np.negative,
    "exp": np.exp,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "abs": np.abs,
    "gelu": _gelu,
    "erf": erf,
    "sqrt": np.sqrt,
    "log": np.log,
    "sigmoid": nn.sigmoid,
    "silu": nn.silu,
    "sin": np.sin,
    "cos": np.cos,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)),  # 1 / sqrt(x), each rounded, as in C
    "where": lambda c, a, b: np.where(c != 0, a, b),  # c arrives in the output's type
    "cast": _cast,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.true_divide,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "lt": np.less,
    "rand_like": _rand_like,
    "rand": _rand_like,  # the same numbers, with no operand to read
    "iota": _iota,
    "sdpa": _sdpa,
    "sdpa_bwd": _sdpa_bwd,
    # Reductions accumulate in the compute dtype: half sums in float, bool counts in int64.
    "sum": lambda e, a, shape: np.sum(a[0], axis=reduced_axes(e)),
    # A device's empty chunk of a sharded axis has the identity as its partial maximum.
    "max": lambda e, a, shape: np.max(
        a[0], axis=reduced_axes(e), initial=identity(a[0].dtype, ReductionOpType.max)
    ),
    "min": lambda e, a, shape: np.min(
        a[0], axis=reduced_axes(e), initial=identity(a[0].dtype, ReductionOpType.min)
    ),
    "expand": lambda e, a, shape: np.broadcast_to(a[0], shape),
    "reshape": lambda e, a, shape: a[0].reshape(shape),
    "take": lambda e, a, shape: np.take(a[0], e.attrs["indices"], axis=0),
    "squeeze": lambda e, a, shape: a[0].reshape(shape),
    "select": lambda e, a, shape: np.take(a[0], e.attrs["index"], axis=e.attrs["axis"]),
    "slice": lambda e, a, shape: a[0][tuple(slice(*r) for r in e.attrs["ranges"])],
    "cat": lambda e, a, shape: np.concatenate(a, axis=e.attrs["axis"]),
    "matmul": lambda e, a, shape: _matmul(*a),
    "linear": lambda e, a, shape: _linear(*a),
    "grouped_mm": _grouped_mm,
    "embedding": _embedding,
    "embedding_backward": _embedding_backward,
}


def store(tv: TensorView, value: np.ndarray) -> np.ndarray:
    """`value` rounded to tv's storage dtype, as when a kernel writes it to global memory."""
    return value.astype(tv.dtype.numpy, copy=False)


def _row(expr: Expr) -> Row:
    row = NUMPY.get(expr.op_name)
    if row is None:
        raise ExecutionError(f"no numpy evaluation for expression {expr!r}")
    return row


def _laid_out(expr: Expr, position: int, value: np.ndarray) -> np.ndarray:
    """A pointwise operand's data on the output's data axes, through the op's axis map:
    its axes where they map (transposed into the output's order), extent 1 elsewhere."""
    out_data = {li: k for k, li in enumerate(expr.output.data_positions())}
    producer = expr.inputs[position]
    amap = operand_to_output(expr, position)
    try:
        target = [out_data[amap[li]] for li in producer.data_positions()]
    except KeyError:
        raise ExecutionError(
            f"{expr!r}: an axis of {producer.name} maps to no data axis of {expr.output.name}"
        ) from None
    order = sorted(range(len(target)), key=target.__getitem__)
    shape = [1] * len(out_data)
    for k, t in enumerate(target):
        shape[t] = value.shape[k]
    return value.transpose(order).reshape(shape)


def _operands(
    expr: Expr, args: list[np.ndarray], dtype: np.dtype, scalars: dict | None = None
) -> list[np.ndarray]:
    """operands() as arrays in `dtype`: the tensor arrays given, scalars as 0-d arrays
    in their places (`scalars`: values to take instead of the expression's own)."""
    operands = [a.astype(dtype, copy=False) for a in args]
    if scalars is None:
        scalars = getattr(expr, "scalars", {})  # only an Op takes scalars
    for k, x in scalars.items():
        operands.insert(k, np.asarray(x, dtype))
    return operands


def eval_expr(
    expr: Expr,
    args: list[np.ndarray],
    out_shape: tuple[int, ...],
    dtype: np.dtype | None = None,
    start: tuple[int, ...] | None = None,
) -> np.ndarray:
    """Evaluate one single-output expression on arrays (global or local shards); the
    result is in the output's compute dtype (see `store`), or in `dtype` if given.

    `start` is where the local array lies in the global tensor (its first element's
    global coordinates; None: at the origin), for the ops whose values depend on it."""
    return eval_outputs(expr, args, [out_shape], dtype, start)[0]


def eval_outputs(
    expr: Expr,
    args: list[np.ndarray],
    shapes: list[tuple[int, ...]],
    dtype: np.dtype | None = None,
    start: tuple[int, ...] | None = None,
) -> list[np.ndarray]:
    """eval_expr for an expression of one or more outputs: one array per output, of
    the shape `shapes` gives it (a row of several outputs returns a tuple); `start`
    places the first output."""
    d = definition_of(expr)
    row = _row(expr)
    first = tuple(shapes[0])
    if d.category is Category.POINTWISE and d.axis_map is not positional:
        args = [_laid_out(expr, k, a) for k, a in enumerate(args)]
    with np.errstate(all="ignore"):
        if d.converts and d.category is Category.POINTWISE:  # operands in their own dtypes
            out = row(expr, *args)
        elif d.indexed and d.category is Category.POINTWISE:
            out = row(expr, Block(expr.output.shape, _start(start, first)).index(first))
        elif d.category is Category.POINTWISE:
            out = row(*_operands(expr, args, _operand_dtype(expr, dtype)))
        else:
            operands = (
                list(args) if d.converts else _operands(expr, args, _operand_dtype(expr, dtype))
            )
            where = (_start(start, first),) if d.indexed else ()
            out = row(expr, operands, first, *where)
    values = out if isinstance(out, tuple) else (out,)
    if len(values) != len(expr.outputs) or len(shapes) != len(expr.outputs):
        raise ExecutionError(f"{expr!r} produced {len(values)} values for its outputs")
    results = []
    for tv, value, shape in zip(expr.outputs, values, shapes):
        want = tv.dtype.compute.numpy if dtype is None else dtype
        value = np.asarray(value).astype(want, copy=False)
        if value.shape != tuple(shape):
            raise ExecutionError(
                f"{expr!r} produced shape {value.shape}, expected {tuple(shape)} for {tv.name}"
            )
        results.append(value)
    return results


def stack_key(expr: Expr) -> tuple | None:
    """What evaluating `expr` in a stack of like expressions (eval_stacked) depends on but
    its scalars' values, its output's shape last; None unless it is a positional
    pointwise op of one output that takes scalars and no attributes. Expressions of one
    key read the very same tensors: they stack whatever their scalars."""
    if not getattr(expr, "scalars", None) or len(expr.outputs) != 1:
        return None
    d = definition_of(expr)
    if (
        d.category is not Category.POINTWISE
        or d.axis_map is not positional
        or d.converts
        or d.indexed
        or expr.attributes()
    ):
        return None
    out = expr.output
    return (
        expr.op_name,
        type(expr),
        tuple(map(id, expr.inputs)),
        tuple(expr.scalars),  # their positions
        None if d.compute is None else d.compute(expr),  # else the output dtype's
        out.dtype,
        out.shape,
    )


def eval_stacked(
    exprs: list[Expr], args: list[np.ndarray], out_shape: tuple[int, ...]
) -> list[np.ndarray]:
    """eval_expr of each of `exprs`, expressions of one stack_key (their scalars differ)
    reading `args`: one numpy step over a column of each scalar position's values, one
    row per expression, each the value its expression alone gives, element by element."""
    expr = exprs[0]
    dtype = _operand_dtype(expr, None)
    rank = max((a.ndim for a in args), default=0)  # the rows' rank, as a 0-d scalar leaves it
    column = (len(exprs),) + (1,) * rank
    with np.errstate(all="ignore"):
        scalars = {
            k: np.asarray([e.scalars[k] for e in exprs], dtype).reshape(column)
            for k in expr.scalars
        }
        out = _row(expr)(*_operands(expr, args, dtype, scalars))
    out = np.asarray(out).astype(expr.output.dtype.compute.numpy, copy=False)
    if out.shape != (len(exprs), *out_shape):
        raise ExecutionError(
            f"{expr!r} produced shape {out.shape[1:]}, expected {tuple(out_shape)} for "
            f"{expr.output.name}"
        )
    return [out[i, ...] for i in range(len(exprs))]  # arrays, 0-d ones too (not scalars)


def _operand_dtype(expr: Expr, dtype: np.dtype | None) -> np.dtype:
    """What an expression's operands are computed in: `dtype` if given, else its op's
    compute dtype (a comparison's operands in their own, not in bool)."""
    return compute_dtype(expr).numpy if dtype is None else dtype


def _start(start: tuple[int, ...] | None, shape: tuple[int, ...]) -> tuple[int, ...]:
    return (0,) * len(shape) if start is None else tuple(start)


def eval_at_points(
    expr: Expr,
    args: list[np.ndarray],
    index: np.ndarray | None = None,
    scalars: dict[int, np.ndarray] | None = None,
) -> np.ndarray:
    """Evaluate a pointwise expression on operand values already gathered at its
    output's points (the kernel runner's chunks); the result in the output's compute
    dtype. `index` is each point's global linear index, which an indexed op needs;
    `scalars`, per scalar position, values to take instead of the expression's own (a
    batch of expressions evaluated at once: a column, one row per expression)."""
    dtype = expr.output.dtype.compute.numpy
    d = definition_of(expr)
    with np.errstate(all="ignore"):
        if d.indexed:
            if index is None:
                raise ExecutionError(f"{expr!r} needs the global index of its points")
            out = _row(expr)(expr, index)
        elif d.converts:
            out = _row(expr)(expr, *args)
        else:
            out = _row(expr)(*_operands(expr, args, _operand_dtype(expr, None), scalars))
        return np.asarray(out).astype(dtype, copy=False)
