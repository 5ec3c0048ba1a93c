"""bfloat16 GEMMs on Intel AMX tiles: a library kernel's linear or matmul, opted into.

A library kernel (kernel/library.py) computes a linear or matmul of bfloat16 operands
in float32: by default numpy's BLAS on float32 copies of them (`gemm="blas"`, the same
calls on every compute path, so compiled and interpreted runs are bit-identical).
`FusionExecutor(..., gemm="amx")` computes them instead with AMX's TDPBF16PS, which
multiplies bfloat16 tiles straight into float32 accumulators, as XLA's CPU backend
does for JAX: about 4x numpy's float32 GEMM on one core of this machine (a device's
1024 x 512 x 256 product with its store to bfloat16: 0.47 ms, against 2.0 ms for
numpy's GEMM of the float32 copies alone). What it changes, and why it is opt-in:

- the sum's order and rounding inside a tile are the hardware's own and documented
  by no model: on a Sapphire Rapids core it matched neither a sequential float32 sum
  (either order of each pair), nor pairs summed first, nor an exact sum rounded once,
  nor a tree (about 170 of 256 elements differ from each). So no numpy path can give
  its bits: an AMX run is not bit-identical to a "blas" or an interpreted one, and is
  checked against the float reference by the rounding bounds (a contraction's
  sqrt(k) u |a| @ |b|; AMX's error was 0.02-0.14 of that sigma, BLAS's 0.01-0.20,
  tests/test_amx.py), and against the unsharded run on the same path (each element is
  a function of its row of a and column of b alone, whatever the block of rows or
  columns around it, so a device's columns are the whole product's bits);
- AMX reads a subnormal bfloat16 (below 2**-126) as zero and flushes a subnormal
  float32 result to zero (tests/test_amx.py): an error of at most 2**-126 times the
  other operand per term, or 2**-126 per sum, which the bounds leave out (a run it
  matters for fails validation: never a silent difference);
- it needs an x86-64 CPU with amx_tile and amx_bf16 (Sapphire Rapids and later),
  Linux's permission for the tile registers (arch_prctl, asked once per process) and
  the compiled compute path; without them `gemm="amx"` is an ExecutionError that says
  which is missing.

Each device's product is one call: b is packed into AMX's pairs of k, zero-padded to
whole tiles; a's tiles are read where a lies when k is whole tiles (else from a
zero-padded copy, as are the rows of a last partial block of 32); each 32 x 32 block
of output is accumulated over k in four tiles, then the bias added and the block
stored in the output's dtype (the float32 sum plus the bias, rounded to bfloat16 as
any store is: the blas path's epilogue on that sum). Several threads call it at once,
each with its own tile configuration and buffers.
"""

from __future__ import annotations

import ctypes
import platform
import threading
from pathlib import Path

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.types import DType
from fuserlite.kernel.cpu import PRELUDE

