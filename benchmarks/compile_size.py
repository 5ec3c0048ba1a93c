"""How long g++ takes over one large kernel, in one function and split into parts.

    python benchmarks/compile_size.py [--quick] [--unsplit-max KB] [--timeout S]

Two families of one kernel each, as tests/test_pipeline_scaling.py builds them:
N outputs `y_k = x + k` of x[8, 16] on 2 devices (N = 1000, 2000, 5000,
20000), and a chain of N pointwise ops on x[8, 16] (N = 10000, 30000, 120000).
Each kernel's CPU source is compiled once as fuserlite builds it
(fuserlite.kernel.cpu_parts: split above FUNCTION_BYTES into parts of
PART_BYTES) and once as one function (as before the split existed), the latter
only up to --unsplit-max KB of C++ (default 2000: larger ones take minutes).
Each compile runs the toolchain's own command line on a file in a temporary
directory (no cache), under a wrapper process that reports g++'s CPU time and
peak memory (the largest of its processes: cc1plus).

Prints one row per compile as it finishes; writes results/compile_size.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _report import Table, write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_pipeline_scaling import chain, many_outputs  # noqa: E402

import fuserlite as fl  # noqa: E402
import fuserlite.kernel.cpu_parts as cpu_parts  # noqa: E402
from fuserlite.kernel.compile import KernelCompiler, uses_openmp  # noqa: E402
from fuserlite.kernel.cpu import cpu_function, prelude  # noqa: E402
from fuserlite.kernel.cuda import kernel_statements  # noqa: E402
from fuserlite.schedule.grid import kernel_grid  # noqa: E402

CASES = [("outputs", n) for n in (1000, 2000, 5000, 20000)] + [
    ("chain", n) for n in (10000, 30000, 120000)
]
QUICK = [("outputs", 1000), ("outputs", 2000), ("chain", 10000)]
# Runs the command given, then prints its exit status, the CPU seconds and the peak
# resident KB of its processes.
WRAPPER = (
    "import json, resource, subprocess, sys\n"
    "rc = subprocess.run(sys.argv[1:], capture_output=True).returncode\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps([rc, u.ru_utime + u.ru_stime, u.ru_maxrss]))\n"
)


def compile_once(command: list[str], timeout: float) -> dict:
    """Wall seconds, g++ CPU seconds, peak MB and success of one compile."""
    start = time.perf_counter()
    # Its own process group, so that a timeout ends cc1plus too, not only the wrapper.
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, *command],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return {"wall_s": timeout, "cpu_s": math.nan, "peak_mb": math.nan, "ok": "timeout"}
    rc, cpu, kb = json.loads(out)
    wall = time.perf_counter() - start
    ok = "yes" if rc == 0 else f"rc {rc}"
    return {"wall_s": wall, "cpu_s": cpu, "peak_mb": kb / 1024, "ok": ok}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three small kernels only")
    parser.add_argument("--unsplit-max", type=int, default=2000, help="KB (default 2000)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per compile (600 s)")
    args = parser.parse_args()
    toolchain = KernelCompiler(cache_dir=tempfile.mkdtemp()).toolchain
    rows = []
    columns = ["kernel", "statements", "C++ KB", "parts", "wall s", "g++ CPU s", "peak MB", "ok"]
    split_at = cpu_parts.FUNCTION_BYTES
    title = "g++ over one kernel: split (as built) and one function"
    with Table(title, columns, widths=[36]) as table:
        for family, n in QUICK if args.quick else CASES:
            fusion = many_outputs(n) if family == "outputs" else chain(n)
            (kernel,) = [k for k in fl.lower(fusion).kernels if k.scheduled]
            grid = kernel_grid([e.output for e in kernel.exprs])
            statements = len(kernel_statements(kernel, grid, ""))
            built = cpu_function(kernel)
            cpu_parts.FUNCTION_BYTES = math.inf
            whole = cpu_function(kernel)
            cpu_parts.FUNCTION_BYTES = split_at
            if built.parts == 1:
                versions = [("one function (below the split)", built)]
            elif len(whole.source) / 1024 <= args.unsplit_max:
                versions = [("split", built), ("one function", whole)]
            else:
                versions = [("split", built)]  # one function: minutes, not built
            for how, function in versions:
                kb = len(function.source) / 1024
                with tempfile.TemporaryDirectory() as tmp:
                    source = Path(tmp) / "kernel.cpp"
                    unit = prelude([kernel]) + function.source
                    source.write_text(unit)
                    openmp = uses_openmp(unit)  # as KernelCompiler builds it
                    command = toolchain.command(source, Path(tmp) / "kernel.so", openmp=openmp)
                    result = compile_once(command, args.timeout)
                row = {"kernel": f"{family} {n}", "how": how, "statements": statements}
                row |= {"kb": kb, "parts": function.parts, **result}
                rows.append(row)
                table.row(
                    f"{family} {n}, {how}",
                    statements,
                    round(kb),
                    function.parts,
                    result["wall_s"],
                    result["cpu_s"],
                    result["peak_mb"],
                    result["ok"],
                )
    write_json(
        "compile_size",
        {
            "function_bytes": split_at,
            "part_bytes": cpu_parts.PART_BYTES,
            "compiler": toolchain.version,
            "flags": list(toolchain.flags),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
