"""Counter-based random numbers: Philox4x32-10 and nvFuser's rand_like mapping.

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC'11; the Random123 library) turns a 128-bit counter and a 64-bit key into four
uint32 words with ten rounds of multiply-hi/lo and xor. Nothing is stateful, so
any element's random number can be computed alone, in any order, on any device.

nvFuser's scheme, which fuserlite follows (NVIDIA/Fuser: runtime/random_numbers.cu,
csrc/device_lower/pass/rng.cpp, csrc/device_lower/pass/index.cpp, csrc/rng.cpp):

- `philox(seed, subsequence, offset)`: key = (seed low, seed high word), counter =
  (offset low, offset high, subsequence low, subsequence high): Random123's
  philox4x32_10(counter, key), the state curand_init(seed, subsequence, 4 * offset)
  starts from.
- rand_like at linear index i (row-major over the tensor's logical shape) of a
  float32, half or bfloat16 tensor: r = philox(seed, i // 4, offset), x = r[i % 4],
  u = float(x) * 2**-32 + 2**-33 in float arithmetic; float32 maps u == 1 to 0; half
  and bfloat16 round u to their type and map a rounded 1 to 0. float64: r =
  philox(seed, i // 2, offset), z = r[2c] ^ (r[2c + 1] << 21) for c = i % 2, u =
  z * 2**-53 + 2**-54, 1 mapped to 0. Every u lies in [0, 1).
- `offset` is in units of one philox call (four words): nvFuser passes
  torch's generator offset / 4 + the RNG op's number, or the philox_offset given to
  rand_like(tv, philox_seed, philox_offset).

fuserlite's index is the element's linear index in the *global* (unsharded) tensor,
so a device computing its shard (a `Block`) draws exactly the numbers the unsharded
program draws there: a sharded dropout keeps exactly the unsharded mask.
`C_SOURCE` is the same generator as C for the code generator (host and device).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from fuserlite.ir.errors import ExecutionError

# Random123's philox4x32 constants: the round multipliers and the Weyl key increments.
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
ROUNDS = 10
_U64 = 2**64

_F32_SCALE = np.float32(2.0**-32)  # uint32 -> float: x * 2**-32 + 2**-33, as curand
_F32_HALF = np.float32(2.0**-33)
_F64_SCALE = 2.0**-53
_F64_HALF = 2.0**-54
# dtypes whose u is a float32 draw rounded to them, 1 mapped to 0 after the rounding
_ROUNDED = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
_FLOAT32 = (np.dtype(np.float32), *_ROUNDED)


def philox4x32(counter: np.ndarray, key: np.ndarray, rounds: int = ROUNDS) -> np.ndarray:
    """Random123's philox4x32_R: uint32[..., 4] counters and uint32[..., 2] keys
    (broadcast together) -> uint32[..., 4]."""
    counter = np.asarray(counter, np.uint32)
    key = np.asarray(key, np.uint32)
    c0, c1, c2, c3 = (counter[..., j] for j in range(4))
    k0, k1 = key[..., 0], key[..., 1]
    with np.errstate(over="ignore"):  # the key schedule wraps around 2**32 by design
        for r in range(rounds):
            if r:
                k0, k1 = k0 + _W0, k1 + _W1
            p0 = c0.astype(np.uint64) * _M0
            p1 = c2.astype(np.uint64) * _M1
            c0, c1, c2, c3 = (
                (p1 >> np.uint64(32)).astype(np.uint32) ^ c1 ^ k0,
                p1.astype(np.uint32),
                (p0 >> np.uint64(32)).astype(np.uint32) ^ c3 ^ k1,
                p0.astype(np.uint32),
            )
    return np.stack(np.broadcast_arrays(c0, c1, c2, c3), axis=-1)


def _u64(value: int, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ExecutionError(f"philox: the {what} must be an integer, got {value!r}")
    if not 0 <= int(value) < _U64:
        raise ExecutionError(f"philox: the {what} must be in [0, 2**64), got {value}")
    return int(value)


def _words(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) uint32 words of uint64 values."""
    return value.astype(np.uint32), (value >> np.uint64(32)).astype(np.uint32)


