"""Run the generated CUDA kernels on a GPU; compare them with the CPU target and numpy.

    python benchmarks/cuda_kernels.py [--cpu-only]

For a few scheduled pointwise fusions (a 1000-element chain, a 3x5x7
broadcast, outputs of different ranks): emit CUDA with fuserlite.kernel.cuda,
compile to PTX with nvcc, launch each kernel through the CUDA driver API
(ctypes on libcuda: no cupy or cuda-python needed) with the gridDim/blockDim
the schedule says, and compare the outputs with the same kernel body compiled
for the CPU (fuserlite.kernel.cpu, as `compute="compiled"` runs it) and with
the reference evaluator. Skips cleanly (exit 0, a message) when nvcc, libcuda
or a GPU is missing; --cpu-only runs everything but the GPU (a check of this
script on a machine without one). Exit 1 if any difference is over 1e-5.
Prints a table and writes results/cuda_kernels.json.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _report import Table, write_json

import fuserlite as fl
from fuserlite.kernel.compile import find_compiler
from fuserlite.kernel.cuda import cuda_source, launch_dims
from fuserlite.runtime.compute import CompiledKernels, default_compiler
from fuserlite.schedule.grid import kernel_grid


def fusions() -> dict[str, fl.Fusion]:
    """name -> fusion (single device; sharded kernels run the same code on each shard)."""
    out = {}
    with fl.Fusion() as f:
        x, y = fl.tensor([1000]), fl.tensor([1])
        f.add_input(x)
        f.add_input(y)
        f.add_output(fl.tanh(x + y) * 2.0)
    out["chain_1000"] = f
    with fl.Fusion() as f:
        a, b = fl.tensor([3, 5, 7]), fl.tensor([3, 1, 7])
        f.add_input(a)
        f.add_input(b)
        f.add_output(fl.exp(a) - b)
    out["bcast_3x5x7"] = f
    with fl.Fusion() as f:
        a, b = fl.tensor([300, 129]), fl.tensor([129])
        f.add_input(a)
        f.add_input(b)
        f.add_output(fl.relu(a * b))
        f.add_output(b + 1.0)
    out["rank_mix"] = f
    return out


class Driver:
    """The few CUDA driver calls needed to load PTX and launch a kernel."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("cuda") or "libcuda.so.1"
        self.lib = ctypes.CDLL(name)
        self.check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxCreate_v2(ctypes.byref(self.ctx), 0, dev), "cuCtxCreate")

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed with CUDA error {rc}")

    def load(self, ptx: bytes) -> ctypes.c_void_p:
        module = ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(module), ptx), "cuModuleLoadData")
        return module

    def alloc(self, nbytes: int) -> ctypes.c_uint64:
        ptr = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), max(nbytes, 1)), "cuMemAlloc")
        return ptr

    def run(self, module, name: str, dims, arrays_in, shapes_out, dtypes_out) -> list[np.ndarray]:
        fn = ctypes.c_void_p()
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), name)
        ptrs = []
        for a in arrays_in:
            p = self.alloc(a.nbytes)
            self.check(self.lib.cuMemcpyHtoD_v2(p, a.ctypes.data, a.nbytes), "HtoD")
            ptrs.append(p)
        outs = [np.empty(s, d) for s, d in zip(shapes_out, dtypes_out)]
        for o in outs:
            ptrs.append(self.alloc(o.nbytes))
        params = (ctypes.c_void_p * len(ptrs))(*[ctypes.addressof(p) for p in ptrs])
        (gx, gy, gz), (bx, by, bz) = dims
        self.check(
            self.lib.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, 0, None, params, None), "launch"
        )
        self.check(self.lib.cuCtxSynchronize(), "synchronize")
        for o, p in zip(outs, ptrs[len(arrays_in) :]):
            self.check(self.lib.cuMemcpyDtoH_v2(o.ctypes.data, p, o.nbytes), "DtoH")
        for p in ptrs:
            self.lib.cuMemFree_v2(p)
        return outs


def max_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))


def measure(driver: Driver | None, name: str, fusion: fl.Fusion) -> dict:
    """One fusion's kernel on the GPU (unless `driver` is None) and on the CPU target,
    each against the reference."""
    inputs = fl.random_inputs(fusion)
    expected = fl.evaluate(fusion, inputs)
    program = fl.Pipeline(["segment", "schedule-pointwise"]).run(fusion)
    (kernel,) = program.kernels
    by_tensor = dict(zip(program.inputs, inputs))
    local = {t: np.ascontiguousarray(by_tensor[t]) for t in kernel.inputs}
    cpu_out = CompiledKernels([kernel], default_compiler()).run(kernel, local)
    cpu = [cpu_out[t] for t in program.outputs]
    dims = launch_dims(kernel_grid([e.output for e in kernel.exprs]))
    row = {
        "fusion": name,
        "grid": dims[0],
        "block": dims[1],
        "cpu_vs_ref": max_error(cpu, expected),
    }
    if driver is None:
        return row
    with tempfile.TemporaryDirectory() as tmp:
        cu, ptx = Path(tmp) / "k.cu", Path(tmp) / "k.ptx"
        cu.write_text(cuda_source(kernel, prefix=name))
        subprocess.run(["nvcc", "-ptx", "-o", str(ptx), str(cu)], check=True)
        module = driver.load(ptx.read_bytes() + b"\0")
    gpu_out = driver.run(
        module,
        f"{name}_0",
        dims,
        list(local.values()),  # the kernel's parameters: its inputs, then its outputs
        [t.shape for t in kernel.outputs],
        [t.dtype.numpy for t in kernel.outputs],
    )
    gpu = [dict(zip(kernel.outputs, gpu_out))[t] for t in program.outputs]
    return row | {"gpu_vs_ref": max_error(gpu, expected), "gpu_vs_cpu": max_error(gpu, cpu)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-only", action="store_true", help="leave the GPU out")
    args = parser.parse_args()
    driver = None
    if not args.cpu_only:
        if shutil.which("nvcc") is None:
            print("skipped: nvcc is not on the PATH")
            return 0
        try:
            driver = Driver()
        except (OSError, RuntimeError) as exc:
            print(f"skipped: no usable GPU ({exc})")
            return 0
    if find_compiler() is None:
        print("skipped: no C++ compiler for the CPU target")
        return 0
    rows = []
    columns = ["fusion", "gridDim", "blockDim", "cpu vs ref", "gpu vs ref", "gpu vs cpu"]
    with Table("generated CUDA vs the CPU target vs numpy (max abs error)", columns) as table:
        for name, fusion in fusions().items():
            r = measure(driver, name, fusion)
            rows.append(r)
            gpu = [r.get("gpu_vs_ref", "-"), r.get("gpu_vs_cpu", "-")]
            table.row(r["fusion"], str(r["grid"]), str(r["block"]), r["cpu_vs_ref"], *gpu)
    write_json("cuda_kernels", {"gpu": driver is not None, "rows": rows})
    errors = [v for r in rows for k, v in r.items() if k.endswith(("_ref", "_cpu"))]
    return 0 if all(e < 1e-5 for e in errors) else 1


if __name__ == "__main__":
    sys.exit(main())
