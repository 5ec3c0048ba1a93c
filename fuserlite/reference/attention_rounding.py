"""The rounding bounds of attention (fuserlite.reference.rounding's sdpa rows): how the
errors of q, k and v, and an attention's own rounding, reach its output and its
logsumexp (forward, in quadrature) and its gradients (backward, added up: an upper
bound)."""

from __future__ import annotations

import numpy as np

from fuserlite.ir.expr import Expr
from fuserlite.numerics import attention

F64 = np.dtype(np.float64)


def absolute(v) -> np.ndarray:
    """|v| as float64 (|int64 min| does not fit an int64)."""
    return np.abs(np.asarray(v, F64))


def swap_last(x: np.ndarray) -> np.ndarray:
    """x with its last two axes swapped (a batch of transposes)."""
    return np.swapaxes(x, -1, -2)


def weights(expr: Expr, q: np.ndarray, k: np.ndarray) -> tuple:
    a = expr.attrs
    p, factor, scale = attention.probabilities(
        q, k, a["dropout_p"], a["is_causal"], a["scale"], seed=a["seed"], offset=a["offset"]
    )
    return p.astype(F64), np.asarray(factor, F64), scale


def sdpa_sigma(expr: Expr, vals, sq, sk, sv, ss=0.0) -> tuple[np.ndarray, np.ndarray]:
    """(out, lse)'s sigma for sigmas (sq, sk, sv) of (q, k, v) and `ss` of each score of
    its own, in quadrature. out = sum_s D_s p_s v_s with p = softmax(s), s_s = scale
    q.k_s, so dout = sum_s c_s ds_s + sum_s D_s p_s dv_s, c_s = p_s (D_s v_s - out): a
    key's error and a score's own are independent from key to key, a query's is the
    same for every key of its row (summed before squaring); d lse = sum_s p_s ds_s."""
    q, k, v = (np.asarray(x, F64) for x in vals[:3])
    p, factor, scale = weights(expr, q, k)
    pd = p * factor
    out = pd @ v
    w = scale**2 * ((q**2) @ swap_last(sk**2)) + ss**2  # [..., L, S]: independent per score
    keys = (
        (pd**2 * w) @ v**2 - 2 * out * ((p * pd * w) @ v) + out**2 * np.sum(p**2 * w, -1)[..., None]
    )
    per_q = (
        np.einsum("...ls,...sj,...sd->...ljd", pd, v, k) - out[..., None] * (p @ k)[..., None, :]
    )
    query = scale**2 * np.einsum("...ljd,...ld->...lj", per_q**2, sq**2)
    sigma_out = np.sqrt(np.maximum(keys, 0) + query + (pd**2) @ sv**2)
    lse = np.sum(p**2 * w, -1) + scale**2 * np.sum(sq**2 * (p @ k) ** 2, -1)
    return sigma_out, np.sqrt(lse)


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
