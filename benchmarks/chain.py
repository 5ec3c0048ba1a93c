"""A chain of N pointwise ops on 8 devices: fuserlite compiled and interpreted, and JAX.

    python benchmarks/chain.py [--sizes 10,100,1000] [--runs 30] [--compiles 3] [--no-jax]

The program: x[8192] float32 sharded on 8 sim devices, then N ops repeating
add 1.0, multiply by 0.5, tanh, negate (one scheduled kernel). For each N:

- build: the Python calls that make the fusion; lower: FusionExecutor's
  pipeline (the passes and the validator), each the median of --compiles, a fresh
  fusion each time;
- compile (cold): generating the C++ of the kernels and one compiler launch,
  into an empty cache directory (the compiler's probe, once per process, is done
  before);
- load (warm): a new KernelCompiler on that directory, as a new process would
  be: generate, hash, find the library, dlopen it;
- run: one `ex.run(inputs)` (global array in, global array out), compiled and
  interpreted (compute="interpret"), median of --runs calls.

When JAX is importable (never a dependency: `pip install jax`), the same
program with jax.jit on 8 forced host CPU devices (XLA_FLAGS
--xla_force_host_platform_device_count=8, x sharded with a NamedSharding):
trace + lower + compile of a fresh function (median of --compiles), and one
call with block_until_ready. Run calls take turns (fuserlite compiled,
interpreted, JAX) so a busy machine slows all alike.

Targets (issue 25): run per call <= 1.5x JAX's; build + lower + cold compile <=
1.0x JAX's trace + lower + compile; build + lower + warm load <= 0.1x. Prints
each row as it is measured, then the ratios; writes results/chain.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

# JAX reads its flags at import: 8 host devices must be asked for before anything imports it.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import numpy as np  # noqa: E402
from _report import Table, write_json  # noqa: E402

import fuserlite as fl  # noqa: E402
from fuserlite.kernel.compile import KernelCompiler  # noqa: E402
from fuserlite.runtime.compute import compile_kernels  # noqa: E402
from fuserlite.schedule.shard import shard_axis  # noqa: E402

DEVICES = 8
ELEMENTS = 8192
TARGETS = {"run": 1.5, "cold": 1.0, "warm": 0.1}


def chain(n_ops: int) -> fl.Fusion:
    """x[8192] sharded on 8 devices through n_ops ops: + 1, * 0.5, tanh, neg, repeating."""
    with fl.Fusion() as fusion:
        x = fl.tensor([ELEMENTS], name="x")
        fusion.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(DEVICES))
        t = x
        for k in range(n_ops):
            t = STEPS[k % 4](t)
        fusion.add_output(t)
    return fusion


STEPS = (lambda t: t + 1.0, lambda t: t * 0.5, fl.tanh, fl.neg)


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


class Jax:
    """The chain with jax.jit on 8 host devices."""

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        self.jax, self.jnp = jax, jnp
        if len(jax.devices()) < DEVICES:
            raise RuntimeError(f"JAX sees {len(jax.devices())} devices, not {DEVICES}")
        mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("d",))
        self.sharding = NamedSharding(mesh, PartitionSpec("d"))

    def function(self, n_ops: int):
        """A fresh Python function each time, so no JAX cache knows it."""
        jnp = self.jnp
        steps = [lambda t: t + 1.0, lambda t: t * 0.5, jnp.tanh, jnp.negative]

        def body(x):
            for k in range(n_ops):
                x = steps[k % 4](x)
            return x

        return self.jax.jit(body, in_shardings=self.sharding, out_shardings=self.sharding)

    def compile(self, n_ops: int, x):
        """(trace + lower + compile seconds, the compiled function)."""
        return timed(lambda: self.function(n_ops).lower(x).compile())

    def put(self, array: np.ndarray):
        return self.jax.device_put(array, self.sharding)


def measure(n: int, args, jax: Jax | None, table: Table) -> dict:
    """One size: every phase of fuserlite's two paths and of JAX."""
    fl.FusionExecutor(chain(n), compute="interpret")  # warm-up: imports, first-use caches
    builds, lowers = [], []
    for _ in range(args.compiles):  # medians, as for the compiles: one lowering is noisy
        build, fusion = timed(lambda: chain(n))
        lower, ex = timed(lambda f=fusion: fl.FusionExecutor(f, compute="interpret"))
        builds.append(build)
        lowers.append(lower)
    build_s, lower_s = statistics.median(builds), statistics.median(lowers)
    inputs = fl.random_inputs(fusion, seed=0)
    (x,) = inputs
    kernels = ex.program.kernels
    cold, warm = [], []
    for _ in range(args.compiles):
        with tempfile.TemporaryDirectory() as cache:
            _ = KernelCompiler(cache_dir=cache).toolchain  # the probe, once per process
            first = KernelCompiler(cache_dir=cache)
            cold.append(timed(lambda c=first: compile_kernels(kernels, c))[0])
            compiler = KernelCompiler(cache_dir=cache)  # a new process, as far as it knows
            warm.append(timed(lambda c=compiler: compile_kernels(kernels, c))[0])
            assert (first.compiles, compiler.compiles) == (1, 0)
    compiled = fl.FusionExecutor(fusion, compute=compiler)
    interpreted = ex
    runners = {
        "compiled": lambda: compiled.run(inputs),
        "interpret": lambda: interpreted.run(inputs),
    }
    want = fl.evaluate(fusion, inputs)[0]
    for run in runners.values():
        fl.validate(fusion, inputs, run())
    jax_compile = None
    if jax is not None:
        xj = jax.put(x)
        jax_compile = statistics.median(jax.compile(n, xj)[0] for _ in range(args.compiles))
        fn = jax.compile(n, xj)[1]
        runners["jax"] = lambda: fn(xj).block_until_ready()
        np.testing.assert_allclose(np.asarray(runners["jax"]()), want, rtol=1e-5, atol=1e-5)
    times: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(args.runs + 1):  # the first round warms up
        for name, run in runners.items():
            times[name].append(timed(run)[0])
    run_s = {name: statistics.median(t[1:]) for name, t in times.items()}
    row = {
        "n_ops": n,
        "build_s": build_s,
        "lower_s": lower_s,
        "compile_cold_s": statistics.median(cold),
        "load_warm_s": statistics.median(warm),
        "run_compiled_s": run_s["compiled"],
        "run_interpret_s": run_s["interpret"],
        "jax_compile_s": jax_compile,
        "run_jax_s": run_s.get("jax"),
    }
    table.row(
        n,
        f"{build_s * 1e3:.1f}",
        f"{lower_s * 1e3:.1f}",
        f"{row['compile_cold_s'] * 1e3:.0f}",
        f"{row['load_warm_s'] * 1e3:.1f}",
        f"{run_s['compiled'] * 1e3:.3f}",
        f"{run_s['interpret'] * 1e3:.3f}",
        "-" if jax_compile is None else f"{jax_compile * 1e3:.0f}",
        "-" if jax is None else f"{run_s['jax'] * 1e3:.3f}",
    )
    return row


