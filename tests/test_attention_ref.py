"""fuserlite.numerics.attention: closed forms, causal masking, the Philox dropout mask,
finite-difference gradients (float64) and shards that compute the unsharded result."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from finite_differences import gradient

import fuserlite as fl
from fuserlite.numerics.attention import sdpa_bwd, sdpa_fwd
from fuserlite.numerics.philox import Block, keep_mask

BF16 = np.dtype(ml_dtypes.bfloat16)
B, H, L, S, E, EV = 2, 3, 4, 6, 5, 7


def qkv(seed: int = 0, dtype=np.float64, rows: int = L):
    rng = np.random.default_rng(seed)
    shapes = [(B, H, rows, E), (B, H, S, E), (B, H, S, EV)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def naive(q, k, v, is_causal=False, scale=None):
    """Per (batch, head): the textbook softmax(q k^T * scale) v, float64, no max shift."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    lse = np.zeros(q.shape[:-1])
    for b, h in np.ndindex(q.shape[:2]):
        w = np.exp(q[b, h] @ k[b, h].T * scale)
        if is_causal:
            w = w * np.tri(*w.shape)  # key s <= query l
        out[b, h] = (w / w.sum(axis=1, keepdims=True)) @ v[b, h]
        lse[b, h] = np.log(w.sum(axis=1))
    return out, lse


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_forward_equals_the_textbook_formula(is_causal, scale):
    q, k, v = qkv()
    out, lse, rng, unused = sdpa_fwd(q, k, v, 0.0, is_causal, scale)
    want_out, want_lse = naive(q, k, v, is_causal, scale)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-12, atol=1e-12)
    assert out.shape == (B, H, L, EV) and lse.shape == (B, H, L)
    assert rng.dtype == unused.dtype == np.uint64 and rng.shape == (2,) and unused.shape == ()


def test_zero_query_causal_attention_is_the_running_mean_of_values():
    _, k, v = qkv()
    q = np.zeros((B, H, L, E))
    out, lse, _, _ = sdpa_fwd(q, k, v, is_causal=True)
    running = np.cumsum(v, axis=2)[:, :, :L] / np.arange(1, L + 1)[:, None]
    np.testing.assert_allclose(out, running, rtol=1e-12)
    np.testing.assert_allclose(lse, np.broadcast_to(np.log(np.arange(1, L + 1)), lse.shape))


def test_causal_outputs_ignore_later_keys_and_values():
    q, k, v = qkv()
    out, _, _, _ = sdpa_fwd(q, k, v, is_causal=True)
    k2, v2 = k.copy(), v.copy()
    k2[:, :, 2:] += 100.0  # keys and values after query 1
    v2[:, :, 2:] -= 50.0
    out2, _, _, _ = sdpa_fwd(q, k2, v2, is_causal=True)
    np.testing.assert_array_equal(out2[:, :, :2], out[:, :, :2])
    assert not np.allclose(out2[:, :, 2:], out[:, :, 2:])


def test_large_logits_stay_finite_and_pick_the_best_key():
    q, k, v = qkv(dtype=np.float32)
    out, lse, _, _ = sdpa_fwd(q * 300, k * 300, v)  # scores ~ 1e4: exp would overflow
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    best = np.argmax(np.einsum("bhle,bhse->bhls", q, k), axis=-1)
    np.testing.assert_allclose(out, np.take_along_axis(v, best[..., None], axis=2), atol=1e-4)


def test_dropout_mask_is_philox_at_each_probability_index():
    # values = identity: the output is the dropped probabilities themselves
    q, k, _ = qkv(dtype=np.float32)
    v = np.broadcast_to(np.eye(S, dtype=np.float32), (B, H, S, S)).copy()
    p_drop, seed, offset = 0.4, 77, 3
    out, _, rng, _ = sdpa_fwd(q, k, v, p_drop, True, seed=seed, offset=offset)
    assert rng.tolist() == [seed, offset]
    probs, _, _, _ = sdpa_fwd(q, k, v, 0.0, True)
    keep = keep_mask(
        p_drop, seed, offset, Block.whole((B, H, L, S)).index((B, H, L, S)), np.float32
    )
    np.testing.assert_array_equal(out, np.where(keep, probs * np.float32(1 / 0.6), 0))
    causal_part = np.tri(L, S, dtype=bool)
    assert keep[..., causal_part].any() and not keep[..., causal_part].all()


def test_bfloat16_inputs_give_bfloat16_output_and_float_logsumexp():
    q, k, v = qkv(dtype=BF16)
    out, lse, _, _ = sdpa_fwd(q, k, v, 0.1, True, seed=1)
    assert out.dtype == BF16 and lse.dtype == np.float32
    want, _, _, _ = sdpa_fwd(*(t.astype(np.float32) for t in (q, k, v)), 0.1, True, seed=1)
    np.testing.assert_array_equal(out.astype(np.float32), want.astype(BF16).astype(np.float32))
    grads = sdpa_bwd(out, q, k, v, out, lse, 0.1, True, np.array([1, 0], np.uint64))
    assert [g.dtype for g in grads] == [BF16] * 3


