"""Run under `mpiexec -n N`: one rank stops (SIGSTOP), dies (SIGKILL) or is slow as a
step begins.

    mpiexec -n N python stalled_rank.py DIR RANK STEP HOW {cli,executor} TIMEOUT [ARGS]

The tensor-parallel MLP runs on N devices: examples/tp_mlp.fus through `fuserlite
run --devices N --backend mpi --timeout TIMEOUT ARGS` (cli), or
models.tensor_parallel_mlp(N) through `FusionExecutor(..., backend="mpi",
timeout=TIMEOUT)` (executor); step 3 is its Allreduce. Every rank writes its pid to DIR/pid.R first;
rank RANK, when program step STEP begins, writes the time to DIR/stopped and
sends itself the signal HOW (STOP or KILL), or sleeps HOW seconds (a number).
The other ranks then wait in that step's collective until the watchdog ends the
job (SIGSTOP), or mpiexec does (SIGKILL); a slow rank that answers the watchdog
in time lets the job finish.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import fuserlite as fl
from fuserlite import cli, models
from fuserlite.runtime.backends.mpi import MpiCommunicator

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "tp_mlp.fus")


def main() -> int:
    where, rank, step, how, path, timeout, *extra = sys.argv[1:]
    where, rank, step, seconds = Path(where), int(rank), int(step), float(timeout)
    begin_step = MpiCommunicator.begin_step

    def stalling(self, index, comm):
        begin_step(self, index, comm)
        if self.rank == rank and index == step:
            (where / "stopped").write_text(repr(time.time()))
            if how in ("STOP", "KILL"):
                os.kill(os.getpid(), signal.SIGSTOP if how == "STOP" else signal.SIGKILL)
            else:
                time.sleep(float(how))

    MpiCommunicator.begin_step = stalling
    me = int(os.environ["PMI_RANK"])
    (where / f"pid.{me}").write_text(str(os.getpid()))
    size = os.environ["PMI_SIZE"]
    if path == "cli":
        args = ["run", EXAMPLE, "--devices", size, "--backend", "mpi", "--timeout", timeout]
        return cli.main([*args, *extra])
    fusion = models.tensor_parallel_mlp(int(size))
    ex = fl.FusionExecutor(fusion, backend="mpi", timeout=seconds)
    ex.run(fl.random_inputs(fusion, 0))
    # One write of the whole line: print writes the text and its end apart, and two
    # ranks' lines could interleave in mpiexec's shared stdout.
    sys.stdout.write(f"rank {me} finished\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
