"""The rounding bounds of attention (fuserlite.reference.rounding's sdpa rows): how the
errors of q, k and v, and an attention's own rounding, reach its output and its
logsumexp (forward, in quadrature) and its gradients (backward, added up: an upper
bound)."""

from __future__ import annotations

import numpy as np

from fuserlite.ir.expr import Expr
from fuserlite.numerics import attention
from fuserlite.reference.numpy_ops import probabilities_block

F64 = np.dtype(np.float64)


def absolute(v) -> np.ndarray:
    """|v| as float64 (|int64 min| does not fit an int64)."""
    return np.abs(np.asarray(v, F64))


def swap_last(x: np.ndarray) -> np.ndarray:
    """x with its last two axes swapped (a batch of transposes)."""
    return np.swapaxes(x, -1, -2)


def weights(expr: Expr, q: np.ndarray, k: np.ndarray, start: tuple[int, ...] | None = None):
    """(p, factor, scale) of attention.probabilities for q's rows whose output starts at
    global `start` (None: all of them)."""
    a = expr.attrs
    block = None if start is None else probabilities_block(expr, start)
    p, factor, scale = attention.probabilities(
        q,
        k,
        a["dropout_p"],
        a["is_causal"],
        a["scale"],
        seed=a["seed"],
        offset=a["offset"],
        block=block,
    )
    return p.astype(F64), np.asarray(factor, F64), scale


Sigmas = tuple  # (sq, sk, sv, ss): the sigmas of q, k, v and of each score's own
QUERY_BLOCK = 1 << 20  # float64 elements of a block of the query term's [l, j, d] products


def sdpa_sigma(
    expr: Expr, vals, sources: list[Sigmas], start: tuple[int, ...] | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per source (sq, sk, sv, ss): (out, lse)'s sigma for sigmas sq, sk, sv of (q, k, v)
    and `ss` of each score of its own, in quadrature. out = sum_s D_s p_s v_s with
    p = softmax(s), s_s = scale q.k_s, so dout = sum_s c_s ds_s + sum_s D_s p_s dv_s,
    c_s = p_s (D_s v_s - out): a key's error and a score's own are independent from key
    to key, a query's is the same for every key of its row (summed before squaring);
    d lse = sum_s p_s ds_s. The probabilities are worked out once for all the sources;
    `start`: where the output's block lies (its dropout mask is the one drawn there)."""
    q, k, v = (np.asarray(x, F64) for x in vals[:3])
    p, factor, scale = weights(expr, q, k, start)
    pd = p * factor
    out = pd @ v
    pk = p @ k
    queries = [np.any(sq) for sq, *_ in sources]
    per_query = _query_terms(pd, v, k, out, pk, [x[0] for x, on in zip(sources, queries) if on])
    made = []
    for (sq, sk, sv, ss), on in zip(sources, queries):
        w = scale**2 * ((q**2) @ swap_last(np.asarray(sk) ** 2)) + np.asarray(ss) ** 2
        keys = (
            (pd**2 * w) @ v**2
            - 2 * out * ((p * pd * w) @ v)
            + out**2 * np.sum(p**2 * w, -1)[..., None]
        )
        query = scale**2 * per_query.pop(0) if on else 0.0
        sigma_out = np.sqrt(np.maximum(keys, 0) + query + (pd**2) @ np.asarray(sv) ** 2)
        lse = np.sum(p**2 * w, -1) + scale**2 * np.sum(np.asarray(sq) ** 2 * pk**2, -1)
        made.append((sigma_out, np.sqrt(lse)))
    return made


def _query_terms(pd, v, k, out, pk, sqs: list) -> list[np.ndarray]:
    """Per query sigma sq of `sqs`: sum_d sq[l, d]**2 a[l, j, d]**2, where a[l, j, d] =
    sum_s pd[l, s] v[s, j] k[s, d] - out[l, j] pk[l, d] is how out[l, j] moves with
    q[l, d]. a is a product through BLAS of pd with v (x) k, a block of rows l and keys s
    at a time (each attention of the batch alone): a few MiB, where a whole [..., L, Dv,
    Dk] (and an einsum of three operands, which numpy runs without BLAS) took minutes."""
    if not sqs:
        return []
    lead = np.broadcast_shapes(pd.shape[:-2], v.shape[:-2], k.shape[:-2], out.shape[:-2])
    L, S = pd.shape[-2:]
    dv, dk = v.shape[-1], k.shape[-1]
    pd, v, k = (np.broadcast_to(x, (*lead, *x.shape[-2:])) for x in (pd, v, k))
    out, pk = (np.broadcast_to(x, (*lead, *x.shape[-2:])) for x in (out, pk))
    sq2 = [np.broadcast_to(np.asarray(sq) ** 2, (*lead, L, dk)) for sq in sqs]
    found = [np.zeros((*lead, L, dv)) for _ in sqs]
    rows = max(1, QUERY_BLOCK // (dv * dk))  # of l, and of s
    for b in np.ndindex(*lead):
        for l0 in range(0, L, rows):
            ls = slice(l0, l0 + rows)
            a = -(out[b][ls, :, None] * pk[b][ls, None, :]).reshape(-1, dv * dk)
            for s0 in range(0, S, rows):
                keys = slice(s0, s0 + rows)
                vk = (v[b][keys, :, None] * k[b][keys, None, :]).reshape(-1, dv * dk)
                a += pd[b][ls, keys] @ vk
            a2 = (a**2).reshape(-1, dv, dk)
            for into, s2 in zip(found, sq2):
                into[b][ls] = np.einsum("ljd,ld->lj", a2, s2[b][ls])
    return found


def score_scale(expr: Expr, q: np.ndarray) -> float:
    """The score scale of an attention: its own, or 1 / sqrt(head size)."""
    scale = expr.attrs["scale"]
    return float(scale) if scale is not None else 1 / np.sqrt(q.shape[-1])


def sdpa_bwd_change(expr: Expr, vals, ms) -> tuple[np.ndarray, ...]:
    """The gradients' change, added up: sdpa_bwd's formulas on |x| and the changes, with
    the probabilities' change through the scores."""
    (dout, q, k, v, out, _), (mdo, mq, mk, mv, mo, _) = vals, ms
    p, factor, scale = weights(expr, q, k)
    ado, aq, ak, av, ao = (absolute(x) for x in (dout, q, k, v, out))
    ms_ = scale * (mq @ swap_last(ak) + aq @ swap_last(mk))
    grad_p = factor * (ado @ swap_last(av))
    row = np.sum(ado * ao, axis=-1, keepdims=True)
    m_grad_p = factor * (mdo @ swap_last(av) + ado @ swap_last(mv))
    m_row = np.sum(mdo * ao + ado * mo, axis=-1, keepdims=True)
    grad_s = p * (grad_p + row)
    m_grad_s = p * (m_grad_p + m_row) + grad_s * (ms_ + np.sum(p * ms_, axis=-1, keepdims=True))
    pd = p * factor
    m_dq = scale * (m_grad_s @ ak + grad_s @ mk)
    m_dk = scale * (swap_last(m_grad_s) @ aq + swap_last(grad_s) @ mq)
    m_dv = swap_last(pd) @ mdo + swap_last(pd * ms_) @ ado
    return m_dq, m_dk, m_dv
