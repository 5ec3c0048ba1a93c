"""gemm="amx": a library kernel's bfloat16 linear and matmul on AMX tiles (kernel/amx.py).

The products are checked against float64 ones within a fraction of the contraction's
sigma (sqrt(k) u |a| @ |b|), at shapes with every kind of tail; a transformer block run
with it is validated against its unsharded run and the float reference, and its library
kernels are seen to call AMX. Where the CPU has no AMX the option is refused, and the
tests that need the tiles say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from three_way import HAVE_COMPILER

import fuserlite as fl
from fuserlite import models
from fuserlite.cli import main
from fuserlite.ir.errors import ExecutionError
from fuserlite.kernel import amx
from fuserlite.kernel.amx import AmxGemm, amx_missing, check_gemm
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.runtime.validation import validate_run
from fuserlite.schedule.shard import shard_axis

BF16 = ml_dtypes.bfloat16
needs_amx = pytest.mark.skipif(amx_missing() is not None, reason=f"{amx_missing()}")


@pytest.fixture(scope="module")
def gemm(tmp_path_factory) -> AmxGemm:
    return AmxGemm(KernelCompiler(cache_dir=tmp_path_factory.mktemp("amx")))


def counted_products(monkeypatch) -> list[int]:
    """The number of products of each AmxGemm.rows call from now on (each still made)."""
    products: list[int] = []
    real = AmxGemm.rows
    monkeypatch.setattr(
        AmxGemm,
        "rows",
        lambda self, a, b, out, *r: products.append(len(out)) or real(self, a, b, out, *r),
    )
    return products


def one_linear(dtype: str, m: int, k: int, n: int) -> fl.Fusion:
    """y = linear(x[m, k], w[n, k]) on one device."""
    with fl.Fusion() as fusion:
        x = fl.tensor([m, k], dtype, name="x")
        w = fl.tensor([n, k], dtype, name="w")
        for t in (x, w):
            fusion.add_input(t)
        fusion.add_output(fl.linear(x, w))
    return fusion


def product(gemm: AmxGemm, a, b, out, weight: bool, bias=None) -> None:
    """One product through AmxGemm.rows (a leading axis of one)."""
    gemm.rows(a[None], b[None], out[None], weight, None if bias is None else bias[None])


def test_gemm_option_is_checked(monkeypatch):
    with pytest.raises(
        ExecutionError, match="gemm must be one of 'auto', 'blas', 'amx', got 'mkl'"
    ):
        check_gemm("mkl", "compiled", "FusionExecutor")
    with pytest.raises(ExecutionError, match="compute='numpy' does not make"):
        check_gemm("amx", "numpy", "FusionExecutor")
    assert check_gemm("auto", "numpy", "FusionExecutor") == "blas"  # op by op: no library
    assert check_gemm("blas", "interpret", "FusionExecutor") == "blas"
    monkeypatch.setattr(amx, "amx_missing", lambda: None)
    monkeypatch.setattr(amx, "find_compiler", lambda: "g++")
    for compute in ("compiled", "interpret"):  # both paths compute the library kernels alike
        assert check_gemm("auto", compute, "FusionExecutor") == "amx"
        assert check_gemm("amx", compute, "FusionExecutor") == "amx"
    monkeypatch.setattr(amx, "find_compiler", lambda: None)
    assert check_gemm("auto", "interpret", "FusionExecutor") == "blas"
    with pytest.raises(ExecutionError, match="no C\\+\\+ compiler is on the PATH"):
        check_gemm("amx", "interpret", "FusionExecutor")
    monkeypatch.setattr(amx, "amx_missing", lambda: "the CPU has no amx_bf16")
    assert check_gemm("auto", "compiled", "FusionExecutor") == "blas"
    with pytest.raises(
        ExecutionError, match="cannot run here: the CPU has no amx_bf16; use gemm='blas'"
    ):
        check_gemm("amx", "compiled", "FusionExecutor")


def test_linux_refusing_the_tiles_is_a_reason(monkeypatch):
    """amx_missing asks Linux for the tile registers itself: a refusal is its reason."""
    if amx_missing() is not None and "Linux" not in amx_missing():
        pytest.skip(f"the refusal is asked only of a CPU with AMX: {amx_missing()}")

    class Libc:
        @staticmethod
        def syscall(*args):
            assert args == (158, 0x1023, 18)
            return -1

    monkeypatch.setattr(amx.ctypes, "CDLL", lambda *a, **k: Libc)
    assert "Linux refused the process AMX's tile registers" in amx_missing()


def test_the_executor_refuses_amx_on_the_numpy_path():
    fusion = models.transformer_block(8, "bfloat16", models.BlockShape(2, 32, 64, 4), 0.1)
    with pytest.raises(ExecutionError, match="gemm='amx' computes library kernels"):
        fl.FusionExecutor(fusion, compute="numpy", gemm="amx")
    assert fl.FusionExecutor(fusion, compute="numpy").amx_kernels == 0


@pytest.mark.parametrize(
    "m, k, n",
    [(1024, 512, 256), (37, 70, 45), (1, 1, 1), (33, 31, 17), (64, 2048, 96), (45, 64, 33)],
)
def test_products_are_within_a_fraction_of_the_contraction_sigma(gemm, m, k, n):
    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((m, k)).astype(BF16)
    w = (rng.standard_normal((n, k)) * np.exp(rng.uniform(-4, 4, (n, k)))).astype(BF16)
    b = np.ascontiguousarray(w.T)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    sigma = np.sqrt(k) * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    as_matmul = np.empty((m, n), np.float32)
    as_linear = np.full((m, n), np.nan, np.float32)
    product(gemm, a, b, as_matmul, False)
    product(gemm, a, w, as_linear, True)
    np.testing.assert_array_equal(as_matmul.view(np.uint32), as_linear.view(np.uint32))
    assert (np.abs(as_matmul - exact) <= 0.5 * sigma).all()  # seen: at most 0.14


@needs_amx
@pytest.mark.parametrize("m, k, n", [(37, 64, 45), (64, 96, 32), (5, 70, 3)])
def test_the_bias_and_the_store_are_those_of_the_float32_sum(gemm, m, k, n):
    """Fused into the call: the float32 sum plus the float32 bias, rounded to bfloat16
    as a store of that float is (kernel/library.py's casts: ml_dtypes' bits)."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(BF16)
    w = rng.standard_normal((n, k)).astype(BF16)
    bias = rng.standard_normal(n).astype(BF16).astype(np.float32)
    plain = np.empty((m, n), np.float32)
    product(gemm, a, w, plain, True)
    with_bias = np.empty((m, n), np.float32)
    product(gemm, a, w, with_bias, True, bias)
    np.testing.assert_array_equal(with_bias.view(np.uint32), (plain + bias).view(np.uint32))
    stored = np.empty((m, n), BF16)
    product(gemm, a, w, stored, True, bias)
    np.testing.assert_array_equal(
        stored.view(np.uint16), (plain + bias).astype(BF16).view(np.uint16)
    )
    with pytest.raises(ExecutionError, match="stores float32 or bfloat16, not float16"):
        product(gemm, a, w, np.empty((m, n), np.float16), True)
    with pytest.raises(ExecutionError, match="do not make"):
        product(gemm, a, w, np.empty((m, n + 1), np.float32), True)


