"""Executor overhead: the tensor-parallel MLP on 8 simulated devices vs plain numpy (§8).

    python benchmarks/executor_overhead.py [--runs 5]

The MLP of fuserlite.models.tensor_parallel_mlp (batch 8, seq 512, hidden
1024, float32) lowered once, then run with FusionExecutor on 8 devices of the
`sim` backend with each `compute` path: compiled kernels (the default where a
C++ compiler is found), the interpreted kernel runner, and numpy op by op
(`compute="numpy"`, formerly `schedule=False`). The
baseline is the same math in plain numpy on whole arrays:
gelu(x @ w1.T + b1) @ w2.T + b2, gelu in its tanh form. Both run in this
process, so numpy's BLAS uses the same threads for both. Reports the median
and the minimum of `--runs` runs (the minimum is the steadier number on a
shared machine) and the ratio executor / numpy (target: <= 1.5; with compiled
kernels <= 1.3). Prints a table and writes results/executor_overhead.json.

Then the same for the transformer block (fuserlite.models.transformer_block,
BLOCK sizes, bfloat16 and float32, tensor + sequence parallel on 8 devices)
against its math in plain numpy on whole arrays (fuserlite.numerics' layer_norm,
attention and dropout, with the same Philox masks), computed in float32 and
rounded once at the end; results/executor_overhead_block.json. `--only mlp` or
`--only block` runs one of them.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from _report import Table, write_json

import fuserlite as fl
from fuserlite import models
from fuserlite.kernel.compile import find_compiler
from fuserlite.numerics import attention, nn

DEVICES = 8
SIZES = {"batch": 8, "seq": 512, "hidden": 1024}
TARGET = 1.5
TARGET_COMPILED = 1.3


def gelu(h: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (the formula of fuserlite's numpy_ops)."""
    c = np.float32(math.sqrt(2.0 / math.pi))
    return 0.5 * h * (1.0 + np.tanh(c * (h + np.float32(0.044715) * h * h * h)))


def plain_numpy(x, w1, b1, w2, b2) -> np.ndarray:
    """The MLP on one array, as a numpy user writes it."""
    return gelu(x @ w1.T + b1) @ w2.T + b2


def plain_numpy_2d(x, w1, b1, w2, b2) -> np.ndarray:
    """The same with the rows flattened first: one GEMM per linear, numpy's fastest form."""
    rows = x.reshape(-1, x.shape[-1])
    return (gelu(rows @ w1.T + b1) @ w2.T + b2).reshape(x.shape)


