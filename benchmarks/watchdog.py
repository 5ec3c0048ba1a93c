"""The mpi backend's watchdog: how long a job takes to end after one rank stalls, and
what waiting through it costs an operation.

    python benchmarks/watchdog.py [--ranks 4] [--timeouts 1 2 5 10] [--ops 2000]

Each row is one `mpiexec -n D` job of tests/mpi_scripts/stalled_rank.py: the
tensor-parallel MLP on D devices through `fuserlite run --backend mpi --timeout
T`, where rank 1 sends itself SIGSTOP as step 3 (the Allreduce) begins, or
SIGKILL (`kill` rows, T = 300). Measured: seconds from the stall (the time the
rank wrote just before the signal) to mpiexec's exit, against the target
T + 5 s; the number of live ranks that printed their line; whether every rank's
process has ended (a zombie has) within 5 s of the job's end.

Then the cost of the wait, where it is largest: one MPI_Allgather of 16 floats
(latency only), `--ops` times in a row on 2 and D ranks, as a blocking
MPI_Allgather, as MPI_Iallgather + MPI_Wait, and as MPI_Iallgather +
`Watchdog.wait` (what the mpi backend does): microseconds an operation, the
median of 5 repeats (the slowest rank's). Prints the tables and writes
benchmarks/results/watchdog.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import Table, write_json

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "mpi_scripts" / "stalled_rank.py"
STALLED = 1


def ended(pid: int, within: float = 5.0) -> bool:
    """Whether process `pid` is gone or a zombie within `within` seconds."""
    until = time.monotonic() + within
    while time.monotonic() < until:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def stall(d: int, how: str, timeout: float) -> dict:
    """One job where rank STALLED gets signal `how` at step 3."""
    with tempfile.TemporaryDirectory() as where:
        args = [where, str(STALLED), "3", how, "cli", f"{timeout:g}"]
        cmd = ["mpiexec", "-n", str(d), sys.executable, str(SCRIPT), *args]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
        end = time.time()
        stalled = float(Path(where, "stopped").read_text())
        pids = [int(Path(where, f"pid.{r}").read_text()) for r in range(d)]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: rank ")]
    return {
        "signal": how,
        "timeout_s": timeout,
        "end_after_stall_s": end - stalled,
        "target_s": timeout + 5,
        "exit": proc.returncode,
        "lines": len(lines),
        "all_ended": all(ended(pid) for pid in pids),
        "first_line": lines[0] if lines else proc.stderr[-300:],
    }


WAYS = ("blocking MPI_Allgather", "MPI_Iallgather + MPI_Wait", "MPI_Iallgather + watchdog")


def latency_worker(ops: int) -> None:
    """One rank of the latency job: print {way: microseconds an operation} on rank 0."""
    import numpy as np
    from mpi4py import MPI

    from fuserlite.runtime.backends.mpi_watchdog import Pending, Watchdog

    world = MPI.COMM_WORLD
    send, recv = np.zeros(16, np.float32), np.zeros(16 * world.Get_size(), np.float32)
    dog = Watchdog(MPI, world, 300.0, True)
    team = range(world.Get_size())
    calls = {
        WAYS[0]: lambda: world.Allgather(send, recv),
        WAYS[1]: lambda: world.Iallgather(send, recv).Wait(),
        WAYS[2]: lambda: dog.wait(Pending([world.Iallgather(send, recv)], "", team)),
    }
    out = {}
    for way, call in calls.items():
        times = []
        for _ in range(5):
            world.Barrier()
            t0 = time.perf_counter()
            for _ in range(ops):
                call()
            times.append((time.perf_counter() - t0) / ops * 1e6)
        out[way] = world.allreduce(sorted(times)[2], op=MPI.MAX)
    if world.Get_rank() == 0:
        print(json.dumps(out))


def latency(d: int, ops: int) -> dict:
    cmd = ["mpiexec", "-n", str(d), sys.executable, __file__, "--latency-worker", str(ops)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"mpiexec -n {d} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--timeouts", type=float, nargs="+", default=[1, 2, 5, 10])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--latency-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.latency_worker:
        latency_worker(args.latency_worker)
        return
    columns = ["signal", "timeout s", "ended after s", "target s", "exit", "lines", "all gone"]
    rows = []
    load = os.getloadavg()[0]
    with Table(f"stalled rank {STALLED} of {args.ranks}, load {load:.1f}", columns) as table:
        cases = [("STOP", t) for t in args.timeouts] + [("KILL", 300.0)]
        for how, timeout in cases:
            row = stall(args.ranks, how, timeout)
            rows.append(row)
            table.row(
                how,
                timeout,
                row["end_after_stall_s"],
                row["target_s"],
                row["exit"],
                row["lines"],
                row["all_ended"],
            )
    print(rows[0]["first_line"])
    waits = []
    load = os.getloadavg()[0]
    with Table(f"us per MPI_Allgather of 16 floats, load {load:.1f}", ["D", *WAYS]) as table:
        for d in sorted({2, args.ranks}):
            us = latency(d, args.ops)
            waits.append({"ranks": d, **us})
            table.row(d, *(us[w] for w in WAYS))
    write_json("watchdog", {"ranks": args.ranks, "load": load, "rows": rows, "waits": waits})


if __name__ == "__main__":
    main()
