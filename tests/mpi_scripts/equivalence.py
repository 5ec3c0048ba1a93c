"""Run under `mpiexec -n 2` or `-n 4`: the mpi backend against the sim backend.

For every case that fits the world size (the examples, each row of DESIGN.md
§5, the seed-000 program and the tensor-parallel MLP), each rank compares its
own device's outputs with the sim backend's outputs for that device, and rank 0
also validates the assembled global outputs against the reference. Rank 0
prints one JSON object: case name -> "identical", "close" (within tolerance,
not bit-identical) or an error message.
"""

from __future__ import annotations

import glob
import json
import os

import numpy as np
from mpi4py import MPI

import fuserlite as fl
from fuserlite import models
from fuserlite.models import resharding as build
from fuserlite.schedule.shard import shard_axis

HERE = os.path.dirname(os.path.abspath(__file__))
M = fl.DeviceMesh


def section5_cases(size: int) -> dict[str, object]:
    """Each §5 row on `size` devices (roots inside and, on 4 ranks, outside the mesh)."""
    every = M(range(size))
    cases = {
        "LocalSlice": lambda: build(every, None, every, 1),
        "Allgather": lambda: build(every, 0, every, None),
        "AllToAll": lambda: build(every, 0, every, 1),
        "Allreduce": lambda: build(every, 0, every, None, 0),
        "ReduceScatter": lambda: build(every, 0, every, 0, 0),
        "Broadcast": lambda: build(M([0]), None, every, None),
        "Scatter": lambda: build(M([0]), None, every, 0),
        "Gather": lambda: build(every, 0, M([0]), None),
        "Reduce": lambda: build(every, 0, M([0]), None, 0),
    }
    if size == 4:
        three = M([0, 1, 2])  # COLS = 12 splits three ways
        cases |= {
            "SendRecv": lambda: build(M([0, 1]), 1, M([2, 3]), 1),
            "Broadcast-root-outside": lambda: build(M([3]), None, three, None),
            "Scatter-root-outside": lambda: build(M([3]), None, three, 1),
            "Gather-root-outside": lambda: build(three, 1, M([3]), None),
            "Reduce-root-outside": lambda: build(three, 1, M([3]), None, 1),
            "Allreduce-max": lambda: _max_allreduce(every),
            "SendRecv-then-Allgather-on-a-subteam": _subteam,
        }
    return cases


def _max_allreduce(mesh: fl.DeviceMesh) -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor([mesh.size * 2, 6])
        f.add_input(x)
        shard_axis(x, 0, mesh)
        y = fl.max(x, [0])
        y.set_device_mesh(mesh)
        f.add_output(y)
    return f


def _subteam() -> fl.Fusion:
    """x on {0 1} -> SendRecv to {2 3} -> Allgather among {2 3}; ranks 0 and 1 sit it out."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 12])
        f.add_input(x)
        shard_axis(x, 1, M([0, 1]))
        y = fl.set(x)
        shard_axis(y, 1, M([2, 3]))
        z = fl.set(y)
        z.set_device_mesh(M([2, 3]))
        f.add_output(z)
    return f


def all_cases(size: int) -> dict[str, object]:
    cases = {}
    if size == 2:
        root = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
        for path in sorted(glob.glob(os.path.join(root, "*.fus"))):
            cases["example:" + os.path.basename(path)] = lambda p=path: fl.load(p)
    cases |= section5_cases(size)
    cases["seed000"] = lambda: models.all_gather_all_reduce_reduce_scatter(size, local=64)
    cases["tp-mlp"] = lambda: models.tensor_parallel_mlp(size)
    cases["sp-mlp"] = lambda: models.tensor_parallel_mlp(size, sequence_parallel=True)
    return cases


def compare(mine, theirs) -> str:
    """identical / close / a message, for one device's outputs."""
    verdict = "identical"
    for a, b in zip(mine, theirs):
        if (a is None) != (b is None):
            return "held by one backend only"
        if a is None:
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
        if np.array_equal(a, b, equal_nan=True) and a.tobytes() == b.tobytes():
            continue
        if not np.allclose(a, b, rtol=1e-5, atol=1e-5):
            return f"differs: max error {float(np.max(np.abs(a - b))):.3g}"
        verdict = "close"
    return verdict


def main() -> None:
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    results = {}
    for name, make in all_cases(size).items():
        fusion = make()
        inputs = fl.random_inputs(fusion, 5)
        try:
            mpi = fl.FusionExecutor(fusion, backend="mpi")
            mine = mpi.run_per_device(inputs)[rank]
            kinds = [c.kind.value for c in mpi.communications]
            sim = fl.FusionExecutor(fusion).run_per_device(inputs)[rank]
            verdict = compare(mine, sim)
            outs = mpi.run(inputs)
            if rank == 0:
                fl.validate(fusion, inputs, outs)
            elif outs is not None:
                verdict = "run() returned outputs on a rank other than 0"
        except fl.FuserliteError as exc:
            verdict, kinds = f"error: {exc}", []
        verdicts = world.gather(verdict, root=0)
        if rank == 0:
            worst = next((v for v in verdicts if v not in ("identical", "close")), None)
            summary = worst or ("close" if "close" in verdicts else "identical")
            results[name] = {"verdict": summary, "kinds": kinds}
    if rank == 0:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
