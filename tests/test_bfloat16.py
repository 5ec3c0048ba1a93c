"""bfloat16 (ml_dtypes.bfloat16): its name, promotion, text, and float computation
rounded once where it is stored, in the reference, the kernel runner and the CUDA."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from pointwise_cases import bfloat16_chain, run_everywhere, sharded_sum, whole_kernel

import fuserlite as fl
from fuserlite.kernel.cuda import cuda_source
from fuserlite.reference.rounding import AGAINST_REFERENCE, Source, bounds
from fuserlite.reference.validate import ValidationError
from fuserlite.schedule.pointwise import schedule_pointwise

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("spelling", ["bfloat16", "__bfloat", BF16, ml_dtypes.bfloat16])
def test_parse_accepts_the_name_the_printed_name_and_the_numpy_dtype(spelling):
    assert fl.DType.parse(spelling) is fl.DType.bfloat16


def test_bfloat16_is_a_two_byte_float_computed_in_float():
    bf = fl.DType.bfloat16
    assert bf.numpy == BF16 and bf.itemsize == 2 and bf.is_float
    assert bf.compute is fl.DType.float32
    assert bf.largest == float(ml_dtypes.finfo(BF16).max) and bf.lowest == float("-inf")


def test_unknown_dtype_lists_bfloat16():
    with pytest.raises(fl.FuserliteError, match="bfloat16"):
        fl.DType.parse("bf17")


def result(a: str, b) -> str:
    with fl.Fusion():
        x = fl.tensor([2], a)
        return fl.add(x, fl.tensor([2], b) if isinstance(b, str) else b).dtype.name


@pytest.mark.parametrize(
    "a,b,want",
    [
        ("bfloat16", "float16", "float32"),  # torch.promote_types: neither holds the other
        ("float16", "bfloat16", "float32"),
        ("bfloat16", "bfloat16", "bfloat16"),
        ("bfloat16", "float32", "float32"),
        ("bfloat16", "float64", "float64"),
        ("int64", "bfloat16", "bfloat16"),
        ("bool", "bfloat16", "bfloat16"),
        ("bfloat16", 2.5, "bfloat16"),
        ("bfloat16", 3, "bfloat16"),
    ],
)
def test_promotion_follows_torch(a, b, want):
    assert result(a, b) == want


def test_scalars_beyond_bfloat16s_range_are_rejected():
    with fl.Fusion(), pytest.raises(fl.FuserliteError, match="does not fit the bfloat16"):
        fl.add(fl.tensor([2], "bfloat16"), 1e39)


def test_sum_of_bfloat16_stays_bfloat16():
    with fl.Fusion():
        assert fl.sum(fl.tensor([4, 2], "bfloat16"), [0]).dtype is fl.DType.bfloat16


def test_printed_as_nvfuser_prints_it_and_written_back_as_bfloat16():
    fusion = bfloat16_chain()
    assert "T0_g___bfloat[ iS0{300} ]" in str(fusion)
    text = fl.to_fus(fusion)
    assert "input T0: bfloat16[300]" in text
    assert fl.to_fus(fl.parse(text)) == text
    assert fl.parse("input x: __bfloat[4]\noutput x\n").inputs[0].dtype is fl.DType.bfloat16


def test_random_inputs_are_bfloat16():
    (x, h) = fl.random_inputs(bfloat16_chain(), 3)
    assert x.dtype == BF16 and h.dtype == np.float16 and np.isfinite(x.astype(float)).all()


X = np.linspace(-3, 3, 300).astype(BF16)
H = np.linspace(2, -2, 300).astype(np.float16)


def test_bfloat16_chains_are_computed_in_float_and_rounded_once():
    stepwise = ((X + BF16.type(100)) - BF16.type(100)).astype(float)  # rounded after each op
    assert not np.array_equal(stepwise, X.astype(float))  # so the test can tell
    for x_again, product in run_everywhere(bfloat16_chain(), [X, H]):
        assert x_again.dtype == BF16 and product.dtype == np.float32
        np.testing.assert_array_equal(x_again.astype(float), X.astype(float))
        np.testing.assert_array_equal(product, X.astype(np.float32) * H.astype(np.float32))


def test_bfloat16_sums_accumulate_in_float_across_devices():
    x = np.full((512, 2), 1.0, BF16)  # summed in bfloat16, the count would stop at 256
    for (out,) in run_everywhere(sharded_sum([512, 2], "bfloat16", 4), [x]):
        assert out.dtype == BF16
        np.testing.assert_array_equal(out.astype(float), [512.0, 512.0])


def test_cuda_loads_and_stores_bfloat16_through_float():
    kernel = whole_kernel(bfloat16_chain())  # test_codegen compiles it with nvcc
    schedule_pointwise(kernel)
    src = cuda_source(kernel)
    assert "#include <cuda_bf16.h>" in src and "#include <cuda_fp16.h>" in src
    assert "const __nv_bfloat16* __restrict__ T0" in src
    assert "__bfloat162float(T0[" in src and "__half2float(T1[" in src
    assert src.count("__float2bfloat16(") == 1 and "] = __float2bfloat16(t" in src


def test_bfloat16_rounding_is_allowed_where_a_kernel_may_store_it():
    """(x + 100) - 100 may be stored as bfloat16 between its two ops (the reference keeps
    it in float): the output's bound holds that rounding; x * h of exact inputs is
    computed once in float32 on every side: nothing to allow."""
    fusion = bfloat16_chain()
    inputs = [X, X.astype(np.float16)]
    found = bounds(fusion, inputs, AGAINST_REFERENCE)
    store = list(Source).index(Source.STORE)
    assert np.all(found.errs[0].parts[store] > 0) and found.dtypes[Source.STORE] == {
        fl.DType.bfloat16
    }
    assert found.errs[1] is None  # exactly equal, or wrong


def test_validate_rejects_one_ulp_where_every_side_computes_the_same_bits():
    with fl.Fusion() as f:
        x = fl.tensor([300], "bfloat16")
        f.add_input(x)
        f.add_output(fl.mul(x, 3))
    (y,) = fl.evaluate(f, [X])
    next_up = (y.view(np.uint16) + np.uint16(1)).view(BF16)  # one unit in the last place
    assert not np.array_equal(next_up.astype(float), y.astype(float))
    with pytest.raises(ValidationError, match="must be bit-identical"):
        fl.validate(f, [X], [next_up])
    wrong = y.copy()
    wrong[7] = BF16.type(float(y[7]) * 1.2)
    with pytest.raises(ValidationError, match=r"output T1 differs from the reference at \[7\]"):
        fl.validate(f, [X], [wrong])