def ratios(row: dict) -> dict[str, float] | None:
    """Against JAX: run per call, and the time to a runnable program cold and warm."""
    if row["run_jax_s"] is None:
        return None
    front = row["build_s"] + row["lower_s"]
    return {
        "run": row["run_compiled_s"] / row["run_jax_s"],
        "run_interpret": row["run_interpret_s"] / row["run_jax_s"],
        "cold": (front + row["compile_cold_s"]) / row["jax_compile_s"],
        "warm": (front + row["load_warm_s"]) / row["jax_compile_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", default="10,100,1000", help="chain lengths (default 10,100,1000)"
    )
    parser.add_argument("--runs", type=int, default=30, help="timed calls per path (median)")
    parser.add_argument("--compiles", type=int, default=3, help="timed compiles (median)")
    parser.add_argument("--no-jax", action="store_true", help="leave JAX out even if importable")
    args = parser.parse_args()
    jax = None
    if not args.no_jax:
        try:
            jax = Jax()
        except ImportError:
            print("JAX is not importable: fuserlite alone (pip install jax to compare)")
        except RuntimeError as exc:
            print(f"JAX left out: {exc}")
    rows = []
    columns = ["N", "build ms", "lower ms", "compile cold ms", "load warm ms"]
    columns += ["run compiled ms", "run interp ms", "jax compile ms", "run jax ms"]
    with Table(f"chain of N ops, x[{ELEMENTS}] on {DEVICES} devices", columns) as table:
        for n in (int(s) for s in args.sizes.split(",")):
            rows.append(measure(n, args, jax, table))
    with Table(
        "ratios to JAX (targets: run <= 1.5, cold <= 1.0, warm <= 0.1)",
        ["N", "run", "run (interpret)", "build+lower+cold", "build+lower+warm"],
    ) as table:
        for row in rows:
            r = ratios(row)
            row["ratios"] = r
            if r is None:
                table.row(row["n_ops"], "-", "-", "-", "-")
                continue
            table.row(
                row["n_ops"],
                *(f"{r[k]:.2f}" for k in ("run", "run_interpret", "cold", "warm")),
            )
    write_json(
        "chain",
        {
            "devices": DEVICES,
            "elements": ELEMENTS,
            "runs": args.runs,
            "compiles": args.compiles,
            "targets": TARGETS,
            "load_average": list(os.getloadavg()),
            "cpus": os.cpu_count(),
            "jax": None if jax is None else jax.jax.__version__,
            "toolchain": list(KernelCompiler().toolchain.flags),
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
