"""A training step of the GPT block, tensor + sequence parallel on 8 simulated devices.

    python examples/transformer_train_step.py               # bfloat16
    python examples/transformer_train_step.py --dtype float32

The block of examples/transformer_block.py (fuserlite.models.transformer_block:
layer_norm, q/k/v column-parallel, causal attention with dropout on each device's
heads, the row-parallel output projection, dropout, residual, layer_norm, the MLP)
with a loss, mean(y**2) computed in float32. `fl.grad` derives its gradient with
respect to x and every parameter, each placed as its parameter, and the planner
lowers forward and backward together. The forward moves what Megatron-SP moves (an
Allgather of the normalized activations before the column-parallel linears, a
ReduceScatter of the row-parallel partial sums); the backward moves the duals: an
Allgather of the gradient reaching each row-parallel linear, a ReduceScatter of the
gradient leaving each column-parallel one (three for q, k and v, which are three
linears here; Megatron's fused QKV linear makes it one), and an Allreduce of the
gradient of each parameter the sequence shards all read (the layer norms' weights and
the biases added after a ReduceScatter). Attention's backward (sdpa_bwd) draws the
forward's dropout mask again and needs nothing from other devices. The step is run and
checked against the reference evaluator of the derived fusion, and its time modelled on
8 H100s on NVLink (fl.timeline: compute, communication and what is exposed).
"""

from __future__ import annotations

import argparse

import fuserlite as fl
from fuserlite import models
from fuserlite.timing.chart import totals_text
from fuserlite.timing.units import seconds_text


def block_loss(dtype: str, devices: int = 8) -> fl.Fusion:
    """The block with one output, the loss mean(y**2) in float32."""
    fusion = models.transformer_block(devices, dtype)
    with fusion:
        y = fl.cast(fusion.outputs[0], "float32")
        loss = fl.mul(fl.sum(fl.mul(y, y)), 1.0 / y.shape[0] / y.shape[1] / y.shape[2])
        loss.user_name = "loss"
    fusion.replace_output(fusion.outputs[0], loss)
    return fusion


def main(argv: list[str] | None = None) -> None:
    """Derive, lower, run and validate the step; print the communications of each half."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    options = parser.parse_args(argv)
    forward = block_loss(options.dtype)
    step = fl.grad(forward, [t.user_name for t in forward.inputs])
    program = fl.lower(step)
    comms = program.communications
    # The step's program runs the forward first: its communications come first.
    n = len(fl.lower(forward).communications)
    print(f"transformer block training step, {options.dtype}, 8 sim devices:")
    for title, part in (("forward", comms[:n]), ("backward", comms[n:])):
        print(f"{title}: {', '.join(c.kind.value for c in part)}")
        for c in part:
            what = f"{c.kind.value} {c.input.dtype.name}{list(c.input.shape)}"
            print(f"  {what}: {c.before} -> {c.after}, {c.bytes_per_device} B/device")
    inputs = fl.random_inputs(step, seed=0)
    outputs = fl.FusionExecutor(program).run(inputs)
    checked = fl.validate(step, inputs, outputs)
    print(f"loss {float(outputs[0]):.5f}; {len(outputs) - 1} gradients, each placed as its input")
    print(f"validation ok: {checked.summary()[0]}")
    # The step's modelled time (`fuserlite timeline` of it draws the chart per device):
    # on one stream per device every communication is exposed.
    forward_time, step_time = fl.timeline(forward), fl.timeline(program)
    print(
        f"step time {seconds_text(step_time.step_time)} on {step_time.machine.name} (forward "
        f"{seconds_text(forward_time.step_time)}): {totals_text(step_time)}",
        end="",
    )


if __name__ == "__main__":
    main()
