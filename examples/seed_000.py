"""Seed 000 as torch_xla writes it, in fl.shard_map, on 8 simulated devices: t5 = 65536
on every device.

    python examples/seed_000.py

Per device: all_gather -> all_reduce -> reduce_scatter -> sum of ones, the program
PyTorch/XLA rejected for mixing layout-pinned and free all-reduces. shard_map builds
it as a global-view fusion; assign-layouts pins every collective, so it lowers and runs.
"""

from __future__ import annotations

import numpy as np

import fuserlite as fl

NUM_DEVICES = 8
LOCAL = 1024
DIDx = fl.ParallelType.DIDx


def build() -> fl.Fusion:
    """The seed's _mp_fn, one local program per device (fuserlite.models has the same)."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(NUM_DEVICES)
        t1 = fl.tensor([NUM_DEVICES * LOCAL], name="t1")  # device d holds block d: ones(1024)
        fusion.add_input(t1)

        @fl.shard_map(mesh=mesh, in_specs=[(DIDx,)], out_specs=[(DIDx,)])
        def mp_fn(t1):
            t2 = fl.all_gather(t1)  # [8192] on every device
            t3 = fl.all_reduce(t2, "sum")  # 8 everywhere
            t4 = fl.reduce_scatter(t3, "sum", scatter_dim=0, shard_count=NUM_DEVICES)  # [1024]
            t5 = fl.sum(t4)  # this device's own sum: 65536
            return fl.reshape(t5, [1])

        fusion.add_output(mp_fn(t1))
    return fusion


def main() -> None:
    """Run the seed's program and print each device's t5 and the three collectives."""
    fusion = build()
    executor = fl.FusionExecutor(fusion, backend="sim")
    inputs = [np.ones(NUM_DEVICES * LOCAL, np.float32)]
    for device, (t5,) in executor.run_per_device(inputs).items():
        print(f"device {device}: t5 = {t5[0]:g}")
    for line in executor.program.fusion.print_math().splitlines():
        if line.startswith("Communication"):
            print(line)
    fl.validate(fusion, inputs, executor.run(inputs))
    kinds = ", ".join(c.kind.value for c in executor.communications)
    print(f"communications: {kinds}; validation ok")


if __name__ == "__main__":
    main()
