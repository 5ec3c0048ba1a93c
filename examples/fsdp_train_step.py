"""A training step of a 2-layer MLP under FSDP (ZeRO-3) on 4 simulated devices.

    python examples/fsdp_train_step.py

The batch is split over the 4 devices, and so is every weight: each device keeps a
quarter of w1's and w2's rows. The forward all-gathers each weight right before its
use (`fl.redistribute` to Replicate, as FSDP's unshard). `fl.grad` derives the
loss's gradients with respect to w1 and w2, each placed as its weight, so the planner
reduce-scatters them back to the shards. FSDP frees a gathered weight after its
forward use and gathers it again for the backward: fl.grad's `regather=True` does the
same, so w2 is gathered twice. w1 is gathered once: the backward never reads it,
because x needs no gradient (PyTorch's FSDP gathers it anyway, in its pre-backward
hook). The step's loss and gradients are checked against the reference evaluator of
the derived fusion, and against central differences of the forward.
"""

from __future__ import annotations

import numpy as np

import fuserlite as fl

DEVICES, BATCH, HIDDEN, FFN = 4, 8, 16, 32


def mlp_loss(dtype: str = "float32") -> fl.Fusion:
    """mean((linear(gelu(linear(x, w1)), w2) - target)**2), FSDP-sharded."""
    mesh = fl.DeviceMesh.for_num_devices(DEVICES)
    with fl.Fusion() as fusion:
        x = fl.tensor([BATCH, HIDDEN], dtype, name="x")
        target = fl.tensor([BATCH, HIDDEN], dtype, name="target")
        w1 = fl.tensor([FFN, HIDDEN], dtype, name="w1")
        w2 = fl.tensor([HIDDEN, FFN], dtype, name="w2")
        for t in (x, target, w1, w2):
            fusion.add_input(t)
            fl.distribute(t, mesh, [fl.Shard(0)])  # the batch, each weight's rows
        gathered = []
        for w in (w1, w2):  # FSDP's unshard: all-gathered right before use
            full = fl.redistribute(w, [fl.Replicate()])
            full.user_name = f"{w.user_name}_full"
            gathered.append(full)
        y = fl.linear(fl.gelu(fl.linear(x, gathered[0])), gathered[1])
        error = fl.sub(y, target)
        loss = fl.mul(fl.sum(fl.mul(error, error)), 1.0 / (BATCH * HIDDEN))
        loss.user_name = "loss"
        fusion.add_output(loss)
    return fusion


def role(comm, forward_comms: int, k: int) -> str:
    """What a communication of the step is for, in FSDP's words."""
    name = comm.input.user_name or comm.output.user_name or comm.input.ir_name
    if comm.kind.value == "Allgather":
        return f"{'forward' if k < forward_comms else 'backward'}: unshard {name}"
    if comm.kind.value == "ReduceScatter":
        return f"backward: reduce-scatter {comm.output.user_name}"
    return "forward: the loss summed over the batch shards"


def main() -> None:
    """Derive the step, print its collectives and why, run it and check its gradients."""
    forward = mlp_loss()
    step = fl.grad(forward, ["w1", "w2"])
    program = fl.lower(step)
    forward_comms = len(fl.lower(forward).communications)
    for k, c in enumerate(program.communications):
        print(
            f"{c.kind.value} on {'/'.join(c.group_names)} teams: {c.before} -> {c.after}, "
            f"{c.bytes_per_device} B/device ({role(c, forward_comms, k)})"
        )
    print(fl.explain(program), end="")
    kinds = ", ".join(c.kind.value for c in program.communications)
    print(f"communications: {kinds}")

    inputs = fl.random_inputs(step, seed=0)
    outputs = fl.FusionExecutor(program).run(inputs)
    checked = fl.validate(step, inputs, outputs)  # against the reference of the step
    loss, grad_w1, grad_w2 = outputs
    print(f"loss {float(loss):.6f}; gradients {[list(g.shape) for g in (grad_w1, grad_w2)]}")
    placed = [(g.placements, w.placements) for g, w in zip(step.outputs[1:], step.inputs[2:])]
    print(f"gradients placed as their weights: {placed[0][0]} as {placed[0][1]}")
    print(f"validation ok: {checked.summary()[0]}")

    # Central differences of the forward in float64 at a few elements of each weight.
    exact, wide = mlp_loss("float64"), [a.astype(np.float64) for a in inputs]
    worst = 0.0
    for k, got in ((2, grad_w1), (3, grad_w2)):
        for index in ((0, 0), (5, 3), (HIDDEN - 1, HIDDEN // 2)):
            index = index if k == 2 else index[::-1]
            up, down = [a.copy() for a in wide], [a.copy() for a in wide]
            up[k][index] += 1e-6
            down[k][index] -= 1e-6
            slope = (fl.evaluate(exact, up)[0] - fl.evaluate(exact, down)[0]) / 2e-6
            worst = max(worst, abs(float(slope) - float(got[index])) / max(1.0, abs(slope)))
    print(f"gradients match float64 central differences (max relative error {worst:.1g})")


if __name__ == "__main__":
    main()