def wall_times(fns: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    """Wall times of each function over `runs` rounds, after one warm-up round; each
    round is printed as it ends.

    The functions take turns within a round, so a busy machine slows all alike.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    with Table("seconds per round (round 0: warm-up, not counted)", ["round", *fns]) as table:
        for round_ in range(runs + 1):
            took = []
            for name, fn in fns.items():
                start = time.perf_counter()
                fn()
                took.append(time.perf_counter() - start)
                if round_:
                    times[name].append(took[-1])
            table.row(round_, *took)
    return times


BLOCK = models.BlockShape(batch=4, seq=256, hidden=512, heads=8)
BLOCK_DROPOUT = 0.1


def plain_block(inputs: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """The transformer block on whole arrays, as a numpy user writes it (float32)."""
    x, ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2 = (
        a.astype(np.float32) for a in inputs
    )
    b, s, h, heads = BLOCK.batch, BLOCK.seq, BLOCK.hidden, BLOCK.heads
    p = BLOCK_DROPOUT

    def heads_first(y):
        return y.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)

    ln1 = nn.layer_norm(x, [h], ln1_w, ln1_b)[0]
    q, k, v = (heads_first(ln1 @ w.T + bias) for w, bias in ((wq, bq), (wk, bk), (wv, bv)))
    o = attention.sdpa_fwd(q, k, v, p, True, seed=0, offset=0)[0]
    attn = o.transpose(0, 2, 1, 3).reshape(b, s, h) @ wo.T + bo

    def dropped(y, offset):
        # The fusion's dropout draws its uniforms in its operand's dtype (bfloat16 too,
        # philox.keep_mask), so the mask is drawn for `dtype` and applied in float32.
        mask = nn.dropout(y.astype(dtype), p, 0, offset)[1]
        return y * mask / np.float32(1.0 - p)

    r1 = x + dropped(attn, 1)
    ln2 = nn.layer_norm(r1, [h], ln2_w, ln2_b)[0]
    mlp = gelu(ln2 @ w1.T + b1) @ w2.T + b2
    return (r1 + dropped(mlp, 2)).astype(dtype)


def block_rows(runs: int) -> list[dict]:
    """The block in bfloat16 and float32: plain numpy and each compute path; one row each."""
    rows = []
    computes = ["numpy", "interpret"] + (["compiled"] if find_compiler() else [])
    for dtype in ("bfloat16", "float32"):
        fusion = models.transformer_block(DEVICES, dtype, BLOCK, BLOCK_DROPOUT)
        inputs = fl.random_inputs(fusion, seed=0)
        executors = {c: fl.FusionExecutor(fusion, compute=c) for c in computes}
        for executor in executors.values():
            fl.validate(fusion, inputs, executor.run(inputs))
        target = inputs[0].dtype
        # the baseline computes what the fusion computes (float32 throughout, one rounding)
        fl.validate(fusion, inputs, [plain_block(inputs, target)])
        variants: dict[str, Callable[[], object]] = {
            "plain numpy": lambda a=inputs, t=target: plain_block(a, t)
        }
        for c, executor in executors.items():
            variants[f"executor, compute={c}"] = lambda e=executor, a=inputs: e.run(a)
        times = wall_times(variants, runs)
        base = min(times["plain numpy"])
        for name, t in times.items():
            rows.append(
                {
                    "dtype": dtype,
                    "variant": name,
                    "median_s": statistics.median(t),
                    "min_s": min(t),
                    "ratio_min": min(t) / base,
                    "ratio_median": statistics.median(t) / statistics.median(times["plain numpy"]),
                }
            )
    with Table(
        f"transformer block {vars(BLOCK)}, {DEVICES} sim devices, {runs} runs; ratio to numpy",
        ["dtype", "variant", "median s", "min s", "ratio (median)", "ratio (min)"],
        widths=[8, 26],
    ) as table:
        for r in rows:
            table.row(
                r["dtype"],
                r["variant"],
                f"{r['median_s']:.3f}",
                f"{r['min_s']:.3f}",
                f"{r['ratio_median']:.2f}",
                f"{r['ratio_min']:.2f}",
            )
        table.note(f"target ratio <= {TARGET}")
    return rows


def main() -> None:
    """Time numpy and both executor modes; print and save the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per variant (median)")
    parser.add_argument("--only", choices=["mlp", "block"], help="run one of the two")
    args = parser.parse_args()
    if args.only != "mlp":
        rows = block_rows(args.runs)
        write_json(
            "executor_overhead_block",
            {"block": vars(BLOCK), "devices": DEVICES, "runs": args.runs, "rows": rows},
        )
    if args.only != "block":
        mlp(args)


def mlp(args: argparse.Namespace) -> None:
    """The tensor-parallel MLP: numpy and each executor mode; print and save the table."""
    fusion = models.tensor_parallel_mlp(DEVICES, **SIZES)
    inputs = fl.random_inputs(fusion, seed=0)
    start = time.perf_counter()
    executors = {
        f"executor, compute={c}": fl.FusionExecutor(fusion, compute=c)
        for c in (["numpy", "interpret"] + (["compiled"] if find_compiler() else []))
    }
    lower_s = (time.perf_counter() - start) / len(executors)
    expected = plain_numpy(*inputs)
    scale = float(np.max(np.abs(expected)))  # outputs reach ~1e3: compare relative to that
    for executor in executors.values():
        (out,) = executor.run(inputs)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * scale)

    variants: dict[str, Callable[[], object]] = {
        "plain numpy, x @ w.T": lambda: plain_numpy(*inputs),
        "plain numpy, 2-D GEMMs": lambda: plain_numpy_2d(*inputs),
    }
    for name, executor in executors.items():
        variants[f"{name}, {DEVICES} sim devices"] = lambda e=executor: e.run(inputs)
    times = wall_times(variants, args.runs)
    median = {n: statistics.median(t) for n, t in times.items()}
    best = {n: min(t) for n, t in times.items()}
    numpy_forms = ("plain numpy, x @ w.T", "plain numpy, 2-D GEMMs")
    base_median = min(median[n] for n in numpy_forms)
    base_best = min(best[n] for n in numpy_forms)
    rows = [
        {
            "variant": n,
            "median_s": median[n],
            "min_s": best[n],
            "ratio_median": median[n] / base_median,
            "ratio_min": best[n] / base_best,
        }
        for n in times
    ]
    threads = os.environ.get("OPENBLAS_NUM_THREADS", f"default ({os.cpu_count()} cores)")
    with Table(
        f"tensor-parallel MLP {SIZES} float32, {args.runs} runs, BLAS threads {threads}; "
        "ratios to the faster numpy form",
        ["variant", "median s", "min s", "ratio (median)", "ratio (min)"],
        widths=[40],
    ) as table:
        for r in rows:
            table.row(
                r["variant"],
                f"{r['median_s']:.3f}",
                f"{r['min_s']:.3f}",
                f"{r['ratio_median']:.2f}",
                f"{r['ratio_min']:.2f}",
            )
        table.note(
            f"lowering (once per executor): {lower_s:.3f} s; target ratio <= {TARGET} "
            f"(compiled kernels <= {TARGET_COMPILED})"
        )
    write_json(
        "executor_overhead",
        {
            "sizes": SIZES,
            "devices": DEVICES,
            "runs": args.runs,
            "blas_threads": threads,
            "load_average": list(os.getloadavg()),
            "lowering_seconds": lower_s,
            "target_ratio": TARGET,
            "target_ratio_compiled": TARGET_COMPILED,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
