"""Streamed programs on MPI ranks: each rank runs them on the mpi backend, recording
the order it posts, waits for and computes the chunks (tests/overlap_order.py); rank 0
prints one JSON line: per case whether its outputs equal sim's bit for bit, and its
events renumbered by chunk with the pipelined order they must follow; under "bits",
per case of tests/stream_cases.py (and its ROUNDING sizes) and compute path, whether
the streamed program on MPI has the unstreamed one's bits on sim."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import stream_cases  # noqa: E402
from overlap_order import (  # noqa: E402
    by_chunk,
    pipelined_order,
    reduce_pipelined_order,
    run_recorded,
    same_bits,
)

import fuserlite as fl  # noqa: E402
from fuserlite.pipeline import DEFAULT_PASSES  # noqa: E402
from fuserlite.runtime.backends.mpi import MpiCommunicator  # noqa: E402

UNSTREAMED = [p for p in DEFAULT_PASSES if p != "lower-streams"]

CASES = {  # name -> (fusion builder, the pipelined order it follows: None, "gather", "reduce")
    "ag_matmul_4": (lambda: ag_matmul_on_4(), "gather"),
    "ag_matmul_2": (lambda: stream_cases.ag_matmul(4, m=8, k=8, n=6), "gather"),
    "matmul_reduce_scatter": (lambda: stream_cases.matmul_reduce_scatter(4), "reduce"),
    "matmul_allreduce": (lambda: stream_cases.matmul_allreduce(4), "reduce"),
    "allreduce": (lambda: stream_cases.allreduce(4), None),
}
ORDERS = {"gather": pipelined_order, "reduce": reduce_pipelined_order}


def ag_matmul_on_4() -> fl.Fusion:
    """examples/overlap_ag_matmul.fus's pipeline on 4 devices, small: x [64, 16] sharded
    on its rows, y = x @ w with each device's block of rows in 4 Stream chunks."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x, w = fl.tensor([64, 16], "float32", name="x"), fl.tensor([16, 8], "float32", name="w")
        for t in (x, w):
            t.set_device_mesh(mesh)
            f.add_input(t)
        x.outer_split(0, 4)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        y = fl.matmul(x, w)
        y.set_device_mesh(mesh)
        y.outer_split(0, 4)
        y.outer_split(1, 4)
        y.axis(1).parallelize(fl.ParallelType.Stream)
        f.add_output(y)
    return f


results = {}
for name, (build, order) in CASES.items():
    inputs = fl.random_inputs(build(), seed=11)
    stores = order == "reduce"
    got, events = run_recorded(fl.lower(build()), MpiCommunicator(), inputs, stores=stores)
    if got is None:
        continue
    sim = fl.FusionExecutor(fl.lower(build()), compute="interpret").run(inputs)
    results[name] = {
        "same": same_bits(got, sim),
        "events": by_chunk(events),
        "pipelined": ORDERS[order](events) if order else None,
    }
bits = {}
builds = {
    **stream_cases.CASES,
    **{f"{n}, rounding size": b for n, b in stream_cases.ROUNDING.items()},
}
for name, build in builds.items():
    inputs = fl.random_inputs(build(), seed=12)
    for compute in ("interpret", "numpy"):
        got = fl.FusionExecutor(fl.lower(build()), MpiCommunicator(), compute=compute).run(inputs)
        if got is None:
            continue
        whole = fl.Pipeline(UNSTREAMED).run(build())
        want = fl.FusionExecutor(whole, compute=compute).run(inputs)
        bits[f"{name} ({compute})"] = same_bits(got, want)
if results:
    print(json.dumps({**results, "bits": bits}))
