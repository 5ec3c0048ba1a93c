"""numpy reference for scaled-dot-product attention, forward and backward.

The contract is nvFuser's SdpaFwdOp / SdpaBwdOp (csrc/ir/composite_nodes.h), that
is torch's _scaled_dot_product_flash_attention and its backward:

    query [..., L, E], key [..., S, E], value [..., S, Ev]   (batch axes: N, H, ...)
    sdpa_fwd -> output [..., L, Ev] (query's dtype), logsumexp [..., L] (float32;
                float64 for float64 inputs), philox_seed: uint64[2] = (seed, offset),
                philox_offset: an unused 0-d uint64 (torch >= 2.7's layout)
    sdpa_bwd -> grad_query, grad_key, grad_value (the shapes and dtypes of q, k, v)

scale defaults to 1 / sqrt(E); is_causal masks key s for query l where s > l
(torch's top-left aligned tril); dropout keeps probability p[..., l, s] where the
Philox draw at its global linear index in the [..., L, S] tensor is below
1 - dropout_p (see philox.keep_mask), so the backward regenerates the same mask from
(seed, offset). torch's flash kernel draws its own mask, which nvFuser does not
control; fuserlite's is defined by this index, which is what makes a sharded
attention draw the unsharded mask.

A `Block` of the [..., L, S] probabilities runs one device's shard: its batch or
head start and its query rows' start (the causal diagonal and the dropout indices
follow the global coordinates). Keys and values must be whole (start 0, all of S):
a sharded key/value sequence needs a softmax combined across devices, which this
reference does not do.
"""

from __future__ import annotations

import math

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.numerics.nn import compute_dtype
from fuserlite.numerics.philox import Block, Dropout, check_seed, dropout_scale, keep_mask


def _check(q: np.ndarray, k: np.ndarray, v: np.ndarray, op: str) -> tuple[int, ...]:
    """The [..., L, S] shape of the probabilities; a clear error for mismatched operands."""
    shapes = f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)}"
    if not q.ndim == k.ndim == v.ndim or q.ndim < 2:
        raise ExecutionError(f"{op}: query, key and value need one rank >= 2; got {shapes}")
    if q.shape[-1] != k.shape[-1]:
        raise ExecutionError(
            f"{op}: query and key head dims differ ({q.shape[-1]} vs {k.shape[-1]}); {shapes}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ExecutionError(
            f"{op}: key and value sequence lengths differ ({k.shape[-2]} vs {v.shape[-2]}); "
            f"{shapes}"
        )
    if not q.dtype == k.dtype == v.dtype:
        raise ExecutionError(
            f"{op}: query, key and value dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})"
        )
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ExecutionError(f"{op}: the batch axes do not broadcast; {shapes}") from None
    return (*batch, q.shape[-2], k.shape[-2])


def _flags(op: str, dropout_p: float, is_causal: bool) -> None:
    if not isinstance(is_causal, (bool, np.bool_)):
        raise ExecutionError(f"{op}: is_causal must be a bool, got {is_causal!r}")
    if isinstance(dropout_p, bool) or not 0.0 <= float(dropout_p) <= 1.0:
        raise ExecutionError(f"{op}: dropout_p must be in [0, 1], got {dropout_p!r}")


def _block(op: str, block: Block | None, shape: tuple[int, ...]) -> Block:
    block = block or Block.whole(shape)
    if len(block.shape) != len(shape) or block.start[-1] != 0 or block.shape[-1] != shape[-1]:
        raise ExecutionError(
            f"{op}: the block {list(block.start)} of {list(block.shape)} must span the whole "
            f"key/value sequence ({shape[-1]}) in a {len(shape)}-d [..., L, S] tensor; "
            "reshard key and value to replicate their sequence axis"
        )
    return block


class _Probabilities:
    """softmax(scale q k^T, causal) recomputed from (q, k), and the dropout mask (or the
    `dropout` function that applies it, which draws no mask here)."""

    def __init__(
        self, q, k, shape, dropout_p, is_causal, scale, seed, offset, block, op, dropout=None
    ):
        self.shape = shape
        self.block = _block(op, block, shape)
        self.c = compute_dtype(q.dtype)
        self.q, self.k = q.astype(self.c, copy=False), k.astype(self.c, copy=False)
        self.scale = self.c.type(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
        scores = self.q @ np.swapaxes(self.k, -1, -2)
        np.multiply(scores, self.scale, out=scores)  # in place: the same products
        if is_causal:
            rows = self.block.start[-2] + np.arange(self.shape[-2])
            allowed = np.arange(self.shape[-1])[None, :] <= rows[:, None]
            np.copyto(scores, -np.inf, where=~allowed)
        self.scores = scores
        self.keep, self.dropout, self.drop = None, dropout, None
        if dropout_p > 0:
            self.drop = (float(dropout_p), *check_seed(seed, offset))
            if dropout is None:  # numpy's: the mask, drawn once for every use
                index = self.block.index(self.shape)
                self.keep = keep_mask(float(dropout_p), seed, offset, index, self.c)
            else:
                self.block.check(self.shape)

    def dropped(self, p: np.ndarray) -> np.ndarray:
        """p * mask / (1 - dropout_p): what multiplies the values."""
        if self.drop is None:
            return p
        if self.keep is None:
            return self.dropout(p, *self.drop, self.block)
        scale = dropout_scale(self.drop[0], p.dtype)
        return np.where(self.keep, p * scale, np.zeros((), p.dtype))


def probabilities(
    q: np.ndarray,
    k: np.ndarray,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    seed: int = 0,
    offset: int = 0,
    block: Block | None = None,
) -> tuple[np.ndarray, np.ndarray | float, float]:
    """(p, factor, scale): the softmax probabilities [..., L, S], what dropout multiplies
    them by (mask / (1 - dropout_p), or 1) and the score scale; for error bounds."""
    shape = (*np.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2])
    probs = _Probabilities(q, k, shape, dropout_p, is_causal, scale, seed, offset, block, "sdpa")
    e = np.exp(probs.scores - np.max(probs.scores, axis=-1, keepdims=True))
    p = e / np.sum(e, axis=-1, keepdims=True)
    return p, probs.dropped(np.ones_like(p)), float(probs.scale)


