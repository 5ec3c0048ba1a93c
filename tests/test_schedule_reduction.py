"""The reduction scheduler (fuserlite.schedule.reduction, the schedule-reduction pass) and
its kernels (fuserlite.kernel.reduction): a row per block, a cross-thread tree; the
compiled and the interpreted kernel agree bit for bit, the reference within rounding."""

from __future__ import annotations

import math
import shutil

import ml_dtypes
import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.types import ParallelType
from fuserlite.kernel.cuda import cuda_source
from fuserlite.kernel.reduction import reduction_of
from fuserlite.schedule.reduction import threads_for

CASES = [  # (shape, reduced axes, sharded axis or None)
    ([4, 64], [1], None),
    ([3, 5], [1], None),  # n = 5 < T = 8: threads predicated off
    ([2, 300], [1], None),  # n = 300 > 128: three steps, the last uneven
    ([6, 7, 3], [0, 2], None),  # reduced axes around a kept one
    ([5, 9], [0], None),  # the outer axis reduced: strided loads
    ([17], [0], None),  # to a scalar: one block
    ([8, 12, 6], [2], 1),  # a kept axis sharded on 4 devices
    ([4, 1, 33], [1, 2], 0),
]
DTYPES = ["float32", "bfloat16", "float16", "float64"]


def _fusion(op: str, shape, axes, sharded, dtype: str) -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor(shape, dtype)
        f.add_input(x)
        if sharded is not None:
            x.set_device_mesh(fl.DeviceMesh.for_num_devices(4))
            x.outer_split(sharded, 4)
            x.axis(sharded).parallelize(ParallelType.DIDx)
        f.add_output(getattr(fl, op)(x, axes))
    return f


def _inputs(f: fl.Fusion, seed: int) -> list[np.ndarray]:
    (x,) = fl.random_inputs(f, seed=seed)
    flat = x.reshape(-1)
    if flat.size > 3 and x.dtype != np.float64:  # signed zeros and an exact tie
        flat[:3] = np.array([-0.0, 0.0, flat[3]], np.float32).astype(x.dtype)
    return [x]


def bits(a: np.ndarray) -> np.ndarray:
    return np.atleast_1d(a).view(np.uint8)


@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_and_interpreted_reductions_agree_bit_for_bit(op: str, dtype: str) -> None:
    for k, (shape, axes, sharded) in enumerate(CASES):
        f = _fusion(op, shape, axes, sharded, dtype)
        inputs = _inputs(f, k)
        outs = {}
        for compute in ("compiled", "interpret"):
            ex = fl.FusionExecutor(f, compute=compute)
            (kernel,) = ex.program.kernels
            assert kernel.scheduled and reduction_of(kernel) is not None, kernel.notes
            outs[compute] = ex.run(inputs)[0]
        a, b = outs["compiled"], outs["interpret"]
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(bits(a), bits(b), err_msg=str(shape))
        fl.validate(f, inputs, [a])


