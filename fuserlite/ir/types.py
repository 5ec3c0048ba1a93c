"""IR values: iteration types, parallel types, data types, memory types."""

from __future__ import annotations

from enum import Enum

import ml_dtypes
import numpy as np

from fuserlite.ir.errors import FusionError
from fuserlite.ir.values import fact


class _Kind(Enum):
    """An enumeration of the IR, hashed by identity in C (its members are singletons):
    Enum's own hash is a Python call, and these are keys of most facts."""

    __hash__ = object.__hash__


class IterType(_Kind):
    """What an IterDomain iterates over: real data, a broadcast, or a reduction."""

    ITERATION = "i"
    BROADCAST = "b"
    REDUCTION = "r"


class ParallelType(_Kind):
    """How a loop axis is executed; the value is nvFuser's printed text."""

    DIDx = "deviceIdx.x"
    DIDy = "deviceIdx.y"
    DIDz = "deviceIdx.z"
    BIDx = "blockIdx.x"
    BIDy = "blockIdx.y"
    BIDz = "blockIdx.z"
    TIDx = "threadIdx.x"
    TIDy = "threadIdx.y"
    TIDz = "threadIdx.z"
    Unswitch = "US"
    Unroll = "UR"
    Vectorize = "V"
    # A host loop over chunks (nvFuser's ParallelType::Stream, printed `istreamIdx0{4}`):
    # the program runs the axis's chunks one after the other, each on its stream, so one
    # chunk's communication overlaps another's compute (fuserlite.ir.streams).
    Stream = "streamIdx"
    Serial = "S"

    @property
    def is_device(self) -> bool:
        """True for deviceIdx.x/y/z."""
        return self in DEVICE_PARALLEL_TYPES

    @property
    def is_stream(self) -> bool:
        """True for streamIdx: chunks of the axis run in a host loop, each on its stream."""
        return self is ParallelType.Stream

    @property
    def is_block(self) -> bool:
        return self in (ParallelType.BIDx, ParallelType.BIDy, ParallelType.BIDz)

    @property
    def is_thread(self) -> bool:
        return self in (ParallelType.TIDx, ParallelType.TIDy, ParallelType.TIDz)

    @classmethod
    def parse(cls, text: str) -> ParallelType:
        """Accept the enum name (DIDx), the printed text (deviceIdx.x) or a few aliases."""
        if isinstance(text, ParallelType):
            return text
        if not isinstance(text, str):
            names = ", ".join(pt.name for pt in cls)
            raise FusionError(
                f"parallel type must be a ParallelType or one of {names}, got {text!r}"
            )
        key = text.strip()
        for pt in cls:
            if key in (pt.name, pt.value):
                return pt
        aliases = {"Serial": cls.Serial, "unswitch": cls.Unswitch, "unroll": cls.Unroll}
        aliases["stream"] = cls.Stream  # nvFuser's Python name
        if key in aliases:
            return aliases[key]
        names = ", ".join(pt.name for pt in cls)
        raise FusionError(f"unknown parallel type {text!r}; expected one of {names}")


DEVICE_PARALLEL_TYPES = (ParallelType.DIDx, ParallelType.DIDy, ParallelType.DIDz)
MAX_THREADS = 1024  # CUDA's limit on a threadIdx extent (and on threads per block)
MAX_FACTOR = 2**31 - 1  # loop extents are 32-bit in CUDA's grid


