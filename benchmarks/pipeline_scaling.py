"""Pipeline time as the fusion grows, and the kernel runner against numpy (docs/design.md §8).

    python benchmarks/pipeline_scaling.py [--quick] [--repeats K] [--compute PATH]

Part 1, chain: the whole default pipeline (propagate-shardings ... assign-layouts,
the validator after each pass) on a chain of N pointwise ops over x[64, 128]
sharded on 8 devices, N = 10, 100, 1000, 10000, 100000. Targets: N = 1000 under
one second, t(10000) / t(1000) <= 12 and t(100000) / t(10000) <= 12 (linear
growth).

Part 1, outputs: N outputs `y_k = x + k` of one input x[8, 16] sharded on 2
devices (fuserlite.models.many_outputs), N = 1000, 2000, 5000, 20000, end to end as
`fuserlite run` does it: build the fusion, lower it (the pipeline), run it on the
sim backend, validate the outputs against the reference. Targets: N = 20000 under
5 s end to end, t(20000) / t(2000) <= 12. The
kernels run as `--compute` says (default interpret): compiled, the one kernel
of N outputs is compiled as functions of at most 16 KB of C++ once it is over
256 KB (fuserlite.kernel.cpu_parts), in a time linear in N (13 s of g++ for
20000: benchmarks/compile_size.py), cached on disk afterwards.

Each row is printed as soon as it is measured; the median of K runs (default
3; one run for N >= 100000 and for 20000 outputs) and the spread (max - min),
in wall-clock seconds and in this process's CPU seconds (which other jobs on a
shared machine inflate less).

Part 2: for a chain of N pointwise ops (alternating add / mul / tanh on
x[rows, cols] plus a broadcast bias) the fusion is scheduled once by
schedule-pointwise as a single kernel. Timed, best of a few runs after one
warm-up run (which builds the cached grid indices, like compiling a kernel
once): the reference evaluator (`fl.evaluate`, direct numpy on whole arrays)
and the schedule-driven kernel runner (`run_kernel`, every value computed
through its loop indices over the whole blockIdx x Unswitch x threadIdx grid).
Target: runner / numpy <= 3.

Prints tables, writes results/pipeline_scaling.json.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

from _report import print_table, write_json

import fuserlite as fl
from fuserlite.kernel.grid_index import GridCache
from fuserlite.kernel.runner import run_scheduled
from fuserlite.models import many_outputs
from fuserlite.schedule.shard import shard_axis

TARGET_RATIO = 3.0
TARGET_GROWTH = 12.0
TARGET_OUTPUTS_S = 5.0


def _step(t: fl.TensorView, k: int, operand: fl.TensorView | float) -> fl.TensorView:
    """The k-th op of a chain: add, mul, tanh in turn (only the chosen one is built)."""
    if k % 3 == 0:
        return t + operand
    if k % 3 == 1:
        return t * 0.5
    return fl.tanh(t)


def chain(n_ops: int, rows: int, cols: int) -> fl.Fusion:
    """x[rows, cols] and bias[cols] through `n_ops` pointwise ops."""
    with fl.Fusion() as fusion:
        x = fl.tensor([rows, cols])
        bias = fl.tensor([cols])
        fusion.add_input(x)
        fusion.add_input(bias)
        t = x
        for k in range(n_ops):
            t = _step(t, k, bias)
        fusion.add_output(t)
    return fusion


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """(median seconds, max - min seconds, median CPU seconds) of `repeats` runs."""
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(times), max(times) - min(times), statistics.median(cpu)


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
        program = fl.Pipeline(["segment", "schedule-pointwise"]).run(fusion)
        schedule_s = time.perf_counter() - start
        repeats = 3 if quick else 7
        grids = GridCache()  # what an executor holds: the indices, kept between runs
        run_scheduled(program, inputs, grids)  # warm-up: builds the cached grid indices
        numpy_s = best_of(lambda f=fusion, i=inputs: fl.evaluate(f, i), repeats)
        runner_s = best_of(lambda p=program, i=inputs, g=grids: run_scheduled(p, i, g), repeats)
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
            t = _step(t, k, 1.0)
        fusion.add_output(t)
    return fusion


def _say(text: str) -> None:
    print(text, flush=True)


def pipeline_rows(quick: bool, repeats: int) -> list[dict]:
    """Seconds of the whole default pipeline per chain length."""
    rows = []
    for n_ops in [10, 100, 1000] if quick else [10, 100, 1000, 10000, 100000]:
        fusion = sharded_chain(n_ops)
        median, spread, cpu = timed(lambda f=fusion: fl.lower(f), 1 if n_ops >= 100000 else repeats)
        rows.append(
            {
                "ops": n_ops,
                "pipeline_s": median,
                "spread_s": spread,
                "cpu_s": cpu,
                "per_op_us": 1e6 * median / n_ops,
            }
        )
        _say(
            f"  chain of {n_ops} ops: pipeline {median:.3g} s (spread {spread:.2g} s, "
            f"CPU {cpu:.3g} s)"
        )
    return rows


def end_to_end(n_outputs: int, compute: str) -> dict[str, float]:
    """Seconds of each step `fuserlite run` takes, for `n_outputs` outputs."""
    steps: dict[str, float] = {}
    start_cpu = time.process_time()
    start = time.perf_counter()
    fusion = many_outputs(n_outputs)
    steps["build_s"] = time.perf_counter() - start
    start = time.perf_counter()
    executor = fl.FusionExecutor(fusion, compute=compute)  # lowers: the whole pipeline
    steps["lower_s"] = time.perf_counter() - start
    inputs = fl.random_inputs(fusion)
    start = time.perf_counter()
    outputs = executor.run(inputs)
    steps["run_s"] = time.perf_counter() - start
    start = time.perf_counter()
    fl.validate(fusion, inputs, outputs)
    steps["validate_s"] = time.perf_counter() - start
    steps["total_s"] = sum(steps.values())
    steps["cpu_s"] = time.process_time() - start_cpu
    return steps


def outputs_rows(quick: bool, repeats: int, compute: str) -> list[dict]:
    """End-to-end seconds (median of runs) per number of outputs, with each step's."""
    rows = []
    for n in [100, 1000] if quick else [1000, 2000, 5000, 20000]:
        runs = [end_to_end(n, compute) for _ in range(1 if n >= 20000 else repeats)]
        totals = [r["total_s"] for r in runs]
        median = sorted(runs, key=lambda r: r["total_s"])[len(runs) // 2]
        row = {"outputs": n, **median, "spread_s": max(totals) - min(totals)}
        rows.append(row)
        _say(
            f"  {n} outputs: {row['total_s']:.3g} s end to end (build {row['build_s']:.2g}, "
            f"lower {row['lower_s']:.3g}, run {row['run_s']:.3g}, "
            f"validate {row['validate_s']:.2g}; spread {row['spread_s']:.2g} s; "
            f"CPU {row['cpu_s']:.3g} s)"
        )
    return rows


def _option(argv: list[str], name: str, default: int) -> int:
    if name in argv:
        return int(argv[argv.index(name) + 1])
    return default


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    repeats = _option(argv, "--repeats", 3)
    compute = argv[argv.index("--compute") + 1] if "--compute" in argv else "interpret"
    _say("default pipeline, chain of N ops on 8 devices:")
    scaling = pipeline_rows(quick, repeats)
    by_ops = {r["ops"]: r["pipeline_s"] for r in scaling}
    growth = {
        f"{b}/{a}": by_ops[b] / by_ops[a]
        for a, b in ((1000, 10000), (10000, 100000))
        if a in by_ops and b in by_ops
    }
    print_table(
        f"default pipeline on 8 devices (targets: N=1000 < 1 s, growth per 10x <= "
        f"{TARGET_GROWTH:g})",
        ["ops", "pipeline s (median)", "spread s", "CPU s", "us per op"],
        [[r["ops"], r["pipeline_s"], r["spread_s"], r["cpu_s"], r["per_op_us"]] for r in scaling],
    )
    for name, ratio in growth.items():
        print(f"growth t({name.replace('/', ')/t(')}) = {ratio:.2f}")
    _say(f"many outputs, end to end (build, lower, run on sim with compute={compute}, validate):")
    outs = outputs_rows(quick, repeats, compute)
    by_outputs = {r["outputs"]: r for r in outs}
    if 2000 in by_outputs and 20000 in by_outputs:
        for what in ("total_s", "cpu_s"):
            grown = by_outputs[20000][what] / by_outputs[2000][what]
            print(
                f"growth t(20000)/t(2000), {what[:-2]} = {grown:.2f} (target <= {TARGET_GROWTH:g})"
            )
    print_table(
        f"N outputs of x[8, 16] on 2 devices, end to end (target: 20000 in < "
        f"{TARGET_OUTPUTS_S:g} s)",
        ["outputs", "total s", "build s", "lower s", "run s", "validate s", "spread s", "CPU s"],
        [
            [
                r["outputs"],
                r["total_s"],
                r["build_s"],
                r["lower_s"],
                r["run_s"],
                r["validate_s"],
                r["spread_s"],
                r["cpu_s"],
            ]
            for r in outs
        ],
    )
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
            "pipeline": {"rows": scaling, "growth": growth},
            "outputs": {"target_s": TARGET_OUTPUTS_S, "compute": compute, "rows": outs},
            "kernel_runner": {"target_ratio": TARGET_RATIO, "rows": rows},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
