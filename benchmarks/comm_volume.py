"""Bytes each device sends, per lowered program, against the lower bound (docs/design.md §5, §8).

    python benchmarks/comm_volume.py

For every row of the §5 table (x[512, 512] float32 resharded) and for the two
Megatron MLPs, on D = 2, 4, 8 simulated devices: lower the fusion, run it and
validate it against the reference, then sum `bytes_per_device` over the
program's communications. The lower bound of a §5 row is its formula; for the
tensor-parallel MLP it is one Allreduce of the output, 2(D-1)/D * B_out, and
for the sequence-parallel MLP an Allgather of x plus a ReduceScatter of the
output, (D-1)/D * (B_x + B_out), and for the transformer block (bfloat16,
Megatron-SP) four collectives of the activation, two Allgathers of it and two
ReduceScatters of its float32 partial sums, 6 (D-1)/D * B_act.

Uneven rows: the §5 rows whose collectives chunk an axis (Allgather, AllToAll,
ReduceScatter, Scatter, Gather) on x[509, 509] float32 (509 is prime: no D
divides it) on D = 3, 4, 8, lowered with padded and with variable-size chunks
(`lower-communications[chunks=...]`) and with the default choice, each run and
validated; against the even bound (the §5 formula on the real extents) and the
padded bound (the formula on extents padded to D * ceil(n/D)).

Prints the tables, writes results/comm_volume.json.
"""

from __future__ import annotations

from collections.abc import Callable

from _report import Table, write_json

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.fusion import Fusion
from fuserlite.pipeline import default_pass_names

DEVICES = (2, 4, 8)
ROWS = COLS = 512
MLP = {"batch": 4, "seq": 128, "hidden": 256}  # float32; B_x = B_out = 512 KiB
UNEVEN = 509  # x[509, 509]: prime, so every D leaves short chunks
UNEVEN_DEVICES = (3, 4, 8)
CHUNKED = ("allgather", "alltoall", "reduce-scatter", "scatter", "gather")
BLOCK = models.BlockShape(batch=4, seq=128, hidden=256, heads=8)  # bfloat16: 256 KiB


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
        (
            "transformer-block",
            lambda: models.transformer_block(d, "bfloat16", BLOCK),
            # Megatron-SP: 2 Allgathers of the bfloat16 activation, 2 ReduceScatters of
            # its partial sums, which are float32 (insert-reshardings.partial_dtype)
            2 * ((d - 1) * (activation // 2) // d) + 2 * ((d - 1) * activation // d),
        ),
    ]


def measure(fusion: Fusion, chunks: str = "cheaper") -> tuple[list[str], int]:
    """Run and validate `fusion`; its communications' kinds and summed bytes per device."""
    pipeline = fl.Pipeline(default_pass_names(**{"lower-communications": f"chunks={chunks}"}))
    executor = fl.FusionExecutor(fusion, pipeline=pipeline)
    inputs = fl.random_inputs(fusion, seed=0)
    fl.validate(fusion, inputs, executor.run(inputs))
    comms = executor.communications
    kinds = [
        c.kind.value + ("" if c.sizing.value == "even" else f" {c.sizing.value}") for c in comms
    ]
    return kinds, sum(c.bytes_per_device for c in comms)


def uneven_rows() -> list[dict]:
    """The chunking §5 rows on x[509, 509], padded, variable-size and the default choice."""
    rows = []
    title = f"uneven: x[{UNEVEN}, {UNEVEN}] float32, bytes sent per device"
    columns = ["case", "D", "even bound", "padded bound", "padded", "variable", "chosen"]
    with Table(title, columns, widths=[14, 2, 10, 12, 10, 10, 18]) as table:
        for d in UNEVEN_DEVICES:
            padded_extent = d * -(-UNEVEN // d)
            even = {c.name: c for c in models.resharding_cases(d, UNEVEN, UNEVEN)}
            pad = {c.name: c for c in models.resharding_cases(d, padded_extent, padded_extent)}
            for name in CHUNKED:
                build = even[name].build
                sent = {chunks: measure(build(), chunks) for chunks in ("padded", "variable")}
                chosen, chosen_bytes = measure(build())
                r = {
                    "case": name,
                    "devices": d,
                    "even_bound": even[name].bytes_per_device,
                    "padded_bound": pad[name].bytes_per_device,
                    "padded": sent["padded"][1],
                    "variable": sent["variable"][1],
                    "chosen": chosen,
                    "chosen_bytes": chosen_bytes,
                }
                rows.append(r)
                table.row(
                    name,
                    d,
                    r["even_bound"],
                    r["padded_bound"],
                    r["padded"],
                    r["variable"],
                    " + ".join(chosen),
                )
        over = [
            r for r in rows if r["variable"] > r["even_bound"] or r["padded"] > r["padded_bound"]
        ]
        table.note(f"{len(over)} of {len(rows)} plans move more than their bound")
    return rows


def main() -> None:
    """Measure every case on every mesh size; print each row as it is measured, save them."""
    rows = []
    title = (
        f"bytes sent per device: §5 cases x[{ROWS}, {COLS}] float32, MLPs {MLP}, "
        f"transformer block {BLOCK} bfloat16"
    )
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
    uneven = uneven_rows()
    write_json(
        "comm_volume",
        {
            "shape": [ROWS, COLS],
            "mlp": MLP,
            "block": vars(BLOCK),
            "devices": list(DEVICES),
            "rows": rows,
            "uneven": {"shape": [UNEVEN, UNEVEN], "devices": list(UNEVEN_DEVICES), "rows": uneven},
        },
    )


if __name__ == "__main__":
    main()
