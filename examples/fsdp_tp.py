"""FSDP x tensor parallelism on a 2x4 mesh (8 simulated devices): lower, explain, run, validate.

    python examples/fsdp_tp.py

The pattern seed 000 comes from. Mesh axis 0 (DIDy, 2 devices) is the data axis,
mesh axis 1 (DIDx, 4 devices) the tensor-parallel one. The batch is split over
DIDy. Each weight is sharded over both mesh axes: over DIDx as Megatron shards it
(w1 on its output features, w2 on its input features) and over DIDy on its other
axis, as FSDP keeps a slice of every parameter per data-parallel rank. Before each
linear the weight is all-gathered over the data axis (DIDy teams); the second
linear's partial sums are reduce-scattered over the DIDx teams after it.
"""

from __future__ import annotations

import fuserlite as fl
from fuserlite.plan import Placement
from fuserlite.schedule.shard import shard_as

MESH = fl.DeviceMesh.for_shape([2, 4])
BATCH, SEQ, HIDDEN, FFN = 4, 8, 16, 64


def fsdp_tp_mlp() -> fl.Fusion:
    """out = linear(gelu(linear(x, w1)), w2), out sharded (batch over DIDy, hidden over DIDx)."""
    with fl.Fusion() as fusion:
        x = fl.tensor([BATCH, SEQ, HIDDEN], name="x")
        w1 = fl.tensor([FFN, HIDDEN], name="w1")
        w2 = fl.tensor([HIDDEN, FFN], name="w2")
        for t in (x, w1, w2):
            fusion.add_input(t)
        shard_as(x, MESH, Placement.parse("(S0,R)", 3))  # batch over DIDy
        shard_as(w1, MESH, Placement.parse("(S1,S0)", 2))  # FSDP on axis 1, TP on axis 0
        shard_as(w2, MESH, Placement.parse("(S0,S1)", 2))  # FSDP on axis 0, TP on axis 1
        # FSDP: gather each weight over the data axis right before its use (a Set to the
        # placement without the DIDy shard, as DTensor's redistribute).
        w1_full, w2_full = fl.set(w1), fl.set(w2)
        shard_as(w1_full, MESH, Placement.parse("(R,S0)", 2))
        shard_as(w2_full, MESH, Placement.parse("(R,S1)", 2))
        out = fl.linear(fl.gelu(fl.linear(x, w1_full)), w2_full)
        shard_as(out, MESH, Placement.parse("(S0,S2)", 3))  # reduce-scattered over DIDx
        fusion.add_output(out)
    return fusion


def main() -> None:
    """Lower the MLP, print its communications and why each is there, then run it."""
    fusion = fsdp_tp_mlp()
    program = fl.lower(fusion)
    for comm in program.communications:
        print(
            f"{comm.kind.value} on {'/'.join(comm.group_names)} teams: {comm.before} -> "
            f"{comm.after}, {comm.bytes_per_device} B/device"
        )
    print(fl.explain(program), end="")
    kinds = ", ".join(c.kind.value for c in program.communications)
    print(f"communications: {kinds}")
    executor = fl.FusionExecutor(program, backend="sim")
    inputs = fl.random_inputs(fusion, seed=0)
    outputs = executor.run(inputs)
    checked = fl.validate(fusion, inputs, outputs)  # a Program: against the reference
    print(f"validation ok: {checked.summary()[0]}")


if __name__ == "__main__":
    main()
