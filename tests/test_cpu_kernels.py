"""The CPU target runs the CUDA kernel body, and gives the kernel runner's bits."""

from __future__ import annotations

import ctypes
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from pointwise_cases import build
from test_codegen import all_test_fusions, scheduled
from test_kernel_runner import _reschedule
from three_way import HAVE_COMPILER, bits_differ, libm_outputs, run_three_ways

import fuserlite as fl
import fuserlite.kernel.compile as compile_module
import fuserlite.kernel.cpu_parts as cpu_parts
from fuserlite.ir.types import ParallelType
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.kernel.cpu import PARALLEL_WORK, PRELUDE, cpu_function, cpu_source
from fuserlite.kernel.cuda import kernel_source
from fuserlite.kernel.runner import run_kernel, shard_slices
from fuserlite.pipeline import default_pass_names
from fuserlite.program.program import Kernel
from fuserlite.runtime.compute import CompiledKernels, default_compiler
from fuserlite.schedule.shard import shard_axis

needs_compiler = pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on the PATH")


def lines_after(source: str, opening: str) -> list[str]:
    """The lines after the first that starts with `opening`, without indentation."""
    lines = [line.strip() for line in source.splitlines()]
    return lines[next(i for i, line in enumerate(lines) if line.startswith(opening)) + 1 :]


@pytest.mark.parametrize("name", sorted(all_test_fusions()))
def test_the_cpu_function_is_the_cuda_body_in_a_grid_loop(name: str) -> None:
    kernel = all_test_fusions()[name]
    symbol, cpu, parts, _ = cpu_function(kernel)
    assert parts == 1
    cuda = lines_after(kernel_source(kernel, "k"), 'extern "C"')[:-1]  # less its closing }
    ours = lines_after(cpu, "const fl_dim3 threadIdx")
    assert ours[: len(cuda)] == cuda
    rest = ours[len(cuda) :]
    assert rest == ["}", "}", "}"]  # the thread loop, the block loop, the function
    assert f'extern "C" void {symbol}(' in cpu and symbol == cpu_function(kernel)[0]


def test_equal_kernels_are_one_function_and_big_ones_run_in_parallel() -> None:
    def chain(shape: list[int]) -> Kernel:
        return scheduled(build([shape], lambda a: [fl.neg(a * 2.0 + 1.0)]))

    small, again, big = chain([1000]), chain([1000]), chain([512, 300])
    assert cpu_function(small) == cpu_function(again)
    assert "#pragma omp parallel for" not in cpu_function(small).source
    assert not cpu_function(small).parallel  # the executor may spread it over devices
    assert 512 * 300 * len(big.exprs) >= PARALLEL_WORK
    assert "#pragma omp parallel for" in cpu_function(big).source
    assert cpu_function(big).parallel  # OpenMP's threads: not also spread over devices
    assert cpu_source([small, big]).count('extern "C" void fl_') == 2


# -- compiled == interpreted ---------------------------------------------------------
def local_inputs(fusion: fl.Fusion, seed: int) -> dict[fl.TensorView, np.ndarray]:
    """Device 0's shards of random global inputs."""
    arrays = fl.random_inputs(fusion, seed)
    return {tv: a[shard_slices(tv, 0)] for tv, a in zip(fusion.inputs, arrays)}


def compare(kernel: Kernel, seed: int = 0, compiler: KernelCompiler | None = None) -> None:
    """A whole-fusion kernel compiled and interpreted on device 0: bit for bit, except
    through libm (tests/three_way.py)."""
    fusion = kernel.outputs[0].fusion
    inputs = local_inputs(fusion, seed)
    want = run_kernel(kernel, inputs)
    got = CompiledKernels([kernel], compiler or default_compiler()).run(kernel, inputs)
    for tv, libm in zip(fusion.outputs, libm_outputs(fusion)):
        if libm:  # through exp/log/tanh: within float32's tolerance
            np.testing.assert_allclose(got[tv], want[tv], rtol=1e-5, atol=1e-6, err_msg=tv.name)
        else:
            assert bits_differ(got[tv], want[tv]) is None, tv.name


