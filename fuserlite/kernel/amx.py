"""bfloat16 GEMMs on Intel AMX tiles: a library kernel's linear or matmul, opted into.

A library kernel (kernel/library.py) computes a linear or matmul of bfloat16 operands
in float32: by default numpy's BLAS on float32 copies of them (`gemm="blas"`, the same
calls on every compute path, so compiled and interpreted runs are bit-identical).
`FusionExecutor(..., gemm="amx")` computes them instead with AMX's TDPBF16PS, which
multiplies bfloat16 tiles straight into float32 accumulators: 3.5x numpy's float32
GEMM on one core of this machine (a device's 1024 x 512 x 256 product, 0.58 vs 2.03
ms), as XLA's CPU backend does for JAX. What it changes, and why it is opt-in:

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
  float32 result to zero: an error of at most 2**-126 times the other operand per
  term, which the bounds leave out (a run it matters for fails validation: never a
  silent difference);
- it needs an x86-64 CPU with amx_tile and amx_bf16 (Sapphire Rapids and later),
  Linux's permission for the tile registers (arch_prctl, asked once per process) and
  the compiled compute path; without them `gemm="amx"` is an ExecutionError that says
  which is missing.

Each device's product is one call: its operands are packed into zero-padded tiles (a
in rows of 32 k, b in AMX's pairs of k), its 32 x 32 blocks of output accumulated over
k in four tiles, then copied out; several threads call it at once (each its own tile
configuration and buffers).
"""

from __future__ import annotations

import ctypes
import platform
import threading
from pathlib import Path

import numpy as np

from fuserlite.ir.errors import ExecutionError

GEMMS = ("blas", "amx")
AMX_SYMBOLS = ("fl_amx_enable", "fl_amx_gemm")
AMX_PRELUDE = r"""
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
"""
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

/* C[i, j] (float, row stride ldc) = sum over kk of A[i, kk] * B(kk, j) in float from
   bfloat16 bits: A row-major (row stride lda); B(kk, j) at B[kk * bk + j * bn] ([k, n]:
   bk = n, bn = 1; a linear's weight [n, k]: bk = 1, bn = k). Returns 0, or 1 where a
   buffer could not be allocated (nothing computed). */
extern "C" __attribute__((target("amx-tile,amx-bf16")))
int fl_amx_gemm(const uint16_t* A, long long lda, const uint16_t* B, long long bk,
                long long bn, float* C, long long ldc, long long m, long long n, long long k) {
  const long long mp = fl_round_up(m), np_ = fl_round_up(n), kp = fl_round_up(k);
  uint16_t* pa = (uint16_t*)aligned_alloc(64, mp * kp * 2);
  uint16_t* pb = (uint16_t*)aligned_alloc(64, kp * np_ * 2);
  float* pc = (float*)aligned_alloc(64, 32 * np_ * 4);
  if (!pa || !pb || !pc) { free(pa); free(pb); free(pc); return 1; }
  /* a, zero-padded to [mp, kp] */
  for (long long i = 0; i < mp; ++i) {
    uint16_t* row = pa + i * kp;
    if (i < m) {
      memcpy(row, A + i * lda, k * 2);
      memset(row + k, 0, (kp - k) * 2);
    } else {
      memset(row, 0, kp * 2);
    }
  }
  /* b in pairs of k (the tiles' layout): b(kk, j) at pb[(kk / 2) * 2 np + 2 j + kk % 2] */
  memset(pb, 0, kp * np_ * 2);
  for (long long kk = 0; kk < k; ++kk) {
    uint16_t* row = pb + (kk / 2) * 2 * np_ + (kk % 2);
    const uint16_t* b = B + kk * bk;
    for (long long j = 0; j < n; ++j) row[2 * j] = b[j * bn];
  }
  fl_tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
  _tile_loadconfig(&cfg);
  const long long sa = kp * 2, sb = np_ * 4, sc = np_ * 4; /* bytes from row to row */
  for (long long i0 = 0; i0 < mp; i0 += 32) {
    for (long long j0 = 0; j0 < np_; j0 += 32) {
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (long long k0 = 0; k0 < kp; k0 += 32) {
        _tile_loadd(4, pa + i0 * kp + k0, sa);
        _tile_loadd(5, pa + (i0 + 16) * kp + k0, sa);
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
    for (long long i = i0; i < i0 + 32 && i < m; ++i)
      memcpy(C + i * ldc, pc + (i - i0) * np_, n * 4);
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
            function.argtypes = (
                [ctypes.c_void_p, ctypes.c_longlong]
                + [ctypes.c_void_p]
                + [ctypes.c_longlong] * 2
                + [ctypes.c_void_p]
                + [ctypes.c_longlong] * 4
            )
            function.restype = ctypes.c_int
            self._function = function
            return function

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray, weight: bool) -> None:
        """out[m, n] (float32, rows of unit stride) = a[m, k] @ b, a and b bfloat16 with
        rows of unit stride: b is [k, n], or a linear's weight [n, k] (`weight`: b^T)."""
        function = self._function or self._load()
        m, k = a.shape
        n = b.shape[0] if weight else b.shape[1]
        if m == 0 or n == 0:
            return
        if k == 0:
            out[...] = 0
            return
        item = a.itemsize
        bk, bn = (1, b.strides[0] // item) if weight else (b.strides[0] // item, 1)
        failed = function(a.ctypes.data, a.strides[0] // item, b.ctypes.data, bk, bn,
                          out.ctypes.data, out.strides[0] // out.itemsize, m, n, k)  # fmt: skip
        if failed:
            raise ExecutionError(f"gemm='amx': no memory for a {m} x {k} x {n} product's tiles")


__all__ = ["AMX_SOURCES", "GEMMS", "AmxGemm", "amx_missing", "check_gemm"]