@pytest.mark.parametrize("is_causal,p_drop", [(False, 0.0), (True, 0.0), (True, 0.3)])
def test_backward_equals_finite_differences(is_causal, p_drop):
    q, k, v = qkv(1)
    g = np.random.default_rng(2).standard_normal((B, H, L, EV))
    scale, seed, offset = 0.7, 123, 4

    def loss(q=q, k=k, v=v) -> float:
        out = sdpa_fwd(q, k, v, p_drop, is_causal, scale, seed=seed, offset=offset)[0]
        return float(np.sum(out * g))

    out, lse, rng, unused = sdpa_fwd(q, k, v, p_drop, is_causal, scale, seed=seed, offset=offset)
    dq, dk, dv = sdpa_bwd(g, q, k, v, out, lse, p_drop, is_causal, rng, unused, scale)
    for got, arg, x in ((dq, "q", q), (dk, "k", k), (dv, "v", v)):
        want = gradient(lambda t, a=arg: loss(**{a: t}), x)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8, err_msg=arg)


def test_broadcast_batch_axes_sum_their_gradients():
    q, k, v = qkv(3)
    k1, v1 = k[:, :1], v[:, :1]  # one key/value head shared by every query head
    g = np.ones((B, H, L, EV))
    out, lse, _, _ = sdpa_fwd(q, k1, v1)
    _, dk, dv = sdpa_bwd(g, q, k1, v1, out, lse)
    _, dk_full, dv_full = sdpa_bwd(g, q, *(np.repeat(t, H, axis=1) for t in (k1, v1)), out, lse)
    np.testing.assert_allclose(dk, dk_full.sum(axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(dv, dv_full.sum(axis=1, keepdims=True), rtol=1e-12)


# -- shards ---------------------------------------------------------------------------
ARGS = dict(dropout_p=0.3, is_causal=True, scale=0.5)
RNG_STATE = dict(seed=9, offset=2)


def whole_run(q, k, v, g):
    out, lse, rng, _ = sdpa_fwd(q, k, v, **ARGS, **RNG_STATE)
    return out, lse, sdpa_bwd(g, q, k, v, out, lse, philox_seed=rng, **ARGS)


def test_batch_and_head_shards_compute_their_slice_with_no_communication():
    q, k, v = qkv(4, np.float32)
    g = np.random.default_rng(5).standard_normal((B, H, L, EV)).astype(np.float32)
    out, lse, grads = whole_run(q, k, v, g)
    for axis, parts in ((0, B), (1, H)):
        for d in range(parts):
            cut = [slice(None)] * 4
            cut[axis] = slice(d, d + 1)
            cut = tuple(cut)
            start = [0, 0, 0, 0]
            start[axis] = d
            block = Block((B, H, L, S), tuple(start))
            o, lse_d, rng, _ = sdpa_fwd(q[cut], k[cut], v[cut], **ARGS, **RNG_STATE, block=block)
            np.testing.assert_allclose(o, out[cut], rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(lse_d, lse[cut[:3]], rtol=1e-6)
            mine = sdpa_bwd(
                g[cut], q[cut], k[cut], v[cut], o, lse_d, philox_seed=rng, **ARGS, block=block
            )
            for got, want in zip(mine, grads):
                np.testing.assert_allclose(got, want[cut], rtol=1e-5, atol=1e-6)


def test_a_query_sequence_shard_with_whole_keys_and_values():
    # q sharded on L over 2 devices, k and v replicated: out, lse and dq are shards;
    # dk and dv are partial sums that an Allreduce (or ReduceScatter) completes.
    q, k, v = qkv(6, np.float32, rows=8)
    g = np.random.default_rng(7).standard_normal((B, H, 8, EV)).astype(np.float32)
    out, lse, (dq, dk, dv) = whole_run(q, k, v, g)
    dk_sum, dv_sum = np.zeros_like(dk), np.zeros_like(dv)
    for start in (0, 4):
        rows = slice(start, start + 4)
        block = Block((B, H, 8, S), (0, 0, start, 0))
        o, lse_d, rng, _ = sdpa_fwd(q[:, :, rows], k, v, **ARGS, **RNG_STATE, block=block)
        np.testing.assert_allclose(o, out[:, :, rows], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(lse_d, lse[:, :, rows], rtol=1e-6)
        dq_d, dk_d, dv_d = sdpa_bwd(
            g[:, :, rows], q[:, :, rows], k, v, o, lse_d, philox_seed=rng, **ARGS, block=block
        )
        np.testing.assert_allclose(dq_d, dq[:, :, rows], rtol=1e-5, atol=1e-6)
        dk_sum += dk_d
        dv_sum += dv_d
    np.testing.assert_allclose(dk_sum, dk, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dv_sum, dv, rtol=1e-5, atol=1e-6)


def test_a_key_sequence_shard_is_refused():
    q, k, v = qkv()
    with pytest.raises(fl.ExecutionError, match="must span the whole key/value sequence"):
        sdpa_fwd(q, k[:, :, :3], v[:, :, :3], block=Block((B, H, L, S), (0, 0, 0, 3)))


# -- bad input ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "change,message",
    [
        (lambda q, k, v: (q, k[..., :4], v), r"query and key head dims differ \(5 vs 4\)"),
        (lambda q, k, v: (q, k, v[:, :, :5]), r"key and value sequence lengths differ \(6 vs 5\)"),
        (lambda q, k, v: (q[0], k, v), "need one rank >= 2"),
        (lambda q, k, v: (q, k[:2, :2], v[:2, :2]), "batch axes do not broadcast"),
        (lambda q, k, v: (q, k.astype(np.float32), v), "dtypes differ"),
    ],
)
def test_mismatched_operands_are_clear_errors(change, message):
    with pytest.raises(fl.ExecutionError, match=message):
        sdpa_fwd(*change(*qkv()))


def test_flags_are_checked():
    q, k, v = qkv()
    with pytest.raises(fl.ExecutionError, match="is_causal must be a bool, got 1"):
        sdpa_fwd(q, k, v, is_causal=1)
    with pytest.raises(fl.ExecutionError, match=r"dropout_p must be in \[0, 1\], got 1.5"):
        sdpa_fwd(q, k, v, dropout_p=1.5)
    out, lse, _, _ = sdpa_fwd(q, k, v)
    with pytest.raises(fl.ExecutionError, match="dropout needs philox_seed"):
        sdpa_bwd(out, q, k, v, out, lse, dropout_p=0.2)
    with pytest.raises(fl.ExecutionError, match="logsumexp"):
        sdpa_bwd(out, q, k, v, out, lse[..., :2])


@pytest.mark.parametrize("is_causal, p_drop", [(False, 0.0), (True, 0.25)])
def test_attention_bounds_blocked_equal_their_formula(monkeypatch, is_causal, p_drop):
    """attention_rounding.sdpa_sigma's query term, a BLAS product a block of rows and keys
    at a time, equals the formula as one einsum of three operands; the other sources'
    terms are shared between the sources given together."""
    import fuserlite.reference.attention_rounding as ar

    monkeypatch.setattr(ar, "QUERY_BLOCK", 3 * 8 * 4)  # 3 rows and keys a block of 13
    rng = np.random.default_rng(5)
    with fl.Fusion() as f:
        q, k, v = fl.tensor([2, 3, 13, 4]), fl.tensor([2, 3, 11, 4]), fl.tensor([2, 3, 11, 8])
        if is_causal:
            k, v = fl.tensor([2, 3, 13, 4]), fl.tensor([2, 3, 13, 8])
        for t in (q, k, v):
            f.add_input(t)
        out, _ = fl.sdpa(q, k, v, dropout_p=p_drop, is_causal=is_causal)
        f.add_output(out)
    expr = out.definition
    vals = [rng.standard_normal(t.shape) for t in (q, k, v)]
    sources = [tuple(rng.random(t.shape) * 1e-3 for t in (q, k, v)) + (1e-4,) for _ in range(2)]
    sources.append((0.0 * vals[0], 0.0 * vals[1], sources[0][2], 0.0))  # no query sigma
    got = ar.sdpa_sigma(expr, vals, sources)
    qf, kf, vf = vals
    p, factor, scale = ar.weights(expr, qf, kf)
    pd = p * factor
    o = pd @ vf
    for (sq, sk, sv, ss), (sigma_out, sigma_lse) in zip(sources, got):
        w = scale**2 * ((qf**2) @ ar.swap_last(sk**2)) + ss**2
        keys = (pd**2 * w) @ vf**2 - 2 * o * ((p * pd * w) @ vf)
        keys = keys + o**2 * np.sum(p**2 * w, -1)[..., None]
        per_q = np.einsum("...ls,...sj,...sd->...ljd", pd, vf, kf)
        per_q = per_q - o[..., None] * (p @ kf)[..., None, :]
        query = scale**2 * np.einsum("...ljd,...ld->...lj", per_q**2, sq**2)
        want = np.sqrt(np.maximum(keys, 0) + query + (pd**2) @ sv**2)
        np.testing.assert_allclose(sigma_out, want, rtol=1e-12)
        lse = np.sum(p**2 * w, -1) + scale**2 * np.sum(sq**2 * (p @ kf) ** 2, -1)
        np.testing.assert_allclose(sigma_lse, np.sqrt(lse), rtol=1e-12)
