"""Philox4x32-10 against Random123's known answers, nvFuser's rand_like mapping, the
C source bit for bit (g++ and ctypes), and shards drawing the unsharded numbers."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import fuserlite as fl
from fuserlite.numerics.philox import (
    C_SOURCE,
    Block,
    keep_mask,
    philox,
    philox4x32,
    uniform,
    uniform_from_bits,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = (np.dtype(np.float16), BF16, np.dtype(np.float32), np.dtype(np.float64))

# DEShawResearch/random123 tests/kat_vectors, the "philox4x32 10" lines:
# counter (4 words), key (2 words) -> the 4 output words.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


def as_nvfuser_arguments(counter, key) -> tuple[int, int, int]:
    """(seed, subsequence, offset) whose philox call is philox4x32_10(counter, key)."""
    return key[0] | key[1] << 32, counter[2] | counter[3] << 32, counter[0] | counter[1] << 32


@pytest.mark.parametrize("counter,key,want", KAT)
def test_known_answers(counter, key, want):
    got = philox4x32(np.array(counter, np.uint32), np.array(key, np.uint32))
    assert got.tolist() == list(want)
    assert philox(*as_nvfuser_arguments(counter, key)).tolist() == list(want)


def test_philox_is_vectorized_over_counters_and_keys():
    counters = np.array([c for c, _, _ in KAT], np.uint32)
    keys = np.array([k for _, k, _ in KAT], np.uint32)
    assert philox4x32(counters, keys).tolist() == [list(w) for _, _, w in KAT]


def test_element_i_takes_word_i_mod_4_of_subsequence_i_div_4():
    words = philox(99, np.arange(3), 5)  # float32: four numbers per call
    want = uniform_from_bits(words.reshape(-1), None, np.float32)
    np.testing.assert_array_equal(uniform(99, 5, np.arange(12), np.float32), want)
    # float64: two numbers per call, each from a pair of words
    pairs = philox(99, np.arange(3), 5).reshape(-1, 2)
    z = pairs[:, 0].astype(np.uint64) ^ (pairs[:, 1].astype(np.uint64) << np.uint64(21))
    want64 = z.astype(np.float64) * 2.0**-53 + 2.0**-54
    np.testing.assert_array_equal(uniform(99, 5, np.arange(6), np.float64), want64)


def test_uniform_from_bits_ends_of_the_range():
    top = np.uint32(0xFFFFFFFF)
    assert uniform_from_bits(np.uint32(0), None, np.float32) == np.float32(2.0**-33)
    assert uniform_from_bits(top, None, np.float32) == 0  # rounds to 1.0: mapped to 0
    low = np.uint32(0x001FFFFF)  # with y's bits shifted over it: z = 2**53 - 1
    assert uniform_from_bits(low, top, np.float64) == 0
    assert uniform_from_bits(np.uint32(0), np.uint32(0), np.float64) == 2.0**-54
    # just below the top: 1 - 2**-12 rounds to 1 in half and bfloat16 but not in float32
    x = np.uint32(0xFFF00000)
    assert 0.999 < uniform_from_bits(x, None, np.float32) < 1
    for dtype in (np.float16, BF16):
        assert uniform_from_bits(x, None, dtype) == 0


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_uniform_lies_in_0_1_and_looks_uniform(dtype):
    u = uniform(2024, 3, np.arange(40_000), dtype).astype(np.float64)
    assert ((u >= 0) & (u < 1)).all()
    assert abs(u.mean() - 0.5) < 0.01 and abs((u < 0.25).mean() - 0.25) < 0.01
    assert uniform(2024, 3, np.arange(40_000), dtype).dtype == dtype


def test_seed_and_offset_select_other_streams():
    base = uniform(1, 0, np.arange(64), np.float32)
    for seed, offset in [(2, 0), (1, 1), (2**40 + 1, 0), (1, 2**33)]:
        assert not np.array_equal(uniform(seed, offset, np.arange(64), np.float32), base)


def test_a_number_depends_only_on_its_index():
    index = np.random.default_rng(0).permutation(1000)
    whole = uniform(7, 11, np.arange(1000), np.float32)
    np.testing.assert_array_equal(uniform(7, 11, index, np.float32), whole[index])


SHARDINGS = {  # name -> (global shape, list of (start, local shape))
    "rows of 2": ((6, 8), [((0, 0), (3, 8)), ((3, 0), (3, 8))]),
    "columns of 4": ((6, 8), [((0, c), (6, 2)) for c in (0, 2, 4, 6)]),
    "2x2 mesh": ((6, 8), [((r, c), (3, 4)) for r in (0, 3) for c in (0, 4)]),
    "heads of [B, H, L, S]": ((2, 4, 3, 5), [((0, h, 0, 0), (2, 1, 3, 5)) for h in range(4)]),
}


@pytest.mark.parametrize("name", SHARDINGS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_sharded_dropout_keeps_exactly_the_unsharded_mask(name, dtype):
    shape, shards = SHARDINGS[name]
    whole = keep_mask(0.3, 42, 9, Block.whole(shape).index(shape), dtype)
    assembled = np.zeros(shape, bool)
    covered = np.zeros(shape, int)
    for start, local in shards:
        where = tuple(slice(s, s + k) for s, k in zip(start, local))
        assembled[where] = keep_mask(0.3, 42, 9, Block(shape, start).index(local), dtype)
        covered[where] += 1
    assert (covered == 1).all()
    np.testing.assert_array_equal(assembled, whole)
    assert 0.5 < whole.mean() < 0.9  # a real mask, not all kept


def test_block_index_is_the_global_row_major_index():
    np.testing.assert_array_equal(Block((4, 6), (2, 3)).index((2, 3)), [[15, 16, 17], [21, 22, 23]])
    assert Block.whole(()).index(()) == 0


def test_keep_mask_probabilities():
    index = np.arange(20_000)
    assert keep_mask(0.0, 1, 0, index, np.float32).all()
    assert not keep_mask(1.0, 1, 0, index, np.float32).any()
    assert abs(keep_mask(0.25, 1, 0, index, BF16).mean() - 0.75) < 0.02


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: uniform(-1, 0, np.arange(4), np.float32), r"seed must be in \[0, 2\*\*64\)"),
        (lambda: uniform(2**64, 0, np.arange(4), np.float32), "seed must be in"),
        (lambda: uniform(0, 1.5, np.arange(4), np.float32), "offset must be an integer"),
        (lambda: uniform(0, 0, np.array([3, -1]), np.float32), "non-negative integers"),
        (lambda: uniform(0, 0, np.arange(4), np.int32), "uniform numbers are floats"),
        (
            lambda: keep_mask(1.5, 0, 0, np.arange(4), np.float32),
            r"probability must be in \[0, 1\]",
        ),
        (lambda: Block((4, 6), (3, 0)).index((2, 6)), r"axis 0 covers \[3, 5\), outside \[0, 4\)"),
        (lambda: Block((4, 6), (0, 0)).index((4,)), "of another rank"),
    ],
)
def test_bad_arguments_are_clear_errors(call, message):
    with pytest.raises(fl.ExecutionError, match=message):
        call()


# -- the C source ---------------------------------------------------------------------
HARNESS = r"""
extern "C" {
void philox_n(uint64_t seed, uint64_t offset, const uint64_t* sub, long n, uint32_t* out) {
  for (long i = 0; i < n; ++i) fl_philox(seed, sub[i], offset, out + 4 * i);
}
void uniformf_n(uint64_t seed, uint64_t offset, const uint64_t* index, long n, float* out) {
  for (long i = 0; i < n; ++i) out[i] = fl_uniformf(seed, offset, index[i]);
}
void uniform_n(uint64_t seed, uint64_t offset, const uint64_t* index, long n, double* out) {
  for (long i = 0; i < n; ++i) out[i] = fl_uniform(seed, offset, index[i]);
}
/* through one memo; each call's (seed, offset) from the arrays (a stream change mid-run) */
void uniformf_memo_n(const uint64_t* seed, const uint64_t* offset, const uint64_t* index, long n,
                     float* out) {
  fl_philox_memo memo = {0};
  for (long i = 0; i < n; ++i) out[i] = fl_uniformf_memo(&memo, seed[i], offset[i], index[i]);
}
void uniform_memo_n(const uint64_t* seed, const uint64_t* offset, const uint64_t* index, long n,
                    double* out) {
  fl_philox_memo memo = {0};
  for (long i = 0; i < n; ++i) out[i] = fl_uniform_memo(&memo, seed[i], offset[i], index[i]);
}
void bits_n(const uint32_t* x, const uint32_t* y, long n, float* out, double* out64) {
  for (long i = 0; i < n; ++i) {
    out[i] = fl_uniformf_bits(x[i]);
    out64[i] = fl_uniform_bits(x[i], y[i]);
  }
}
}
"""
CXX = shutil.which("g++") or shutil.which("c++")


@pytest.fixture(scope="module")
def clib(tmp_path_factory) -> ctypes.CDLL:
    if CXX is None:
        pytest.skip("no C++ compiler on the PATH")
    d = tmp_path_factory.mktemp("philox")
    (d / "philox.cpp").write_text(C_SOURCE + HARNESS)
    cmd = [CXX, "-O2", "-shared", "-fPIC", "-o", str(d / "philox.so"), str(d / "philox.cpp")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lib = ctypes.CDLL(str(d / "philox.so"))
    u64, ptr = ctypes.c_uint64, ctypes.c_void_p
    for name in ("philox_n", "uniformf_n", "uniform_n"):
        getattr(lib, name).argtypes = [u64, u64, ptr, ctypes.c_long, ptr]
    lib.bits_n.argtypes = [ptr, ptr, ctypes.c_long, ptr, ptr]
    for name in ("uniformf_memo_n", "uniform_memo_n"):
        getattr(lib, name).argtypes = [ptr, ptr, ptr, ctypes.c_long, ptr]
    return lib


def run_c(fn, seed: int, offset: int, inputs: np.ndarray, out: np.ndarray) -> np.ndarray:
    inputs = np.ascontiguousarray(inputs, np.uint64)
    fn(seed, offset, inputs.ctypes.data, inputs.size, out.ctypes.data)
    return out


@pytest.mark.parametrize("counter,key,want", KAT)
def test_c_known_answers(clib, counter, key, want):
    seed, sub, offset = as_nvfuser_arguments(counter, key)
    got = run_c(clib.philox_n, seed, offset, np.array([sub]), np.zeros(4, np.uint32))
    assert got.tolist() == list(want)


# seeds and offsets with both words set; indices past 2**32 and near the top
STREAMS = [(0, 0), (1234, 7), (2**63 + 12345, 2**40 + 3), (2**64 - 1, 2**64 - 1)]
INDICES = np.concatenate(
    [np.arange(3000), 2**32 - 2 + np.arange(8), 2**62 + np.arange(8), [2**63 - 1]]
).astype(np.uint64)


@pytest.mark.parametrize("seed,offset", STREAMS)
def test_c_equals_numpy_bit_for_bit(clib, seed, offset):
    n = INDICES.size
    f32 = run_c(clib.uniformf_n, seed, offset, INDICES, np.zeros(n, np.float32))
    f64 = run_c(clib.uniform_n, seed, offset, INDICES, np.zeros(n, np.float64))
    index = INDICES.astype(np.int64)
    assert f32.tobytes() == uniform(seed, offset, index, np.float32).tobytes()
    assert f64.tobytes() == uniform(seed, offset, index, np.float64).tobytes()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_the_generator_for_the_device(tmp_path: Path):
    kernel = r"""