@needs_amx
@pytest.mark.parametrize("shared", ["weight", "x", "none"])
def test_every_devices_product_in_one_call_is_each_ones_alone(gemm, shared):
    """rows(): a product per leading row (a device's), a shared operand given once (a
    stride-0 axis: its b packed once), each row's bits those of its own call."""
    rng = np.random.default_rng(11)
    rows, m, k, n = 3, 40, 64, 24
    x = rng.standard_normal((rows, m, k)).astype(BF16)
    w = rng.standard_normal((rows, n, k)).astype(BF16)
    bias = rng.standard_normal((rows, n)).astype(np.float32)
    if shared == "weight":
        w, bias = np.broadcast_to(w[:1], w.shape), np.broadcast_to(bias[:1], bias.shape)
    elif shared == "x":
        x = np.broadcast_to(x[:1], x.shape)
    out = np.empty((rows, m, n), BF16)
    gemm.rows(x, w, out, True, bias)
    for r in range(rows):
        alone = np.empty((m, n), BF16)
        product(gemm, np.ascontiguousarray(x[r]), np.ascontiguousarray(w[r]), alone, True, bias[r])
        np.testing.assert_array_equal(out[r].view(np.uint16), alone.view(np.uint16))


@needs_amx
def test_a_row_is_the_same_whatever_rows_and_columns_are_computed_with_it(gemm):
    """Each element is its row of a and column of b alone: a device's rows or columns of
    a product are the whole product's bits (the unsharded run's, on the same path)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((100, 300)).astype(BF16)
    b = rng.standard_normal((300, 70)).astype(BF16)
    whole = np.empty((100, 70), np.float32)
    product(gemm, a, b, whole, False)
    part = np.empty((13, 9), np.float32)
    product(gemm, np.ascontiguousarray(a[40:53]), np.ascontiguousarray(b[:, 50:59]), part, False)
    np.testing.assert_array_equal(part.view(np.uint32), whole[40:53, 50:59].view(np.uint32))


@needs_amx
def test_empty_and_zero_length_products(gemm):
    a = np.ones((3, 0), BF16)
    out = np.full((3, 4), np.nan, np.float32)
    product(gemm, a, np.ones((0, 4), BF16), out, False)
    np.testing.assert_array_equal(out, np.zeros((3, 4), np.float32))
    product(gemm, a, np.ones((4, 0), BF16), out, True, np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(out, np.tile(np.arange(4, dtype=np.float32), (3, 1)))
    product(gemm, np.ones((0, 5), BF16), np.ones((5, 4), BF16), np.empty((0, 4), np.float32), False)


@needs_amx
def test_a_subnormal_operand_reads_as_zero_and_a_subnormal_result_is_flushed(gemm):
    """What the module says AMX does (and the bounds leave out)."""
    tiny = np.array([[2.0**-130]], np.float32).astype(BF16)
    assert tiny.astype(np.float32)[0, 0] != 0  # a bfloat16 subnormal
    out = np.empty((1, 1), np.float32)
    product(gemm, tiny, np.array([[2.0**100]], np.float32).astype(BF16), out, False)
    assert out[0, 0] == 0.0
    # and a subnormal product of normal operands (2**-130) is flushed to zero
    small = np.array([[2.0**-65]], np.float32).astype(BF16)
    product(gemm, small, small, out, False)
    assert out[0, 0] == 0.0


@needs_amx
def test_a_transformer_block_on_amx_is_validated_and_calls_it(monkeypatch, tmp_path):
    fusion = models.transformer_block(8, "bfloat16", models.BlockShape(2, 32, 64, 4), 0.1)
    inputs = fl.random_inputs(fusion, seed=0)
    products = counted_products(monkeypatch)
    ex = fl.FusionExecutor(fusion, compute=KernelCompiler(cache_dir=tmp_path), gemm="amx")
    outputs = ex.run(inputs)
    # q, k, v, the projection and the MLP's two on each device: a call per launch (or
    # per range of its devices on the threads)
    assert sum(products) == 6 * 8 and len(products) <= 6 * ex.threads.workers
    validation = validate_run(ex, inputs, outputs)  # the unsharded run is on AMX too
    assert validation.unsharded is not None and validation.unsharded.failed == 0
    assert validation.reference.failed == 0


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "transformer_block.fus"


def test_run_refuses_amx_on_the_numpy_path(capsys):
    code = main(["run", str(EXAMPLE), "--gemm", "amx", "--compute", "numpy"])
    err = capsys.readouterr().err
    assert code != 0
    assert "gemm='amx' computes library kernels, which compute='numpy' does not make" in err


@needs_amx
def test_run_with_amx_validates(capsys, tmp_path):
    code = main(["run", str(EXAMPLE), "--gemm", "amx", "--cache-dir", str(tmp_path / "k")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "validation: ok" in out
    assert "vs the same program on 1 device (compiled, gemm=amx): bit-identical" in out


@needs_amx
def test_run_json_says_which_gemm_ran(capsys, tmp_path):
    args = ["run", str(EXAMPLE), "--json", "--cache-dir", str(tmp_path / "k")]
    for flags, gemm in ((["--gemm", "blas"], "blas"), (["--gemm", "amx"], "amx"), ([], "amx")):
        assert main([*args, *flags]) == 0
        assert json.loads(capsys.readouterr().out)["validation"]["gemm"] == gemm


def test_auto_is_blas_where_amx_cannot_run(capsys, monkeypatch):
    monkeypatch.setattr(amx, "amx_missing", lambda: "the CPU has no amx_tile")
    assert main(["run", str(EXAMPLE), "--json", "--compute", "interpret"]) == 0
    assert json.loads(capsys.readouterr().out)["validation"]["gemm"] == "blas"


@needs_amx
def test_the_report_names_amx_only_where_a_kernel_ran_on_it(capsys, tmp_path):
    """A float32 program has no bfloat16 GEMM: gemm='amx' is chosen, and nothing says it."""
    fusion = one_linear("float32", 64, 32, 16)
    ex = fl.FusionExecutor(fusion, compute=KernelCompiler(cache_dir=tmp_path))
    assert (ex.gemm, ex.amx_kernels) == ("amx", 0)
    inputs = fl.random_inputs(fusion, seed=0)
    assert validate_run(ex, inputs, ex.run(inputs)).gemm == "blas"


def _big_linear() -> fl.Fusion:
    """A column-parallel bfloat16 linear deep enough (k = 1024) that another float32 sum
    order shows through the bfloat16 store in some elements."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x = fl.tensor([512, 1024], "bfloat16", name="x")
        w = fl.tensor([256, 1024], "bfloat16", name="w")
        for t in (x, w):
            t.set_device_mesh(mesh)
            fusion.add_input(t)
        shard_axis(w, 0, mesh)
        fusion.add_output(fl.linear(x, w))
    return fusion


