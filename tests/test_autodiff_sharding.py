"""Gradients are sharded as their parameters: the communications of each training
step against the textbook's (kinds, teams, bytes), and its values against the
reference evaluator of the derived fusion.

Bytes are per device, the ring's: an Allgather or ReduceScatter of N elements over D
devices sends D-1 chunks of ceil(N/D) elements, an Allreduce twice that (a scalar
loss's Allreduce sends 2(D-1) one-element chunks)."""

from __future__ import annotations

import pytest

import fuserlite as fl

B, S, H, F = 4, 8, 16, 32  # batch, sequence, hidden, MLP features (float32: 4 bytes)


S0, S1, R = fl.Shard(0), fl.Shard(1), fl.Replicate()
# pattern -> {input: its placements}; the others replicated
PLACEMENTS = {
    "dp": {"x": [S0]},  # the batch over the data axis
    "fsdp": {"x": [S0], "w1": [S0], "w2": [S0]},  # every device keeps a slice of each weight
    "tp": {"w1": [S0], "b1": [S0], "w2": [S1]},  # Megatron: column- then row-parallel
    "sp": {"x": [S1], "w1": [S0], "b1": [S0], "w2": [S1]},  # and the sequence sharded
    # the batch over DIDy, Megatron over DIDx
    "dp_tp": {"x": [S0, R], "w1": [R, S0], "b1": [R, S0], "w2": [R, S1]},
}


def mlp_loss(pattern: str, mesh: fl.DeviceMesh) -> fl.Fusion:
    """mean(y**2), y = linear(gelu(linear(x, w1, b1)), w2, b2), x [B, S, H], placed as
    PLACEMENTS[pattern] says; fsdp's MLP has no biases and gathers each weight before
    its use."""
    biases = pattern != "fsdp"
    placed = PLACEMENTS[pattern]
    with fl.Fusion() as fusion:
        x = fl.tensor([B, S, H], name="x")
        w1, w2 = fl.tensor([F, H], name="w1"), fl.tensor([H, F], name="w2")
        b1, b2 = fl.tensor([F], name="b1"), fl.tensor([H], name="b2")
        for t in (x, w1, b1, w2, b2) if biases else (x, w1, w2):
            fusion.add_input(t)
            fl.distribute(t, mesh, placed.get(t.user_name, [R] * mesh.rank))
        if pattern == "fsdp":  # FSDP's unshard
            w1, w2 = fl.redistribute(w1, [R]), fl.redistribute(w2, [R])
        h = fl.gelu(fl.linear(x, w1, b1 if biases else None))
        y = fl.linear(h, w2)
        if pattern == "sp":  # the partial sums reduce-scattered over the sequence
            fl.distribute(y, mesh, [S1])
        y = fl.add(y, b2) if biases else y
        fusion.add_output(fl.mul(fl.sum(fl.mul(y, y)), 1.0 / (B * S * H)))
    return fusion


def steps(program: fl.Program) -> list[tuple[str, str, int]]:
    """(kind, the parallel types of its teams, bytes per device) of each communication."""
    return [
        (c.kind.value, "/".join(c.group_names), c.bytes_per_device) for c in program.communications
    ]


