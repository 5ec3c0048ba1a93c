"""cast: nvFuser's printed names, rounding once, saturating integer conversions, the
same bits on every compute path, and its sharding rule."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from pointwise_cases import run_everywhere, whole_kernel

import fuserlite as fl
from fuserlite.ir.types import DType
from fuserlite.kernel.cuda import cuda_source
from fuserlite.numerics.casts import cast
from fuserlite.ops.casts import cast_name
from fuserlite.schedule.pointwise import schedule_pointwise
from fuserlite.schedule.shard import shard_axis

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_printed_names_are_nvfusers() -> None:
    """As nvFuser's supported_casts2string names them."""
    names = {
        (DType.float32, DType.bfloat16): "__float2bfloat",
        (DType.bfloat16, DType.float32): "__bfloat2float",
        (DType.float64, DType.float16): "__double2half",
        (DType.int64, DType.float16): "__int2half",
        (DType.bool, DType.bfloat16): "__bool2bfloat",
        (DType.float16, DType.int64): "__half2int",
        (DType.bfloat16, DType.int32): "__bfloat2int32",
        (DType.float16, DType.bfloat16): "__half2bfloat",
        (DType.float32, DType.float64): "__to_double",
        (DType.int32, DType.int64): "__to_int64",
        (DType.float64, DType.bool): "__to_bool",
        (DType.int64, DType.float32): "__to_float",
    }
    assert {pair: cast_name(*pair) for pair in names} == names


def test_cast_to_its_own_dtype_is_a_set() -> None:
    with fl.Fusion():
        x = fl.tensor([4], "bfloat16")
        assert fl.cast(x, "bfloat16").definition.op_name == "set"


def test_float64_to_bfloat16_rounds_once() -> None:
    """1 + 2**-8 + 2**-30 is just above the halfway point between 1 and 1 + 2**-7;
    through float32 it would become the halfway point, then 1 (to even)."""
    x = np.array([1 + 2**-8 + 2**-30, -(1 + 2**-8 + 2**-30), 1 + 2**-8], np.float64)
    assert np.float32(x[0]) == 1 + 2**-8  # the first rounding lands on the tie
    assert cast(x, BF16).astype(np.float64).tolist() == [1 + 2**-7, -(1 + 2**-7), 1.0]
    h = np.array([1 + 2**-11 + 2**-30], np.float64)  # the same for half (spacing 2**-10)
    assert cast(h, np.float16).tolist() == [1 + 2**-10]


def test_float_to_int_truncates_and_saturates() -> None:
    x = np.array([np.nan, 2.9, -2.9, 3e9, -3e9, np.inf, -np.inf, -(2.0**31)], np.float32)
    i32 = np.iinfo(np.int32)
    expected = [0, 2, -2, i32.max, i32.min, i32.max, i32.min, i32.min]
    assert cast(x, np.int32).tolist() == expected
    assert cast(np.array([2.0**63, -(2.0**63)]), np.int64).tolist() == [2**63 - 1, -(2**63)]


def _every_pair() -> tuple[fl.Fusion, list[np.ndarray]]:
    """One input per dtype, cast to every other dtype, with values that round, tie,
    overflow, saturate and are NaN."""
    floats = [0.0, -0.0, 1.5, -2.5, 2.9, -2.9, 1 + 2**-8 + 2**-30, 70000.0, 3e9, -3e9]
    floats += [1e300, np.inf, -np.inf, np.nan, 2.0**-140, 0.1]
    ints = [0, 1, -1, 7, -(2**31), 2**31 - 1, 2**24 + 1, 65519, 65520]
    with fl.Fusion() as fusion:
        inputs = []
        for dt in DType:
            x = fl.tensor([len(floats if dt.is_float else ints)], dt)
            fusion.add_input(x)
            inputs.append(x)
            for target in DType:
                if target is not dt:
                    fusion.add_output(fl.cast(x, target))
    arrays = []
    for dt in DType:
        values = floats if dt.is_float else ints
        with np.errstate(all="ignore"):
            arrays.append(np.array(values, np.float64).astype(dt.numpy))
    return fusion, arrays


def test_every_pair_is_the_same_on_every_path() -> None:
    fusion, inputs = _every_pair()
    reference, *others = run_everywhere(fusion, inputs)
    expected = []
    for x, dt in zip(inputs, DType):
        expected += [cast(x, t.numpy) for t in DType if t is not dt]
    for ref, want in zip(reference, expected):
        np.testing.assert_array_equal(ref.view(np.uint8), want.view(np.uint8))
    for run in others:
        for got, ref in zip(run, reference):
            np.testing.assert_array_equal(got.view(np.uint8), ref.view(np.uint8))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_every_pair(tmp_path: Path) -> None:
    kernel = whole_kernel(_every_pair()[0])
    schedule_pointwise(kernel)
    cu = tmp_path / "casts.cu"
    cu.write_text(cuda_source([kernel]))
    subprocess.run(
        ["nvcc", "-ptx", "-o", str(tmp_path / "c.ptx"), str(cu)], check=True, timeout=300
    )


def test_sharding_passes_through_and_partial_sums_complete_first() -> None:
    """cast(x) of a sharded x needs no communication; cast(linear(x, w)) with the
    contraction axis sharded sums the partial products before it rounds them."""
    mesh = fl.DeviceMesh.for_num_devices(4)
    with fl.Fusion() as fusion:
        x, w = fl.tensor([8, 16], name="x"), fl.tensor([4, 16], name="w")
        fusion.add_input(x)
        fusion.add_input(w)
        for t in (x, w):
            shard_axis(t, 1, mesh)
        y = fl.cast(x, "bfloat16")
        z = fl.cast(fl.linear(x, w), "bfloat16")
        fusion.add_output(y)
        fusion.add_output(z)
    ex = fl.FusionExecutor(fusion)
    assert [c.kind.value for c in ex.communications] == ["Allreduce"]
    assert ex.communications[0].input.dtype is DType.float32  # before the cast
    inputs = fl.random_inputs(fusion, seed=1)
    fl.validate(fusion, inputs, ex.run(inputs))


def test_fus_spelling_and_bad_dtype() -> None:
    f = fl.parse("input x: float32[4]\ny = cast(x, dtype=int64)\noutput y\n")
    assert f.outputs[0].dtype is DType.int64
    assert "cast(T0, int64)" in fl.to_fus(f)
    with pytest.raises(fl.ParseError, match=r"cast: argument 'dtype' must be a dtype .* got f8"):
        fl.parse("input x: float32[4]\ny = cast(x, f8)\noutput y\n")