@pytest.mark.skipif(not HAVE_COMPILER, reason="no C++ compiler on the PATH")
def test_a_deep_bf16_linear_is_bit_identical_across_paths_with_either_gemm(tmp_path):
    """Compiled and interpreted are bit-identical with each gemm on a product deep enough
    to show another sum order (the interpreted path's library kernels call the same AMX
    function); AMX's bits differ from BLAS's there, validated all the same, and "auto"
    is AMX where it can run."""
    fusion = _big_linear()
    inputs = fl.random_inputs(fusion, seed=2)
    compiler = KernelCompiler(cache_dir=tmp_path)
    gemms = ["blas"] if amx_missing() is not None else ["blas", "amx"]
    runs = {}
    for gemm in gemms:
        (compiled,) = fl.FusionExecutor(fusion, compute=compiler, gemm=gemm).run(inputs)
        (interpreted,) = fl.FusionExecutor(fusion, compute="interpret", gemm=gemm).run(inputs)
        np.testing.assert_array_equal(compiled.view(np.uint16), interpreted.view(np.uint16))
        fl.validate(fusion, inputs, [compiled])
        runs[gemm] = compiled
    assert fl.FusionExecutor(fusion, compute=compiler).gemm == gemms[-1]
    if "amx" in runs:
        assert (runs["amx"].view(np.uint16) != runs["blas"].view(np.uint16)).any()


