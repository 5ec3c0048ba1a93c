"""Run under `mpiexec -n 2`: the ranks wait on each other in different operations.

Rank 0 joins an Allgather over {0 1}; rank 1 waits for a message from rank 0 that
never comes. Both answer the watchdog's questions, but neither completes anything,
so the second question ends the wait: with abort_on_error=False as an
ExecutionError on each rank, which prints it and ends the job itself.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import fuserlite as fl
from fuserlite.runtime.backends.mpi import MpiCommunicator
from fuserlite.runtime.communicator import BufferSpec, Message, Team

mpi = MpiCommunicator(timeout=1, abort_on_error=False)
# Both ranks start waiting together: a rank still starting up when the other's second
# question comes would be one that did not answer (another verdict), not this one.
mpi.world.Barrier()
try:
    if mpi.rank == 0:
        mpi.allgather([Team((0, 1))], {0: np.zeros(4, np.float32)})
    else:
        mpi.exchange([Message(0, 1, BufferSpec((4,), np.dtype(np.float32)))], {})
except fl.ExecutionError as exc:
    sys.stdout.write(f"caught: {exc}\n")
    sys.stdout.flush()
    mpi.world.Barrier()  # both have printed (the watchdog's own messages are done)
    mpi.world.Abort(1)
    os._exit(1)  # MPICH's Abort can return before mpiexec ends the process
print("finished", flush=True)
