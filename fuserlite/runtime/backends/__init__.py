"""Communicator backends: `sim` (in-process, default) and `mpi` (mpi4py)."""

from __future__ import annotations

from fuserlite.ir.errors import ExecutionError
from fuserlite.runtime.communicator import Communicator

BACKENDS = ("sim", "mpi")


def make_backend(name: str) -> Communicator:
    """The communicator for a backend name."""
    if name == "sim":
        from fuserlite.runtime.backends.sim import SimCommunicator

        return SimCommunicator()
    if name == "mpi":
        from fuserlite.runtime.backends.mpi import MpiCommunicator

        return MpiCommunicator()
    raise ExecutionError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
