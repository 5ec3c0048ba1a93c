"""Type promotion as torch does it, and half computed in float up to where it is stored."""

from __future__ import annotations

import re

import numpy as np
import pytest
from pointwise_cases import dtype_mix, run_everywhere, sharded_sum, whole_kernel

import fuserlite as fl
from fuserlite.kernel.cuda import cuda_source
from fuserlite.schedule.pointwise import schedule_pointwise
from fuserlite.schedule.shard import shard_axis


def result(dtype_a: str, b, op=fl.add) -> str:
    """The dtype of op(tensor of dtype_a, b), b a Python scalar or a dtype name."""
    with fl.Fusion():
        a = fl.tensor([2], dtype_a)
        return op(a, fl.tensor([2], b) if isinstance(b, str) else b).dtype.name


@pytest.mark.parametrize(
    "a,b,op,want",
    [
        ("bool", 5, fl.add, "int64"),  # a Python int raises bool to integer
        ("bool", 2.5, fl.mul, "float32"),
        ("bool", True, fl.add, "bool"),
        ("bool", "bool", fl.add, "bool"),
        ("bool", 5, fl.sub, "int64"),
        ("int32", 5, fl.add, "int32"),  # a scalar of the same category does not widen
        ("int32", True, fl.add, "int32"),
        ("int32", 2.5, fl.add, "float32"),
        ("int64", 2.5, fl.add, "float32"),
        ("float16", 2.5, fl.mul, "float16"),
        ("float16", 5, fl.add, "float16"),
        ("int32", "int64", fl.add, "int64"),  # tensors: the wider dtype
        ("int64", "float16", fl.add, "float16"),
        ("float16", "float32", fl.maximum, "float32"),
        ("int32", 2, fl.div, "float32"),  # true division of integers
        ("bool", "bool", fl.div, "float32"),
    ],
)
def test_promotion_follows_torch(a, b, op, want):
    assert result(a, b, op) == want


@pytest.mark.parametrize(
    "dtype,op,want",
    [
        ("bool", fl.sum, "int64"),
        ("int32", fl.sum, "int64"),
        ("int64", fl.sum, "int64"),
        ("float16", fl.sum, "float16"),
        ("bool", fl.max, "bool"),
        ("int32", fl.max, "int32"),
    ],
)
def test_reduction_dtypes_follow_torch(dtype, op, want):
    with fl.Fusion():
        assert op(fl.tensor([4, 2], dtype), [0]).dtype.name == want


def test_max_of_int64_starts_from_the_int64_minimum():
    with fl.Fusion():
        y = fl.max(fl.tensor([4, 2], "int64"), [0])
    assert y.definition.attrs["init"] == np.iinfo(np.int64).min


B = np.array([True, False, True, True, False, False, True, False])


def test_bool_plus_an_int_is_an_int64_count_like_numpy():
    with fl.Fusion() as f:
        b = fl.tensor([8], "bool")
        f.add_input(b)
        shard_axis(b, 0, fl.DeviceMesh.for_num_devices(2))
        f.add_output(fl.add(b, 5))
    for outputs in run_everywhere(f, [B]):
        np.testing.assert_array_equal(outputs[0], B + 5)
        assert outputs[0].dtype == np.int64


def test_sum_of_bool_counts_across_devices():
    x = np.stack([B, ~B], axis=1)
    for outputs in run_everywhere(sharded_sum([8, 2], "bool", 4), [x]):
        np.testing.assert_array_equal(outputs[0], [4, 4])
        assert outputs[0].dtype == np.int64


def half_chain() -> fl.Fusion:
    with fl.Fusion() as f:
        x = fl.tensor([300], "float16")
        f.add_input(x)
        f.add_output(fl.div(fl.mul(x, 1000), 1000))
    return f


X16 = np.linspace(-200, 200, 300).astype(np.float16)  # x * 1000 overflows half


def test_half_chains_are_computed_in_float_and_rounded_once():
    for (out,) in run_everywhere(half_chain(), [X16]):
        np.testing.assert_array_equal(out, X16)  # not inf: x * 1000 stays in float


def test_cuda_computes_half_in_float_and_rounds_at_the_store():
    kernel = whole_kernel(half_chain())
    schedule_pointwise(kernel)
    src = cuda_source(kernel)
    assert "const float t" in src and "__half2float(T0[" in src
    assert src.count("__float2half(") == 1 and "] = __float2half(t" in src


def test_half_sums_accumulate_in_float():
    with fl.Fusion() as f:
        x = fl.tensor([3000, 2], "float16")
        f.add_input(x)
        f.add_output(fl.sum(x, [0]))
    x = np.full((3000, 2), 1.001, np.float16)  # summed in half, the rows add up to 3954
    want = np.sum(x.astype(np.float32), axis=0).astype(np.float16)
    for (out,) in run_everywhere(f, [x]):
        np.testing.assert_array_equal(out, want)


def test_cuda_scalars_keep_their_value():
    kernel = whole_kernel(dtype_mix())  # test_codegen compiles it with nvcc
    schedule_pointwise(kernel)
    src = cuda_source(kernel)
    # the bool operand widened to the int64 result (by a select, which GCC vectorizes)
    assert re.search(r"\(t\d+ \? static_cast<long long>\(1\) : static_cast<long long>\(0\)\)", src)
    assert "static_cast<long long>(1152921504606846977LL)" in src  # not via a double
    assert "(-9223372036854775807LL - 1)" in src
    assert "__longlong_as_double(-4503599627370496LL)" in src  # -inf as its bits, no `inf`
    assert "__uint_as_float(2143289344u)" in src  # NaN


def test_bool_int64_and_half_mix_agrees_everywhere():
    f = dtype_mix()
    runs = run_everywhere(f, fl.random_inputs(f, 2))
    for outputs in runs[1:]:
        for got, want in zip(outputs, runs[0]):
            np.testing.assert_array_equal(got, want)
