"""The ops users write that fuserlite lacked: sin, cos (rotary embeddings), pow (and
`x ** e`), rsqrt, and grouped_mm (mixture of experts) with its sharding rule, each
against numpy on every compute path."""

from __future__ import annotations

import numpy as np
import pytest
from three_way import HAVE_COMPILER

import fuserlite as fl

COMPUTE = ["numpy", "interpret", *(["compiled"] if HAVE_COMPILER else [])]
S, R = fl.Shard, fl.Replicate
MESH = fl.DeviceMesh([0, 1])


def _run(f: fl.Fusion, inputs: list[np.ndarray]) -> list[list[np.ndarray]]:
    """The outputs on every compute path, each validated against the reference."""
    runs = []
    for compute in COMPUTE:
        ex = fl.FusionExecutor(f, compute=compute)
        out = ex.run(inputs)
        fl.validate(f, inputs, out)
        runs.append(out)
    return runs


def test_rotary_embedding_with_sin_and_cos_on_sharded_heads() -> None:
    """q * cos(pos * f) + rotate_half(q) * sin(pos * f), q [2, heads 4, seq 6, dim 8]
    sharded on the heads: nothing moves."""
    seq, dim = 6, 8
    with fl.Fusion() as f:
        q = fl.tensor([2, 4, seq, dim], name="q")
        f.add_input(q)
        fl.distribute(q, MESH, [S(1)])
        pos = fl.reshape(fl.iota(seq, "float32"), [seq, 1])
        freq = fl.reshape(fl.iota(dim // 2, "float32", 1.0, 0.5), [1, dim // 2])
        angle = fl.cat([pos * freq, pos * freq], 1)  # [seq, dim]
        lo, hi = fl.chunk(q, 2, 3)
        rotated = fl.cat([fl.neg(hi), lo], 3)
        f.add_output(q * fl.cos(angle) + rotated * fl.sin(angle))
    x = np.random.default_rng(0).standard_normal((2, 4, seq, dim)).astype(np.float32)
    a = np.arange(seq, dtype=np.float32)[:, None] * (
        1 + 0.5 * np.arange(dim // 2, dtype=np.float32)
    )
    a = np.concatenate([a, a], 1)
    half = np.concatenate([-x[..., dim // 2 :], x[..., : dim // 2]], -1)
    expected = x * np.cos(a) + half * np.sin(a)
    for (out,) in _run(f, [x]):
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert not fl.FusionExecutor(f).communications


def test_pow_rsqrt_and_the_power_operator() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([5, 7], name="x")
        n = fl.tensor([7], "int32", name="n")
        f.add_input(x)
        f.add_input(n)
        fl.distribute(x, MESH, [S(1)])
        ax = fl.abs(x) + 0.25
        f.add_output(ax**2.5 - 2.0**x)
        f.add_output(fl.rsqrt(ax))
        f.add_output(fl.pow(n, 2))  # integers: a float32 result, as div's
    assert f.outputs[2].dtype is fl.DType.float32
    x = np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32)
    n = np.arange(-3, 4, dtype=np.int32)
    ax = np.abs(x) + np.float32(0.25)
    for a, b, c in _run(f, [x, n]):
        np.testing.assert_allclose(a, ax**2.5 - np.float32(2.0) ** x, rtol=2e-6, atol=1e-6)
        np.testing.assert_array_equal(b, np.float32(1) / np.sqrt(ax))  # both steps exact
        np.testing.assert_array_equal(c, n.astype(np.float32) ** 2)


RNG = np.random.default_rng(7)
X = RNG.standard_normal((12, 8)).astype(np.float32)
W = RNG.standard_normal((3, 8, 6)).astype(np.float32)
ENDS = np.array([5, 5, 11], np.int32)  # group 1 empty, row 11 past the last end: 0


def _grouped_expected(x, w, ends):
    out = np.zeros((x.shape[0], w.shape[-1]), np.float32)
    for g, (lo, hi) in enumerate(zip([0, *ends[:-1]], ends)):
        out[lo:hi] = x[lo:hi] @ w[g]
    return out


SHARDINGS = {
    # name: (x's placement, w's, the communications)
    "unsharded": ([R()], [R()], []),
    "experts column-parallel": ([R()], [S(2)], []),
    "tokens sharded": ([S(0)], [R()], []),  # each device finds its rows' groups
    "row-parallel (k)": ([S(1)], [S(1)], ["Allreduce"]),
    "experts sharded: gathered": ([R()], [S(0)], ["Allgather"]),
}


@pytest.mark.parametrize("name", SHARDINGS)
def test_grouped_mm_by_its_sharding_rule(name: str) -> None:
    px, pw, comms = SHARDINGS[name]
    with fl.Fusion() as f:
        x, w = fl.tensor([12, 8], name="x"), fl.tensor([3, 8, 6], name="w")
        ends = fl.tensor([3], "int32", name="ends")
        for t in (x, w, ends):
            f.add_input(t)
        fl.distribute(x, MESH, px)
        fl.distribute(w, MESH, pw)
        fl.distribute(ends, MESH, [R()])
        f.add_output(fl.grouped_mm(x, w, ends))
    expected = _grouped_expected(X, W, ENDS)
    for (out,) in _run(f, [X, W, ENDS]):
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert [c.kind.value for c in fl.FusionExecutor(f).communications] == comms


def test_grouped_mm_over_k_groups_gives_one_product_per_group() -> None:
    """The weight gradient's form: mat1[m, k] @ mat2[k, n], offsets over k -> [g, m, n]."""
    with fl.Fusion() as f:
        a, b = fl.tensor([4, 10], name="a"), fl.tensor([10, 3], name="b")
        ends = fl.iota(3, "int32", 3, 3)  # 3 6 9: k 9 is in no group
        f.add_input(a)
        f.add_input(b)
        fl.distribute(a, MESH, [S(0)])
        f.add_output(fl.grouped_mm(a, b, ends))
    av = RNG.standard_normal((4, 10)).astype(np.float32)
    bv = RNG.standard_normal((10, 3)).astype(np.float32)
    expected = np.stack([av[:, k : k + 3] @ bv[k : k + 3] for k in (0, 3, 6)])
    for (out,) in _run(f, [av, bv]):
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_grouped_mm_mistakes_are_clear_errors() -> None:
    with fl.Fusion() as f:
        x, w = fl.tensor([12, 8], name="x"), fl.tensor([3, 8, 6], name="w")
        ends = fl.tensor([3], "int32", name="ends")
        for t in (x, w, ends):
            f.add_input(t)
        f.add_output(fl.grouped_mm(x, w, ends))
        with pytest.raises(fl.FusionError, match="contracted extents differ"):
            fl.grouped_mm(x, fl.tensor([3, 7, 6]), ends)
        with pytest.raises(fl.FusionError, match="other ranks are not supported"):
            fl.grouped_mm(fl.tensor([2, 12, 8]), w, ends)
    for bad in ([5, 3, 11], [5, 5, 13]):
        with pytest.raises(fl.ExecutionError, match="non-decreasing ends"):
            fl.FusionExecutor(f, compute="numpy").run([X, W, np.array(bad, np.int32)])


def test_grouped_mm_inside_shard_map_takes_values_alike_on_every_device() -> None:
    with fl.Fusion():
        x, w = fl.tensor([12, 8], name="x"), fl.tensor([3, 8, 6], name="w")
        ends = fl.tensor([3], "int32", name="ends")
        spec = [(fl.ParallelType.DIDx,), None, None]
        with pytest.raises(fl.FusionError, match="grouped_mm of values that differ"):
            fl.shard_map(fl.grouped_mm, MESH, spec, [None])(x, w, ends)