@needs_amx
def test_the_interpreted_path_calls_amx(monkeypatch):
    fusion = _big_linear()
    products = counted_products(monkeypatch)
    ex = fl.FusionExecutor(fusion, compute="interpret")
    assert (ex.gemm, ex.amx_kernels) == ("amx", 1)
    ex.run(fl.random_inputs(fusion, seed=0))
    assert sum(products) == 4  # each of the 4 devices' products


@needs_amx
def test_flushed_subnormals_are_within_the_bounds(tmp_path):
    """Products of 2**-65 are subnormal (2**-130): AMX flushes each to zero, so a sum of 64
    of them is 0 where the exact one is 2**-124. The bounds allow a flushing GEMM that
    (k 2**-126 (1 + max|a| + max|b|)), and nothing near a real error."""
    fusion = one_linear("bfloat16", 32, 64, 32)
    tiny = np.full((32, 64), 2.0**-65, np.float32).astype(BF16)
    ex = fl.FusionExecutor(fusion, compute=KernelCompiler(cache_dir=tmp_path), gemm="amx")
    (y,) = ex.run([tiny, tiny])
    assert (y == 0).all()
    fl.validate(fusion, [tiny, tiny], [y])
    wrong = y.copy()
    wrong[3, 4] = 2.0**-100  # far beyond any rounding of these sums: refused
    with pytest.raises(fl.ValidationError):
        fl.validate(fusion, [tiny, tiny], [wrong])


@needs_amx
def test_an_uneven_contraction_runs_each_device_on_amx_and_validates(monkeypatch, tmp_path):
    """k = 100 over 3 devices: the devices' calls differ in shape, so each runs alone
    (LibraryKernels.run), still on AMX; the partial sums' run matches the unsharded one."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(3)
        x = fl.tensor([64, 100], "bfloat16", name="x")
        w = fl.tensor([32, 100], "bfloat16", name="w")
        for t in (x, w):
            t.set_device_mesh(mesh)
            fusion.add_input(t)
            shard_axis(t, 1, mesh)
        fusion.add_output(fl.linear(x, w))
    products = counted_products(monkeypatch)
    inputs = fl.random_inputs(fusion, seed=0)
    ex = fl.FusionExecutor(fusion, compute=KernelCompiler(cache_dir=tmp_path), gemm="amx")
    outputs = ex.run(inputs)
    assert products[:3] == [1, 1, 1]  # a call per device (then the unsharded run's)
    validation = validate_run(ex, inputs, outputs)
    assert validation.unsharded is not None and validation.reference.failed == 0
