"""Conversions between dtypes, each rounded once, as CUDA's conversion intrinsics round.

numpy and ml_dtypes convert float64 to bfloat16 through float32, rounding twice
(a value just above a bfloat16 halfway point can round to float32's halfway value,
then to even: the wrong way). `cast` rounds float64 (and every integer, through
float64) to float32 *to odd* first (truncate, then set the last bit if anything was
cut), which makes the second rounding to half or bfloat16 exact: round-to-odd with
two or more extra bits commutes with round-to-nearest-even. A float to an integer
truncates toward zero and saturates, NaN to 0, as CUDA's cvt.rzi does (and torch on
CUDA), instead of numpy's platform-dependent INT_MIN.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fuserlite.ir.types import DType, ReductionOpType

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
_NARROW = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def to_odd_float32(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounded to odd: the float32 next to x toward zero, its last
    bit set where it is not x exactly (inf stays inf, NaN NaN)."""
    x = np.asarray(x, F64)
    with np.errstate(all="ignore"):
        f = x.astype(F32)
        back = f.astype(F64)
        away = np.abs(back) > np.abs(x)  # rounded away from zero (or to inf): step back
        f = np.where(away, np.nextafter(f, np.zeros((), F32)), f)
        inexact = (f.astype(F64) != x) & ~np.isnan(x) & ~np.isinf(x)
    bits = f.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(F32)


def _to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    x = np.asarray(x, F64 if x.dtype == F64 else F32)
    with np.errstate(all="ignore"):
        out = np.trunc(x).astype(dtype)
    # 2**31 and 2**63 are exact in float32 and float64: compare against them.
    out = np.where(x >= -float(info.min), info.max, out)
    out = np.where(x < float(info.min), info.min, out)
    return np.where(np.isnan(x), 0, out).astype(dtype)


def cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """x converted to `dtype` (a storage dtype), rounding once."""
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    if dtype == x.dtype:
        return x.copy()
    if dtype.kind in "iu":
        if x.dtype.kind == "f" or x.dtype in _NARROW:
            return _to_int(x.astype(F64 if x.dtype == F64 else F32), dtype)
        return x.astype(dtype)
    if dtype == np.bool_:
        return x.astype(F32) != 0 if x.dtype in _NARROW else x.astype(np.bool_)
    if dtype in _NARROW and x.dtype not in (F32, *_NARROW):
        x = to_odd_float32(x.astype(F64))  # float64, integers, bools: exact in float64 or odd
    with np.errstate(all="ignore"):
        return x.astype(dtype)


def identity(dtype: np.dtype, op: ReductionOpType) -> np.generic:
    """The neutral element of `op` (ReductionOpType.identity) as a numpy scalar of `dtype`."""
    return dtype.type(op.identity(DType.from_numpy(dtype)))
