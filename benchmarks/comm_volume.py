"""Bytes each device sends, per lowered program, against the lower bound (docs/design.md §5, §8).

    python benchmarks/comm_volume.py

For every row of the §5 table (x[512, 512] float32 resharded) and for the two
Megatron MLPs, on D = 2, 4, 8 simulated devices: lower the fusion, run it and
validate it against the reference, then sum `bytes_per_device` over the
program's communications. The lower bound of a §5 row is its formula; for the
tensor-parallel MLP it is one Allreduce of the output, 2(D-1)/D * B_out, and
for the sequence-parallel MLP an Allgather of x plus a ReduceScatter of the
output, (D-1)/D * (B_x + B_out). Prints a table, writes results/comm_volume.json.
"""

from __future__ import annotations

from collections.abc import Callable

from _report import Table, write_json

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.fusion import Fusion

DEVICES = (2, 4, 8)
ROWS = COLS = 512
MLP = {"batch": 4, "seq": 128, "hidden": 256}  # float32; B_x = B_out = 512 KiB


Case = tuple[str, Callable[[], Fusion], int]  # name, builder, lower bound in bytes


def cases(d: int) -> list[Case]:
    """Every §5 row, then the two Megatron MLPs, on d devices with their lower bounds."""
    activation = MLP["batch"] * MLP["seq"] * MLP["hidden"] * 4  # B_x = B_out
    rows = [(c.name, c.build, c.bytes_per_device) for c in models.resharding_cases(d, ROWS, COLS)]
    return [
        *rows,
        ("tp-mlp", lambda: models.tensor_parallel_mlp(d, **MLP), 2 * (d - 1) * activation // d),
        (
            "sp-mlp",
            lambda: models.tensor_parallel_mlp(d, **MLP, sequence_parallel=True),
            2 * ((d - 1) * activation // d),
        ),
    ]


def measure(fusion: Fusion) -> tuple[list[str], int]:
    """Run and validate `fusion`; its communications' kinds and summed bytes per device."""
    executor = fl.FusionExecutor(fusion)
    inputs = fl.random_inputs(fusion, seed=0)
    fl.validate(fusion, inputs, executor.run(inputs))
    comms = executor.communications
    return [c.kind.value for c in comms], sum(c.bytes_per_device for c in comms)


def main() -> None:
    """Measure every case on every mesh size; print each row as it is measured, save them."""
    rows = []
    title = f"bytes sent per device: §5 cases x[{ROWS}, {COLS}] float32, MLPs {MLP}"
    columns = ["case", "D", "communications", "bytes/device", "lower bound", "ratio"]
    with Table(title, columns, widths=[22, 2, 26, 12, 12, 5]) as table:
        for d in DEVICES:
            for name, build, bound in cases(d):
                kinds, sent = measure(build())
                r = {
                    "case": name,
                    "devices": d,
                    "communications": kinds,
                    "bytes_per_device": sent,
                    "lower_bound": bound,
                    "ratio": sent / bound if bound else None,  # None: nothing need move
                }
                rows.append(r)
                table.row(
                    name,
                    d,
                    " + ".join(kinds) or "(none)",
                    sent,
                    bound,
                    "-" if r["ratio"] is None else f"{r['ratio']:.2f}",
                )
        over = [r for r in rows if r["bytes_per_device"] > r["lower_bound"]]
        table.note(f"{len(over)} of {len(rows)} programs move more than the lower bound")
    write_json(
        "comm_volume",
        {"shape": [ROWS, COLS], "mlp": MLP, "devices": list(DEVICES), "rows": rows},
    )


if __name__ == "__main__":
    main()
