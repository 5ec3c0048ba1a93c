"""Run under `mpiexec -n N`: `fuserlite run EXAMPLE --devices N --backend mpi` for every
example, in one launch. Rank 0 prints `=== NAME`, the report, then `=== status S`; an
example that cannot be resized fails on every rank before any communication."""

from __future__ import annotations

import glob
import os
import sys

from mpi4py import MPI

from fuserlite import cli

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = sorted(
    glob.glob(os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "*.fus"))
)

n, rank = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
for path in EXAMPLES:
    if rank == 0:
        print(f"=== {os.path.basename(path)}", flush=True)
    status = cli.main(["run", path, "--devices", str(n), "--backend", "mpi"])
    sys.stdout.flush()
    if rank == 0:
        print(f"=== status {status}", flush=True)
    MPI.COMM_WORLD.Barrier()