def ring(kind: str, elements: int, d: int) -> int:
    """The bytes one device sends in the textbook ring collective of `elements` float32
    values over d devices."""
    return -(-elements // d) * 4 * (d - 1) * (2 if kind == "Allreduce" else 1)


ACT, W = B * S * H, F * H  # the elements of an activation [B, S, H] and of a weight


def run_and_check(fusion: fl.Fusion) -> fl.Program:
    """Check that each gradient is placed as its input, lower the derived fusion, run it
    on the simulated mesh and validate it against the reference evaluator of the same
    fusion; the lowered program."""
    by_name = {t.user_name: t for t in fusion.inputs}
    for g in fusion.outputs[1:]:
        assert g.placements == by_name[g.user_name.removeprefix("grad_")].placements
    program = fl.lower(fusion)
    inputs = fl.random_inputs(fusion, seed=3)
    outputs = fl.FusionExecutor(program).run(inputs)
    fl.validate(fusion, inputs, outputs)
    return program


def test_data_parallel_allreduces_each_gradient_over_the_data_axis() -> None:
    d = 4
    program = run_and_check(
        fl.grad(mlp_loss("dp", fl.DeviceMesh.for_num_devices(d)), ["w1", "b1", "w2", "b2"])
    )
    assert steps(program) == [
        ("Allreduce", "DIDx", ring("Allreduce", 1, d)),  # the loss
        *(("Allreduce", "DIDx", ring("Allreduce", n, d)) for n in (W, F, W, H)),
    ]


@pytest.mark.parametrize(
    ("wrt", "gathers"),
    [
        # the backward reads w2 (for the gradient of h) but never w1: x needs no gradient
        (["w1", "w2"], {"w1": 1, "w2": 2}),
        (["x", "w1", "w2"], {"w1": 2, "w2": 2}),  # the textbook's 2 + 1 for every weight
    ],
)
def test_fsdp_gathers_weights_forward_and_backward_and_reduce_scatters_gradients(
    wrt: list[str], gathers: dict[str, int]
) -> None:
    d = 4
    program = run_and_check(fl.grad(mlp_loss("fsdp", fl.DeviceMesh.for_num_devices(d)), wrt))
    gathered = [c.input.user_name for c in program.communications if c.kind.value == "Allgather"]
    assert {n: gathered.count(n) for n in ("w1", "w2")} == gathers
    assert sorted(steps(program)) == sorted(
        [("Allgather", "DIDx", ring("Allgather", W, d))] * sum(gathers.values())
        + [("ReduceScatter", "DIDx", ring("ReduceScatter", W, d))] * 2
        + [("Allreduce", "DIDx", ring("Allreduce", 1, d))]  # the loss
    )
    scattered = [c.output for c in program.communications if c.kind.value == "ReduceScatter"]
    assert all(
        str(c.after) == "(S0)" for c in program.communications if c.kind.value == "ReduceScatter"
    )
    assert len(scattered) == 2


def test_fsdp_without_regather_keeps_the_forward_copy() -> None:
    fusion = mlp_loss("fsdp", fl.DeviceMesh.for_num_devices(4))
    program = run_and_check(fl.grad(fusion, ["x", "w1", "w2"], regather=False))
    assert [k for k, _, _ in steps(program)].count("Allgather") == 2


def test_megatron_allreduces_the_input_gradient_at_the_column_parallel_linear() -> None:
    d = 4
    fusion = mlp_loss("tp", fl.DeviceMesh.for_num_devices(d))
    program = run_and_check(fl.grad(fusion, ["x", "w1", "b1", "w2", "b2"]))
    ar = ("Allreduce", "DIDx", ring("Allreduce", ACT, d))
    assert steps(program) == [ar, ar]  # forward's g after w2, backward's f before w1
    forward, backward = program.communications
    assert forward.input.definition.op_name == "linear"
    assert backward.input.definition.op_name == "matmul"  # g w1: partial over w1's rows


def test_sequence_parallel_backward_is_the_forward_s_duals() -> None:
    d = 4
    fusion = mlp_loss("sp", fl.DeviceMesh.for_num_devices(d))
    program = run_and_check(fl.grad(fusion, ["x", "w1", "b1", "w2", "b2"]))
    ag, rs = (
        ("Allgather", "DIDx", ring("Allgather", ACT, d)),
        (
            "ReduceScatter",
            "DIDx",
            ring("ReduceScatter", ACT, d),
        ),
    )
    assert steps(program) == [
        ag,  # forward: x gathered before the column-parallel linear
        rs,  # forward: y's partial sums reduce-scattered over the sequence
        ("Allreduce", "DIDx", ring("Allreduce", 1, d)),  # the loss
        ag,  # backward: y's gradient gathered (the dual of the ReduceScatter)
        rs,  # backward: x's gradient reduce-scattered (the dual of the Allgather)
        ("Allreduce", "DIDx", ring("Allreduce", H, d)),  # b2: replicated, read per shard
    ]


def test_data_and_tensor_parallel_on_a_2d_mesh_use_each_axis_teams() -> None:
    mesh = fl.DeviceMesh.for_shape([2, 4])
    program = run_and_check(fl.grad(mlp_loss("dp_tp", mesh), ["x", "w1", "b1", "w2", "b2"]))
    half = ACT // 2  # each DIDx team holds half the batch
    assert steps(program) == [
        ("Allreduce", "DIDx", ring("Allreduce", half, 4)),  # forward, row-parallel output
        ("Allreduce", "DIDy", ring("Allreduce", 1, 2)),  # the loss over the data axis
        ("Allreduce", "DIDx", ring("Allreduce", half, 4)),  # backward, x's gradient
        # the weight gradients over the data axis, each of a DIDx device's slice
        ("Allreduce", "DIDy", ring("Allreduce", W // 4, 2)),
        ("Allreduce", "DIDy", ring("Allreduce", F // 4, 2)),
        ("Allreduce", "DIDy", ring("Allreduce", W // 4, 2)),
        ("Allreduce", "DIDy", ring("Allreduce", H, 2)),
    ]
