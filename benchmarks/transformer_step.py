"""The transformer block's step on 8 devices: fuserlite (sim, compiled) and JAX, side by side.

    python benchmarks/transformer_step.py [--sizes example,large] [--rounds 3] [--steps 30]
                                          [--no-jax] [--no-blas]

The block is fuserlite.models.transformer_block (examples/transformer_block.fus:
layer_norm, q/k/v column-parallel, causal sdpa with dropout, row-parallel output
projection, dropout and residual, layer_norm, the MLP, dropout and residual;
Megatron-SP's two Allgathers and two ReduceScatters), bfloat16 on 8 simulated
devices, at two sizes: `example` (batch 2, seq 16, hidden 64, 8 heads, the
example's) and `large` (batch 4, seq 256, hidden 512, 8 heads).

JAX (optional: `pip install jax`; skipped with a note when not importable) runs
the same block with jax.jit over shard_map on 8 host CPU devices
(XLA_FLAGS=--xla_force_host_platform_device_count=8): x sharded on the
sequence, the same weights' shardings, all_gather and psum_scatter where
fuserlite lowers its Allgathers and ReduceScatters, bfloat16 storage with
float32 layer_norm and softmax, dropout masks from jax.random (other bits than
fuserlite's Philox; the same work).

fuserlite runs with its default gemm ("auto": the library kernels' bfloat16 linears
on AMX tiles where the CPU has them, kernel/amx.py; else numpy's BLAS), and each row
says which ran. Where that is AMX, a third system runs fuserlite with `gemm="blas"`
(numpy's float32 GEMM), reported beside it (`--no-blas` leaves it out).

Each round runs each system in a fresh process, taking turns (fuserlite, JAX,
fuserlite, ...), so a busy machine slows all alike. A fuserlite process
measures: lower (FusionExecutor's pipeline), the cold build of the kernels into
an empty cache directory, the warm load (a new KernelCompiler on that
directory), and the steady step (`ex.run(inputs)`, global arrays in and out:
median of --steps after 3 warm-up steps, the third's outputs validated against the
reference, untimed: a few seconds at `large`). A JAX process: trace + lower + compile
and the steady step (with block_until_ready). Prints each process's row as it
ends, then the medians over rounds and the ratios (issue 25's targets: the step
<= 1.5x JAX at `example`, <= 1.0x at `large`), with the load average; writes
results/transformer_step.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = {
    "example": {"batch": 2, "seq": 16, "hidden": 64, "heads": 8},
    "large": {"batch": 4, "seq": 256, "hidden": 512, "heads": 8},
}
TARGETS = {"example": 1.5, "large": 1.0}
DEVICES = 8
DROPOUT = 0.1


def fuserlite_worker(size: dict, steps: int, gemm: str = "auto") -> dict:
    """One fresh process's numbers for fuserlite (`gemm`: the executor's, kernel/amx.py)."""
    import fuserlite as fl
    from fuserlite import models
    from fuserlite.kernel.compile import KernelCompiler
    from fuserlite.runtime.compute import compile_kernels

    fusion = models.transformer_block(DEVICES, "bfloat16", models.BlockShape(**size), DROPOUT)
    inputs = fl.random_inputs(fusion, seed=0)
    start = time.perf_counter()
    lowered = fl.FusionExecutor(fusion, compute="interpret")
    lower_s = time.perf_counter() - start
    kernels = lowered.program.kernels
    with tempfile.TemporaryDirectory() as cache:
        _ = KernelCompiler(cache_dir=cache).toolchain  # the probe, once per process
        cold = KernelCompiler(cache_dir=cache)
        start = time.perf_counter()
        compile_kernels(kernels, cold)
        cold_s = time.perf_counter() - start
        warm = KernelCompiler(cache_dir=cache)
        start = time.perf_counter()
        compile_kernels(kernels, warm)
        warm_s = time.perf_counter() - start
        ex = fl.FusionExecutor(lowered.program, compute=warm, gemm=gemm)
        for _ in range(3):
            out = ex.run(inputs)
        fl.validate(fusion, inputs, out)  # the steps timed are of a validated program
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            ex.run(inputs)
            times.append(time.perf_counter() - start)
    return {
        "lower_s": lower_s,
        "cold_s": cold_s,
        "warm_s": warm_s,
        "step_s": statistics.median(times),
        "gemm": ex.gemm,
    }


def jax_worker(size: dict, steps: int) -> dict:
    """One fresh process's numbers for JAX: the block with jit over shard_map."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    try:
        from jax import shard_map
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map
    b, s, h, heads = size["batch"], size["seq"], size["hidden"], size["heads"]
    d = h // heads
    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("d",))
    bf16 = jnp.bfloat16
    names = ["x", "ln1_w", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo"]
    names += ["ln2_w", "ln2_b", "w1", "b1", "w2", "b2"]
    shapes = {"x": (b, s, h), "wq": (h, h), "wk": (h, h), "wv": (h, h), "wo": (h, h)}
    shapes |= {"w1": (4 * h, h), "b1": (4 * h,), "w2": (h, 4 * h)}
    specs = {"x": P(None, "d", None), "wo": P(None, "d"), "w2": P(None, "d")}
    specs |= {n: P("d") for n in ("wq", "bq", "wk", "bk", "wv", "bv", "w1", "b1")}
    rng = np.random.default_rng(0)
    arrays = [
        jax.device_put(
            rng.standard_normal(shapes.get(n, (h,)), np.float32).astype(bf16),
            NamedSharding(mesh, specs.get(n, P())),
        )
        for n in names
    ]

    def layer_norm(x, w, bias):
        x = x.astype(jnp.float32)
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + 1e-5) * w.astype(jnp.float32) + bias
        return y.astype(bf16)

    def dropout(x, key):
        keep = jax.random.bernoulli(key, 1.0 - DROPOUT, x.shape)
        return jnp.where(keep, x / (1.0 - DROPOUT), 0).astype(x.dtype)

    def linear(x, w, bias=None):
        y = jnp.einsum("bsk,nk->bsn", x, w, preferred_element_type=jnp.float32)
        return (y if bias is None else y + bias).astype(bf16)

    def block(x, ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2):
        me = jax.lax.axis_index("d")
        key = jax.random.fold_in(jax.random.key(0), me)
        ln1 = jax.lax.all_gather(layer_norm(x, ln1_w, ln1_b), "d", axis=1, tiled=True)

        def heads_first(y):  # this device's heads
            return y.reshape(b, s, -1, d).transpose(0, 2, 1, 3)

        q, k, v = (heads_first(linear(ln1, w, bias)) for w, bias in ((wq, bq), (wk, bk), (wv, bv)))
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32)
        causal = jnp.tril(jnp.ones((s, s), bool))
        scores = jnp.where(causal, scores / np.sqrt(d), -jnp.inf)
        probs = dropout(jax.nn.softmax(scores, -1), jax.random.fold_in(key, 0)).astype(bf16)
        o = jnp.einsum("bhqk,bhkd->bhqd", probs, v, preferred_element_type=jnp.float32)
        o = o.astype(bf16).transpose(0, 2, 1, 3).reshape(b, s, -1)
        attn = jax.lax.psum_scatter(linear(o, wo), "d", scatter_dimension=1, tiled=True) + bo
        r1 = x + dropout(attn, jax.random.fold_in(key, 1))
        ln2 = jax.lax.all_gather(layer_norm(r1, ln2_w, ln2_b), "d", axis=1, tiled=True)
        hidden = jax.nn.gelu(linear(ln2, w1, b1), approximate=True)
        mlp = jax.lax.psum_scatter(linear(hidden, w2), "d", scatter_dimension=1, tiled=True) + b2
        return r1 + dropout(mlp, jax.random.fold_in(key, 2))

    in_specs = tuple(specs.get(n, P()) for n in names)
    mapped = shard_map(block, mesh=mesh, in_specs=in_specs, out_specs=P(None, "d", None))
    start = time.perf_counter()
    fn = jax.jit(mapped).lower(*arrays).compile()
    compile_s = time.perf_counter() - start
    for _ in range(3):
        fn(*arrays).block_until_ready()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn(*arrays).block_until_ready()
        times.append(time.perf_counter() - start)
    return {"compile_s": compile_s, "step_s": statistics.median(times)}


