"""Communicator backends: `sim` (in-process, default) and `mpi` (mpi4py)."""

from __future__ import annotations

import os

from fuserlite.ir.errors import ExecutionError
from fuserlite.runtime.communicator import Communicator

BACKENDS = ("sim", "mpi")

# What MPI launchers tell each process: MPICH's Hydra (and Intel MPI, srun --mpi=pmi2),
# Open MPI's mpirun.
LAUNCH_VARIABLES = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))


def mpi_launch() -> tuple[int, int] | None:
    """(rank, size) an MPI launcher gave this process in its environment (before MPI is
    initialized); None when no launcher started it."""
    for rank, size in LAUNCH_VARIABLES:
        r, n = os.environ.get(rank, ""), os.environ.get(size, "")
        if r.isdigit() and n.isdigit():
            return int(r), int(n)
    return None


def silent_rank() -> bool:
    """Whether this process is an MPI rank other than 0: an error that every rank meets
    alike (its flags, its file) is rank 0's to print."""
    launch = mpi_launch()
    return launch is not None and launch[0] != 0


def make_backend(name: str, timeout: float | None = None) -> Communicator:
    """The communicator for a backend name; `timeout`: seconds an mpi operation may wait
    before its watchdog asks who stalled (None: 300; sim never waits on anyone)."""
    if name == "sim":
        from fuserlite.runtime.backends.sim import SimCommunicator

        return SimCommunicator()
    if name == "mpi":
        from fuserlite.runtime.backends.mpi import MpiCommunicator

        return MpiCommunicator(timeout=timeout)
    raise ExecutionError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
