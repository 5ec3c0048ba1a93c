"""Run the generated CUDA kernels on a GPU and compare them with numpy.

    python benchmarks/cuda_kernels.py

For a few scheduled pointwise fusions (seed 004, a 1000-element chain, a
3x5x7 broadcast, outputs of different ranks): emit CUDA with fuserlite.kernel.cuda,
compile to PTX with nvcc, launch each kernel through the CUDA driver API
(ctypes on libcuda; no cupy needed) with the gridDim/blockDim the schedule
says, and compare the outputs with the reference evaluator. Skips cleanly
(exit 0, a message) when nvcc, libcuda or a GPU is missing. Prints a table and
writes results/cuda_kernels.json.
"""

from __future__ import annotations

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
from fuserlite.kernel.cuda import cuda_source, launch_dims
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


def measure(driver: Driver, name: str, fusion: fl.Fusion) -> dict:
    """Compile `fusion`'s kernel with nvcc, run it on the GPU, compare with numpy."""
    inputs = fl.random_inputs(fusion)
    expected = fl.evaluate(fusion, inputs)
    (kernel,) = fl.Pipeline(["segment", "schedule-pointwise"]).run(fusion).kernels
    src = cuda_source(kernel, prefix=name)
    with tempfile.TemporaryDirectory() as tmp:
        cu, ptx = Path(tmp) / "k.cu", Path(tmp) / "k.ptx"
        cu.write_text(src)
        subprocess.run(["nvcc", "-ptx", "-o", str(ptx), str(cu)], check=True)
        module = driver.load(ptx.read_bytes() + b"\0")
    dims = launch_dims(kernel_grid([e.output for e in kernel.exprs]))
    got = driver.run(
        module,
        f"{name}_0",
        dims,
        [np.ascontiguousarray(a) for a in inputs],
        [t.shape for t in fusion.outputs],
        [t.dtype.numpy for t in fusion.outputs],
    )
    err = max(float(np.max(np.abs(g - e))) for g, e in zip(got, expected))
    return {"fusion": name, "grid": dims[0], "block": dims[1], "max_abs_err": err}


def main() -> int:
    if shutil.which("nvcc") is None:
        print("skipped: nvcc is not on the PATH")
        return 0
    try:
        driver = Driver()
    except (OSError, RuntimeError) as exc:
        print(f"skipped: no usable GPU ({exc})")
        return 0
    rows = []
    with Table(
        "generated CUDA vs numpy", ["fusion", "gridDim", "blockDim", "max abs err"]
    ) as table:
        for name, fusion in fusions().items():
            r = measure(driver, name, fusion)
            rows.append(r)
            table.row(r["fusion"], str(r["grid"]), str(r["block"]), r["max_abs_err"])
    write_json("cuda_kernels", {"rows": rows})
    return 0 if all(r["max_abs_err"] < 1e-5 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
