"""bfloat16 GEMMs on Intel AMX tiles: a library kernel's linear or matmul, wherever it can run.

A library kernel (kernel/library.py) computes a linear or matmul of bfloat16 operands
in float32. `FusionExecutor(..., gemm="amx")` computes it with AMX's TDPBF16PS, which
multiplies bfloat16 tiles straight into float32 accumulators, as XLA's CPU backend
does for JAX: about 4x numpy's float32 GEMM on one core of this machine (a device's
1024 x 512 x 256 product with its store to bfloat16: 0.47 ms, against 2.0 ms for
numpy's GEMM of the float32 copies alone). `gemm="blas"` is numpy's BLAS on float32
copies; `gemm="auto"` (the default) is "amx" where this process can run it, else
"blas" (check_gemm). The compiled and the interpreted path call the same function, so
they are bit-identical with either gemm. What AMX changes:

- the sum's order and rounding inside a tile are the hardware's own and documented
  by no model: on a Sapphire Rapids core it matched neither a sequential float32 sum
  (either order of each pair), nor pairs summed first, nor an exact sum rounded once,
  nor a tree (about 170 of 256 elements differ from each). So no numpy code can give
  its bits (compute="numpy", op by op, keeps numpy's GEMM), and a run is checked
  against the float reference by the rounding bounds (a contraction's
  sqrt(k) u |a| @ |b|; AMX's error was 0.02-0.14 of that sigma, BLAS's 0.01-0.20,
  tests/test_amx.py), and against the unsharded run on the same path (each element is
  a function of its row of a and column of b alone, whatever the block of rows or
  columns around it, so a device's columns are the whole product's bits);
- AMX reads a subnormal bfloat16 (below 2**-126) as zero and flushes a subnormal
  float32 sum to zero (tests/test_amx.py): an error of at most 2**-126 times the
  other operand per term, or 2**-126 per sum, which the bounds allow for
  (reference/rounding.py's _flushed);
- it needs an x86-64 CPU with amx_tile and amx_bf16 (Sapphire Rapids and later),
  Linux's permission for the tile registers (arch_prctl, asked by amx_missing) and a
  C++ compiler to build it; without them "auto" is "blas" and "amx" an ExecutionError
  that says which is missing.

A launch's devices' products are one call, a product each (a shared operand given once,
as a stride-0 axis, its b packed once): b is packed into AMX's pairs of k, zero-padded to
whole tiles; a's tiles are read where a lies when k is whole tiles (else from a
zero-padded copy, as are the rows of a last partial block of 32); each 32 x 32 block
of output is accumulated over k in four tiles, then the bias added and the block
stored in the output's dtype (the float32 sum plus the bias, rounded to bfloat16 as
any store is: the blas path's epilogue on that sum). Several threads call it at once,
each with its own tile configuration and buffers.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from pathlib import Path

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.types import DType
from fuserlite.kernel.compile import find_compiler
from fuserlite.kernel.cpu import PRELUDE

GEMMS = ("auto", "blas", "amx")
SYS_ARCH_PRCTL = 158  # x86-64 Linux
ARCH_REQ_XCOMP_PERM = 0x1023
XFEATURE_XTILEDATA = 18
BF16 = DType.bfloat16.numpy
# After kernel.cpu's PRELUDE: its __float2bfloat16, the rounding every store makes.
AMX_PRELUDE = (
    PRELUDE
    + r"""
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
"""
)
AMX_SOURCES = {
    "fl_amx_gemm": r"""
struct fl_tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

static inline long long fl_round_up(long long x) { return (x + 31) / 32 * 32; }

/* B(kk, j) at B[kk * bk + j * bn] in pairs of k (the tiles' layout), zero-padded:
   B(kk, j) at pb[(kk / 2) * 2 np + 2 j + kk % 2]. */
static void fl_pack_b(const uint16_t* B, long long bk, long long bn, long long n,
                      long long k, long long np_, long long kp, uint16_t* pb) {
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
}

/* For r in [0, rows): C_r[i, j] = sum over kk of A_r[i, kk] * B_r(kk, j), accumulated in
   float from bfloat16 bits, plus bias_r[j] where bias is given (float32), stored as
   float32 or (out_bf16) rounded to bfloat16 as a store of the float value is
   (kernel/cpu.py's __float2bfloat16). X_r is X + r * sx (elements; 0: one X for every
   r, a b packed once). A_r is row-major (row stride lda), C_r too (ldc); B_r(kk, j) lies
   at B_r[kk * bk + j * bn] ([k, n]: bk = n, bn = 1; a linear's weight [n, k]: bk = 1,
   bn = k). Returns 0, or 1 where a buffer could not be allocated (nothing computed). */