def spawn(system: str, size: str, steps: int) -> dict | None:
    """The numbers of one fresh process; None (with its error) when it fails."""
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={DEVICES}"
    ).strip()
    argv = [sys.executable, __file__, "--worker", system, "--sizes", size, "--steps", str(steps)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        print(f"{system} {size} failed:\n{proc.stderr[-2000:]}", flush=True)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def jax_importable() -> bool:
    """True if this Python can import jax (it is never a dependency)."""
    probe = subprocess.run([sys.executable, "-c", "import jax"], capture_output=True)
    return probe.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="example,large", help="of " + ", ".join(SIZES))
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per system")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per process")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX out even if importable")
    parser.add_argument(
        "--no-blas",
        action="store_true",
        help="leave out fuserlite with gemm='blas' where the default runs AMX",
    )
    parser.add_argument(
        "--worker", choices=["fuserlite", "fuserlite-blas", "jax"], help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    sizes = args.sizes.split(",")
    if args.worker is not None:
        size = SIZES[sizes[0]]
        if args.worker == "jax":
            print(json.dumps(jax_worker(size, args.steps)))
        else:
            gemm = "blas" if args.worker == "fuserlite-blas" else "auto"
            print(json.dumps(fuserlite_worker(size, args.steps, gemm)))
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _report import Table, write_json

    from fuserlite.kernel.amx import check_gemm

    systems = ["fuserlite"]
    default = check_gemm("auto", "compiled", "transformer_step")
    if default == "blas":
        print("fuserlite's default gemm is blas here (no AMX): one fuserlite system")
    elif args.no_blas:
        print("fuserlite with gemm='blas' left out (--no-blas)")
    else:
        systems.append("fuserlite-blas")
    if args.no_jax:
        print("JAX left out (--no-jax)")
    elif jax_importable():
        systems.append("jax")
    else:
        print("JAX is not importable: fuserlite alone (pip install jax to compare)")
    load = [os.getloadavg()]
    results: dict[str, dict[str, list[dict]]] = {s: {n: [] for n in systems} for s in sizes}
    columns = ["size", "round", "system", "lower ms", "cold build ms", "warm load ms"]
    columns += ["compile ms", "step ms"]
    with Table(f"transformer block step, bfloat16, {DEVICES} devices", columns) as table:
        for size in sizes:
            for r in range(args.rounds):
                for system in systems:
                    got = spawn(system, size, args.steps)
                    if got is None:
                        continue
                    results[size][system].append(got)
                    ms = {k: f"{v * 1e3:.2f}" for k, v in got.items() if k != "gemm"}
                    name = f"{system} ({got['gemm']})" if system == "fuserlite" else system
                    table.row(
                        size, r, name, ms.get("lower_s", "-"), ms.get("cold_s", "-"),
                        ms.get("warm_s", "-"), ms.get("compile_s", "-"), ms["step_s"],
                    )  # fmt: skip
                load.append(os.getloadavg())
    summary = []
    title = "medians over rounds; ratios to JAX (targets: step <= 1.5 at example, 1.0 at large)"
    columns = ["size", "gemm", "fuserlite step ms", "jax step ms", "step ratio"]
    columns += ["lower+cold / jax compile", "lower+warm / jax compile"]
    columns += ["blas step ms", "blas step ratio"]
    with Table(title, columns) as table:
        for size in sizes:
            med = {
                system: {
                    k: statistics.median(row[k] for row in rows) for k in rows[0] if k != "gemm"
                }
                | {"gemm": rows[0].get("gemm")}
                for system, rows in results[size].items()
                if rows
            }
            fus, jx, blas = med.get("fuserlite"), med.get("jax"), med.get("fuserlite-blas")
            row = {"size": size, "shape": SIZES[size], "fuserlite": fus, "jax": jx}
            row["fuserlite_blas"] = blas
            if fus is not None and jx is not None:
                row["ratios"] = {
                    "step": fus["step_s"] / jx["step_s"],
                    "cold": (fus["lower_s"] + fus["cold_s"]) / jx["compile_s"],
                    "warm": (fus["lower_s"] + fus["warm_s"]) / jx["compile_s"],
                }
            if blas is not None and jx is not None:
                row.setdefault("ratios", {})["blas_step"] = blas["step_s"] / jx["step_s"]
            summary.append(row)
            ratios = row.get("ratios", {})
            table.row(
                size,
                "-" if fus is None else fus["gemm"],
                "-" if fus is None else f"{fus['step_s'] * 1e3:.2f}",
                "-" if jx is None else f"{jx['step_s'] * 1e3:.2f}",
                *(f"{ratios[k]:.2f}" if k in ratios else "-" for k in ("step", "cold", "warm")),
                "-" if blas is None else f"{blas['step_s'] * 1e3:.2f}",
                f"{ratios['blas_step']:.2f}" if "blas_step" in ratios else "-",
            )
        table.note(f"load average (1, 5, 15 min) from {load[0]} to {load[-1]}")
    write_json(
        "transformer_step",
        {
            "devices": DEVICES,
            "rounds": args.rounds,
            "steps": args.steps,
            "targets": TARGETS,
            "load_average": [list(x) for x in load],
            "cpus": os.cpu_count(),
            "rows": summary,
            "processes": results,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
