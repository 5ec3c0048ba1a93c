"""The CPU's block windows of Philox numbers (fuserlite.kernel.cpu.BlockWindows): a
compiled kernel that draws random numbers draws a block's numbers before its thread loop
and reads them as an array, so that the loop vectorizes; where a block's indices span
more calls than a window holds it draws through the memo. Either way every output is
numpy's, bit for bit (NaN payloads, -0.0 and infinities included)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from three_way import HAVE_COMPILER, bits_differ, precompile

import fuserlite as fl
from fuserlite.kernel import cpu
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.kernel.cpu import cpu_function, prelude
from fuserlite.schedule.shard import shard_axis

pytestmark = pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler")

DTYPES = ("float32", "bfloat16", "float16", "float64")
# p near 0 and 1 (1 - p rounds in the compute dtype), a draw's exact value, 0 and 1
PROBABILITIES = (0.0, 2.0**-40, 2.0**-24, 0.1, 0.25, 0.5, 1 - 2.0**-15, 1 - 2.0**-24, 1.0)
HALF_MAX = 65504.0  # float16's: dropout's scale 1 / (1 - p) must fit


def _probabilities(dtype: str) -> list[float]:
    return [p for p in PROBABILITIES if dtype != "float16" or p == 1 or 1 / (1 - p) <= HALF_MAX]


# (shape, devices sharding axis 0 or None, seed, offset): odd sizes, uneven shards whose
# blocks start anywhere in a philox call's four numbers
CASES = (
    ((1,), None, 0, 0),
    ((7, 13), None, 3, 5),
    ((129,), 3, 2**64 - 1, 7),
    ((5, 3, 37), 2, 11, 2**40 + 1),
    ((9, 2, 130), 4, 123456789, 1),
)


def _fusion(
    shape: tuple[int, ...], devices: int | None, dtype: str, p: float, seed: int, offset: int
):
    """Two dropouts of x, one plain, one residual (two windows in one kernel)."""
    with fl.Fusion() as f:
        x, r = fl.tensor(shape, dtype, name="x"), fl.tensor(shape, dtype, name="r")
        f.add_input(x)
        f.add_input(r)
        if devices is not None:
            mesh = fl.DeviceMesh.for_num_devices(devices)
            shard_axis(x, 0, mesh)
            shard_axis(r, 0, mesh)
        f.add_output(fl.dropout(x, p, seed=seed, offset=offset))
        f.add_output(r + fl.dropout(x * r, p, seed=seed, offset=offset + 1))
    return f


def _inputs(shape: tuple[int, ...], dtype: str, seed: int) -> list[np.ndarray]:
    """Random values with -0.0, NaNs (of both signs, other payloads), infinities and 0."""
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        v = rng.standard_normal(shape).astype(np.float64)
        flat = v.reshape(-1)
        special = [-0.0, np.nan, -np.nan, np.inf, -np.inf, 0.0]
        where = rng.choice(flat.size, size=min(flat.size, 3 * len(special)), replace=False)
        flat[where] = np.resize(special, where.size)
        a = v.astype(np_dtype)
        if a.size > 2:  # a NaN of another payload, in the dtype's own bits
            bits = a.reshape(-1).view(f"u{a.itemsize}")
            bits[1] = {2: 0x7E01, 4: 0x7FC00123, 8: 0x7FF8000000000123}[a.itemsize]
            if dtype == "bfloat16":
                bits[1] = 0xFFC1
        out.append(a)
    return out


def _same_bits(a: np.ndarray, b: np.ndarray, any_nan: bool) -> bool:
    """Bit for bit; with `any_nan`, a NaN equal to any NaN (three_way.bits_differ's rule:
    where two NaNs meet in an add, which one x86 returns is the compiler's operand order,
    on main as here)."""
    if any_nan:
        return bits_differ(a, b) is None
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("small_windows", [False, True])
def test_compiled_dropout_is_numpys_bit_for_bit(small_windows, monkeypatch) -> None:
    """Every dtype, p at and near its ends, odd sizes and shard offsets, special values:
    compiled (through windows; with small_windows also through the memo where a block's
    draws span more than 16 calls) equals numpy, the kernel runner and the reference:
    the dropout bit for bit, NaN payloads included; the residual add NaN for NaN."""
    if small_windows:
        monkeypatch.setattr(cpu, "WINDOW_CALLS", 1)  # windows of 16 calls
    cases = [
        (shape, dtype, p, _fusion(shape, devices, dtype, p, seed, offset))
        for shape, devices, seed, offset in CASES
        for dtype in DTYPES
        for p in _probabilities(dtype)
    ]
    compiled = [fl.FusionExecutor(f, compute="compiled") for *_, f in cases]
    precompile(compiled)
    for n, ((shape, dtype, p, fusion), ex) in enumerate(zip(cases, compiled)):
        (kernel,) = [
            k for k in ex.program.kernels if any(e.op_name == "rand_like" for e in k.exprs)
        ]
        assert "fl_window_" in cpu_function(kernel).source
        inputs = _inputs(shape, dtype, n)
        got = ex.run(inputs)
        want = fl.evaluate(fusion, inputs)
        for compute in ("numpy", "interpret"):
            other = fl.FusionExecutor(ex.program, compute=compute).run(inputs)
            for k, (a, b) in enumerate(zip(got, other)):
                assert _same_bits(a, b, k == 1), (shape, dtype, p, compute, k)
        for k, (a, b) in enumerate(zip(got, want)):
            assert _same_bits(a, b, k == 1), (shape, dtype, p, "reference", k)


def test_a_bool_operand_is_a_select() -> None:
    """x * (u < 1 - p): the bool is 1 or 0 by a select, not a conversion (which GCC's
    vectorizer refuses)."""
    fusion = _fusion((8, 128), None, "bfloat16", 0.1, 0, 1)
    ex = fl.FusionExecutor(fusion, compute="interpret")
    (kernel,) = [k for k in ex.program.kernels if any(e.op_name == "rand_like" for e in k.exprs)]
    source = cpu_function(kernel).source
    keeps = {m.group(1) for m in re.finditer(r"const bool (t\d+) = \(t\d+ < ", source)}
    assert len(keeps) == 2
    for keep in keeps:
        assert f"({keep} ? static_cast<float>(1) : static_cast<float>(0))" in source
        assert f"static_cast<float>({keep})" not in source


def test_the_block_draws_before_its_thread_loop_which_vectorizes(tmp_path: Path) -> None:
    """The transformer block's dropout and residual (a bfloat16 [4, 32, 512] shard):
    GCC vectorizes the thread loop that reads the block's window (the memo's lookup kept
    it scalar), and the window's philox calls."""
    toolchain = KernelCompiler().toolchain
    if "clang" in toolchain.version.lower():
        pytest.skip("the vectorizer's report is GCC's")
    with fl.Fusion() as f:
        x, r, b = fl.tensor([4, 256, 512], "bfloat16"), fl.tensor([4, 256, 512], "bfloat16"), None
        b = fl.tensor([512], "bfloat16")
        for t in (x, r, b):
            f.add_input(t)
        mesh = fl.DeviceMesh.for_num_devices(8)
        shard_axis(x, 1, mesh)
        shard_axis(r, 1, mesh)
        f.add_output(r + fl.dropout(x + b, 0.1, seed=0, offset=1))
    ex = fl.FusionExecutor(f, compute="interpret")
    (kernel,) = [k for k in ex.program.kernels if any(e.op_name == "rand_like" for e in k.exprs)]
    function = cpu_function(kernel)
    source = tmp_path / "kernel.cc"
    text = prelude([kernel]) + function.source
    source.write_text(text)
    lines = text.splitlines()
    loops = [i + 1 for i, line in enumerate(lines) if "for (long long fl_thread" in line]
    assert len(loops) == 3  # the indices' range, the windows' loop, the memo's loop
    (fill,) = [
        i + 1 for i, line in enumerate(lines) if line.startswith("static void fl_philox_window")
    ]
    argv = toolchain.command(source, tmp_path / "kernel.so") + ["-fopt-info-vec-optimized"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    vectorized = {
        int(m.group(1))
        for m in re.finditer(r"kernel\.cc:(\d+):\d+: optimized: loop vectorized", proc.stderr)
    }
    assert loops[1] in vectorized, proc.stderr
    assert loops[2] not in vectorized  # the memo's
    assert any(fill < n < fill + 10 for n in vectorized), proc.stderr
