"""The mpi backend's watchdog: how long a job takes to end after one rank stalls.

    python benchmarks/watchdog.py [--ranks 4] [--timeouts 1 2 5 10]

Each row is one `mpiexec -n D` job of tests/mpi_scripts/stalled_rank.py: the
tensor-parallel MLP on D devices through `fuserlite run --backend mpi --timeout
T`, where rank 1 sends itself SIGSTOP as step 3 (the Allreduce) begins, or
SIGKILL (`kill` rows, T = 300). Measured: seconds from the stall (the time the
rank wrote just before the signal) to mpiexec's exit, against the target
T + 5 s; the number of live ranks that printed their line; whether every rank's
process has ended (a zombie has) within 5 s of the job's end. Prints a table and
writes benchmarks/results/watchdog.json.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--timeouts", type=float, nargs="+", default=[1, 2, 5, 10])
    args = parser.parse_args()
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
    write_json("watchdog", {"ranks": args.ranks, "load": load, "rows": rows})


if __name__ == "__main__":
    main()
