"""Streamed against unstreamed on MPI ranks: does overlap show in wall time?

    python benchmarks/overlap_mpi.py [--ranks 4] [--repeats 10] [--chunks 4]
                                     [--only ag_matmul|block] [--timeout SECONDS]

Two programs, each lowered twice, on `mpiexec -n RANKS` (the mpi backend, mpi4py +
MPICH): once with its Stream loops (each chunk's communication posted before the
chunk before it computes: runtime/host_loops.py `pipelined`) and once without
(lower-streams left out: each communication whole, then the kernels reading it):

- `ag_matmul`: examples/overlap_ag_matmul.fus's pipeline on RANKS devices, float32,
  x [8192, 1024] sharded on its rows, all-gathered, times w [1024, 64]; each device's
  block of rows in CHUNKS Stream chunks;
- `block`: the Megatron-SP transformer block (fuserlite.models.transformer_block,
  examples/transformer_block_overlap.fus's program) of batch 2, sequence 1024, hidden
  256, float32, no dropout, `--streams CHUNKS` (its two Allgather + linear pairs and
  two linear + ReduceScatter pairs in loops).

Each repeat runs the two forms one after the other (alternating which goes first),
every rank starting together (a barrier) and the slowest rank's time counting, after
one warm-up run of each. Prints a row per repeat as it is measured, then per program
the median and minimum of each form, streamed / unstreamed, and the spread (the
interquartile range of the repeat-by-repeat ratio), and the `cpu` machine model's step
times for comparison; writes benchmarks/results/overlap_mpi.json. Rank 0 also checks
that the two forms' outputs are equal bit for bit.

MPICH advances a non-blocking collective only inside MPI calls (no progress thread),
and the ranks share the machine's cores: the overlap measured is what the executor's
posts and waits get from that, not the model's ideal. One BLAS thread per rank unless
cores are left over. `--timeout` is the mpi backend's watchdog timeout (default 300 s;
`inf`: MPI_Waitall, no polling between naps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _report import Table, print_table, write_json

import fuserlite as fl
from fuserlite import models
from fuserlite.pipeline import DEFAULT_PASSES, Pipeline, default_pass_names

UNSTREAMED = [p for p in DEFAULT_PASSES if p != "lower-streams"]


def ag_matmul(d: int, chunks: int, m: int = 8192, k: int = 1024, n: int = 64) -> fl.Fusion:
    """x [m, k] sharded on its rows over d devices, y = x @ w, each device's block of
    y's rows in `chunks` Stream chunks."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(d)
        x, w = fl.tensor([m, k], "float32", name="x"), fl.tensor([k, n], "float32", name="w")
        for t in (x, w):
            t.set_device_mesh(mesh)
            f.add_input(t)
        x.outer_split(0, d)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        y = fl.matmul(x, w)
        y.set_device_mesh(mesh)
        y.outer_split(0, d)
        y.outer_split(1, chunks)
        y.axis(1).parallelize(fl.ParallelType.Stream)
        f.add_output(y)
    return f


BLOCK = models.BlockShape(batch=2, seq=1024, hidden=256, heads=8)


def programs(d: int, chunks: int, only: str | None) -> dict[str, tuple[fl.Program, fl.Program]]:
    """name -> (streamed, unstreamed) lowered programs."""
    out = {}
    if only in (None, "ag_matmul"):
        fusion = ag_matmul(d, chunks)
        out["ag_matmul"] = (fl.lower(fusion), Pipeline(UNSTREAMED).run(ag_matmul(d, chunks)))
    if only in (None, "block"):

        def block() -> fl.Fusion:
            return models.transformer_block(d, "float32", BLOCK, dropout_p=0.0)

        names = default_pass_names(**{"lower-streams": f"chunks={chunks}"})
        out["block"] = (Pipeline(names).run(block()), fl.lower(block()))
    return out


