"""fl.shard_map: per-device programs with torch_xla's and JAX's collectives, checked
against the values their own tests and documentation give, and against the reference."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models

DIDx = fl.ParallelType.DIDx
X = ("DIDx",)  # the teams of a collective over the only mesh axis


def lowered(ex: fl.FusionExecutor) -> list[tuple[str, tuple[str, ...], int]]:
    """Each communication's kind, the mesh axes of its teams and the bytes each device sends."""
    return [(c.kind.value, c.group_names, c.bytes_per_device) for c in ex.communications]


def run(fn, inputs, in_specs, out_specs, devices=4):
    """shard_map(fn) on `devices` sim devices: (global outputs, `lowered` communications)."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(devices)
        xs = [fl.tensor(list(a.shape), str(a.dtype)) for a in inputs]
        for x in xs:
            fusion.add_input(x)
        out = fl.shard_map(fn, mesh, in_specs, out_specs)(*xs)
        for o in out if isinstance(out, tuple) else [out]:
            fusion.add_output(o)
    ex = fl.FusionExecutor(fusion)
    outputs = ex.run(inputs)
    fl.validate(fusion, inputs, outputs)
    return outputs, lowered(ex)


# -- torch_xla's collective tests (test/test_mp_all_reduce etc.), in shard_map form --------
@pytest.mark.parametrize("d", [2, 4, 8])
def test_xla_all_reduce_of_ordinals(d):
    ordinals = np.arange(d, dtype=np.float32)  # device i holds [i]
    (out,), comms = run(fl.all_reduce, [ordinals], [(DIDx,)], [(DIDx,)], d)
    np.testing.assert_array_equal(out, np.full(d, d * (d - 1) / 2))
    assert comms == [("Allreduce", X, 2 * (d - 1) * 4)]  # the ring's one-element chunks


@pytest.mark.parametrize("d", [2, 4, 8])
def test_xla_all_gather_of_ordinals(d):
    ordinals = np.arange(d, dtype=np.float32)
    (out,), comms = run(fl.all_gather, [ordinals], [(DIDx,)], [None], d)
    np.testing.assert_array_equal(out, ordinals)  # every device: [0, 1, ..., d-1]
    assert comms == [("Allgather", X, (d - 1) * 4)]


@pytest.mark.parametrize("d", [2, 4, 8])
def test_xla_reduce_scatter_of_minus_arange(d):
    # Every device holds -arange(2d); each keeps its two elements of the sum over devices.
    x = np.tile(-np.arange(2 * d, dtype=np.float32), d)
    (out,), comms = run(
        lambda t: fl.reduce_scatter(t, "sum", scatter_dim=0, shard_count=d),
        [x],
        [(DIDx,)],
        [(DIDx,)],
        d,
    )
    np.testing.assert_array_equal(out, -d * np.arange(2 * d))
    assert comms == [("ReduceScatter", X, (d - 1) * 2 * 4)]  # each keeps 2 of 2d elements


@pytest.mark.parametrize("d", [2, 4, 8])
def test_seed_000_gives_65536_on_every_device(d):
    fusion = models.all_gather_all_reduce_reduce_scatter(d, 1024)
    ex = fl.FusionExecutor(fusion)
    x = [np.ones(d * 1024, np.float32)]
    per_device = ex.run_per_device(x)
    assert {dev: out[0].tolist() for dev, out in per_device.items()} == {
        dev: [1024.0 * d * d] for dev in range(d)
    }
    b = d * 1024 * 4  # the gathered [1024 d] float32, in bytes
    assert lowered(ex) == [  # exactly the three collectives torch_xla runs, ring counts
        ("Allgather", X, (d - 1) * b // d),
        ("Allreduce", X, 2 * (d - 1) * b // d),
        ("ReduceScatter", X, (d - 1) * b // d),
    ]
    assert d != 8 or per_device[0][0][0] == 65536


# -- JAX's shard_map documentation (the collectives tutorial), on a 4-device axis ---------
def test_jax_psum():
    x = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.float32)
    (out,), comms = run(lambda b: fl.psum(b, DIDx), [x], [(DIDx,)], [None])
    np.testing.assert_array_equal(out, [14, 17])
    assert comms == [("Allreduce", X, 2 * 3 * 4)]  # 2 elements in chunks of 1, padded


def test_jax_all_gather_tiled():
    x = np.array([3, 9, 5, 2], np.float32)
    (out,), comms = run(
        lambda b: fl.all_gather(b, axis="DIDx", tiled=True), [x], [(DIDx,)], [(DIDx,)]
    )
    np.testing.assert_array_equal(out, [3, 9, 5, 2] * 4)
    assert comms == [("Allgather", X, 3 * 4)]


def test_jax_all_gather_untiled_stacks():
    x = np.array([3, 9, 5, 2], np.float32)
    (out,), comms = run(lambda b: fl.all_gather(b, tiled=False), [x], [(DIDx,)], [None])
    np.testing.assert_array_equal(out, [[3], [9], [5], [2]])
    assert comms == [("Allgather", X, 3 * 4)]


def test_jax_psum_scatter():
    x = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 1, 2], np.float32)
    (out,), comms = run(lambda b: fl.psum_scatter(b, DIDx, tiled=True), [x], [(DIDx,)], [(DIDx,)])
    np.testing.assert_array_equal(out, [22, 20, 12, 17])
    assert comms == [("ReduceScatter", X, 3 * 4)]
    # Untiled, the scattered axis (extent 4, the device count) goes away: [4, 1] -> [1].
    (untiled,), comms = run(
        lambda b: fl.psum_scatter(b, DIDx), [x.reshape(16, 1)], [(DIDx,)], [(DIDx,)]
    )
    np.testing.assert_array_equal(untiled, [22, 20, 12, 17])
    assert comms == [("ReduceScatter", X, 3 * 4)]


def test_jax_ppermute_ring_shift():
    x = np.arange(8, dtype=np.float32)
    shift = [(i, (i + 1) % 4) for i in range(4)]
    (out,), comms = run(lambda b: fl.ppermute(b, DIDx, shift), [x], [(DIDx,)], [(DIDx,)])
    np.testing.assert_array_equal(out, [6, 7, 0, 1, 2, 3, 4, 5])
    # point to point: each device sends its one block (2 floats) to the next, no Allgather
    assert comms == [("CollectivePermute", X, 2 * 4)]


def test_ppermute_pair_swap():
    x = np.arange(8, dtype=np.float32)
    swap = [(0, 1), (1, 0), (2, 3), (3, 2)]
    (out,), comms = run(lambda b: fl.ppermute(b, DIDx, swap), [x], [(DIDx,)], [(DIDx,)])
    np.testing.assert_array_equal(out, [2, 3, 0, 1, 6, 7, 4, 5])
    assert comms == [("CollectivePermute", X, 2 * 4)]


def test_pmax_and_local_ops_act_on_each_devices_value():
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    (out,), comms = run(lambda b: fl.pmax(fl.exp(b) * 2, DIDx), [x], [(DIDx,)], [None])
    np.testing.assert_allclose(out, [2 * np.exp(x[3])], rtol=1e-6)
    assert comms == [("Allreduce", X, 2 * 3 * 4)]  # a [1, 4] row in chunks of one
    (sums,), comms = run(lambda b: fl.sum(b, [1], keepdim=True), [x], [(DIDx,)], [(DIDx,)])
    np.testing.assert_array_equal(sums, x.sum(1, keepdims=True))
    assert comms == []


def test_a_cast_inside_shard_map_acts_locally():
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(4, 4)
    (out,), comms = run(lambda b: fl.all_reduce(fl.cast(b, "float64")), [x], [(DIDx,)], [None])
    assert comms == [("Allreduce", X, 2 * 3 * 8)]  # of float64: 8-byte elements
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, x.astype(np.float64).sum(0, keepdims=True), rtol=1e-12)


def test_all_to_all_and_specs_on_other_axes():
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    (out,), comms = run(lambda b: fl.all_to_all(b, 1, 0), [x], [(DIDx,)], [(None, DIDx)])
    np.testing.assert_array_equal(out, x)
    assert comms == [("AllToAll", X, 3 * 2 * 4)]  # a [1, 8] row: 2 elements to each of 3
    # Columns sharded: each device's [4, 2] block; a local sum over rows stays local.
    (cols,), comms = run(lambda b: fl.sum(b, [0]), [x], [(None, DIDx)], [(DIDx,)])
    np.testing.assert_array_equal(cols, x.sum(0))
    assert comms == []


def test_replicated_input_and_local_matmul():
    a = np.arange(8, dtype=np.float32).reshape(4, 2)
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,), comms = run(lambda x, k: fl.matmul(x, k), [a, w], [(DIDx,), None], [(DIDx,)])
    np.testing.assert_allclose(out, a @ w)
    assert comms == []


def test_the_trap_of_the_old_api_is_gone():
    """The natural port of seed 000 sums each device's own t4 (the old global sum gave
    524288 on 8 devices)."""
    fusion = models.all_gather_all_reduce_reduce_scatter(8, 1024)
    out = fl.FusionExecutor(fusion).run([np.ones(8192, np.float32)])[0]
    np.testing.assert_array_equal(out, [65536] * 8)


def test_print_shows_the_global_program():
    text = str(models.all_gather_all_reduce_reduce_scatter(2, 4))
    assert "T0_g_float[ ideviceIdx.x" in text and "{8}" in text  # the global [8] input


# -- errors ------------------------------------------------------------------------
def _traced(fn, in_specs=((DIDx,),), out_specs=((DIDx,),), shape=(8,)):
    with fl.Fusion():
        x = fl.tensor(list(shape), name="x")
        return fl.shard_map(fn, fl.DeviceMesh.for_num_devices(4), list(in_specs), list(out_specs))(
            x
        )


@pytest.mark.parametrize(
    "fn, message",
    [
        (lambda t: fl.all_gather(t, dim=1), "dim must be"),
        (lambda t: fl.all_reduce(t, op="prod"), "op must be one of"),
        (lambda t: fl.reduce_scatter(t, shard_count=3), "shard_count 3 must equal the 4 devices"),
        (lambda t: fl.reduce_scatter(t, scatter_dim=0), "divisible by the 4 devices"),
        (lambda t: fl.psum(t, "DIDy"), "axis must be a mesh axis"),
        (lambda t: fl.ppermute(t, None, [(0, 1), (1, 0)]), r"device\(s\) \[2, 3\]"),
        # JAX rejects a source used twice (block 0 to devices 1 and 2): not a permutation
        (
            lambda t: fl.ppermute(t, None, [(0, 1), (0, 2), (2, 3), (1, 0)]),
            r"perm must be .* each source once and each destination once \(a permutation, "
            r"as in JAX's ppermute\), got \[\(0, 1\), \(0, 2\), \(2, 3\), \(1, 0\)\]: "
            "source 0 appears twice",
        ),
        (lambda t: fl.ppermute(t, None, [(0, 1), (1, 1)]), "destination 1 appears twice"),
        (lambda t: fl.tensor([2]), "made a new tensor"),
        (lambda t: fl.all_gather(fl.all_gather(t)) and None, "must return a local tensor"),
    ],
)
def test_misuse_inside_is_a_clear_error(fn, message):
    with pytest.raises(fl.FusionError, match=message):
        _traced(fn)


def test_a_collective_outside_shard_map_is_an_error():
    with fl.Fusion():
        x = fl.tensor([8])
        x.set_device_mesh(fl.DeviceMesh.for_num_devices(4))
        for collective in (fl.all_gather, fl.all_reduce, fl.psum, fl.reduce_scatter):
            with pytest.raises(
                fl.FusionError, match="only inside a function given to fl.shard_map"
            ):
                collective(x)


def test_a_varying_value_cannot_leave_replicated():
    with pytest.raises(fl.FusionError, match="differs between the devices of DIDx"):
        _traced(lambda t: t * 2, out_specs=[None])


def test_specs_are_checked():
    with pytest.raises(fl.FusionError, match="not divisible by the 4 devices"):
        _traced(lambda t: t, shape=(6,))
    with pytest.raises(fl.FusionError, match="one spec per argument"):
        _traced(lambda t: t, in_specs=[None, None])
    with pytest.raises(fl.FusionError, match="has 2 entries but the tensor has 1 axes"):
        _traced(lambda t: t, in_specs=[(DIDx, None)])
    with pytest.raises(fl.FusionError, match="names a mesh axis twice"):
        _traced(lambda t: t, in_specs=[(DIDx, DIDx)], shape=(8, 8))


def test_every_op_has_a_local_rule():
    from fuserlite.ops.registry import Category, LocalRule, all_ops
    from fuserlite.spmd.trace import REPLAYS

    assert all(d.local_rule in REPLAYS for d in all_ops()), [
        d.name for d in all_ops() if d.local_rule not in REPLAYS
    ]
    assert set(REPLAYS) == set(LocalRule)
    # The generic rule (the leading axes are batch axes) only for pointwise ops, sets,
    # casts and iota (which has no operands: the same on every device).
    generic = {d.name for d in all_ops() if d.local_rule is LocalRule.same}
    assert all(
        d.category is Category.POINTWISE or d.name in ("set", "cast", "iota")
        for d in all_ops()
        if d.name in generic
    )


def test_shard_maps_do_not_nest():
    def inner(t):
        return fl.shard_map(fl.neg, fl.DeviceMesh.for_num_devices(4), [None], [None])(t)

    with pytest.raises(fl.FusionError, match="cannot call another shard_map"):
        _traced(inner)


def test_megatron_mlp_in_shard_map_form():
    """Column- then row-parallel linear, each device with its own weight blocks; one psum."""
    d, hidden = 4, 8
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, hidden)).astype(np.float32)
    w1 = rng.standard_normal((4 * hidden, hidden)).astype(np.float32)
    b1 = rng.standard_normal(4 * hidden).astype(np.float32)
    w2 = rng.standard_normal((hidden, 4 * hidden)).astype(np.float32)

    def mlp(x, w1, b1, w2):  # local: w1 [8, 8], b1 [8], w2 [8, 8]
        return fl.psum(fl.linear(fl.gelu(fl.linear(x, w1, b1)), w2))

    (out,), comms = run(mlp, [x, w1, b1, w2], [None, (DIDx,), (DIDx,), (None, DIDx)], [None], d)
    assert comms == [("Allreduce", X, 2 * 3 * (2 * 3 * 8 // 4) * 4)]  # [2, 3, 8] partial sums
    assert out.shape == (2, 3, hidden)
    # the same MLP, one device: validated against fl.evaluate inside run(); here by hand
    h = x @ w1.T + b1
    gelu = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    np.testing.assert_allclose(out, gelu @ w2.T, rtol=1e-4, atol=1e-4)


def test_batched_local_matmul_with_each_devices_own_matrix():
    a = np.arange(32, dtype=np.float32).reshape(4, 2, 4)  # device i: a[i] [2, 4] -> [1, 2, 4]
    b = np.arange(48, dtype=np.float32).reshape(16, 3)  # device i: b[4i:4i+4] [4, 3]
    (out,), comms = run(lambda p, q: fl.matmul(p, q), [a, b], [(DIDx,), (DIDx,)], [(DIDx,)])
    np.testing.assert_allclose(out, np.stack([a[i] @ b[4 * i : 4 * i + 4] for i in range(4)]))
    assert comms == []


def test_a_2x4_mesh_gathers_over_one_axis_and_reduces_over_the_other():
    """The global program of a 2-D shard_map lowers to exactly the two collectives it names:
    no gather of the input around the reshape that stacks each device's one-row block."""
    fusion = models.gather_then_reduce_on_a_2d_mesh(2, 4, local=4)
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    (out,) = fl.evaluate(fusion, [x])
    expected = (x[0] + x[1]).reshape(4, 4).sum(1, keepdims=True)
    np.testing.assert_array_equal(out, np.concatenate([expected, expected]))  # once per y
    ex = fl.FusionExecutor(fusion)  # and lowered and run on the 8 devices of the mesh
    (got,) = ex.run([x])
    np.testing.assert_array_equal(got, out)
    # Allgather of a [1, 4] block over 4 devices: 3 * 16 B; Allreduce of [4, 4] over 2: 64 B
    assert lowered(ex) == [("Allgather", ("DIDx",), 48), ("Allreduce", ("DIDy",), 64)]


@pytest.mark.parametrize("in_specs", [[], (), None])
def test_a_function_of_no_arguments(in_specs):
    """JAX's `shard_map(lambda: ..., in_specs=())`: each device's value from its index
    alone (it failed with "an op needs at least one tensor operand"); it writes as a
    block of no arguments and reads back."""

    def per_device():
        return fl.add(fl.iota(2, fl.DType.float32), fl.mul(fl.axis_index(DIDx), 10.0))

    (out,), comms = run(lambda: per_device(), [], in_specs, (DIDx,))
    np.testing.assert_array_equal(out, [0, 1, 10, 11, 20, 21, 30, 31])
    assert comms == []
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(4)
        fusion.add_output(fl.shard_map(per_device, mesh, in_specs, (DIDx,))())
    text = fl.to_fus(fusion)
    assert "shard_map m0 () -> (T6 [DIDx])" in text and fl.to_fus(fl.parse(text)) == text


def test_a_function_of_no_arguments_still_needs_its_specs_to_match():
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion(), pytest.raises(fl.FusionError, match="one spec per argument"):
        fl.shard_map(lambda: fl.axis_index(DIDx), mesh, [(DIDx,)], ())()