@pytest.fixture(scope="module")
def kernels() -> dict[str, Kernel]:
    """Every test kernel, compiled in one compiler launch."""
    out = all_test_fusions()
    if HAVE_COMPILER:
        CompiledKernels(out.values(), default_compiler()).prepare()
    return out


@needs_compiler
@pytest.mark.parametrize("name", sorted(all_test_fusions()))
def test_compiled_kernel_gives_the_runners_bits(name: str, kernels) -> None:
    compare(kernels[name])


@needs_compiler
def test_a_kernel_big_enough_for_threads_gives_the_runners_bits() -> None:
    fusion = build([[512, 300], [300]], lambda a, b: [fl.maximum(a * b - 1.5, fl.abs(b) / 3.0)])
    kernel = scheduled(fusion)
    assert "#pragma omp parallel for" in cpu_function(kernel).source
    compare(kernel, seed=4)


@needs_compiler
def test_a_large_unit_builds_at_o1_a_small_one_at_o2_both_giving_the_runners_bits(
    tmp_path, monkeypatch
) -> None:
    """The optimization level follows the unit's size (kernel/compile.py optimization),
    is in its key, and every test kernel gives the kernel runner's bits at either."""
    commands = []
    real = compile_module._run

    def spy(argv, building=None):
        commands.append(argv)
        return real(argv, building)

    monkeypatch.setattr(compile_module, "_run", spy)
    kernels = all_test_fusions()
    small = KernelCompiler(cache_dir=tmp_path)
    CompiledKernels([kernels["vectorized"]], small).prepare()
    assert commands[-1][1:3] == ["-O2", "-fno-tree-vrp"]
    assert compile_module.optimization(255) == ("-O2", "-fno-tree-vrp")
    assert compile_module.optimization(256) == ("-O1",)
    monkeypatch.setattr(compile_module, "LARGE_UNIT_LINES", 0)  # every unit is large
    large = KernelCompiler(cache_dir=tmp_path)
    CompiledKernels(kernels.values(), large).prepare()
    assert large.compiles == 1 and commands[-1][1:3] == ["-O1", "-std=c++17"]
    for kernel in kernels.values():
        compare(kernel, compiler=large)


THREADS = """
extern "C" int fl_test_threads(long long most) {
#ifdef _OPENMP
  int n = 0;
#pragma omp parallel num_threads(fl_threads(most))
  {
#pragma omp atomic
    n += 1;
  }
  return n;
#else
  return -1;
#endif
}
"""


