"""A GPT block in bfloat16, tensor-parallel with sequence parallelism on 8 devices.

    python examples/transformer_block.py                      # 8 simulated devices
    mpiexec -n 8 python examples/transformer_block.py --backend mpi

Builds fuserlite.models.transformer_block (layer_norm, q/k/v projections, causal
attention with dropout, output projection, dropout, residual, layer_norm, MLP with
gelu, dropout, residual), whose inputs it shards with DTensor's placements
(`fl.distribute(w, mesh, [fl.Shard(0)])`), lowers it, runs it, prints the sharded
inputs' placements and what moved between devices (exactly Megatron-SP's two
Allgathers and two ReduceScatters) and validates the output: against the same
program run on 1 device, then against the float reference, each within the rounding
possible at each element (FusionExecutor.validate).
"""

from __future__ import annotations

import argparse

import fuserlite as fl
from fuserlite import models


def main(argv: list[str] | None = None) -> None:
    """Run the block; print its communications and the validation (rank 0 only under MPI)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sim", "mpi"], default="sim")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--devices", type=int, default=8)
    options = parser.parse_args(argv)
    fusion = models.transformer_block(options.devices, options.dtype)
    executor = fl.FusionExecutor(fusion, backend=options.backend)
    inputs = fl.random_inputs(fusion, seed=0)
    outputs = executor.run(inputs)
    if outputs is None:  # an MPI rank other than 0: rank 0 reports
        return
    checked = executor.validate(inputs, outputs)
    print(f"transformer block, {options.dtype}, {options.devices} {options.backend} devices:")
    sharded = [t for t in fusion.inputs if t.placements != (fl.Replicate(),)]
    print("  placements: " + ", ".join(f"{t.user_name} {t.placements[0]}" for t in sharded))
    for c in executor.communications:
        print(f"  {c.kind.value} of {c.input.name}{list(c.input.shape)}")
    for line in checked.lines():
        print(f"  {line}")
    kinds = ", ".join(c.kind.value for c in executor.communications)
    error = max(checked.reference.max_errors)
    print(f"communications: {kinds}; validation ok (max abs error {error:.3g})")


if __name__ == "__main__":
    main()
