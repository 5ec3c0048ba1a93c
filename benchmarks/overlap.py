"""Modelled step time and exposed communication, against the ideal pipelined bound.

    python benchmarks/overlap.py [--machine NAME]

For every example (.fus, at its file's sizes) and three programs at the sizes people
run (bfloat16 on 8 devices: nvFuser's Allgather + matmul, the sequence-parallel MLP
and the transformer block of Megatron-SP), lowered by the default pipeline and
scheduled by fl.timeline on the machine model (default h100-nvlink): the step time,
compute C and communication M (the busiest device's), the communication exposed
(no compute beside it), and the ideal pipelined bound of S chunks,
max(C, M) + min(C, M) / S, for S = 2, 4, 8: what Stream parallelization could reach
where every communication hides behind the compute of another chunk. Without
Stream nothing overlaps: exposed = M and the step time is C + M.

The second table streams nvFuser's Allgather + GEMM by hand, as a host program: x in
S chunks (separate tensors, models.allgather_matmul(chunks=S)), chunk i's Allgather
posted and waited for on stream i + 1 and its matmul after it there
(fuserlite.program.streams), at a compute-bound and a communication-bound size: the
step time with and without streams, the exposed communication, and the ratio to the
ideal bound.

The third table is ParallelType.Stream as the compiler lowers it: the same Allgather
+ matmul, the sequence-parallel MLP and the transformer block lowered with
`lower-streams[chunks=S]` (`fuserlite timeline --streams S`: each Allgather and
every matmul/linear that reads it in one loop, each matmul/linear + ReduceScatter
pair in another, cut into S chunks of every device's block), and the block at the
size of examples/transformer_block_overlap.fus: step time, exposed communication,
and the ratio to the ideal bound of the unstreamed C and M.

The fourth table is the ring-based pipeline (nvFuser's swizzle1d, passes/ring_streams.py):
the Allgather + matmul of the second table's sizes with its output's row blocks
swizzled by DIDx and Stream-parallel (8 steps, each a CollectivePermute of one block
and a matmul of one block), against the unstreamed program, lower-streams[chunks=8]'s
collective-based pipeline and the ideal bound of 8 chunks.

Prints the tables, writes results/overlap.json. A model, not a measurement: it runs
no kernel (seconds per run, not per program size).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from _report import Table, write_json

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.fusion import Fusion
from fuserlite.pipeline import default_pass_names
from fuserlite.program import host
from fuserlite.program.streams import stream_chunks

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
STREAMS = (2, 4, 8)
DEVICES = 8
BLOCK = models.BlockShape(batch=4, seq=2048, hidden=4096, heads=32)  # GPT-3 6.7B's widths
AG_MATMUL = {"m": 8192, "k": 4096, "n": 8192}  # nvFuser's AGMatmulTest is [S, D, M/(S D), K]
PIPELINED = {  # compute-bound (C = 4.3 M) and communication-bound (C = 0.53 M) on h100-nvlink
    "8192x4096x8192": AG_MATMUL,
    "8192x8192x1024": {"m": 8192, "k": 8192, "n": 1024},
}


def cases() -> list[tuple[str, Callable[[], Fusion]]]:
    """The examples at their sizes, then the three programs at full size."""
    found = [(p.stem, lambda p=p: fl.load(p)) for p in sorted(EXAMPLES.glob("*.fus"))]
    size = f"{AG_MATMUL['m']}x{AG_MATMUL['k']}x{AG_MATMUL['n']}"
    return [
        *found,
        (f"ag-matmul {size}", lambda: models.allgather_matmul(DEVICES, **AG_MATMUL)),
        (
            "sp-mlp 4x2048x4096",
            lambda: models.tensor_parallel_mlp(
                DEVICES, batch=4, seq=2048, hidden=4096, sequence_parallel=True
            ),
        ),
        (
            "transformer-block 4x2048x4096",
            lambda: models.transformer_block(DEVICES, "bfloat16", BLOCK),
        ),
    ]


def bound(compute: float, comm: float, s: int) -> float:
    """The ideal pipelined step time of s chunks: max(C, M) + min(C, M) / s."""
    return max(compute, comm) + min(compute, comm) / s


def main() -> None:
    """Model every case; print each row as it is computed, save them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machine", default=None, help="a machine model (default h100-nvlink)")
    options = parser.parse_args()
    rows = []
    title = "modelled step time (us), without Stream, and the ideal pipelined bound of S chunks"
    columns = ["program", "step", "compute", "comm", "exposed", *(f"S={s}" for s in STREAMS)]
    with Table(title, columns, widths=[30, 8, 8, 8, 8, 8, 8, 8]) as table:
        for name, build in cases():
            tl = fl.timeline(fl.lower(build()), options.machine)
            t = tl.totals()
            r = {
                "program": name,
                "machine": tl.machine.name,
                "devices": len(tl.devices),
                "step_time_s": tl.step_time,
                "compute_s": t.compute,
                "communication_s": t.communication,
                "exposed_s": t.exposed,
                "bound_s": {s: bound(t.compute, t.communication, s) for s in STREAMS},
            }
            rows.append(r)
            us = [x * 1e6 for x in (tl.step_time, t.compute, t.communication, t.exposed)]
            table.row(name, *us, *(r["bound_s"][s] * 1e6 for s in STREAMS))
        table.note(
            "without Stream every communication is exposed (step = compute + comm); "
            "S=n: max(C, M) + min(C, M) / n"
        )
    streamed = pipelined(options.machine)
    lowered = stream_parallel(options.machine)
    rings = ring(options.machine)
    write_json(
        "overlap",
        {"rows": rows, "streamed": streamed, "stream_parallel": lowered, "ring": rings},
    )