class DType(_Kind):
    """Element types; the value is nvFuser's printed name."""

    float32 = "float"
    float64 = "double"
    float16 = "half"
    bfloat16 = "__bfloat"
    int32 = "int"
    int64 = "int64_t"
    bool = "bool"

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype used to execute this type (bfloat16: ml_dtypes.bfloat16)."""
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.float32, DType.float64, DType.float16, DType.bfloat16)

    @property
    def compute(self) -> DType:
        """The dtype arithmetic on this storage dtype runs in.

        As in nvFuser's kernels, half and bfloat16 are loaded into float registers,
        computed in float and rounded back only where a value is stored to global memory.
        """
        return _COMPUTE.get(self, self)

    @property
    def largest(self) -> int | float:
        """The largest finite value (numpy's finfo does not know bfloat16; ml_dtypes' does)."""
        return _largest(self)

    @property
    def lowest(self) -> int | float | bool:
        """The smallest value (max's neutral element): -inf, the integer minimum, False."""
        if self.is_float:
            return float("-inf")
        if self is DType.bool:
            return False
        return int(np.iinfo(self.numpy).min)

    @classmethod
    def parse(cls, value: str | DType | np.dtype) -> DType:
        """Accept a DType, a name (float32, float), or a numpy dtype."""
        if isinstance(value, DType):
            return value
        if value is None:  # np.dtype(None) is float64: never guess
            raise FusionError(
                f"dtype must be one of {', '.join(dt.name for dt in cls)} (or a numpy dtype), "
                "got None; leave the argument out for the default float32"
            )
        if type(value).__module__ == "torch":  # torch.float32 -> 'float32', without torch
            value = str(value).removeprefix("torch.")
        if not isinstance(value, (str, np.dtype, type)):  # np.dtype(np.int64(5)) is int64
            names = ", ".join(dt.name for dt in cls)
            raise FusionError(f"unknown dtype {value!r}; expected one of {names}")
        if not isinstance(value, str):
            try:
                name = np.dtype(value).name
            except (TypeError, ValueError):
                names = ", ".join(dt.name for dt in cls)
                raise FusionError(f"unknown dtype {value!r}; expected one of {names}") from None
            value = name
        for dt in cls:
            if value in (dt.name, dt.value):
                return dt
        names = ", ".join(dt.name for dt in cls)
        raise FusionError(f"unknown dtype {value!r}; expected one of {names}")

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DType:
        return cls.parse(np.dtype(dtype).name)


_NUMPY = {
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
    DType.float16: np.dtype(np.float16),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.int32: np.dtype(np.int32),
    DType.int64: np.dtype(np.int64),
    DType.bool: np.dtype(np.bool_),
}


@fact
def _largest(dtype: DType) -> int | float | bool:
    if dtype.is_float:
        return float(ml_dtypes.finfo(dtype.numpy).max)
    if dtype is DType.bool:
        return True
    return int(np.iinfo(dtype.numpy).max)


_COMPUTE = {DType.float16: DType.float32, DType.bfloat16: DType.float32}

# torch's type promotion: categories bool < integer < floating; within one, by rank.
# float16 and bfloat16 share a rank: neither holds the other, so together they promote
# to the next rank up, float32 (torch.promote_types(float16, bfloat16) is float32).
_CATEGORY = {DType.bool: 0, DType.int32: 1, DType.int64: 1}
_RANK = {
    DType.bool: 0,
    DType.int32: 1,
    DType.int64: 2,
    DType.float16: 3,
    DType.bfloat16: 3,
    DType.float32: 4,
    DType.float64: 5,
}


def category(dtype: DType) -> int:
    """0 bool, 1 integer, 2 floating."""
    return _CATEGORY.get(dtype, 2)


def scalar_dtype(value: bool | int | float) -> DType:
    """The dtype torch gives a Python scalar: bool, int64 or float32 (the default dtype)."""
    if isinstance(value, bool):
        return DType.bool
    return DType.int64 if isinstance(value, int) else DType.float32


def result_type(tensors: list[DType], scalars: list[bool | int | float]) -> DType:
    """The dtype of a pointwise op on tensors of `tensors` dtypes and Python `scalars`.

    Tensors promote to the widest dtype, float16 with bfloat16 to float32; a scalar
    counts only where it raises the category (bool tensor + 5 -> int64, int32 tensor
    + 5 -> int32, int32 + 2.5 -> float32, half + 2.5 -> half), as in torch and
    nvFuser's frontend.
    """
    dtype = tensors[0]
    for other in tensors[1:]:
        dtype = _promote_pair(dtype, other)
    for value in scalars:
        if category(scalar_dtype(value)) > category(dtype):
            dtype = scalar_dtype(value)
    return dtype


def _promote_pair(a: DType, b: DType) -> DType:
    if _RANK[a] != _RANK[b]:
        return a if _RANK[a] > _RANK[b] else b
    return a if a is b else DType.float32  # float16 with bfloat16


class MemoryType(_Kind):
    """Where a TensorView lives: global (fusion inputs/outputs), local, or shared."""

    GLOBAL = "g"
    LOCAL = "l"
    SHARED = "s"


class ReductionOpType(Enum):
    """How values are combined: by a reduction op, and by the collective that completes
    partial results (the value is nvFuser's printed name)."""

    sum = "add"
    max = "max"
    min = "min"

    def identity(self, dtype: DType) -> int | float | bool:
        """The neutral element on `dtype`, where a reduction starts: -0.0 for a float sum
        (-0.0 + x is x bit for bit, even for x = -0.0), 0 for other sums, for max the
        dtype's lowest value (-inf, the integer minimum, False), for min its highest
        (inf, the integer maximum, True)."""
        if self is ReductionOpType.sum:
            return -0.0 if dtype.is_float else 0
        if self is ReductionOpType.min:
            return float("inf") if dtype.is_float else dtype.largest
        return dtype.lowest
