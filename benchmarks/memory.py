"""Peak memory of `fuserlite run` against the program's working set (docs/design.md §8).

    python benchmarks/memory.py [--quick]

Each case runs in a fresh Python process twice: once as the `fuserlite run`
command (random inputs, lowering, execution on the sim backend, checksums,
validation against the reference evaluator), once as the executor alone
(`random_inputs` then `FusionExecutor.run`). A process measures its own
baseline, the peak RSS (`ru_maxrss`) of an idle interpreter that imported
fuserlite and built the fusion, and reports its peak RSS minus that baseline.

The working set is `FusionExecutor.working_set()`: the bytes of the inputs, of
the outputs and of the largest set of intermediates live at once (a tensor is
live from the kernel, expression or communication that writes it through the
last one that reads it), each summed over the devices that hold it, so a
replicated tensor on D devices counts D times. Target: peak <= 3x the working
set, for both. Prints each row as it finishes, writes results/memory.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from _report import Table, write_json

MiB = 2**20
TARGET = 3.0


def neg(mib: int):
    """y = neg(x), x[rows, 1024] float32 sharded by rows on 2 devices."""
    import fuserlite as fl
    from fuserlite.schedule.shard import shard_axis

    with fl.Fusion() as f:
        x = fl.tensor([mib * MiB // 4096, 1024])
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(2))
        f.add_output(fl.neg(x))
    return f


def chain(mib: int):
    """Eight pointwise ops and a broadcast bias on x[rows, 1024], rows on 2 devices."""
    import fuserlite as fl
    from fuserlite.schedule.shard import shard_axis

    with fl.Fusion() as f:
        x = fl.tensor([mib * MiB // 4096, 1024])
        bias = fl.tensor([1024])
        f.add_input(x)
        f.add_input(bias)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(2))
        bias.set_device_mesh(fl.DeviceMesh.for_num_devices(2))
        t = x
        for k in range(8):
            t = (t * 0.5, t + bias, fl.tanh(t), fl.exp(t))[k % 4]
        f.add_output(t)
    return f


def reduction(mib: int):
    """s = sum(x, [1]), x[rows, 1024] float32 sharded by columns on 2 devices: an Allreduce."""
    import fuserlite as fl
    from fuserlite.schedule.shard import shard_axis

    with fl.Fusion() as f:
        x = fl.tensor([mib * MiB // 4096, 1024])
        f.add_input(x)
        shard_axis(x, 1, fl.DeviceMesh.for_num_devices(2))
        f.add_output(fl.sum(x, [1]))
    return f


def mlp(mib: int):
    """The tensor-parallel MLP of fuserlite.models on 2 devices, hidden 1024, seq 512;
    the batch makes x about `mib` MiB."""
    from fuserlite import models

    return models.tensor_parallel_mlp(2, batch=max(1, mib // 2), seq=512, hidden=1024)


CASES: dict[str, Callable[[int], object]] = {
    "neg": neg,
    "chain8": chain,
    "sum": reduction,
    "tp-mlp": mlp,
}
SIZES = {"neg": [64, 256, 512], "chain8": [64, 512], "sum": [256, 1024], "tp-mlp": [16, 64]}
QUICK = {"neg": [64], "chain8": [64], "sum": [64], "tp-mlp": [16]}


def peak_rss() -> int:
    """This process's peak resident set size in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(case: str, mib: int, mode: str) -> None:
    """Measure one case in this (fresh) process; prints one JSON line."""
    import fuserlite as fl
    from fuserlite import cli

    fusion = CASES[case](mib)
    ws = fl.FusionExecutor(fusion).working_set()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{case}.fus")
        with open(path, "w") as fh:
            fh.write(fl.to_fus(fusion))
        baseline = peak_rss()
        start = time.perf_counter()
        if mode == "run":
            with contextlib.redirect_stdout(io.StringIO()):
                status = cli.main(["run", path])
            if status != 0:
                raise SystemExit(f"fuserlite run {case} {mib} MiB failed ({status})")
        else:
            inputs = fl.random_inputs(fusion)
            fl.FusionExecutor(fusion).run(inputs)
        seconds = time.perf_counter() - start
    extra = {"baseline": baseline, "peak": peak_rss(), "seconds": seconds}
    print(json.dumps({"working_set": [ws.inputs, ws.outputs, ws.intermediates], **extra}))


def measure(case: str, mib: int, mode: str) -> dict:
    """Run `child` in a fresh interpreter."""
    cmd = [sys.executable, __file__, "--child", case, str(mib), mode]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{case} {mib} MiB ({mode}) failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small size per case")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, mib, mode = args.child
        child(case, int(mib), mode)
        return 0
    rows = []
    columns = ["case", "size MiB", "working set MiB", "run peak MiB", "run/ws", "run s"]
    columns += ["executor peak MiB", "executor/ws", "ok"]
    title = f"peak RSS above an idle interpreter vs the working set (target <= {TARGET}x)"
    with Table(title, columns) as table:
        for case, sizes in (QUICK if args.quick else SIZES).items():
            for mib in sizes:
                run, alone = measure(case, mib, "run"), measure(case, mib, "executor")
                ws = sum(run["working_set"])
                row = {
                    "case": case,
                    "size_mib": mib,
                    "working_set": dict(
                        zip(["inputs", "outputs", "intermediates"], run["working_set"])
                    ),
                    "working_set_bytes": ws,
                    "run": run,
                    "executor": alone,
                    "run_ratio": (run["peak"] - run["baseline"]) / ws,
                    "executor_ratio": (alone["peak"] - alone["baseline"]) / ws,
                }
                row["ok"] = max(row["run_ratio"], row["executor_ratio"]) <= TARGET
                rows.append(row)
                table.row(
                    case,
                    mib,
                    round(ws / MiB),
                    round((run["peak"] - run["baseline"]) / MiB),
                    f"{row['run_ratio']:.2f}",
                    f"{run['seconds']:.1f}",
                    round((alone["peak"] - alone["baseline"]) / MiB),
                    f"{row['executor_ratio']:.2f}",
                    "yes" if row["ok"] else "NO",
                )
        failing = [f"{r['case']} {r['size_mib']} MiB" for r in rows if not r["ok"]]
        table.note(f"over the target: {', '.join(failing)}" if failing else "all within the target")
    write_json("memory", {"target_ratio": TARGET, "cpus": os.cpu_count(), "rows": rows})
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