def worker(args: argparse.Namespace) -> None:
    """One rank: every program's two forms, alternating; rank 0 prints a JSON line per
    repeat (the slowest rank's seconds) and one per program at its end."""
    from mpi4py import MPI

    from fuserlite.runtime.backends.mpi import MpiCommunicator

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
    from overlap_order import same_bits

    world = MPI.COMM_WORLD
    rank0 = world.Get_rank() == 0
    for name, forms in programs(world.Get_size(), args.chunks, args.only).items():
        inputs = fl.random_inputs(forms[0].fusion, 0)
        backend = lambda: MpiCommunicator(timeout=args.timeout)  # noqa: E731
        executors = [fl.FusionExecutor(p, backend=backend()) for p in forms]
        outputs = [ex.run(inputs) for ex in executors]  # warm-up (and the values)
        same = same_bits(*outputs) if rank0 else None

        def timed(ex: fl.FusionExecutor, inputs: list = inputs) -> float:
            world.Barrier()
            t0 = time.perf_counter()
            ex.run(inputs)
            return world.allreduce(time.perf_counter() - t0, op=MPI.MAX)

        for r in range(args.repeats):
            order = (0, 1) if r % 2 == 0 else (1, 0)  # streamed first on even repeats
            seconds = {i: timed(executors[i]) for i in order}
            if rank0:
                row = {
                    "program": name,
                    "repeat": r,
                    "first": "streamed" if r % 2 == 0 else "unstreamed",
                }
                row |= {"streamed_s": seconds[0], "unstreamed_s": seconds[1]}
                print(json.dumps(row), flush=True)
        if rank0:
            model = [fl.timeline(p, "cpu").step_time for p in forms]
            print(json.dumps({"program": name, "same_bits": same, "model_s": model}), flush=True)
        for ex in executors:
            ex.close()


def summary(name: str, rows: list[dict], end: dict) -> dict:
    s = [r["streamed_s"] for r in rows]
    u = [r["unstreamed_s"] for r in rows]
    ratios = sorted(a / b for a, b in zip(s, u))
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {
        "program": name,
        "streamed_median_s": statistics.median(s),
        "unstreamed_median_s": statistics.median(u),
        "streamed_min_s": min(s),
        "unstreamed_min_s": min(u),
        "ratio_median": statistics.median(ratios),
        "ratio_iqr": [q[0], q[2]],
        "ratio_of_minima": min(s) / min(u),
        "same_bits": end["same_bits"],
        "model_streamed_s": end["model_s"][0],
        "model_unstreamed_s": end["model_s"][1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--only", choices=["ag_matmul", "block"])
    parser.add_argument("--timeout", type=float, default=300.0, help="the watchdog's (inf: none)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    cmd = ["mpiexec", "-n", str(args.ranks), sys.executable, __file__, "--worker"]
    cmd += ["--repeats", str(args.repeats), "--chunks", str(args.chunks)]
    cmd += ["--timeout", str(args.timeout)]
    cmd += ["--only", args.only] if args.only else []
    threads = str(max(1, (os.cpu_count() or 1) // args.ranks))
    env = {**os.environ, **{v: threads for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
    load = os.getloadavg()
    rows: list[dict] = []
    summaries: list[dict] = []
    title = (
        f"streamed vs unstreamed on {args.ranks} MPI ranks ({os.cpu_count()} cores, "
        f"load {load[0]:.1f}), {args.chunks} chunks, watchdog timeout {args.timeout:g} s, "
        "slowest rank's ms"
    )
    columns = ["program", "repeat", "first", "streamed ms", "unstreamed ms", "ratio"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    with Table(title, columns) as table:
        for line in proc.stdout:
            data = json.loads(line)
            if "repeat" in data:
                rows.append(data)
                ratio = data["streamed_s"] / data["unstreamed_s"]
                cells = (data["streamed_s"] * 1e3, data["unstreamed_s"] * 1e3, ratio)
                table.row(data["program"], data["repeat"], data["first"], *cells)
            else:
                mine = [r for r in rows if r["program"] == data["program"]]
                summaries.append(summary(data["program"], mine, data))
    if proc.wait() != 0:
        raise SystemExit(f"mpiexec -n {args.ranks} failed:\n{proc.stderr.read()}")
    print_table(
        f"per program, {args.repeats} repeats (ratio: streamed / unstreamed; model: machine cpu)",
        ["program", "streamed ms", "unstreamed ms", "ratio", "IQR", "min/min", "model", "bits"],
        [
            (
                s["program"],
                s["streamed_median_s"] * 1e3,
                s["unstreamed_median_s"] * 1e3,
                s["ratio_median"],
                f"{s['ratio_iqr'][0]:.3g}-{s['ratio_iqr'][1]:.3g}",
                s["ratio_of_minima"],
                s["model_streamed_s"] / s["model_unstreamed_s"],
                "same" if s["same_bits"] else "DIFFER",
            )
            for s in summaries
        ],
    )
    meta = {"ranks": args.ranks, "repeats": args.repeats, "chunks": args.chunks}
    meta |= {"timeout": args.timeout}
    meta |= {"cpus": os.cpu_count(), "loadavg_before": load, "loadavg_after": os.getloadavg()}
    meta |= {"ag_matmul": {"m": 8192, "k": 1024, "n": 64}, "block": vars(BLOCK)}
    write_json("overlap_mpi", {**meta, "rows": rows, "summary": summaries})


if __name__ == "__main__":
    main()