def philox(seed: int, subsequence: np.ndarray | int, offset: int) -> np.ndarray:
    """nvFuser's philox(seed, subsequence, offset): uint32[..., 4] per subsequence."""
    seed, offset = _u64(seed, "seed"), _u64(offset, "offset")
    sub = np.asarray(subsequence, np.uint64)
    seed_words = _words(np.asarray(seed, np.uint64))
    offset_words = _words(np.asarray(offset, np.uint64))
    counter = np.stack(np.broadcast_arrays(*offset_words, *_words(sub)), axis=-1)
    return philox4x32(counter, np.stack(seed_words, axis=-1))


def uniform_from_bits(x: np.ndarray, y: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    """nvFuser's uniformf(x) (float32), uniform_half / uniform_bfloat(x) and
    uniform(x, y) (float64, which needs the second word y): uint32 words -> [0, 1)."""
    dtype = np.dtype(dtype)
    x = np.asarray(x, np.uint32)
    if dtype == np.float64:
        if y is None:
            raise ExecutionError("philox: a float64 uniform takes two words, got one")
        z = x.astype(np.uint64) ^ (np.asarray(y, np.uint64) << np.uint64(21))
        u = z.astype(np.float64) * _F64_SCALE + _F64_HALF
    elif dtype in _FLOAT32:
        u = (x.astype(np.float32) * _F32_SCALE + _F32_HALF).astype(dtype)
    else:
        raise ExecutionError(f"philox: uniform numbers are floats; got dtype {dtype}")
    return np.where(u == 1, np.zeros((), dtype), u)


def uniform(seed: int, offset: int, index: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """rand_like's number at each global linear `index` (an integer array): in [0, 1),
    of `dtype` (float16, bfloat16, float32 or float64), as nvFuser draws it."""
    dtype = np.dtype(dtype)
    index = np.asarray(index)
    if index.dtype.kind not in "iu" or (index.size and index.min() < 0):
        raise ExecutionError("philox: element indices must be non-negative integers")
    index = index.astype(np.uint64)
    per_call = np.uint64(2 if dtype == np.float64 else 4)  # numbers one philox call gives
    words = philox(seed, index // per_call, offset)
    component = (index % per_call).astype(np.intp)
    if dtype == np.float64:
        x = np.take_along_axis(words, (2 * component)[..., None], axis=-1)[..., 0]
        y = np.take_along_axis(words, (2 * component + 1)[..., None], axis=-1)[..., 0]
        return uniform_from_bits(x, y, dtype)
    x = np.take_along_axis(words, component[..., None], axis=-1)[..., 0]
    return uniform_from_bits(x, None, dtype)


def keep_mask(p: float, seed: int, offset: int, index: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Dropout's kept elements, as nvFuser's dropout: rand_like(x) < 1 - p, the draw of
    x's dtype compared in its compute dtype (float64 for float64, else float32)."""
    if not 0.0 <= p <= 1.0:
        raise ExecutionError(f"dropout: the probability must be in [0, 1], got {p}")
    compute = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    u = uniform(seed, offset, index, dtype).astype(compute)
    return u < compute(1.0 - p)


def check_seed(seed: int, offset: int) -> tuple[int, int]:
    """(seed, offset) as ints, if each is a uint64 (an ExecutionError otherwise)."""
    return _u64(seed, "seed"), _u64(offset, "offset")


def dropout_scale(p: float, dtype: np.dtype) -> np.generic:
    """What dropout multiplies a kept value by, 1 / (1 - p) (1 for p = 1), in `dtype`."""
    return np.dtype(dtype).type(1.0 / (1.0 - p) if p < 1 else 1.0)


def apply_dropout(values: np.ndarray, p: float, seed: int, offset: int, block: Block) -> np.ndarray:
    """Dropout of a local array of float32 or float64 `values` lying at `block` of the
    global tensor: each value kept where keep_mask is at its global linear index, scaled
    by 1 / (1 - p), else 0. A compiled kernel draws the same numbers in C (C_SOURCE)."""
    keep = keep_mask(p, seed, offset, block.index(values.shape), values.dtype)
    return np.where(keep, values * dropout_scale(p, values.dtype), np.zeros((), values.dtype))


# Dropout as a function of (values, p, seed, offset, block), as apply_dropout: what a
# caller with a compiled one gives attention instead.
Dropout = Callable[[np.ndarray, float, int, int, "Block"], np.ndarray]


@dataclass(frozen=True)
class Block:
    """Where a local array lies in a global tensor: the global shape and the global
    coordinates of the local array's first element (a device's shard is one block)."""

    shape: tuple[int, ...]
    start: tuple[int, ...]

    @classmethod
    def whole(cls, shape: tuple[int, ...]) -> Block:
        """The block that is the whole tensor."""
        return cls(tuple(shape), (0,) * len(shape))

    def index(self, local_shape: tuple[int, ...]) -> np.ndarray:
        """int64 global linear index of every element of a local array of `local_shape`."""
        local_shape = self.check(local_shape)
        total = np.zeros((), np.int64)
        for axis, (n, s, k) in enumerate(zip(self.shape, self.start, local_shape)):
            coord = np.arange(s, s + k, dtype=np.int64)
            total = total * np.int64(n) + coord.reshape((k,) + (1,) * (len(local_shape) - axis - 1))
        return np.broadcast_to(total, local_shape)

    def check(self, local_shape: tuple[int, ...]) -> tuple[int, ...]:
        """`local_shape` as a tuple, if a local array of it lies inside the tensor (an
        ExecutionError otherwise): what index() and a compiled draw at these indices need."""
        local_shape = tuple(local_shape)
        if not len(local_shape) == len(self.shape) == len(self.start):
            raise ExecutionError(
                f"block of a {list(self.shape)} tensor starting at {list(self.start)}: "
                f"the local array has shape {list(local_shape)}, of another rank"
            )
        for axis, (n, s, k) in enumerate(zip(self.shape, self.start, local_shape)):
            if s < 0 or s + k > n:
                raise ExecutionError(
                    f"block of a {list(self.shape)} tensor: axis {axis} covers [{s}, {s + k}), "
                    f"outside [0, {n})"
                )
        if math.prod(self.shape) >= 2**63:
            raise ExecutionError(f"a {list(self.shape)} tensor has more than 2**63 elements")
        return local_shape


# The same generator in C (C99/C++ and CUDA: host and device functions). The code
# generator emits it once per kernel file; fl_uniformf / fl_uniform are rand_like's
# float32 / float64 numbers, fl_raw_uniformf the float draw half and bfloat16 round
# (then map a rounded 1 to 0), as numpy's uniform above; the *_bits functions are
# uniform_from_bits; the *_memo ones (host only) the same numbers, each philox call made
# once for the four (two) elements it gives numbers to.
MEMO_GROUPS = 16  # the philox calls a CPU memo (or a block window) makes at once
C_SOURCE = r"""
#include <stdint.h>
#if defined(__CUDACC__)
#define FL_RNG_FN __host__ __device__ static inline
#else
#define FL_RNG_FN static inline
#endif

/* Philox4x32-10 (Random123) with nvFuser's argument order: key = seed,
   counter = (offset, subsequence) as 64-bit halves, low words first. */
FL_RNG_FN void fl_philox(uint64_t seed, uint64_t subsequence, uint64_t offset,
                         uint32_t out[4]) {
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  uint32_t c0 = (uint32_t)offset, c1 = (uint32_t)(offset >> 32);
  uint32_t c2 = (uint32_t)subsequence, c3 = (uint32_t)(subsequence >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = (uint64_t)0xD2511F53u * c0;
    const uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* nvFuser's raw_uniform_float / uniformf / uniform(x, y): words -> (0, 1] / [0, 1).
   The products are exact (powers of two), so contracting them to an fma changes nothing. */
FL_RNG_FN float fl_raw_uniformf_bits(uint32_t x) {
  const float scale = 2.3283064365386963e-10f; /* 2**-32 */
  return (float)x * scale + 0.5f * scale;
}

FL_RNG_FN float fl_uniformf_bits(uint32_t x) {
  const float u = fl_raw_uniformf_bits(x);
  return u == 1.0f ? 0.0f : u;
}

FL_RNG_FN double fl_uniform_bits(uint32_t x, uint32_t y) {
  const uint64_t z = (uint64_t)x ^ ((uint64_t)y << 21);
  const double scale = 1.1102230246251565e-16; /* 2**-53 */
  const double u = (double)z * scale + 0.5 * scale;
  return u == 1.0 ? 0.0 : u;
}

/* rand_like's number at a global linear index */
FL_RNG_FN float fl_raw_uniformf(uint64_t seed, uint64_t offset, uint64_t index) {
  uint32_t r[4];
  fl_philox(seed, index / 4, offset, r);
  return fl_raw_uniformf_bits(r[index % 4]);
}

FL_RNG_FN float fl_uniformf(uint64_t seed, uint64_t offset, uint64_t index) {
  uint32_t r[4];
  fl_philox(seed, index / 4, offset, r);
  return fl_uniformf_bits(r[index % 4]);
}

FL_RNG_FN double fl_uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  uint32_t r[4];
  fl_philox(seed, index / 2, offset, r);
  const int c = (int)(index % 2);
  return fl_uniform_bits(r[2 * c], r[2 * c + 1]);
}

#if !defined(__CUDACC__)
/* A CPU thread draws neighbouring elements one after another, and one philox call gives
   the numbers of four neighbours (float; two for double). The memo keeps the words of a
   window of FL_MEMO_GROUPS consecutive subsequences: a miss makes the calls of the whole
   window at once, from the subsequence asked for, in a loop of independent calls the
   compiler vectorizes (as sdpa's dropout does, kernel/library.py), instead of one call at a
   time. The same numbers bit for bit, in any order of the elements (a call's words do not
   depend on the calls made with it); a memo belongs to one thread; {0}: empty. */
#define FL_MEMO_GROUPS @MEMO_GROUPS@
typedef struct {
  int valid;
  uint64_t seed, offset, first; /* the window: subsequences first, first + 1, ... */
  uint32_t r[4 * FL_MEMO_GROUPS]; /* word c of subsequence first + g at r[c * FL_MEMO_GROUPS + g] */
} fl_philox_memo;

static void fl_philox_window(fl_philox_memo* m, uint64_t seed, uint64_t first, uint64_t offset) {
  uint32_t* __restrict__ r = m->r;
  for (int g = 0; g < FL_MEMO_GROUPS; ++g) {
    uint32_t w[4];
    fl_philox(seed, first + (uint64_t)g, offset, w);
    r[g] = w[0];
    r[FL_MEMO_GROUPS + g] = w[1];
    r[2 * FL_MEMO_GROUPS + g] = w[2];
    r[3 * FL_MEMO_GROUPS + g] = w[3];
  }
  m->seed = seed;
  m->offset = offset;
  m->first = first;
  m->valid = 1;
}

/* word c (0 to 3) of philox(seed, subsequence, offset) */
static inline uint32_t fl_philox_word(fl_philox_memo* m, uint64_t seed, uint64_t subsequence,
                                      uint64_t offset, int c) {
  if (!m->valid || subsequence - m->first >= (uint64_t)FL_MEMO_GROUPS || m->seed != seed ||
      m->offset != offset)
    fl_philox_window(m, seed, subsequence, offset);
  return m->r[c * FL_MEMO_GROUPS + (int)(subsequence - m->first)];
}

/* fl_raw_uniformf, fl_uniformf and fl_uniform through a memo (none: a null pointer) */
static inline float fl_raw_uniformf_memo(fl_philox_memo* m, uint64_t seed, uint64_t offset,
                                         uint64_t index) {
  if (!m) return fl_raw_uniformf(seed, offset, index);
  return fl_raw_uniformf_bits(fl_philox_word(m, seed, index / 4, offset, (int)(index % 4)));
}

static inline float fl_uniformf_memo(fl_philox_memo* m, uint64_t seed, uint64_t offset,
                                     uint64_t index) {
  if (!m) return fl_uniformf(seed, offset, index);
  return fl_uniformf_bits(fl_philox_word(m, seed, index / 4, offset, (int)(index % 4)));
}

static inline double fl_uniform_memo(fl_philox_memo* m, uint64_t seed, uint64_t offset,
                                     uint64_t index) {
  if (!m) return fl_uniform(seed, offset, index);
  const uint64_t sub = index / 2;
  const int c = (int)(index % 2);
  return fl_uniform_bits(fl_philox_word(m, seed, sub, offset, 2 * c),
                         fl_philox_word(m, seed, sub, offset, 2 * c + 1));
}
#endif
""".replace("@MEMO_GROUPS@", str(MEMO_GROUPS))
