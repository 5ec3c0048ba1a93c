"""communicator.combine, how both backends join partial results: any order, same bits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fuserlite.ir.types import ReductionOpType
from fuserlite.numerics.casts import identity
from fuserlite.runtime.communicator import canonical, combine

SUM, MAX, MIN = ReductionOpType.sum, ReductionOpType.max, ReductionOpType.min
FLOATS = ("float16", "bfloat16", "float32", "float64")


def specials(dtype: str) -> np.ndarray:
    """Every value that can make an order show: NaNs of both signs, infinities, zeros."""
    if dtype == "bool":
        return np.array([False, True])
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        return np.array([info.min, -1, 0, 1, info.max], dtype)
    nan = np.array([np.nan], dtype)
    neg_nan = np.negative(nan)  # the sign bit set: another NaN bit pattern
    values = [np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0]
    return np.concatenate([nan, neg_nan, np.array(values, dtype)])


def every_pair(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v = specials(dtype)
    a, b, c = (x.ravel() for x in np.meshgrid(v, v, v, indexing="ij"))
    return a, b, c


def bits(a: np.ndarray) -> bytes:
    return a.tobytes()


@pytest.mark.parametrize("dtype", [*FLOATS, "int32", "int64", "bool"])
@pytest.mark.parametrize("op", [SUM, MAX, MIN])
def test_combine_is_commutative_bit_for_bit(dtype, op):
    a, b, _ = every_pair(dtype)
    assert bits(combine(op, a, b)) == bits(combine(op, b, a))


@pytest.mark.parametrize("dtype", [*FLOATS, "int32", "int64", "bool"])
@pytest.mark.parametrize("op", [SUM, MAX, MIN])
def test_combine_is_associative_on_values_that_sum_exactly(dtype, op):
    # Small integers, zeros, infinities and NaN sum exactly, so every grouping agrees.
    a, b, c = every_pair(dtype)
    left = combine(op, combine(op, a, b), c)
    assert bits(left) == bits(combine(op, a, combine(op, b, c)))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op, negative_zero", [(MAX, False), (MIN, True)])
def test_max_and_min_propagate_nan_and_prefer_their_zero(dtype, op, negative_zero):
    """max(-0.0, 0.0) is 0.0 and min(-0.0, 0.0) is -0.0, in either order."""
    nan, zero = np.array([np.nan], dtype), np.array([0.0], dtype)
    for a, b in itertools.permutations([nan, np.array([5.0], dtype)]):
        assert np.isnan(combine(op, a, b)).all()
    for a, b in itertools.permutations([-zero, zero]):
        assert np.signbit(combine(op, a, b)).all() == negative_zero
    lo, hi = np.array([-3.0], dtype), np.array([2.0], dtype)
    assert combine(op, lo, hi)[0] == (-3.0 if op is MIN else 2.0)


@pytest.mark.parametrize("dtype", [*FLOATS, "int32", "int64", "bool"])
@pytest.mark.parametrize("op", [SUM, MAX, MIN])
def test_identity_is_neutral(dtype, op):
    # What a Reduce root outside the input mesh contributes on the mpi backend.
    v = specials(dtype)
    got = combine(op, np.full_like(v, identity(v.dtype, op)), v)
    assert bits(got) == bits(canonical(v.copy()))  # -0.0 stays -0.0, NaN is the quiet NaN