extern "C" __global__ void draw(float* out, double* out64, unsigned long long n) {
  const unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { out[i] = fl_uniformf(42, 7, i); out64[i] = fl_uniform(42, 7, i); }
}
"""
    (tmp_path / "rng.cu").write_text(C_SOURCE + kernel)
    cmd = ["nvcc", "-ptx", "-o", str(tmp_path / "rng.ptx"), str(tmp_path / "rng.cu")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "rng.ptx").read_text().count(".entry") == 1


def test_c_maps_words_to_uniforms_as_numpy_ends_included(clib):
    edges = [0, 1, 0x001FFFFF, 0x7FFFFFFF, 0xFFF00000, 0xFFFFFF7F, 0xFFFFFF80, 0xFFFFFFFF]
    words = np.random.default_rng(3).integers(0, 2**32, (2, 4000), dtype=np.uint64)
    x = np.concatenate([edges * 8, words[0]]).astype(np.uint32)
    y = np.concatenate([np.repeat(edges, 8), words[1]]).astype(np.uint32)
    f32, f64 = np.zeros(x.size, np.float32), np.zeros(x.size, np.float64)
    clib.bits_n(x.ctypes.data, y.ctypes.data, x.size, f32.ctypes.data, f64.ctypes.data)
    assert f32.tobytes() == uniform_from_bits(x, None, np.float32).tobytes()
    assert f64.tobytes() == uniform_from_bits(x, y, np.float64).tobytes()
    assert (f32 == 0).any() and (f64 == 0).any()  # the top words reach the 1 -> 0 mapping


@pytest.mark.parametrize("order", ["ascending", "shuffled", "descending", "window"])
def test_c_memo_draws_the_same_numbers_in_any_order(clib, order):
    """The memo's window of FL_MEMO_GROUPS philox calls (four neighbours each, two in
    float64), made at once from the subsequence asked for, kept across elements and
    remade when a subsequence falls outside it or the seed or offset changes: the
    numbers of fl_uniformf."""
    index = np.concatenate([INDICES, INDICES[::7]])  # repeats, far apart
    if order == "window":  # around the window's edges: 16 groups of 4 from the first asked
        base = np.random.default_rng(6).integers(0, 2**40, 300, dtype=np.int64)
        steps = np.array([0, 1, 3, 4, 60, 63, 64, 65, -1, -4, 127, 128, 2, 70, -70])
        index = np.maximum(base[:, None] + steps[None, :], 0).reshape(-1)
    elif order == "shuffled":
        index = np.random.default_rng(5).permutation(index)
    elif order == "descending":
        index = index[::-1]
    index = np.ascontiguousarray(index, np.uint64)
    # the stream changes every 1000 elements: a kept call of another stream is not reused
    which = (np.arange(index.size) // 1000) % len(STREAMS)
    seeds = np.array([STREAMS[w][0] for w in which], np.uint64)
    offsets = np.array([STREAMS[w][1] for w in which], np.uint64)
    n = index.size
    f32, f64 = np.zeros(n, np.float32), np.zeros(n, np.float64)
    args = (seeds.ctypes.data, offsets.ctypes.data, index.ctypes.data, n)
    clib.uniformf_memo_n(*args, f32.ctypes.data)
    clib.uniform_memo_n(*args, f64.ctypes.data)
    for w, (seed, offset) in enumerate(STREAMS):
        at = which == w
        i = index[at].astype(np.int64)
        assert f32[at].tobytes() == uniform(seed, offset, i, np.float32).tobytes()
        assert f64[at].tobytes() == uniform(seed, offset, i, np.float64).tobytes()
