"""The tensor-parallel MLP on 2 simulated devices: lower, run, validate.

    python examples/tp_mlp.py

Builds the fusion of examples/tp_mlp.fus in Python, prints its lowered
communications (one Allreduce) and checks the outputs against the reference.
"""

from __future__ import annotations

import fuserlite as fl
from fuserlite import models


def main() -> None:
    """Run the MLP and its sequence-parallel variant; print what moved between devices."""
    for sequence_parallel in (False, True):
        fusion = models.tensor_parallel_mlp(2, sequence_parallel=sequence_parallel)
        executor = fl.FusionExecutor(fusion, backend="sim")
        inputs = fl.random_inputs(fusion, seed=0)
        outputs = executor.run(inputs)
        checked = executor.validate(inputs, outputs)
        title = "sequence-parallel" if sequence_parallel else "tensor-parallel"
        print(f"{title} MLP, output {list(outputs[0].shape)}:")
        for line in executor.program.fusion.print_math().splitlines():
            if line.startswith("Communication"):
                print(f"  {line}")
        kinds = ", ".join(c.kind.value for c in executor.communications)
        print(f"  communications: {kinds}; validation ok")
        for line in checked.lines():
            print(f"    {line}")


if __name__ == "__main__":
    main()
