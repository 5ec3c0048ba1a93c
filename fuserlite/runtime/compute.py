"""How the executor computes a scheduled kernel.

    FusionExecutor(fusion, compute="compiled")   # C++ for the CPU (fuserlite.kernel.cpu), the
                                                 # default where a C++ compiler is on the PATH
    FusionExecutor(fusion, compute="interpret")  # the numpy kernel runner, through the schedule
    FusionExecutor(fusion, compute="numpy")      # op by op with numpy (schedule=False)

`compute` may also be a KernelCompiler (a compiler, cache directory or flags of
one's own), which means "compiled". Kernels the scheduler left unscheduled run op
by op with numpy whatever `compute` says.

The compiled path builds every scheduled kernel of the program at its first run,
all in one shared object (fuserlite.kernel.compile caches it on disk); the executor
runs each on every device with one native call of its launch plan
(fuserlite.runtime.launch; `run` here calls it for one device). Outputs start as poison (NaN, the
smallest integer, True), as the kernel runner's do, so an element no grid point
writes reads the same on both paths. A kernel body too large for one C++ function
is compiled as several, and one too large to split (fuserlite.kernel.cpu.
KernelTooLarge) runs through the kernel runner; each says so in one line.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable, Iterable

import numpy as np

from fuserlite.ir.args import abbreviate
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.batches import KernelPlan, plan_kernel
from fuserlite.kernel.cache import note
from fuserlite.kernel.compile import CANDIDATES, KernelCompiler, find_compiler, size_text
from fuserlite.kernel.cpu import (
    CpuFunction,
    cpu_function,
    prelude,
    quiet_openmp,
    runs_on_openmp,
)
from fuserlite.kernel.cpu_parts import PART_BYTES, KernelTooLarge
from fuserlite.kernel.grid_index import GridCache
from fuserlite.kernel.indexing import device_indices
from fuserlite.kernel.memory import poison
from fuserlite.kernel.runner import device_values, run_kernel
from fuserlite.kernel.signature import structural_symbol
from fuserlite.program.program import Kernel
from fuserlite.runtime.launch import KernelLaunch
from fuserlite.runtime.threads import DeviceThreads

COMPUTE = ("compiled", "interpret", "numpy")


@functools.lru_cache(maxsize=1)
def default_compiler() -> KernelCompiler:
    """The process's compiler for compute="compiled" (found once; it keeps what it loads)."""
    return KernelCompiler()


@functools.lru_cache(maxsize=1)
def default_compute() -> str:
    """ "compiled" where a C++ compiler is found, else "interpret", said once on stderr."""
    if find_compiler() is not None:
        return "compiled"
    print(
        f"fuserlite: no C++ compiler ($CXX, {', '.join(CANDIDATES)}) on the PATH: kernels run "
        "interpreted (compute='interpret'), more slowly",
        file=sys.stderr,
    )
    return "interpret"


def resolve_compute(
    compute: str | KernelCompiler | None, schedule: bool, who: str
) -> tuple[str, KernelCompiler | None]:
    """(one of COMPUTE, the compiler for "compiled") from the executor's arguments;
    `schedule=False` is the older spelling of compute="numpy"."""
    if isinstance(compute, KernelCompiler):
        name, compiler = "compiled", compute
    elif compute is None:
        name, compiler = (default_compute() if schedule else "numpy"), None
    elif isinstance(compute, str) and compute in COMPUTE:
        name, compiler = compute, None
    else:
        raise ExecutionError(
            f"{who}: compute must be one of {', '.join(COMPUTE)} or a KernelCompiler, "
            f"got {compute!r}"
        )
    if not schedule and name != "numpy":
        raise ExecutionError(
            f"{who}: schedule=False means compute='numpy', which contradicts "
            f"compute={name!r}; pass only one of them"
        )
    if name == "compiled" and compiler is None:
        compiler = default_compiler()
    return name, compiler


class InterpretedKernels:
    """Scheduled kernels through the numpy kernel runner, each planned once; `grids` keeps
    their index arrays between runs."""

    def __init__(self, grids: GridCache) -> None:
        self.grids = grids
        self._plans: dict[int, KernelPlan] = {}

    def run(
        self, kernel: Kernel, local_inputs: dict[TensorView, np.ndarray], device=None
    ) -> dict[TensorView, np.ndarray]:
        """The kernel's local outputs on one device (`device`: its indices, as run_kernel's)."""
        plan = self._plans.get(id(kernel))
        if plan is None:  # the lowered program never changes: each kernel is planned once
            plan = self._plans[id(kernel)] = plan_kernel(kernel, self.grids)
        return run_kernel(kernel, local_inputs, plan, self.grids, device)


class _Entry:
    """A compiled kernel and what calling it takes."""

    def __init__(
        self, kernel: Kernel, function: Callable, launcher: Callable | None, parallel: bool
    ) -> None:
        self.launcher = launcher  # its library's device loop (fuserlite.runtime.launch)
        self.parallel = parallel  # its blocks run on OpenMP's threads
        self.devices = device_indices(kernel.tensors)  # carried after the buffers' addresses
        function.argtypes = [ctypes.c_void_p]  # the array of its buffers' addresses
        function.restype = None
        self.function = function
        self.inputs = [(t, local_shape(t), t.dtype.numpy) for t in kernel.inputs]
        self.outputs = [(local_shape(t), t.dtype.numpy) for t in kernel.outputs]
        self.poison = [poison(dtype) for _, dtype in self.outputs]