@needs_compiler
def test_a_parallel_kernels_team_is_fixed_by_its_work_not_by_the_load(tmp_path) -> None:
    """A thread per PARALLEL_WORK of work, at most OpenMP's thread count (OMP_NUM_THREADS
    here), in a process whose load average is what it is: no dynamic team."""
    script = (
        "import ctypes, sys\n"
        "from fuserlite.kernel.compile import KernelCompiler\n"
        "from fuserlite.kernel.cpu import PRELUDE\n"
        f"c = KernelCompiler(cache_dir={str(tmp_path)!r})\n"
        "f = c.functions(PRELUDE, {'fl_test_threads': sys.argv[1]})['fl_test_threads']\n"
        "f.argtypes = [ctypes.c_longlong]\n"
        "print([f(k) for k in (1, 2, 3, 1000)])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    proc = subprocess.run(
        [sys.executable, "-c", script, THREADS],
        capture_output=True,
        text=True,
        env={**env, "OMP_NUM_THREADS": "3"},
    )
    assert proc.returncode == 0, proc.stderr
    openmp = "openmp" in KernelCompiler().toolchain.features
    assert proc.stdout.strip() == ("[1, 2, 3, 3]" if openmp else "[-1, -1, -1, -1]")
    kernel = scheduled(build([[512, 300], [300]], lambda a, b: [a * b - 1.5]))
    team = min(8, 512 * 300 * len(kernel.exprs) // PARALLEL_WORK)
    assert f"num_threads(fl_threads({team}))" in cpu_function(kernel).source
    assert "omp_set_dynamic" not in cpu_function(kernel).source + PRELUDE


@needs_compiler
def test_block_and_thread_indices_in_y_and_z() -> None:
    """A hand-made schedule over blockIdx.y/x and threadIdx.z/y/x, with tails."""
    fusion = build([[6, 50], [6, 50]], lambda a, b: [fl.neg(a * b + 1.0)])
    dims = (ParallelType.BIDy, ParallelType.BIDx, ParallelType.TIDz, ParallelType.TIDy)
    for tv in fusion.tensors():
        if tv in fusion.inputs:
            continue
        tv.merge(0, 1).split(0, 32).split(1, 8).split(1, 2).split(0, 3)  # [4, 3, 2, 2, 8]
        for ax, pt in zip(tv.loop, (*dims, ParallelType.TIDx)):
            ax.parallelize(pt)
    kernel = Kernel(fusion.exprs(), list(fusion.inputs), list(fusion.outputs), None, True)
    cpu = cpu_function(kernel).source
    assert "blockIdx = {fl_block % 3, fl_block / 3 % 4, 0}" in cpu
    assert "threadIdx = {fl_thread % 8, fl_thread / 8 % 2, fl_thread / 16}" in cpu
    compare(kernel, seed=5)
    inputs = local_inputs(fusion, 5)
    (want,) = fl.evaluate(fusion, list(inputs.values()))
    got = CompiledKernels([kernel], default_compiler()).run(kernel, inputs)
    np.testing.assert_array_equal(got[fusion.outputs[0]], want)


# test_kernel_runner breaks these schedules, and one more: an inlined intermediate's. The
# emitted code reads an inlined tensor from its register at the same thread, so the
# intermediate's own (broken) index mapping never reaches the generated text; only the
# kernel runner, which also tracks where each register is valid, notices it.
@needs_compiler
@pytest.mark.parametrize(
    "which,factor,swap", [("load", 128, True), ("store", 128, True), ("store", 96, False)]
)
def test_a_broken_schedule_gives_wrong_numbers_compiled_too(which, factor, swap) -> None:
    """The emitted text itself runs now: a wrong index or predicate in it is a wrong result."""
    fusion = build([[6, 50], [6, 50]], lambda a, b: [fl.exp(a) + b])
    inputs = fl.random_inputs(fusion, seed=2)
    (want,) = fl.evaluate(fusion, inputs)
    kernel = scheduled(fusion)

    def run() -> np.ndarray:
        compiled = CompiledKernels([kernel], default_compiler())
        return compiled.run(kernel, dict(zip(fusion.inputs, inputs)))[fusion.outputs[0]]

    np.testing.assert_allclose(run(), want, rtol=1e-5, atol=1e-6)
    by_role = {
        "load": kernel.exprs[0].output,  # the local cache of the first input
        "store": fusion.outputs[0],
    }
    _reschedule(by_role[which], factor, swap)
    assert not np.allclose(run(), want, equal_nan=False)


# -- float16 / bfloat16 storage ------------------------------------------------------
# Each: (C type of the input, of the output, the conversion of element i).
CONVERSIONS = {
    "fl_test_to_half": ("float", "unsigned short", "__float2half(x[i]).bits"),
    "fl_test_from_half": ("unsigned short", "float", "__half2float(__half{x[i]})"),
    "fl_test_to_bf16": ("float", "unsigned short", "__float2bfloat16(x[i]).bits"),
    "fl_test_from_bf16": ("unsigned short", "float", "__bfloat162float(__nv_bfloat16{x[i]})"),
}
NUMPY_TYPES = {"float": np.float32, "unsigned short": np.uint16}


@pytest.fixture(scope="module")
def convert():
    """name -> the prelude's conversion as a function of a numpy array."""
    sources = {
        name: f'extern "C" void {name}(const {a}* x, {b}* y, long long n) {{\n'
        f"  for (long long i = 0; i < n; ++i) y[i] = {body};\n}}\n"
        for name, (a, b, body) in CONVERSIONS.items()
    }
    functions = default_compiler().functions(PRELUDE, sources)

    def wrap(name: str):
        fn = functions[name]
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
        out_type = NUMPY_TYPES[CONVERSIONS[name][1]]

        def call(x: np.ndarray) -> np.ndarray:
            x = np.ascontiguousarray(x)
            y = np.empty(x.shape, out_type)
            fn(x.ctypes.data, y.ctypes.data, x.size)
            return y

        return call

    return {name: wrap(name) for name in CONVERSIONS}


def interesting_floats() -> np.ndarray:
    """Every sign/exponent/top-mantissa pattern with the low bits at each rounding edge of
    half (bit 12) and bfloat16 (bit 15), and random bit patterns: NaNs, infinities,
    subnormals and ties included."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    low = np.array(
        [0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF],
        np.uint32,
    )
    edges = (high[:, None] | low[None, :]).ravel()
    rand = np.random.default_rng(0).integers(0, 1 << 32, 1 << 20, dtype=np.uint64)
    return np.concatenate([edges, rand.astype(np.uint32)]).view(np.float32)


@needs_compiler
def test_half_and_bfloat16_round_as_numpy_and_ml_dtypes_do(convert) -> None:
    x = interesting_floats()
    with np.errstate(all="ignore"):
        half, bf16 = x.astype(np.float16), x.astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(convert["fl_test_to_half"](x), half.view(np.uint16))
    np.testing.assert_array_equal(convert["fl_test_to_bf16"](x), bf16.view(np.uint16))


@needs_compiler
def test_every_half_and_bfloat16_widens_as_numpy_and_ml_dtypes_do(convert) -> None:
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    want_half = bits.view(np.float16).astype(np.float32).view(np.uint32)
    want_bf16 = bits.view(ml_dtypes.bfloat16).astype(np.float32).view(np.uint32)
    np.testing.assert_array_equal(convert["fl_test_from_half"](bits).view(np.uint32), want_half)
    np.testing.assert_array_equal(convert["fl_test_from_bf16"](bits).view(np.uint32), want_bf16)


@needs_compiler
def test_a_max_of_a_recomputed_broadcast_in_bfloat16() -> None:
    """GCC 12 vectorized this kernel wrongly (all zeros) at -O1 -ftree-vectorize
    -march=native; found by tests/test_schedule_adversarial.py, seed 1168."""
    with fl.Fusion() as f:
        x, y = fl.tensor([129], dtype="bfloat16"), fl.tensor([1], dtype="bfloat16")
        f.add_input(y)
        f.add_input(x)
        t = fl.maximum(3.0 * y, 3.0 * y)
        f.add_output(t)
        f.add_output(fl.minimum(t, t))
        f.add_output(fl.maximum(x, fl.minimum(t, t)))
    pipeline = fl.Pipeline(default_pass_names(**{"schedule-pointwise": "block_size=1000"}))
    inputs = fl.random_inputs(f, 1168)
    fl.validate(f, inputs, fl.FusionExecutor(f, pipeline=pipeline).run(inputs))


@needs_compiler
def test_a_zero_dimensional_kernel_after_a_sharded_max(tmp_path: Path) -> None:
    """GCC 12.2 at -O2 -march=native built this kernel (its 128 threads all stored the one
    element) wrongly until the tree loop-invariant motion was turned off: 0.0 instead of
    -0.78; found by tests/test_differential.py, seed 78. It now runs one thread, which
    that GCC builds right even with the motion on."""
    with fl.Fusion() as f:
        x = fl.tensor([8])
        f.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh([0, 1, 2, 3]))
        m = fl.max(fl.max(x, 0, keepdim=True), 0, keepdim=True)
        f.add_output(fl.add(-1.5, fl.minimum(fl.relu(m), m)))
    inputs = fl.random_inputs(f, 78)
    run_three_ways(f, inputs)
    motion = KernelCompiler(cache_dir=tmp_path, extra_flags=["-ftree-loop-im"])
    fl.validate(f, inputs, fl.FusionExecutor(f, compute=motion).run(inputs))


# NaN from either side, -0.0 against 0.0 in both orders, infinities, a subnormal, ties.
SPECIAL = [np.nan, -np.nan, -0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, 1e-45, -2.5, 2.5]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_nan_and_signed_zeros_through_maximum_minimum_abs_relu(dtype: str) -> None:
    """numpy's bits on every compute path: a NaN on either side propagates, and of -0.0
    and 0.0 maximum and minimum give the second, abs gives 0.0, relu(-0.0) is 0.0 (C's
    `a > b ? a : b` gave b for a NaN a; fmax drops every NaN)."""
    pairs = list(zip(*itertools.product(SPECIAL, SPECIAL)))
    xs, ys = (np.array(v).astype(fl.DType[dtype].numpy) for v in pairs)
    with fl.Fusion() as f:
        x, y = fl.tensor([xs.size], dtype), fl.tensor([xs.size], dtype)
        f.add_input(x)
        f.add_input(y)
        outs = [fl.maximum(x, y), fl.minimum(x, y), fl.abs(x), fl.relu(x)]
        outs += [fl.maximum(x, -0.0), fl.minimum(float("nan"), y)]  # scalar operands
        for out in outs:
            f.add_output(out)
    assert not np.signbit(np.maximum(np.float32(-0.0), np.float32(0.0)))  # numpy: the second
    want = fl.evaluate(f, [xs, ys])
    for compute, outputs in run_three_ways(f, [xs, ys]).items():
        assert [bits_differ(got, ref) for got, ref in zip(outputs, want)] == [None] * 6, compute


# -- a body too large for one function -----------------------------------------------
@pytest.fixture
def tiny_parts(monkeypatch) -> None:
    """Every body is split, into parts of one or two statements (the test kernels' largest
    statement is 236 bytes)."""
    monkeypatch.setattr(cpu_parts, "FUNCTION_BYTES", 0)
    monkeypatch.setattr(cpu_parts, "PART_BYTES", 240)


@needs_compiler
def test_kernels_split_into_parts_give_the_runners_bits(tiny_parts, capsys, tmp_path) -> None:
    kernels = all_test_fusions()
    split = {name: cpu_function(k).parts for name, k in kernels.items()}
    several = sum(n > 1 for n in split.values())
    assert several >= 25 and max(split.values()) >= 5, split
    compiler = KernelCompiler(cache_dir=tmp_path)
    CompiledKernels(kernels.values(), compiler).prepare()
    assert compiler.compiles == 1  # one compiler launch
    for kernel in kernels.values():
        compare(kernel, compiler=compiler)
    err = capsys.readouterr().err
    assert err.count("too much for one function: compiled as") == several  # said when built
    again = KernelCompiler(cache_dir=tmp_path)  # a new process: loaded, nothing generated
    CompiledKernels(kernels.values(), again).prepare()
    assert again.compiles == 0 and capsys.readouterr().err == ""
    for kernel in kernels.values():
        compare(kernel, compiler=again)


@needs_compiler
def test_a_split_kernel_with_device_indices_and_every_path(tiny_parts, monkeypatch) -> None:
    """The uneven positions program (device indices in the predicates, iota, a mask)."""
    from test_iota import positions

    monkeypatch.setattr(cpu_parts, "PART_BYTES", 400)  # its statements are longer
    fusion = positions(4, 13)
    ex = fl.FusionExecutor(fusion)
    assert "_part1(fl_args, " in cpu_source(ex.program.kernels)
    run_three_ways(fusion, fl.random_inputs(fusion, seed=1), executor=ex)


def test_a_split_puts_each_value_next_to_its_readers(monkeypatch) -> None:
    """The kernel writer computes all of N outputs' values before it stores any; split in
    that order, every value would cross to a later part. Reordered, the input does, and
    at most one value computed just before a boundary and stored just after it."""
    kernel = scheduled(build([[4]], lambda a: [a + float(k) for k in range(300)]))
    assert cpu_function(kernel).parts == 1  # 40 KB: one function
    monkeypatch.setattr(cpu_parts, "FUNCTION_BYTES", 1 << 15)
    monkeypatch.setattr(cpu_parts, "PART_BYTES", 1 << 12)
    function = cpu_function(kernel)  # decided from its size, nothing is built
    assert function.parts == 10
    assert re.findall(r"fl_reg fl_r\[(\d+)\];", function.source) == ["2"]
    heads = function.source.split("_body(")[1::2]  # each body's parameters and statements
    bodies = [b.split(") {\n", 1)[1].split("\n}\n")[0] for b in heads]
    assert len(bodies) == 10 and max(len(b) for b in bodies) < 1.1 * cpu_parts.PART_BYTES


def test_a_kernel_that_cannot_be_split_runs_through_the_kernel_runner(monkeypatch, capsys) -> None:
    monkeypatch.setattr(cpu_parts, "FUNCTION_BYTES", 0)
    f = build([[6, 5], [5]], lambda a, b: [fl.exp(a * b) - a, a + 1.0])
    inputs = fl.random_inputs(f, 3)
    for limits, why in [
        ({"PART_BYTES": 40}, r"its statement computing t\d+ alone is \d+ bytes of C\+\+"),
        ({"PART_BYTES": 200, "MAX_SLOTS": 0}, r"split into \d+ functions, it would pass"),
    ]:
        for name, value in limits.items():
            monkeypatch.setattr(cpu_parts, name, value)
        with pytest.raises(cpu_parts.KernelTooLarge, match=why):
            cpu_function(scheduled(f))
        compiler = KernelCompiler()
        ex = fl.FusionExecutor(f, compute=compiler)
        fl.validate(f, inputs, ex.run(inputs))
        assert compiler.compiles == 0
        err = capsys.readouterr().err
        assert re.fullmatch(
            rf"fuserlite: scheduled kernel 0 \(writes T\d+ T\d+\) is not compiled: {why}.*; "
            r"the kernel runner computes it\n",
            err,
        ), err
        assert "not compiled" in cpu_source(ex.program.kernels)


def test_a_split_kernel_is_the_same_text_in_every_process() -> None:
    """MPI ranks and later runs must find one library: the split source does not depend
    on the process's string hashing (the order of the values one part leaves in slots)."""
    script = (
        "import fuserlite.kernel.cpu_parts as cpu_parts\n"
        "from fuserlite.kernel.cuda import Statement\n"
        "cpu_parts.PART_BYTES = 100\n"
        "defs = [Statement((f'const float t{k} = T0[l0] * {k}.0f;',), f't{k}', 'float', (),"
        " ('T0',)) for k in range(1, 9)]\n"
        "uses = tuple(f't{k}' for k in range(1, 9))\n"
        "out = Statement(('T1[l0] = ' + ' + '.join(uses) + ';',), 't9', 'float', uses, ('T1',))\n"
        "params = ['const float* __restrict__ T0', 'float* __restrict__ T1']\n"
        "print(cpu_parts.split_body('k', [*defs, out], params, 1, ''))\n"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(texts) == 1, texts
    assert "fl_r[7].f" in texts.pop()  # 8 values crossed from one part to the next
