"""sdpa and sdpa_bwd: reference values against fuserlite.numerics.attention, their
sharding rule (what moves for each sharded axis), and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.numerics import attention
from fuserlite.program.communication import CommKind
from fuserlite.schedule.shard import shard_axis

N, H, L, E = 2, 4, 8, 16
FLAGS = {"dropout_p": 0.2, "is_causal": True, "seed": 3, "offset": 5}


def attention_fusion(dtype="float32", shard=None, backward=True, devices=2, **flags):
    """dout, q, k, v [N, H, L, E]; `shard` = {input name: axis} on `devices` devices."""
    flags = {**FLAGS, **flags}
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(devices)
        names = ("dout", "q", "k", "v")
        tensors = dict(zip(names, (fl.tensor([N, H, L, E], dtype, name=n) for n in names)))
        for t in tensors.values():
            f.add_input(t)
            t.set_device_mesh(mesh)
        for name, axis in (shard or {}).items():
            shard_axis(tensors[name], axis, mesh)
        dout, q, k, v = tensors.values()
        out, lse = fl.sdpa(q, k, v, **flags)
        made = [out, lse]
        if backward:
            made += fl.sdpa_bwd(dout, q, k, v, out, lse, **flags)
        for t in made:
            f.add_output(t)
    return f


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("causal,p", [(False, 0.0), (True, 0.0), (True, 0.3)])
def test_reference_matches_numerics(dtype: str, causal: bool, p: float) -> None:
    f = attention_fusion(dtype, dropout_p=p, is_causal=causal)
    dout, q, k, v = inputs = fl.random_inputs(f, seed=1)
    got = fl.evaluate(f, inputs)
    out, lse, rng, _ = attention.sdpa_fwd(q, k, v, p, causal, seed=3, offset=5)
    # the backward reads the output and logsumexp as the reference keeps them (in float)
    o32, l32 = attention.sdpa_fwd(
        *(x.astype(np.float32) for x in (q, k, v)), p, causal, seed=3, offset=5
    )[:2]
    grads = attention.sdpa_bwd(
        dout.astype(np.float32),
        *(x.astype(np.float32) for x in (q, k, v)),
        o32,
        l32,
        p,
        causal,
        rng,
    )
    for g, w in zip(got, [out, lse, *grads]):
        assert g.shape == w.shape
        np.testing.assert_allclose(
            g.astype(np.float32), w.astype(g.dtype).astype(np.float32), rtol=1e-5, atol=1e-5
        )
    assert got[0].dtype == np.dtype(q.dtype) and got[1].dtype == np.float32


def _collectives(f: fl.Fusion) -> list[tuple[str, tuple]]:
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=2)
    fl.validate(f, inputs, ex.run(inputs))
    return [(c.kind.value, c.input.shape) for c in ex.communications if c.kind.is_collective]


ALL = ("dout", "q", "k", "v")


@pytest.mark.parametrize(
    "shard,moves",
    [
        ({n: 0 for n in ALL}, []),  # batch: no communication
        ({n: 1 for n in ALL}, []),  # heads: no communication
        # the query's rows: the forward computes its rows, the backward's grad_key and
        # grad_value are partial sums over them: one Allreduce each
        ({"q": 2, "dout": 2}, [("Allreduce", (N, H, L, E))] * 2),
        # the key's sequence: gathered (a softmax over a sharded axis is not a sum)
        ({"k": 2}, [("Allgather", (N, H, L, E))]),
        # a head dim: gathered
        ({"q": 3}, [("Allgather", (N, H, L, E))]),
    ],
)
def test_sharding_rule(shard: dict, moves: list) -> None:
    comms = _collectives(attention_fusion("bfloat16", shard))
    assert sorted(c for c in comms if c[0] != "LocalSlice") == sorted(moves)


@pytest.mark.parametrize("devices", [2, 4])
def test_query_rows_sharded_forward_moves_nothing(devices: int) -> None:
    """Causal with dropout: each device's rows see the global diagonal and draw the
    global mask (validate would see another mask's values)."""
    f = attention_fusion(shard={"q": 2}, backward=False, devices=devices)
    assert _collectives(f) == []


def test_grad_key_reduce_scatters_into_a_sharded_consumer() -> None:
    """A partial grad_key read sharded (a sequence-parallel consumer) is completed by a
    ReduceScatter, as any partial sum is."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        dout, q, k, v = (fl.tensor([N, H, L, E], name=n) for n in ALL)
        for t in (dout, q, k, v):
            f.add_input(t)
            t.set_device_mesh(mesh)
        shard_axis(q, 2, mesh)
        shard_axis(dout, 2, mesh)
        out, lse = fl.sdpa(q, k, v, **FLAGS)
        _, gk, _ = fl.sdpa_bwd(dout, q, k, v, out, lse, **FLAGS)
        y = fl.mul(gk, 2.0)
        shard_axis(y, 2, mesh)
        f.add_output(y)
    kinds = [kind for kind, _ in _collectives(f)]
    assert kinds == [CommKind.ReduceScatter.value]


@pytest.mark.parametrize("backward", [False, True])
def test_self_attention_of_one_tensor_places_each_role_as_it_needs(backward: bool) -> None:
    """sdpa(x, x, x) on x sharded on its rows: as the query x keeps its rows, as key and
    value it is gathered whole, once (the axis map is per operand position; was: one
    placement for all three roles, and an ExecutionError on the local shards)."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([N, H, L, E], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        shard_axis(x, 2, mesh)
        out, lse = fl.sdpa(x, x, x, **FLAGS)
        made = [out, lse, *(fl.sdpa_bwd(x, x, x, x, out, lse, **FLAGS) if backward else ())]
        for t in made:
            f.add_output(t)
    gathers = [c for c in _collectives(f) if c[0] == "Allgather"]
    assert gathers == [("Allgather", (N, H, L, E))]


def _four(*shapes, dtype="float32"):
    return [fl.tensor(s, dtype, name=n) for s, n in zip(shapes, "qkvo")]


@pytest.mark.parametrize(
    "build,match",
    [
        (
            lambda: fl.sdpa(*_four([2, 8, 16], [2, 8, 8], [2, 8, 16])),
            "head dims of query and key differ",
        ),
        (lambda: fl.sdpa(*_four([2, 8, 16], [2, 6, 16], [2, 8, 16])), "sequence lengths differ"),
        (lambda: fl.sdpa(*_four([2, 8, 16], [3, 8, 16], [3, 8, 16])), "batch axes"),
        (lambda: fl.sdpa(*_four([8, 16], [8, 16], [8])), "one rank >= 2"),
        (
            lambda: fl.sdpa(*_four([8, 16], [8, 16], [8, 16]), is_causal=1),
            "is_causal must be true or false",
        ),
        (
            lambda: fl.sdpa(*_four([8, 16], [8, 16], [8, 16]), dropout_p=1.5),
            r"dropout_p must be in \[0, 1\]",
        ),
        (lambda: fl.sdpa(*_four([8, 16], [8, 16], [8, 16], dtype="int32")), "one float dtype"),
        (
            lambda: fl.sdpa(fl.tensor([8, 16]), fl.tensor([8, 16], "bfloat16"), fl.tensor([8, 16])),
            "one float dtype",
        ),
        (lambda: fl.sdpa(*_four([8, 16], [8, 16], [8, 16]), seed=-1), "sdpa: seed"),
        (lambda: fl.sdpa(None, None, None), "sdpa: query must be"),
        (
            lambda: fl.sdpa_bwd(
                *_four([8, 4], [8, 16], [8, 16], [8, 16]), fl.tensor([8, 16]), fl.tensor([8])
            ),
            r"sdpa_bwd: grad_output .* must be \[8, 16\]",
        ),
    ],
)
def test_bad_input_names_the_op_and_shapes(build, match) -> None:
    with fl.Fusion(), pytest.raises(fl.FusionError, match=match):
        build()


def test_sdpa_from_fus_text_round_trips() -> None:
    text = (
        "input q: float32[2, 8, 16]\n"
        "out, lse = sdpa(q, q, q, is_causal=true, dropout_p=0.5, seed=4)\n"
        "output out\noutput lse\n"
    )
    f = fl.parse(text)
    again = fl.parse(fl.to_fus(f))
    inputs = fl.random_inputs(f)
    for a, b in zip(fl.evaluate(f, inputs), fl.evaluate(again, inputs)):
        np.testing.assert_array_equal(a, b)


def test_inside_shard_map_each_device_attends_over_its_batch() -> None:
    """A local sdpa (two outputs) and dropout in fl.shard_map, batch sharded: the global
    program validates and moves nothing."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    spec = [("DIDx", None, None)]
    with fl.Fusion() as f:
        q = fl.tensor([4, 8, 16], name="q")
        f.add_input(q)

        def local(t):
            out, _ = fl.sdpa(t, t, t, is_causal=True)
            return fl.dropout(out, 0.5, seed=1)

        f.add_output(fl.shard_map(local, mesh, spec, spec)(q))
    assert _collectives(f) == []
