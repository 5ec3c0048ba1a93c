"""Run under `mpiexec -n 2`: rank 1 fails on purpose (MpiCommunicator's test-only
fail_rank) at the start of the execution; rank 0 goes on into the program's Allreduce.
The failing rank prints its message once and aborts the job, so neither rank hangs.
"""

from __future__ import annotations

import fuserlite as fl
from fuserlite import models
from fuserlite.runtime.backends.mpi import MpiCommunicator

fusion = models.tensor_parallel_mlp(2)
inputs = fl.random_inputs(fusion, 0)
fl.FusionExecutor(fusion, backend=MpiCommunicator(fail_rank=1)).run(inputs)
print("finished", flush=True)