class CompiledKernels:
    """Scheduled kernels compiled for the CPU; built together at the first run. Those too
    large to compile run through the kernel runner (`grids`: its index arrays)."""

    def __init__(
        self, kernels: Iterable[Kernel], compiler: KernelCompiler, grids: GridCache | None = None
    ) -> None:
        self.kernels = [k for k in kernels if k.scheduled]
        self.compiler = compiler
        self.interpreted = InterpretedKernels(grids if grids is not None else GridCache())
        self._entries: dict[int, _Entry] | None = None  # the compiled ones

    def prepare(self) -> None:
        """Compile (or load from the cache) every kernel; a no-op once done. A kernel's
        function is named by its structure (fuserlite.kernel.signature), so a
        library in the cache is found and loaded without generating any source."""
        if self._entries is not None:
            return
        made: dict[str, CpuFunction | None] = {}  # generated: symbol -> function (None: too large)
        labels, by_symbol, symbols = {}, {}, {}
        for i, kernel in enumerate(self.kernels):
            label = _label(kernel, i)
            symbol = structural_symbol(kernel)
            if symbol is None:  # no signature: named by its source
                function = self._function(kernel, None, label)
                if function is None:
                    continue
                symbol = function.symbol
                made[symbol] = function
            symbols[id(kernel)] = symbol
            labels[symbol] = label
            by_symbol[symbol] = kernel

        def generate(missing: list[str]) -> dict[str, str]:
            for s in missing:
                if s not in made:
                    made[s] = self._function(by_symbol[s], s, labels[s])
            return {s: made[s].source for s in missing if made[s] is not None}

        quiet_openmp()
        pre = prelude(self.kernels)
        loaded = self.compiler.named(pre, list(by_symbol), generate, labels) if by_symbol else {}
        # Those too large to compile are left, and any a cached library lacks (built apart).
        left = generate([s for s in by_symbol if s not in loaded])
        if left:
            loaded.update(self.compiler.functions(pre, left, labels))
        self._entries = {
            id(k): _Entry(k, loaded[s], self.compiler.launcher(s), runs_on_openmp(k))
            for k in self.kernels
            if (s := symbols.get(id(k))) in loaded
        }

    def _function(self, kernel: Kernel, symbol: str | None, label: str) -> CpuFunction | None:
        """The kernel's CPU function to build, None (said in one line) if it is too large."""
        try:
            function = cpu_function(kernel, symbol)
        except KernelTooLarge as exc:
            note(f"{label} is not compiled: {exc}; the kernel runner computes it")
            return None
        if function.parts > 1:
            note(
                f"{label} is {size_text(len(function.source))} of C++, too much for one "
                f"function: compiled as {function.parts} of at most {size_text(PART_BYTES)} each"
            )
        return function

    def launch(
        self,
        kernel: Kernel,
        mesh: DeviceMesh,
        hosted: list[int],
        output_shapes: Callable[[Kernel, int], list[tuple[int, ...]]],
        threads: DeviceThreads | None = None,
    ) -> KernelLaunch | None:
        """A launch plan of the kernel on the `hosted` devices of `mesh` (one native call
        per run, or one per range of devices on `threads`: runtime/threads.py); None where
        the kernel runner computes it (too large to compile). A kernel whose blocks run on
        OpenMP's threads keeps that parallelism and is not spread over `threads`."""
        self.prepare()
        entry = self._entries.get(id(kernel))
        if entry is None or entry.launcher is None:
            return None
        launch = KernelLaunch(kernel, entry.function, entry.launcher, mesh, hosted, output_shapes)
        if threads is not None and not entry.parallel:
            launch.spread(threads)
        return launch

    def run(
        self, kernel: Kernel, local_inputs: dict[TensorView, np.ndarray], device=None
    ) -> dict[TensorView, np.ndarray]:
        """The kernel's local outputs on one device (`device`: its indices, as run_kernel's)."""
        if self._entries is None:
            self.prepare()
        entry = self._entries.get(id(kernel))
        if entry is None:
            return self.interpreted.run(kernel, local_inputs, device)
        arrays = []
        for tv, shape, dtype in entry.inputs:
            array = np.asarray(local_inputs[tv], dtype=dtype, order="C")  # 0-d stays 0-d
            if array.shape != shape:
                raise ExecutionError(
                    f"compiled kernel: input {tv.name} has local shape {list(shape)}, got an "
                    f"array of shape {list(array.shape)}"
                )
            arrays.append(array)
        outs = [np.full(shape, p, dtype) for (shape, dtype), p in zip(entry.outputs, entry.poison)]
        indices = list(device_values(kernel, entry.devices, device).values())
        addresses = np.array([a.ctypes.data for a in (*arrays, *outs)] + indices, np.uintp)
        entry.function(addresses.ctypes.data)
        return dict(zip(kernel.outputs, outs))


def kernel_path(
    compute: str, compiler: KernelCompiler | None, kernels: Iterable[Kernel], grids: GridCache
) -> CompiledKernels | InterpretedKernels | None:
    """What runs a program's scheduled kernels; None for "numpy"."""
    if compute == "compiled":
        return CompiledKernels(kernels, compiler, grids)
    return InterpretedKernels(grids) if compute == "interpret" else None


def compile_kernels(kernels: Iterable[Kernel], compiler: KernelCompiler | None = None) -> None:
    """Build many programs' kernels with one compiler launch; executors that use the same
    compiler (the default one unless given) then find them loaded."""
    CompiledKernels(kernels, compiler or default_compiler()).prepare()


def _label(kernel: Kernel, index: int) -> str:
    """`scheduled kernel 2 (writes T5 T7)`, for errors."""
    return f"scheduled kernel {index} (writes {abbreviate(t.name for t in kernel.outputs)})"


__all__ = [
    "COMPUTE",
    "CompiledKernels",
    "InterpretedKernels",
    "compile_kernels",
    "default_compiler",
    "default_compute",
    "kernel_path",
    "resolve_compute",
]
