"""CUDA source for scheduled kernels: the schedule's indices, and nvcc compiles it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pointwise_cases import CASES, bfloat16_chain, build, dtype_mix, seed004, whole_kernel

import fuserlite as fl
from fuserlite.kernel.cuda import cuda_source, launch_dims
from fuserlite.kernel.indexing import add, c_expr, div, lower_tensor, mod, mul, structure, var
from fuserlite.program.program import Kernel
from fuserlite.schedule.grid import kernel_grid
from fuserlite.schedule.pointwise import schedule_pointwise


def scheduled(fusion: fl.Fusion, **options) -> Kernel:
    kernel = whole_kernel(fusion)
    schedule_pointwise(kernel, **options)
    return kernel


def all_test_fusions() -> dict[str, Kernel]:
    kernels = {}
    for parallelized in (True, False):
        for d in (1, 2, 4, 8):
            kernels[f"seed004_{int(parallelized)}_d{d}"] = scheduled(seed004(parallelized, d))
    for name, case in CASES.items():
        kernels[name] = scheduled(build(*case))
    kernels["vectorized"] = scheduled(build([[8, 16], [16]], lambda a, b: [a * b]), vectorize=True)
    kernels["dtypes"] = scheduled(dtype_mix())
    kernels["bfloat16"] = scheduled(bfloat16_chain())
    return kernels


def test_source_follows_the_schedule() -> None:
    kernel = scheduled(build([[1000]], lambda a: [fl.exp(a) * 2.0]))
    src = cuda_source(kernel)
    assert src.count("__global__") == 1
    assert "const long long l0 = blockIdx.x;" in src
    assert "for (long long l1 = 0; l1 < 1; ++l1) {  // US" in src
    assert "const long long l2 = threadIdx.x;" in src
    assert "// launch: gridDim = dim3(8, 1, 1), blockDim = dim3(128, 1, 1)" in src
    out = kernel.outputs[0]
    ti = lower_tensor(out, kernel_grid([e.output for e in kernel.exprs]))
    ((ix, bound),) = ti.predicates  # 1000 is not a multiple of 128: one tail predicate
    assert f"{c_expr(ix)} < {bound}" in src  # the runner's predicate, printed as C
    assert f"if (p{out.number}) {out.ir_name}[{c_expr(ti.logical[0])}] = t" in src


def test_launch_dims() -> None:
    kernel = scheduled(build([[3, 5, 7]], lambda a: [a + 1.0]), block_size=32)
    grid = kernel_grid([e.output for e in kernel.exprs])
    assert launch_dims(grid) == ((4, 1, 1), (32, 1, 1))


def test_unscheduled_kernels_are_listed_not_emitted() -> None:
    fusion = build([[4, 8]], lambda a: [fl.sum(a, 1)])
    kernel = Kernel(fusion.exprs(), list(fusion.inputs), list(fusion.outputs), None)
    kernel.notes.append("reduction")
    src = cuda_source([kernel])
    assert "__global__" not in src and "not scheduled (reduction)" in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_every_test_fusion(tmp_path: Path) -> None:
    sources = [cuda_source(k, prefix=f"k_{name}") for name, k in all_test_fusions().items()]
    cu = tmp_path / "kernels.cu"
    cu.write_text("\n".join(sources))
    proc = subprocess.run(
        ["nvcc", "-ptx", "-o", str(tmp_path / "kernels.ptx"), str(cu)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    ptx = (tmp_path / "kernels.ptx").read_text()
    assert ptx.count(".entry") == len(sources)


def test_offsets_of_merged_axes_fold_back_into_the_loop_index() -> None:
    """A contiguous [4, 8, 16] tensor merged into one loop axis is stored at the merged
    index itself, not at a sum of divisions and remainders (which a C compiler cannot
    vectorize, and which made the compiled MLP 1.5x slower than numpy)."""
    kernel = scheduled(build([[4, 8, 16]], lambda a: [a * 2.0]))
    out = kernel.outputs[0]
    assert f"{out.ir_name}[(((l0 + l1) * 128) + l2)] = " in cuda_source(kernel)
    x = var("x", 4 * 8 * 16)
    assert structure(div(div(x, 16), 8)) == structure(div(x, 128))
    merged = add(mul(mod(div(x, 16), 8), 16), mod(x, 16))  # (x / 16 % 8) * 16 + x % 16
    assert structure(merged) == structure(mod(x, 128))
    assert add(mul(div(x, 128), 128), merged) is x


def test_a_threads_index_divided_by_a_multiple_of_the_block_is_the_blocks() -> None:
    """block_form writes (x * m + y) / n and % n, y below m and m dividing n, as
    x / (n / m) and (x % (n / m)) * m + y: the same value at every point (checked against
    the arithmetic itself), and a kernel reading a broadcast row (a layer norm's mean)
    indexes it without dividing the thread index, its own rows still at the merged loop
    index (the loop the C compiler then vectorizes: 6x faster than a gather,
    benchmarks/README.md)."""
    import numpy as np

    from fuserlite.kernel.indexing import block_form, evaluate

    x, y = var("x", 50), var("y", 128)
    point = add(mul(x, 128), y)
    for n in (128, 256, 512, 16384):
        assert structure(block_form(div(point, n))) == structure(div(x, n // 128))
        want = add(mul(mod(x, n // 128), 128), y)
        assert structure(block_form(mod(point, n))) == structure(want)
    either = block_form(div(add(y, mul(x, 128)), 512))
    assert structure(either) == structure(div(x, 4))
    nested = add(mul(add(mul(x, 4), var("z", 4)), 128), y)  # ((x * 4 + z) * 128 + y) / 1024
    assert structure(block_form(div(nested, 1024))) == structure(div(x, 2))
    wide = add(mul(x, 128), var("w", 129))  # w may reach 128
    for kept in (div(point, 192), div(wide, 512), mod(wide, 512)):  # 128 does not divide 192
        assert structure(block_form(kept)) == structure(kept)
    env = {
        "x": np.arange(50)[:, None],
        "y": np.arange(128)[None, :],
        "z": np.arange(4)[:, None, None],
    }
    for ix in (point, nested):
        flat = np.broadcast_to(evaluate(ix, env, {}), (4, 50, 128))
        for n in (128, 256, 384, 512, 1024, 16384):
            for got, want in ((div(ix, n), flat // n), (mod(ix, n), flat % n)):
                value = evaluate(block_form(got), env, {})
                np.testing.assert_array_equal(np.broadcast_to(value, want.shape), want)
    # the layer norm's mean m[b, s] of a[b, s, h] broadcast over h, blocks of 128 threads
    fusion = build(
        [[4, 32, 512], [4, 32]], lambda a, m: [a - fl.broadcast(m, [False, False, True])]
    )
    src = cuda_source(scheduled(fusion))
    assert "T0[(((l0 + l1) * 128) + l2)]" in src  # its own rows: the merged index
    assert "/ 512)" not in src and "/ 16384)" not in src and "% 512)" not in src
