"""The mpi backend against the sim backend: wall time per iteration and bytes moved.

    python benchmarks/backends.py [--ranks 2 4 8] [--iters N] [--timeout SECONDS]

For the seed-000 program (all_gather -> all_reduce -> reduce_scatter ->
sum, in fl.shard_map; `seed000-small` on 64 elements a device, where the time is
the collectives' latency) and the tensor-parallel MLP on D = 2, 4, 8 devices: the time of one
`run_per_device` with `sim` (D devices in this process) and with `mpi` (one
`mpiexec -n D` job per D; the slowest rank counts), plus per device and
iteration the §5 lower bound (sum of `bytes_per_device`) and the bytes of its
own data each rank hands to MPI (`MpiCommunicator.bytes_sent`; MPI's algorithms
may put more on the wire). Times are medians over iterations (the slowest
rank's median for mpi); lowering is outside the timed loop. Prints a table
and writes benchmarks/results/backends.json. Ranks beyond the machine's cores
are oversubscribed, which the mpi times then include. `--timeout` is the mpi
backend's watchdog timeout (default 300 s; `inf` waits with MPI_Waitall, no
watchdog): the cost of its polling is the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from _report import Table, write_json

import fuserlite as fl
from fuserlite import models

PROGRAMS = {
    "seed000": lambda d: models.all_gather_all_reduce_reduce_scatter(d, local=16384),
    "seed000-small": lambda d: models.all_gather_all_reduce_reduce_scatter(d, local=64),
    "tp-mlp": lambda d: models.tensor_parallel_mlp(d, batch=4, seq=64, hidden=256),
}


def lower_bound(ex: fl.FusionExecutor) -> int:
    """Bytes each device must send per iteration (docs/design.md §5)."""
    return sum(c.bytes_per_device for c in ex.communications)


def time_sim(name: str, d: int, iters: int) -> dict:
    fusion = PROGRAMS[name](d)
    ex = fl.FusionExecutor(fusion)
    inputs = fl.random_inputs(fusion, 0)
    ex.run_per_device(inputs)  # warm-up
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        ex.run_per_device(inputs)
        times.append(time.perf_counter() - t0)
    return {"sim_s": float(np.median(times)), "bound_bytes": lower_bound(ex)}


def worker(iters: int, timeout: float) -> None:
    """One rank of an `mpiexec -n D` job: time every program, report from rank 0."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    out = {}
    for name, make in PROGRAMS.items():
        fusion = make(world.Get_size())
        ex = fl.FusionExecutor(fusion, backend="mpi", timeout=timeout)
        inputs = fl.random_inputs(fusion, 0)
        ex.run_per_device(inputs)  # warm-up
        ex.backend.bytes_sent = 0
        times = []
        for _ in range(iters):
            world.Barrier()
            t0 = time.perf_counter()
            ex.run_per_device(inputs)
            times.append(time.perf_counter() - t0)
        elapsed = world.allreduce(float(np.median(times)), op=MPI.MAX)
        sent = world.allreduce(ex.backend.bytes_sent // iters, op=MPI.MAX)
        out[name] = {"mpi_s": elapsed, "mpi_sent_bytes": sent}
    if world.Get_rank() == 0:
        print(json.dumps(out))


def time_mpi(d: int, iters: int, timeout: float) -> dict:
    cmd = ["mpiexec", "-n", str(d), sys.executable, __file__, "--worker", "--iters", str(iters)]
    cmd += ["--timeout", str(timeout)]
    # One BLAS thread per rank unless cores are left over: ranks must not fight for cores.
    threads = str(max(1, (os.cpu_count() or 1) // d))
    env = {**os.environ, **{v: threads for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"mpiexec -n {d} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=300.0, help="the watchdog's (inf: none)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.iters, args.timeout)
        return
    # Every sim timing first: MPI ranks that are still winding down would slow them.
    sims = {(n, d): time_sim(n, d, args.iters) for d in args.ranks for n in PROGRAMS}
    rows = []
    columns = ["program", "D", "sim ms", "mpi ms", "mpi/sim", "bound B/dev", "to MPI B/dev"]
    title = f"mpi vs sim backend, median of {args.iters} iterations, timeout {args.timeout:g} s"
    with Table(title, columns) as table:
        for d in args.ranks:
            mpi = time_mpi(d, args.iters, args.timeout)
            for name in PROGRAMS:
                row = {"program": name, "devices": d, **sims[name, d], **mpi[name]}
                row["mpi_over_sim"] = row["mpi_s"] / row["sim_s"]
                rows.append(row)
                table.row(
                    name,
                    d,
                    row["sim_s"] * 1e3,
                    row["mpi_s"] * 1e3,
                    row["mpi_over_sim"],
                    row["bound_bytes"],
                    row["mpi_sent_bytes"],
                )
    meta = {"iters": args.iters, "timeout": args.timeout, "cpus": os.cpu_count()}
    write_json("backends", {**meta, "rows": rows})


if __name__ == "__main__":
    main()