extern "C" __attribute__((target("amx-tile,amx-bf16")))
int fl_amx_gemm(long long rows, const uint16_t* A, long long sa, long long lda,
                const uint16_t* B, long long sb, long long bk, long long bn,
                const float* bias, long long sbias, void* C, long long sc, long long ldc,
                int out_bf16, long long m, long long n, long long k) {
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
  fl_tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
  _tile_loadconfig(&cfg);
  const long long tail = m / 32 * 32; /* the first row of a partial block */
  const long long sbp = np_ * 4, scp = np_ * 4; /* bytes from row to row of pb, pc */
  for (long long r = 0; r < rows; ++r) {
    const uint16_t* Ar = A + r * sa;
    if (r == 0 || sb != 0) fl_pack_b(B + r * sb, bk, bn, n, k, np_, kp, pb);
    for (long long i = 0; i < copied; ++i) {
      const long long row = direct ? tail + i : i;
      uint16_t* to = pa + i * kp;
      if (row < m) {
        memcpy(to, Ar + row * lda, k * 2);
        memset(to + k, 0, (kp - k) * 2);
      } else {
        memset(to, 0, kp * 2);
      }
    }
    const float* biasr = bias ? bias + r * sbias : 0;
    for (long long i0 = 0; i0 < m; i0 += 32) {
      const int from_a = direct && i0 < tail;
      const uint16_t* a = from_a ? Ar + i0 * lda : direct ? pa : pa + i0 * kp;
      const long long sap = (from_a ? lda : kp) * 2;
      for (long long j0 = 0; j0 < np_; j0 += 32) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (long long k0 = 0; k0 < kp; k0 += 32) {
          _tile_loadd(4, a + k0, sap);
          _tile_loadd(5, (const char*)(a + k0) + 16 * sap, sap);
          _tile_loadd(6, pb + (k0 / 2) * 2 * np_ + 2 * j0, sbp);
          _tile_loadd(7, pb + (k0 / 2) * 2 * np_ + 2 * (j0 + 16), sbp);
          _tile_dpbf16ps(0, 4, 6);
          _tile_dpbf16ps(1, 4, 7);
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
        /* the 32 x 32 block into rows [32, np_] of pc at column j0 */
        _tile_stored(0, pc + j0, scp);
        _tile_stored(1, pc + j0 + 16, scp);
        _tile_stored(2, pc + 16 * np_ + j0, scp);
        _tile_stored(3, pc + 16 * np_ + j0 + 16, scp);
      }
      for (long long i = i0; i < i0 + 32 && i < m; ++i) {
        const float* from = pc + (i - i0) * np_;
        if (out_bf16) {
          uint16_t* to = (uint16_t*)C + r * sc + i * ldc;
          if (biasr) for (long long j = 0; j < n; ++j) to[j] = __float2bfloat16(from[j] + biasr[j]).bits;
          else for (long long j = 0; j < n; ++j) to[j] = __float2bfloat16(from[j]).bits;
        } else {
          float* to = (float*)C + r * sc + i * ldc;
          if (biasr) for (long long j = 0; j < n; ++j) to[j] = from[j] + biasr[j];
          else memcpy(to, from, n * 4);
        }
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
    """Why this process cannot run AMX's bfloat16 tiles (None where it can): an x86-64
    CPU whose flags (/proc/cpuinfo) name amx_tile and amx_bf16, on a Linux that grants
    the process the tile registers (arch_prctl, asked here: granting is idempotent)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the CPU is {platform.machine()}, not x86-64"
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "/proc/cpuinfo cannot be read to find the CPU's AMX flags"
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])  # fmt: skip
    absent = [f for f in ("amx_tile", "amx_bf16") if f not in flags]
    if absent:
        return f"the CPU has no {' or '.join(absent)} (AMX: Sapphire Rapids and later)"
    return _tiles_refused()


def _tiles_refused() -> str | None:
    """Why Linux does not give this process AMX's tile registers, or None where it does."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        granted = libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return "the C library's syscall() cannot be called to ask Linux for the tile registers"
    if granted:
        return None
    return (
        "Linux refused the process AMX's tile registers (arch_prctl ARCH_REQ_XCOMP_PERM: "
        f"{os.strerror(ctypes.get_errno())})"
    )


def check_gemm(gemm: object, compute: str, who: str) -> str:
    """`gemm` checked and resolved to "blas" or "amx": "auto" is "amx" where this process
    can run it (amx_missing) on a compute path with library kernels ("compiled" or
    "interpret") and a C++ compiler to build it, else "blas"; "amx" where it cannot is
    an ExecutionError that says why."""
    if not isinstance(gemm, str) or gemm not in GEMMS:
        raise ExecutionError(
            f"{who}: gemm must be one of {', '.join(map(repr, GEMMS))}, got {gemm!r}"
        )
    if gemm == "blas":
        return gemm
    if compute == "numpy":  # op by op: no library kernels, numpy's GEMM everywhere
        if gemm == "auto":
            return "blas"
        raise ExecutionError(
            f"{who}: gemm='amx' computes library kernels, which compute='numpy' does not "
            "make (it runs every op with numpy); use compute='compiled' or 'interpret'"
        )
    why = amx_missing()
    if why is None and find_compiler() is None:
        why = "no C++ compiler is on the PATH to build its kernel"
    if why is None:
        return "amx"
    if gemm == "auto":
        return "blas"
    raise ExecutionError(f"{who}: gemm='amx' cannot run here: {why}; use gemm='blas'")


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
            refused = _tiles_refused()  # the tile registers are off until a process asks
            if refused is not None:
                raise ExecutionError(f"gemm='amx': {refused}; use gemm='blas'")
            function = self.compiler.functions(AMX_PRELUDE, AMX_SOURCES)["fl_amx_gemm"]
            p, i = ctypes.c_void_p, ctypes.c_longlong
            function.argtypes = [i, p, i, i, p, i, i, i, p, i, p, i, i, ctypes.c_int, i, i, i]
            function.restype = ctypes.c_int
            self._function = function
            return function

    def rows(
        self,
        a: np.ndarray,
        b: np.ndarray,
        out: np.ndarray,
        weight: bool,
        bias: np.ndarray | None = None,
    ) -> None:
        """out[r] = a[r] @ b[r] (+ bias[r]) for each r of out's [rows, m, n], in one call:
        a [rows, m, k] and b ([rows, k, n], or [rows, n, k] for a `weight`) bfloat16, bias
        [rows, n] float32 or None; a leading axis of stride 0 (np.broadcast_to) is one
        array every product reads (a b of it packed once). The float32 sum plus the bias
        is stored into `out` in its dtype, float32 or bfloat16 (rounded as a store is)."""
        function = self._function or self._load()
        rows, m, n = out.shape
        k = a.shape[-1]
        bf16 = out.dtype == BF16
        if out.dtype != np.float32 and not bf16:
            raise ExecutionError(f"gemm='amx' stores float32 or bfloat16, not {out.dtype}")
        if a.dtype != BF16 or b.dtype != BF16:
            raise ExecutionError(f"gemm='amx' multiplies bfloat16, not {a.dtype} by {b.dtype}")
        want_b = (rows, n, k) if weight else (rows, k, n)
        if (
            a.shape != (rows, m, k)
            or b.shape != want_b
            or (bias is not None and bias.shape != (rows, n))
        ):
            given = [list(a.shape), list(b.shape), None if bias is None else list(bias.shape)]
            raise ExecutionError(
                f"gemm='amx': a, b and bias of shapes {given} do not make {list(out.shape)} "
                f"(a [{rows}, {m}, {k}], b {list(want_b)}, bias [{rows}, {n}])"
            )
        if rows == 0 or m == 0 or n == 0:
            return
        if bias is not None:
            bias = _unit_rows(bias.astype(np.float32, copy=False))
        if k == 0:  # no tiles to sum: the bias alone (or 0), stored in out's dtype
            out[...] = np.zeros(out.shape, np.float32) + (0 if bias is None else bias[:, None])
            return
        a, b = _unit_rows(a), _unit_rows(b)
        into = out if _strides_ok(out) else np.empty(out.shape, out.dtype)
        (sa, lda), (sb, sbk), (sc, ldc) = (_steps(x) for x in (a, b, into))
        bk, bn = (1, sbk) if weight else (sbk, 1)
        sbias = 0 if bias is None else _steps(bias[:, None])[0]
        failed = function(
            rows, a.ctypes.data, sa, lda, b.ctypes.data, sb, bk, bn,
            None if bias is None else bias.ctypes.data, sbias, into.ctypes.data, sc, ldc,
            bf16, m, n, k,
        )  # fmt: skip
        if failed:
            raise ExecutionError(f"gemm='amx': no memory for a {m} x {k} x {n} product's tiles")
        if into is not out:
            out[...] = into


def _strides_ok(x: np.ndarray) -> bool:
    """Unit stride along the last axis and whole elements between rows and matrices."""
    item = x.itemsize
    return x.strides[-1] == item and all(s % item == 0 for s in x.strides[:-1])


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """`x`, or a C-contiguous copy where _strides_ok does not hold."""
    return x if _strides_ok(x) else np.ascontiguousarray(x)


def _steps(x: np.ndarray) -> tuple[int, int]:
    """(elements from one leading row to the next, from one matrix row to the next)."""
    return x.strides[0] // x.itemsize, x.strides[1] // x.itemsize


__all__ = ["AMX_SOURCES", "GEMMS", "AmxGemm", "amx_missing", "check_gemm"]