GEMMS = ("blas", "amx")
BF16 = DType.bfloat16.numpy
AMX_SYMBOLS = ("fl_amx_enable", "fl_amx_gemm")
# After kernel.cpu's PRELUDE: its __float2bfloat16, the rounding every store makes.
AMX_PRELUDE = (
    PRELUDE
    + r"""
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
"""
)
AMX_SOURCES = {
    "fl_amx_enable": r"""
/* The tile registers are off until the process asks Linux for them (once). */
extern "C" int fl_amx_enable(void) {
  return (int)syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */);
}
""",
    "fl_amx_gemm": r"""
struct fl_tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

static inline long long fl_round_up(long long x) { return (x + 31) / 32 * 32; }

/* C[i, j] = sum over kk of A[i, kk] * B(kk, j), accumulated in float from bfloat16 bits,
   plus bias[j] where bias is given (float32), stored as float32 or (out_bf16) rounded to
   bfloat16 as a store of the float value is (kernel/cpu.py's __float2bfloat16): C's row
   stride ldc elements. A is row-major (row stride lda); B(kk, j) lies at B[kk * bk + j * bn]
   ([k, n]: bk = n, bn = 1; a linear's weight [n, k]: bk = 1, bn = k). Returns 0, or 1
   where a buffer could not be allocated (nothing computed). */
extern "C" __attribute__((target("amx-tile,amx-bf16")))
int fl_amx_gemm(const uint16_t* A, long long lda, const uint16_t* B, long long bk,
                long long bn, const float* bias, void* C, long long ldc, int out_bf16,
                long long m, long long n, long long k) {
  const long long np_ = fl_round_up(n), kp = fl_round_up(k);
  /* A's tiles are read where A lies when its rows are whole tiles of k (kp == k); the
     rows of a last, partial block of 32 (or every row, where k is not) from a copy
     zero-padded to kp. */
  const int direct = kp == k;
  const long long copied = direct ? 32 : fl_round_up(m);
  uint16_t* pa = (uint16_t*)aligned_alloc(64, copied * kp * 2);
  uint16_t* pb = (uint16_t*)aligned_alloc(64, kp * np_ * 2);
  float* pc = (float*)aligned_alloc(64, 32 * np_ * 4);
  if (!pa || !pb || !pc) { free(pa); free(pb); free(pc); return 1; }
  const long long tail = m / 32 * 32; /* the first row of a partial block */
  for (long long i = 0; i < copied; ++i) {
    const long long row = direct ? tail + i : i;
    uint16_t* to = pa + i * kp;
    if (row < m) {
      memcpy(to, A + row * lda, k * 2);
      memset(to + k, 0, (kp - k) * 2);
    } else {
      memset(to, 0, kp * 2);
    }
  }
  /* B in pairs of k (the tiles' layout): B(kk, j) at pb[(kk / 2) * 2 np + 2 j + kk % 2] */
  memset(pb, 0, kp * np_ * 2);
  if (bk == 1) { /* a weight [n, k]: along its rows, a pair of k at a time */
    for (long long j = 0; j < n; ++j) {
      const uint16_t* b = B + j * bn;
      for (long long kk = 0; kk < k; ++kk) pb[(kk / 2) * 2 * np_ + 2 * j + (kk % 2)] = b[kk];
    }
  } else {
    for (long long kk = 0; kk < k; ++kk) {
      uint16_t* row = pb + (kk / 2) * 2 * np_ + (kk % 2);
      const uint16_t* b = B + kk * bk;
      for (long long j = 0; j < n; ++j) row[2 * j] = b[j * bn];
    }
  }
  fl_tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
  _tile_loadconfig(&cfg);
  const long long sb = np_ * 4, sc = np_ * 4; /* bytes from row to row */
  for (long long i0 = 0; i0 < m; i0 += 32) {
    const int from_a = direct && i0 < tail;
    const uint16_t* a = from_a ? A + i0 * lda : direct ? pa : pa + i0 * kp;
    const long long sa = (from_a ? lda : kp) * 2;
    for (long long j0 = 0; j0 < np_; j0 += 32) {
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (long long k0 = 0; k0 < kp; k0 += 32) {
        _tile_loadd(4, a + k0, sa);
        _tile_loadd(5, (const char*)(a + k0) + 16 * sa, sa);
        _tile_loadd(6, pb + (k0 / 2) * 2 * np_ + 2 * j0, sb);
        _tile_loadd(7, pb + (k0 / 2) * 2 * np_ + 2 * (j0 + 16), sb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      /* the 32 x 32 block into rows [32, np_] of pc at column j0 */
      _tile_stored(0, pc + j0, sc);
      _tile_stored(1, pc + j0 + 16, sc);
      _tile_stored(2, pc + 16 * np_ + j0, sc);
      _tile_stored(3, pc + 16 * np_ + j0 + 16, sc);
    }
    for (long long i = i0; i < i0 + 32 && i < m; ++i) {
      const float* from = pc + (i - i0) * np_;
      if (out_bf16) {
        uint16_t* to = (uint16_t*)C + i * ldc;
        if (bias) for (long long j = 0; j < n; ++j) to[j] = __float2bfloat16(from[j] + bias[j]).bits;
        else for (long long j = 0; j < n; ++j) to[j] = __float2bfloat16(from[j]).bits;
      } else {
        float* to = (float*)C + i * ldc;
        if (bias) for (long long j = 0; j < n; ++j) to[j] = from[j] + bias[j];
        else memcpy(to, from, n * 4);
      }
    }
  }
  _tile_release();
  free(pa); free(pb); free(pc);
  return 0;
}
""",
}