def ring_fusion(m: int, k: int, n: int, ring: bool) -> Fusion:
    """x [M, K] (rows over DIDx) @ w [K, N] in bfloat16, the product's row blocks
    swizzled by DIDx and Stream-parallel (`ring`), else unscheduled."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(DEVICES)
        x = fl.tensor([m, k], "bfloat16", name="x")
        w = fl.tensor([k, n], "bfloat16", name="w")
        for t in (x, w):
            t.set_device_mesh(mesh)
            f.add_input(t)
        x.outer_split(0, DEVICES)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        y = fl.matmul(x, w)
        y.set_device_mesh(mesh)
        if ring:
            y.outer_split(0, DEVICES)
            y.swizzle1d(0, fl.ParallelType.DIDx)
            y.axis(0).parallelize(fl.ParallelType.Stream)
        f.add_output(y)
    return f


def ring(machine: str | None) -> list[dict]:
    """The ring-based pipeline against no Stream and the collective-based one (S = 8)."""
    rows = []
    title = "ring-based pipeline (swizzle1d, 8 steps) (us)"
    columns = ["size", "pipeline", "step", "exposed", "ideal", "step/ideal"]
    with Table(title, columns, widths=[16, 18, 8, 8, 8, 10]) as table:
        for size, shape in PIPELINED.items():
            plain = fl.lower(ring_fusion(**shape, ring=False))
            base = fl.timeline(plain, machine).totals()
            ideal = bound(base.compute, base.communication, DEVICES)
            collective = default_pass_names(**{"lower-streams": f"chunks={DEVICES}"})
            programs = {
                "none": plain,
                "collective S=8": fl.Pipeline(collective).run(ring_fusion(**shape, ring=False)),
                "ring": fl.lower(ring_fusion(**shape, ring=True)),
            }
            for how, program in programs.items():
                tl = fl.timeline(program, machine)
                t = tl.totals()
                rows.append(
                    {
                        "size": size,
                        "pipeline": how,
                        "step_time_s": tl.step_time,
                        "exposed_s": t.exposed,
                        "ideal_s": ideal,
                    }
                )
                us = [x * 1e6 for x in (tl.step_time, t.exposed, ideal)]
                table.row(size, how, *us, tl.step_time / ideal)
        table.note("ideal: max(C, M) + min(C, M) / 8 of the unstreamed program's C and M")
    return rows


def stream_parallel(machine: str | None) -> list[dict]:
    """The pairs of each full-size program Stream-parallel in S chunks by lower-streams."""
    rows = []
    title = "ParallelType.Stream by lower-streams[chunks=S] (us): --streams S"
    columns = ["program", "S", "loops", "step", "exposed", "ideal", "step/ideal"]
    with Table(title, columns, widths=[30, 2, 5, 8, 8, 8, 10]) as table:
        example = EXAMPLES / "transformer_block_overlap.fus"
        at_example = [("transformer_block_overlap", lambda: fl.load(example))]
        for name, build in [*cases()[-3:], *at_example]:
            fusion = build()
            base = fl.timeline(fl.lower(fusion), machine).totals()
            for s in (0, *STREAMS):
                names = default_pass_names(**{"lower-streams": f"chunks={s}"})
                program = fl.Pipeline(names).run(fusion)
                tl = fl.timeline(program, machine)
                t = tl.totals()
                ideal = bound(base.compute, base.communication, max(s, 1))
                loops = sum(isinstance(x, host.ForLoop) for x in program.steps)
                rows.append(
                    {
                        "program": name,
                        "chunks": s,
                        "loops": loops,
                        "step_time_s": tl.step_time,
                        "exposed_s": t.exposed,
                        "ideal_s": ideal,
                    }
                )
                us = [x * 1e6 for x in (tl.step_time, t.exposed, ideal)]
                table.row(name, s, loops, *us, tl.step_time / ideal)
        table.note(
            "S=0: no Stream, ideal C + M at S=1; ideal: "
            "max(C, M) + min(C, M) / S of the unstreamed program's C and M"
        )
    return rows


def pipelined(machine: str | None) -> list[dict]:
    """AG + matmul in S chunks, each on its stream, against the same chunks unstreamed."""
    rows = []
    title = "Allgather + matmul in S chunks on S streams (us): a host program, by hand"
    columns = ["size", "S", "no streams", "streams", "exposed", "bound", "ideal", "streams/ideal"]
    with Table(title, columns, widths=[16, 2, 10, 8, 8, 8, 8, 13]) as table:
        for size, shape in PIPELINED.items():
            whole = fl.timeline(fl.lower(models.allgather_matmul(DEVICES, **shape)), machine)
            c1, m1 = whole.totals().compute, whole.totals().communication
            for s in (1, *STREAMS):
                flat = fl.lower(models.allgather_matmul(DEVICES, chunks=s, **shape))
                before = fl.timeline(flat, machine)
                tl = fl.timeline(stream_chunks(flat), machine)
                t = tl.totals()
                ideal = bound(t.compute, t.communication, s)
                r = {
                    "size": size,
                    "chunks": s,
                    "unstreamed_s": before.step_time,
                    "streamed_s": tl.step_time,
                    "exposed_s": t.exposed,
                    "compute_s": t.compute,
                    "communication_s": t.communication,
                    "bound_s": ideal,
                    "ideal_s": bound(c1, m1, s),
                }
                rows.append(r)
                us = [
                    x * 1e6
                    for x in (before.step_time, tl.step_time, t.exposed, ideal, r["ideal_s"])
                ]
                table.row(size, s, *us, tl.step_time / r["ideal_s"])
        table.note(
            "bound: max(C, M) + min(C, M) / S of the chunks' compute C and communication M "
            "(each chunk pays its launch and latency); ideal: the same of the unchunked C, M"
        )
    return rows


if __name__ == "__main__":
    main()
