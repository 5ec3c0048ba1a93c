"""Run under `mpiexec -n 2`: rank 1 passes an input of the wrong shape.

Rank 0 goes on into the program's Allreduce; rank 1 fails its input check,
prints the error once and aborts the job, so neither rank hangs.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import fuserlite as fl
from fuserlite import models

fusion = models.tensor_parallel_mlp(2)
inputs = fl.random_inputs(fusion, 0)
if MPI.COMM_WORLD.Get_rank() == 1:
    inputs[0] = np.zeros((3, 3), np.float32)
fl.FusionExecutor(fusion, backend="mpi").run(inputs)
print("finished", flush=True)
