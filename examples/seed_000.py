"""Seed 000 with the SPMD API on 8 simulated devices: t5 = 65536 on every device.

    python examples/seed_000.py

all_gather -> all_reduce -> reduce_scatter -> local sum of ones: the program
PyTorch/XLA rejected for mixing layout-pinned and free all-reduces. Here
assign-layouts pins every collective, so it lowers and runs.
"""

from __future__ import annotations

import numpy as np

import fuserlite as fl
from fuserlite import models

NUM_DEVICES = 8
LOCAL = 1024


def main() -> None:
    """Run the seed's program and print each device's t5 and the three collectives."""
    fusion = models.all_gather_all_reduce_reduce_scatter(NUM_DEVICES, LOCAL)
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
