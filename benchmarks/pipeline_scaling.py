"""Pipeline time as the fusion grows, and the kernel runner against numpy (DESIGN.md §8).

    python benchmarks/pipeline_scaling.py [--quick]

Part 1: the whole default pipeline (propagate-shardings ... assign-layouts,
validator after each pass) on a chain of N pointwise ops over x[64, 128]
sharded on 8 devices, N = 10, 100, 1000, 10000. Targets: time(10000) /
time(1000) <= 12 (linear growth) and N = 1000 under one second.

Part 2:
For a chain of N pointwise ops (alternating add / mul / tanh on x[rows, cols]
plus a broadcast bias) the fusion is scheduled once by schedule-pointwise as a
single kernel. Timed, best of a few runs after one warm-up run (which builds the cached grid
indices, like compiling a kernel once): the reference evaluator
(`fl.evaluate`, direct numpy on whole arrays) and the schedule-driven kernel
runner (`run_kernel`, every value computed through its loop indices over the
whole blockIdx x Unswitch x threadIdx grid). Target: runner / numpy <= 3.
Prints tables, writes results/pipeline_scaling.json.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from _report import print_table, write_json

import fuserlite as fl
from fuserlite.runtime.kernel_runner import run_scheduled
from fuserlite.schedule.pointwise import schedule_pointwise, whole_fusion_kernel
from fuserlite.schedule.shard import shard_axis

TARGET_RATIO = 3.0


def chain(n_ops: int, rows: int, cols: int) -> fl.Fusion:
    """x[rows, cols] and bias[cols] through `n_ops` pointwise ops."""
    with fl.Fusion() as fusion:
        x = fl.tensor([rows, cols])
        bias = fl.tensor([cols])
        fusion.add_input(x)
        fusion.add_input(bias)
        t = x
        for k in range(n_ops):
            t = (t + bias, t * 0.5, fl.tanh(t))[k % 3]
        fusion.add_output(t)
    return fusion


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def kernel_runner_rows(quick: bool) -> list[dict]:
    """One row per (ops, shape): schedule time, numpy time, runner time, ratio."""
    sizes = (
        [(10, 256, 256), (100, 256, 256)]
        if quick
        else [
            (10, 256, 256),
            (100, 256, 256),
            (10, 1024, 1024),
            (100, 1024, 1024),
            (1000, 64, 64),
        ]
    )
    rows = []
    for n_ops, r, c in sizes:
        fusion = chain(n_ops, r, c)
        inputs = fl.random_inputs(fusion)
        start = time.perf_counter()
        kernel = whole_fusion_kernel(fusion)
        schedule_pointwise(kernel)
        schedule_s = time.perf_counter() - start
        repeats = 3 if quick else 7
        run_scheduled(fusion, inputs, kernel)  # warm-up: builds the cached grid indices
        numpy_s = best_of(lambda f=fusion, i=inputs: fl.evaluate(f, i), repeats)
        runner_s = best_of(lambda f=fusion, i=inputs, k=kernel: run_scheduled(f, i, k), repeats)
        rows.append(
            {
                "ops": n_ops,
                "shape": [r, c],
                "schedule_s": schedule_s,
                "numpy_s": numpy_s,
                "runner_s": runner_s,
                "ratio": runner_s / numpy_s,
            }
        )
    return rows


def sharded_chain(n_ops: int) -> fl.Fusion:
    """x[64, 128] sharded on 8 devices through `n_ops` pointwise ops."""
    with fl.Fusion() as fusion:
        x = fl.tensor([64, 128])
        fusion.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(8))
        t = x
        for k in range(n_ops):
            t = (t + 1.0, t * 0.5, fl.tanh(t))[k % 3]
        fusion.add_output(t)
    return fusion


def pipeline_rows(quick: bool) -> list[dict]:
    """Seconds of the whole default pipeline per chain length."""
    rows = []
    for n_ops in [10, 100, 1000] if quick else [10, 100, 1000, 10000]:
        fusion = sharded_chain(n_ops)
        seconds = best_of(lambda f=fusion: fl.lower(f), 2 if n_ops >= 10000 else 3)
        rows.append({"ops": n_ops, "pipeline_s": seconds, "per_op_us": 1e6 * seconds / n_ops})
    return rows


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    scaling = pipeline_rows(quick)
    by_ops = {r["ops"]: r["pipeline_s"] for r in scaling}
    growth = by_ops[10000] / by_ops[1000] if 10000 in by_ops else None
    print_table(
        "default pipeline on 8 devices (targets: N=1000 < 1 s, t(10000)/t(1000) <= 12)",
        ["ops", "pipeline s", "us per op"],
        [[r["ops"], r["pipeline_s"], r["per_op_us"]] for r in scaling],
    )
    if growth is not None:
        print(f"growth t(10000)/t(1000) = {growth:.2f}")
    rows = kernel_runner_rows(quick)
    print_table(
        f"kernel runner vs direct numpy (target ratio <= {TARGET_RATIO})",
        ["ops", "shape", "schedule s", "numpy s", "runner s", "ratio"],
        [
            [
                r["ops"],
                "x".join(map(str, r["shape"])),
                r["schedule_s"],
                r["numpy_s"],
                r["runner_s"],
                r["ratio"],
            ]
            for r in rows
        ],
    )
    write_json(
        "pipeline_scaling",
        {
            "pipeline": {"rows": scaling, "growth_10000_over_1000": growth},
            "kernel_runner": {"target_ratio": TARGET_RATIO, "rows": rows},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