def test_the_order_is_the_schedules() -> None:
    """Thread t sums elements t, t + T, ... from init, then a tree: a float32 sum whose
    order shows (1e8 + 1 - 1e8 ...) gives exactly this loop's bits."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 200)) * 10.0 ** rng.integers(-4, 8, (3, 200))).astype(np.float32)
    f = _fusion("sum", [3, 200], [1], None, "float32")
    t = threads_for(200, 128)
    want = np.empty(3, np.float32)
    for row in range(3):
        acc = [np.float32(-0.0)] * t
        for j in range(200):
            acc[j % t] = np.float32(acc[j % t] + x[row, j])
        w = t // 2
        while w:
            acc = [np.float32(acc[i] + acc[i + w]) for i in range(w)]
            w //= 2
        want[row] = acc[0]
    for compute in ("compiled", "interpret"):
        np.testing.assert_array_equal(fl.FusionExecutor(f, compute=compute).run([x])[0], want)
    assert not np.array_equal(want, np.sum(x, axis=1))  # numpy's pairwise order differs


def test_the_schedule_is_a_row_per_block_and_threads_across() -> None:
    f = _fusion("sum", [8, 12, 300], [2], 1, "float32")
    (kernel,) = fl.lower(f).kernels
    out = kernel.reference
    assert [ax.parallel_type for ax in out.domain.loop] == [
        ParallelType.DIDx,
        ParallelType.BIDx,
        ParallelType.Serial,
        ParallelType.TIDx,
    ]
    assert [ax.extent for ax in out.domain.loop] == [4, 8 * 3, math.ceil(300 / 128), 128]
    assert kernel.notes == []


@pytest.mark.parametrize(
    "build, why",
    [
        (lambda: _fusion("sum", [8, 6], [0], 0, "float32"), "device-parallel axis"),
        (lambda: _fusion("sum", [6, 5], [1], 0, "float32"), "unevenly"),
        (lambda: _fusion("sum", [6, 5], [1], None, "int32"), "not a float"),
    ],
)
def test_kernels_it_does_not_take_say_why(build, why: str) -> None:
    f = build()
    ex = fl.FusionExecutor(f)
    reductions = [k for k in ex.program.kernels if any(e.op_name == "sum" for e in k.exprs)]
    assert reductions and not any(k.scheduled for k in reductions)
    assert any(
        "schedule-reduction: not scheduled" in n and why in n for k in reductions for n in k.notes
    )
    inputs = fl.random_inputs(f, seed=1)
    fl.validate(f, inputs, ex.run(inputs))


def test_the_blocks_layer_norms_are_scheduled_reductions() -> None:
    program = fl.lower(models.transformer_block(8, "bfloat16"))
    sums = [k for k in program.kernels if [e.op_name for e in k.exprs] == ["sum"]]
    assert len(sums) == 4 and all(reduction_of(k) is not None for k in sums)
    source = cuda_source(program)
    assert source.count("__syncthreads();") == 2 * 4 and "__shared__ float fl_part[64];" in source


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_the_reduction_kernels(tmp_path) -> None:
    import subprocess

    kernels = [
        k
        for dtype in DTYPES
        for op in ("sum", "max")
        for shape, axes, sharded in CASES
        for k in fl.lower(_fusion(op, shape, axes, sharded, dtype)).kernels
    ]
    cu = tmp_path / "reductions.cu"
    cu.write_text(cuda_source(kernels))
    proc = subprocess.run(["nvcc", "-ptx", "-o", str(tmp_path / "r.ptx"), str(cu)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_half_storage_rounds_once_at_the_store() -> None:
    """bfloat16 accumulates in float and rounds once: 256 ones of 2**-8 plus 1 is 2."""
    x = np.full((1, 257), 2.0**-8, ml_dtypes.bfloat16)
    x[0, 0] = 1
    f = _fusion("sum", [1, 257], [1], None, "bfloat16")
    for compute in ("compiled", "interpret"):
        assert fl.FusionExecutor(f, compute=compute).run([x])[0][0] == 2


def test_the_cpu_function_runs_each_step_across_the_threads() -> None:
    """The C++ function loops over the steps outside and the threads inside (each
    thread's elements in the schedule's order, a step's loads consecutive: the loop
    vectorizes, 5x faster at the block's layer norm), the full steps unpredicated and
    the last, partial one over its threads alone; the bits are the schedule's
    (test_the_order_is_the_schedules, test_compiled_and_interpreted_...)."""
    from fuserlite.kernel.reduction import cpu_reduction

    for shape, steps, tail in (([3, 300], 2, 44), ([4, 512], 4, 0), ([3, 5], 0, 5)):
        (kernel,) = fl.lower(_fusion("sum", shape, [1], None, "float32")).kernels
        r = reduction_of(kernel)
        _, src = cpu_reduction(kernel, r)
        assert f"for (long long fl_s = 0; fl_s < {steps}; ++fl_s) {{" in src
        assert src.index("fl_s < ") < src.index(f"fl_t < {r.threads}; ++fl_t) {{")
        assert "if (fl_j <" not in src
        assert (f"fl_t < {tail}; ++fl_t) {{  // the last step's threads" in src) == bool(tail)