def amx_missing() -> str | None:
    """Why this CPU cannot run AMX's bfloat16 tiles (None where it can): an x86-64 one
    whose flags (/proc/cpuinfo) name amx_tile and amx_bf16."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the CPU is {platform.machine()}, not x86-64"
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "/proc/cpuinfo cannot be read to find the CPU's AMX flags"
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])  # fmt: skip
    absent = [f for f in ("amx_tile", "amx_bf16") if f not in flags]
    return (
        f"the CPU has no {' or '.join(absent)} (AMX: Sapphire Rapids and later)" if absent else None
    )


def check_gemm(gemm: object, compute: str, who: str) -> str:
    """`gemm` checked: one of GEMMS; "amx" only on the compiled path of a CPU with AMX."""
    if not isinstance(gemm, str) or gemm not in GEMMS:
        raise ExecutionError(
            f"{who}: gemm must be one of {', '.join(map(repr, GEMMS))}, got {gemm!r}"
        )
    if gemm == "amx":
        if compute != "compiled":
            raise ExecutionError(
                f"{who}: gemm='amx' runs on the compiled compute path (a C++ compiler), "
                f"not compute={compute!r}"
            )
        why = amx_missing()
        if why is not None:
            raise ExecutionError(f"{who}: gemm='amx' cannot run here: {why}; use gemm='blas'")
    return gemm


_LOADING = threading.Lock()


class AmxGemm:
    """fl_amx_gemm, built by a KernelCompiler at the first product and loaded once."""

    def __init__(self, compiler) -> None:
        self.compiler = compiler
        self._function = None

    def _load(self):
        with _LOADING:
            if self._function is not None:
                return self._function
            loaded = self.compiler.functions(AMX_PRELUDE, AMX_SOURCES)
            enable = loaded["fl_amx_enable"]
            enable.restype = ctypes.c_int
            if enable() != 0:
                raise ExecutionError(
                    "gemm='amx': Linux refused the process AMX's tile registers "
                    "(arch_prctl ARCH_REQ_XCOMP_PERM); use gemm='blas'"
                )
            function = loaded["fl_amx_gemm"]
            pointer, integer = ctypes.c_void_p, ctypes.c_longlong
            function.argtypes = [pointer, integer, pointer, integer, integer, pointer, pointer]
            function.argtypes += [integer, ctypes.c_int, integer, integer, integer]
            function.restype = ctypes.c_int
            self._function = function
            return function

    def __call__(
        self,
        a: np.ndarray,
        b: np.ndarray,
        out: np.ndarray,
        weight: bool,
        bias: np.ndarray | None = None,
    ) -> None:
        """out[m, n] = a[m, k] @ b (+ bias[n]), a and b bfloat16 with rows of unit stride:
        b is [k, n], or a linear's weight [n, k] (`weight`: b^T); the float32 sum plus the
        float32 bias stored into `out` (rows of unit stride) in its dtype, float32 or
        bfloat16 (rounded as a store is)."""
        function = self._function or self._load()
        m, k = a.shape
        n = b.shape[0] if weight else b.shape[1]
        bf16 = out.dtype == BF16
        if out.dtype != np.float32 and not bf16:
            raise ExecutionError(f"gemm='amx' stores float32 or bfloat16, not {out.dtype}")
        if bias is not None:
            bias = np.ascontiguousarray(bias, np.float32)
        if m == 0 or n == 0:
            return
        if k == 0:  # no tiles to sum: the bias alone (or 0), stored in out's dtype
            out[...] = np.zeros((m, n), np.float32) + (0 if bias is None else bias)
            return
        item = a.itemsize
        bk, bn = (1, b.strides[0] // item) if weight else (b.strides[0] // item, 1)
        failed = function(
            a.ctypes.data, a.strides[0] // item, b.ctypes.data, bk, bn,
            None if bias is None else bias.ctypes.data, out.ctypes.data,
            out.strides[0] // out.itemsize, bf16, m, n, k,
        )  # fmt: skip
        if failed:
            raise ExecutionError(f"gemm='amx': no memory for a {m} x {k} x {n} product's tiles")


__all__ = ["AMX_SOURCES", "GEMMS", "AmxGemm", "amx_missing", "check_gemm"]
