"""embedding (rows at tensor indices) and embedding_backward (its scatter-add): values,
the sharding rule's communications (batch-sharded indices and embedding-sharded
weights move nothing; a vocabulary-sharded weight is partial, one Allreduce), and
the vjp in each placement."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import Replicate, Shard

V, D, B, T = 10, 6, 4, 3  # 10 rows over 4 devices: chunks of 3, 3, 3 and 1
RNG = np.random.default_rng(0)
W = RNG.standard_normal((V, D))
IDS = RNG.integers(0, V, (B, T))


def _kinds(ex: fl.FusionExecutor) -> list[str]:
    return [s.kind.name for s in ex.program.steps if hasattr(s, "kind")]


def _fusion(mesh, wp, ip, dtype="float32", index_dtype="int64") -> fl.Fusion:
    with fl.Fusion() as fusion:
        w = fl.tensor([V, D], dtype, name="w")
        ids = fl.tensor([B, T], index_dtype, name="ids")
        fusion.add_input(w)
        fusion.add_input(ids)
        if mesh is not None:
            fl.distribute(w, mesh, wp)
            fl.distribute(ids, mesh, ip)
        fusion.add_output(fl.mul(fl.embedding(w, ids), 2.0))
    return fusion


CASES = {
    "batch-sharded indices": ([Replicate()], [Shard(0)], []),
    "embedding-sharded weight": ([Shard(1)], [Replicate()], []),
    "vocabulary-sharded weight": ([Shard(0)], [Replicate()], ["Allreduce"]),
}


@pytest.mark.parametrize("case", CASES)
def test_sharded_lookups_and_their_communications(case: str) -> None:
    wp, ip, kinds = CASES[case]
    fusion = _fusion(fl.DeviceMesh([0, 1, 2, 3]), wp, ip)
    ex = fl.FusionExecutor(fusion)
    out = ex.run([W.astype(np.float32), IDS])[0]
    np.testing.assert_array_equal(out, 2 * W.astype(np.float32)[IDS])
    assert _kinds(ex) == kinds
    fl.validate(fusion, [W.astype(np.float32), IDS], [out])


def test_vocabulary_parallel_on_a_2d_mesh_reduces_over_the_tensor_axis() -> None:
    """Indices over the data axis, the vocabulary over the tensor axis (Megatron)."""
    mesh = fl.DeviceMesh([[0, 1, 2, 3], [4, 5, 6, 7]])
    fusion = _fusion(mesh, [Replicate(), Shard(0)], [Shard(0), Replicate()], "bfloat16", "int32")
    ex = fl.FusionExecutor(fusion)
    w = W.astype(fl.DType.bfloat16.numpy)
    out = ex.run([w, IDS.astype(np.int32)])[0]
    np.testing.assert_array_equal(out, (2 * w.astype(np.float32)[IDS]).astype(w.dtype))
    allreduce = [s for s in ex.program.steps if getattr(s, "kind", None) is not None]
    assert [s.kind.name for s in allreduce] == ["Allreduce"]
    assert "DIDx" in fl.explain(ex.program)


def test_out_of_range_index_is_an_execution_error_on_every_path() -> None:
    bad = IDS.copy()
    bad[1, 2] = V
    for mesh in (None, fl.DeviceMesh([0, 1])):
        fusion = _fusion(mesh, [Shard(0)], [Replicate()])
        with pytest.raises(fl.ExecutionError, match=r"index 10 of ids \(T1\) is out of range"):
            fl.FusionExecutor(fusion).run([W.astype(np.float32), bad])
    with pytest.raises(fl.ExecutionError, match="out of range"):
        fl.evaluate(_fusion(None, None, None), [W.astype(np.float32), -bad])


def test_builder_errors_name_the_tensor_and_the_fix() -> None:
    with fl.Fusion():
        w, f = fl.tensor([V, D], name="w"), fl.tensor([3], name="f")
        with pytest.raises(fl.FusionError, match=r"indices f \(T1\)\[3\] are float32.*cast"):
            fl.embedding(w, f)
        with pytest.raises(fl.FusionError, match="flatten"):
            fl.embedding_backward(w, fl.tensor([2, 5], "int64"), V)


@pytest.mark.parametrize("case", [*CASES, "unsharded"])
def test_gradient_of_the_weight_is_a_scatter_add(case: str) -> None:
    wp, ip, _ = CASES.get(case, (None, None, None))
    mesh = fl.DeviceMesh([0, 1, 2, 3]) if wp else None
    with fl.Fusion() as fusion:
        w, ids = fl.tensor([V, D], "float64", name="w"), fl.tensor([B, T], "int64", name="ids")
        fusion.add_input(w)
        fusion.add_input(ids)
        if mesh is not None:
            fl.distribute(w, mesh, wp)
            fl.distribute(ids, mesh, ip)
        y = fl.embedding(w, ids)
        fusion.add_output(fl.sum(fl.mul(y, y)))
    grad = fl.grad(fusion, ["w"])
    out = fl.FusionExecutor(grad).run([W, IDS])
    want = np.zeros((V, D))
    np.add.at(want, IDS.ravel(), 2 * W[IDS].reshape(-1, D))
    np.testing.assert_allclose(out[1], want, rtol=1e-12)
    if wp is not None:
        assert grad.outputs[1].placements == tuple(wp)