def sdpa_fwd(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    *,
    seed: int = 0,
    offset: int = 0,
    block: Block | None = None,
    dropout: Dropout | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(output, logsumexp, philox_seed, philox_offset) of attention, see the module;
    `dropout` applies the mask as philox.apply_dropout does (default: that, in numpy)."""
    _flags("sdpa_fwd", dropout_p, is_causal)
    shape = _check(q, k, v, "sdpa_fwd")
    probs = _Probabilities(
        q, k, shape, dropout_p, is_causal, scale, seed, offset, block, "sdpa_fwd", dropout
    )
    m = np.max(probs.scores, axis=-1, keepdims=True)  # finite: key 0 is never masked
    e = np.subtract(probs.scores, m, out=probs.scores)  # in place: not read again
    np.exp(e, out=e)
    total = np.sum(e, axis=-1, keepdims=True)
    logsumexp = m + np.log(total)
    out = probs.dropped(np.divide(e, total, out=e)) @ v.astype(probs.c, copy=False)
    rng = np.array([seed, offset], np.uint64)
    return out.astype(q.dtype), logsumexp[..., 0], rng, np.zeros((), np.uint64)


def sdpa_bwd(
    grad_out: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    out: np.ndarray,
    logsumexp: np.ndarray,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    philox_seed: np.ndarray | None = None,
    philox_offset: np.ndarray | None = None,
    scale: float | None = None,
    *,
    block: Block | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grad_query, grad_key, grad_value) of attention (nvFuser's sdpa_bwd argument
    order); the probabilities are recomputed from logsumexp and the dropout mask from
    philox_seed = (seed, offset). With `block` a query shard, grad_key and grad_value
    are this shard's partial sums: adding them over the shards gives the whole."""
    _flags("sdpa_bwd", dropout_p, is_causal)
    shape = _check(q, k, v, "sdpa_bwd")
    want = (*shape[:-1], v.shape[-1])
    if grad_out.shape != want or out.shape != want or logsumexp.shape != shape[:-1]:
        raise ExecutionError(
            f"sdpa_bwd: grad_output {list(grad_out.shape)} and output {list(out.shape)} must "
            f"be {list(want)} and logsumexp {list(logsumexp.shape)} {list(shape[:-1])}"
        )
    seed, offset = 0, 0
    if dropout_p > 0:
        if philox_seed is None or np.shape(philox_seed) != (2,):
            raise ExecutionError(
                "sdpa_bwd: dropout needs philox_seed, the (seed, offset) pair sdpa_fwd returned"
            )
        seed, offset = (int(x) for x in np.asarray(philox_seed, np.uint64))
    probs = _Probabilities(
        q, k, shape, dropout_p, is_causal, scale, seed, offset, block, "sdpa_bwd"
    )
    c = probs.c
    dout, vc = grad_out.astype(c), v.astype(c)
    p = np.exp(probs.scores - logsumexp.astype(c)[..., None])  # masked keys: exp(-inf) = 0
    grad_v = np.swapaxes(probs.dropped(p), -1, -2) @ dout
    grad_p = probs.dropped(dout @ np.swapaxes(vc, -1, -2))
    # sum_s p * grad_p = sum_e dout * out: the softmax's own term
    grad_scores = p * (grad_p - np.sum(dout * out.astype(c), axis=-1, keepdims=True))
    grad_q = (grad_scores @ probs.k) * probs.scale
    grad_k = (np.swapaxes(grad_scores, -1, -2) @ probs.q) * probs.scale
    return tuple(
        _unbroadcast(g, t.shape).astype(t.dtype) for g, t in ((grad_q, q), (grad_k, k), (grad_v, v))
    )


def _unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """g summed over the batch axes its operand was broadcast along."""
    axes = tuple(a for a, (n, m) in enumerate(zip(shape, g.shape)) if n == 1 and m != 1)
    return np.sum(g, axis=axes, keepdims=True) if axes else g
