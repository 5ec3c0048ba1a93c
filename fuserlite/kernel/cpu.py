"""The CPU target: the CUDA kernel body, wrapped in a C++ function that loops over the grid.

The body is fuserlite.kernel.cuda's `kernel_body`, character for character: the
same loop nest, index expressions and predicates a GPU would run. The wrapper
walks the launch grid, blocks outermost (in parallel with OpenMP when the
compiler has it and the kernel is big enough to pay for the threads: a thread per
PARALLEL_WORK grid points x expressions, at most one per core) and threads inside, and gives the body
`blockIdx` and `threadIdx` as local values:

    extern "C" void fl_1c0ffee(void* const* fl_args) {  // the buffers' addresses
      fl_1c0ffee_grid((const float*)fl_args[0], (float*)fl_args[1]);
    }
    static void fl_1c0ffee_grid(const float* __restrict__ T0, float* __restrict__ T4) {
    #pragma omp parallel for schedule(static)
      for (long long fl_block = 0; fl_block < 8; ++fl_block) {
        const fl_dim3 blockIdx = {fl_block, 0, 0};
        for (long long fl_thread = 0; fl_thread < 128; ++fl_thread) {
          const fl_dim3 threadIdx = {fl_thread, 0, 0};
          ... kernel_body ...

Without a GPU's shared state (no shared memory, no barriers: the kernels are
pointwise), running the threads one after another is the same computation.

A kernel that draws random numbers (rand_like, dropout) draws a block's numbers before
its thread loop (BlockWindows): a first loop over the threads finds the lowest and
highest global index each draw reads, the philox calls between them fill a small local
array, and the thread loop reads that array instead of calling the generator, so it
vectorizes as any pointwise loop (the block's dropout and residual 0.20 -> 0.08 ms a
device, benchmarks/README.md). A block whose indices span more calls than a window holds
draws through the per-block philox memo, element by element, as before; the numbers are
the same either way.

A body too large for one function (thousands of statements: g++'s time grows
faster than a function's size) is compiled as several, called in turn at each
grid point, decided from its size before anything is built
(fuserlite.kernel.cpu_parts); one that cannot be split is KernelTooLarge, and
the executor computes it with the kernel runner.

PRELUDE is what CUDA's headers give the body and C++ lacks, written without any
#include so that one compiler launch stays short: `__half` and `__nv_bfloat16`
as 16-bit storage types whose conversions round exactly as numpy (float16) and
ml_dtypes (bfloat16) do, so a compiled kernel stores the very bits the kernel
runner stores; the bit casts of nvcc's intrinsics; and the math functions for
float and double. Those come from the C library (exp, log and tanh vectorized
through glibc's libmvec where the compiler supports it, FL_VECTOR_MATH; sin, cos
and pow called as they are): none is correctly rounded there nor in numpy, and the
two differ in the last bits.
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import NamedTuple

from fuserlite.ir.expr import Expr
from fuserlite.ir.types import DType, ParallelType
from fuserlite.kernel.cpu_parts import (
    FUNCTION_BYTES,
    KernelTooLarge,
    body_bytes,
    from_address,
    split_body,
    splits,
)
from fuserlite.kernel.cuda import (
    COMPUTE_TYPES,
    Statement,
    kernel_header,
    kernel_params,
    kernel_statements,
    launch_dims,
    loop_nest,
    math_source,
    random_dtypes,
    random_source,
)
from fuserlite.kernel.reduction import cpu_reduction, reduction_of
from fuserlite.numerics.philox import MEMO_GROUPS
from fuserlite.program.program import Kernel
from fuserlite.schedule.grid import GridAxis, kernel_grid

PRELUDE = r"""// fuserlite CPU prelude: what CUDA's headers give a kernel body
struct fl_dim3 { long long x, y, z; };
union fl_reg { float f; double d; int i; long long q; bool b; };  // a value between parts

static inline unsigned int fl_float_bits(float f) { unsigned int u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float fl_bits_float(unsigned int u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline float __uint_as_float(unsigned int u) { return fl_bits_float(u); }
static inline double __longlong_as_double(long long u) { double d; __builtin_memcpy(&d, &u, 8); return d; }

// float16 storage. To half: round to nearest even; a NaN keeps its sign and the top
// 10 bits of its payload (a NaN whose top bits are 0 becomes payload 1), as numpy does.
struct __half { unsigned short bits; };
static inline __half __float2half(float f) {
  const unsigned int u = fl_float_bits(f);
  const unsigned int a = u & 0x7fffffffu;
  const unsigned int payload = (a >> 13) & 0x3ffu;
  const unsigned int nan = 0x7c00u | (payload ? payload : 1u);
  const unsigned int normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // Below 2**-14 (half subnormals and zero): adding 0.5 rounds at 2**-24, half's spacing there.
  const unsigned int tiny = fl_float_bits(fl_bits_float(a) + 0.5f) - 0x3f000000u;
  const unsigned int h = a > 0x7f800000u ? nan
                       : a >= 0x47800000u ? 0x7c00u
                       : a >= 0x38800000u ? normal : tiny;
  return __half{(unsigned short)(((u >> 16) & 0x8000u) | h)};
}
static inline float __half2float(__half h) {
  const unsigned int a = h.bits & 0x7fffu;
  const unsigned int inf_nan = 0x7f800000u | ((a & 0x3ffu) << 13);
  const unsigned int normal = (a << 13) + 0x38000000u;
  const unsigned int tiny = fl_float_bits((float)a * 5.9604644775390625e-08f);  // a * 2**-24, exact
  const unsigned int f = a >= 0x7c00u ? inf_nan : a >= 0x400u ? normal : tiny;
  return fl_bits_float(((unsigned int)(h.bits & 0x8000u) << 16) | f);
}

// bfloat16 storage: the top half of a float, rounded to nearest even; a NaN becomes
// the quiet NaN of its sign, as ml_dtypes does.
struct __nv_bfloat16 { unsigned short bits; };
static inline __nv_bfloat16 __float2bfloat16(float f) {
  const unsigned int u = fl_float_bits(f);
  const unsigned int rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const unsigned int nan = ((u >> 16) & 0x8000u) | 0x7fc0u;
  return __nv_bfloat16{(unsigned short)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
}
static inline float __bfloat162float(__nv_bfloat16 b) { return fl_bits_float((unsigned int)b.bits << 16); }

// double to half or bfloat16 rounded once, as CUDA's __double2half/__double2bfloat16:
// first to float rounded to odd (toward zero, the last bit set if inexact), which
// the rounding to nearest even then cannot double-round (numerics/casts.py).
static inline float fl_to_odd_float(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  if (__builtin_fabs((double)f) > __builtin_fabs(d)) f = __builtin_nextafterf(f, 0.0f);
  return fl_bits_float(fl_float_bits(f) | 1u);
}
static inline __half __double2half(double d) { return __float2half(fl_to_odd_float(d)); }
static inline __nv_bfloat16 __double2bfloat16(double d) { return __float2bfloat16(fl_to_odd_float(d)); }

// A parallel kernel runs on a fixed team: one thread per PARALLEL_WORK of its work, at
// most OpenMP's thread count (the cores, or OMP_NUM_THREADS), whatever the load. (A
// dynamic team, sized by the load average, ran the 1000-op chain on one thread as soon
// as the machine was busy; idle threads sleep, OMP_WAIT_POLICY=PASSIVE, so a busy
// core costs the share it takes, not a spinning barrier.)
#ifdef _OPENMP
extern "C" int omp_get_max_threads(void);
static inline int fl_threads(long long most) {
  const int n = omp_get_max_threads();
  return most < n ? (int)most : n;
}
#endif

#ifdef FL_VECTOR_MATH
#define FL_SIMD __attribute__((simd("notinbranch")))
#else
#define FL_SIMD
#endif
extern "C" {
float expf(float) FL_SIMD;
double exp(double) FL_SIMD;
float logf(float) FL_SIMD;
double log(double) FL_SIMD;
float tanhf(float) FL_SIMD;
double tanh(double) FL_SIMD;
float sinf(float);
double sin(double);
float cosf(float);
double cos(double);
float powf(float, float);
double pow(double, double);
}

// The executor's launch plan (fuserlite.runtime.launch) runs a kernel on every device
// with one call: a row of buffer addresses per device.
extern "C" void fuserlite_launch(void (*kernel)(void* const*), void* const* table, long long rows,
                          long long stride) {
  for (long long r = 0; r < rows; ++r) kernel(table + r * stride);
}
static inline float exp(float x) { return expf(x); }
static inline float log(float x) { return logf(x); }
static inline float tanh(float x) { return tanhf(x); }
static inline float sin(float x) { return sinf(x); }
static inline float cos(float x) { return cosf(x); }
static inline float pow(float x, float y) { return powf(x, y); }
static inline float sqrt(float x) { return __builtin_sqrtf(x); }
static inline double sqrt(double x) { return __builtin_sqrt(x); }
"""

# Grid points x expressions below which one thread runs the kernel: starting threads
# costs microseconds, the kernel fewer.
PARALLEL_WORK = 1 << 17
_NAME = "__FL_KERNEL_NAME__"  # replaced by a hash of the function's text

# OpenMP's threads spin at the end of a parallel region, waiting for the next one
# (libgomp: up to milliseconds), on the cores the numpy and BLAS calls between two
# kernels need; OMP_WAIT_POLICY=PASSIVE makes them sleep. The transformer block's step
# at batch 4, seq 256, hidden 512 took 250 to 380 ms spinning and 175 ms passive
# (2 cores, benchmarks/README.md). libgomp reads it once, when it is loaded.
WAIT_POLICY = "PASSIVE"


def quiet_openmp() -> None:
    """Ask the OpenMP runtime the kernels load for sleeping, not spinning, idle threads
    (OMP_WAIT_POLICY, unless the user set it): call before the first kernel is loaded.
    (Teams are as the kernels ask, fl_threads: OMP_DYNAMIC is false unless the user says.)"""
    os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)


class CpuFunction(NamedTuple):
    """A scheduled kernel's CPU function."""

    # A hash of the kernel's structure (the executor's: fuserlite.kernel.signature) or of
    # its source: equal kernels are one compiled function.
    symbol: str
    source: str
    parts: int  # the functions its body is split into (1: it is not)
    parallel: bool = False  # its blocks run on OpenMP's threads (PARALLEL_WORK)


def _parallel(blocks: int, work: int) -> bool:
    return blocks > 1 and work >= PARALLEL_WORK


def runs_on_openmp(kernel: Kernel) -> bool:
    """Whether the kernel's CPU function runs its blocks on OpenMP's threads (its
    CpuFunction's `parallel`), known without generating it (a warm load generates none)."""
    if reduction_of(kernel) is not None:
        return False
    grid = kernel_grid([e.output for e in kernel.exprs])
    (gx, gy, gz), (bx, by, bz) = launch_dims(grid)
    blocks = gx * gy * gz
    return _parallel(blocks, blocks * bx * by * bz * len(kernel.exprs))


def cpu_function(kernel: Kernel, symbol: str | None = None) -> CpuFunction:
    """The CPU function of a scheduled kernel: the CUDA body in a loop over the grid, in
    one function, or if it is too large for one in parts (fuserlite.kernel.cpu_parts);
    KernelTooLarge if it cannot be split. A scheduled reduction's is its own loop nest
    (fuserlite.kernel.reduction). Named `symbol` (the executor names it by its structure,
    fuserlite.kernel.signature), else by a hash of its text (the same in every
    installation: what `fuserlite codegen` prints)."""
    reduction = reduction_of(kernel)
    if reduction is not None:
        return CpuFunction(*cpu_reduction(kernel, reduction, symbol), 1)
    grid = kernel_grid([e.output for e in kernel.exprs])
    (gx, gy, gz), (bx, by, bz) = launch_dims(grid)
    blocks, threads = gx * gy * gz, bx * by * bz
    params = kernel_params(kernel)
    opening, inner, closing = loop_nest(grid, indent="      ")
    statements = kernel_statements(kernel, grid, inner)
    lines = kernel_header(kernel, _NAME, grid)
    parts = 1
    if not splits(statements):
        # The entry point takes one array of buffer addresses (ctypes calls a function of
        # at most 1024 arguments; a kernel of many outputs has more) and passes them on as
        # the typed, __restrict__ parameters the body is written for.
        lines.append(f"static void {_NAME}_grid({', '.join(params)});")
        lines.append(f'extern "C" void {_NAME}(void* const* fl_args) {{')
        casts = [from_address(p, f"fl_args[{i}]") for i, p in enumerate(params)]
        lines.append(f"  {_NAME}_grid({', '.join(casts)});")
        lines.append("}")
        lines.append(f"static void {_NAME}_grid({', '.join(params)}) {{")
        body = [line for st in statements for line in st.lines]
    else:
        functions, body = split_body(_NAME, statements, params, len(grid), inner)
        lines += functions
        lines.append(f'extern "C" void {_NAME}(void* const* fl_args) {{')
        parts = len(body) - 1  # a call per part, after the slots' declaration
    work = blocks * threads * len(kernel.exprs)
    parallel = _parallel(blocks, work)
    if parallel:
        team = min(blocks, work // PARALLEL_WORK)
        lines.append(f"#pragma omp parallel for schedule(static) num_threads(fl_threads({team}))")
    lines.append(f"  for (long long fl_block = 0; fl_block < {blocks}; ++fl_block) {{")
    lines.append(f"    const fl_dim3 blockIdx = {_dim3('fl_block', gx, gy, gz)};")
    thread_loop = [
        f"    for (long long fl_thread = 0; fl_thread < {threads}; ++fl_thread) {{",
        f"      const fl_dim3 threadIdx = {_dim3('fl_thread', bx, by, bz)};",
    ]
    windows = None
    if parts == 1 and random_dtypes([kernel]):
        points = threads * math.prod(g.extent for g in grid if g.parallel_type not in _HARDWARE)
        windows = block_windows(kernel, grid, inner, statements, points)
        if windows is None:
            lines += MEMO_DECLARATION
    if windows is None:
        lines += thread_loop + opening + body + closing + ["    }"]
    else:  # the block's draws from windows where they fit, else through the memo
        fast = thread_loop + opening + windows.body + closing + ["    }"]
        slow = MEMO_DECLARATION + thread_loop + opening + body + closing + ["    }"]
        lines += windows.ranges(thread_loop, opening, closing)
        lines += windows.fast(["  " + line for line in fast])
        lines += ["  " + line for line in slow] + ["    }"]
    lines += ["  }", "}"]
    text = "\n".join(lines) + "\n"
    symbol = symbol or "fl_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    return CpuFunction(symbol, text.replace(_NAME, symbol), parts, parallel)


# The grid positions that are the block's and thread's indices, not loops
_HARDWARE = {
    ParallelType.BIDx,
    ParallelType.BIDy,
    ParallelType.BIDz,
    ParallelType.TIDx,
    ParallelType.TIDy,
    ParallelType.TIDz,
}
# A block window holds at most this many philox calls' numbers (a float window 8 KiB)
WINDOW_CALLS = 512


def _per_call(dtype: DType) -> int:
    """The numbers one philox call gives: four, two of float64 (numerics/philox.py)."""
    return 2 if dtype == DType.float64 else 4


_WINDOW_FILL = {
    DType.float32: "fl_window_float",
    DType.float64: "fl_window_double",
    DType.float16: "fl_window_half",
    DType.bfloat16: "fl_window_bfloat16",
}


class BlockWindows:
    """A kernel's draws through block windows (`block_windows`): window k holds the
    numbers of one (seed, offset, dtype) for the philox calls from the block's lowest
    index to its highest, drawn before the thread loop (a loop of independent calls that
    vectorizes), and the thread loop reads them as an array: no lookup, no branch, so the
    loop vectorizes too. Where a block's indices span more calls than a window holds, the
    block draws through the memo as before: the same numbers either way."""

    def __init__(self) -> None:
        self.keys: dict[tuple[int, int, DType], int] = {}  # -> the window's number
        self.indices: list[list[str]] = []  # the C text of each window's draws' indices
        self.body: list[str] = []  # the thread loop's statements, drawing from the windows
        self.calls: int = 0  # a window's capacity in philox calls
        self.indent: str = ""  # of the statements inside the loop nest

    def draw(self, expr: Expr, index: str) -> str:
        """The C text of a draw from its window (kernel_statements' `draw`)."""
        key = (int(expr.attrs["seed"]), int(expr.attrs["offset"]), expr.output.dtype)
        k = self.keys.setdefault(key, len(self.keys))
        if k == len(self.indices):
            self.indices.append([])
        if index not in self.indices[k]:
            self.indices[k].append(index)
        return f"fl_win{k}[static_cast<unsigned long long>({index}) - fl_base{k}]"

    def ranges(self, thread_loop: list[str], opening: list[str], closing: list[str]) -> list[str]:
        """A first loop over the block's threads: the lowest and highest index of each
        window's draws (fl_lo<k>, fl_hi<k>)."""
        inner = self.indent
        lines = ["    // the block's draws: the range of each window's indices"]
        for k in range(len(self.indices)):
            lines.append(f"    unsigned long long fl_lo{k} = ~0ULL, fl_hi{k} = 0ULL;")
        body = []
        for k, indices in enumerate(self.indices):
            for j, index in enumerate(indices):
                i = f"fl_i{k}_{j}"
                body.append(
                    f"{inner}const unsigned long long {i} = static_cast<unsigned long long>({index});"
                )
                body.append(f"{inner}fl_lo{k} = {i} < fl_lo{k} ? {i} : fl_lo{k};")
                body.append(f"{inner}fl_hi{k} = {i} > fl_hi{k} ? {i} : fl_hi{k};")
        return lines + thread_loop + opening + body + closing + ["    }"]

    def fast(self, loop: list[str]) -> list[str]:
        """The windows' check, their draws and the thread loop reading them; an `else {`
        follows (the memo's loop)."""
        fits, lines = [], []
        for (_, _, dtype), k in self.keys.items():
            per = _per_call(dtype)
            lines.append(f"    const unsigned long long fl_first{k} = fl_lo{k} / {per};")
            lines.append(
                f"    const unsigned long long fl_calls{k} = fl_hi{k} / {per} - fl_first{k} + 1;"
            )
            fits.append(f"fl_calls{k} <= {self.calls}")
        lines.append(f"    if ({' && '.join(fits)}) {{")
        for (seed, offset, dtype), k in self.keys.items():
            per = _per_call(dtype)
            ctype = COMPUTE_TYPES[dtype]
            lines.append(f"      {ctype} fl_win{k}[{per * self.calls}];")
            lines.append(
                f"      {_WINDOW_FILL[dtype]}(fl_win{k}, {seed}ULL, {offset}ULL, fl_first{k}, "
                f"(long long)fl_calls{k});"
            )
            lines.append(f"      const unsigned long long fl_base{k} = {per} * fl_first{k};")
        return lines + loop + ["    } else {"]


def block_windows(
    kernel: Kernel, grid: list[GridAxis], indent: str, statements: list[Statement], points: int
) -> BlockWindows | None:
    """The kernel's draws through block windows (BlockWindows), for a kernel of one
    function that draws random numbers at `points` grid points a block; None where its
    body twice would be too large for one function."""
    if 2 * body_bytes(statements) > FUNCTION_BYTES:
        return None
    windows = BlockWindows()
    windows.indent = indent
    drawn = kernel_statements(kernel, grid, indent, windows.draw)
    windows.body = [line for st in drawn for line in st.lines]
    if not windows.keys:  # no statement draws (a rand_like nothing reads)
        return None
    per = min(_per_call(dtype) for _, _, dtype in windows.keys)
    groups = MEMO_GROUPS  # a window's calls are made that many at a time
    windows.calls = -(-min(WINDOW_CALLS, -(-points // per) + 1) // groups) * groups
    return windows


# On the CPU a kernel's draws go through the block's windows (BlockWindows) where they
# fit, else through the philox memo (numerics.philox.C_SOURCE) of the block it runs,
# `fl_rng` in the grid loop; at file scope it is a null pointer (no memo), which a kernel
# split into parts calls with. The memo's body text stays CUDA's.
RANDOM_MEMO = r"""
static fl_philox_memo* const fl_rng = 0;
/* a raw float draw as a half or bfloat16 number: rounded, a rounded 1 mapped to 0 */
static inline float fl_half_draw(float raw) {
  const float v = __half2float(__float2half(raw));
  return v == 1.0f ? 0.0f : v;
}
static inline float fl_bfloat16_draw(float raw) {
  const float v = __bfloat162float(__float2bfloat16(raw));
  return v == 1.0f ? 0.0f : v;
}
static inline float fl_uniform_half_memo(fl_philox_memo* m, uint64_t seed, uint64_t offset,
                                         uint64_t index) {
  return fl_half_draw(fl_raw_uniformf_memo(m, seed, offset, index));
}
static inline float fl_uniform_bfloat16_memo(fl_philox_memo* m, uint64_t seed, uint64_t offset,
                                             uint64_t index) {
  return fl_bfloat16_draw(fl_raw_uniformf_memo(m, seed, offset, index));
}
#define fl_uniformf(seed, offset, index) fl_uniformf_memo(fl_rng, seed, offset, index)
#define fl_uniform(seed, offset, index) fl_uniform_memo(fl_rng, seed, offset, index)
#define fl_uniform_half(seed, offset, index) fl_uniform_half_memo(fl_rng, seed, offset, index)
#define fl_uniform_bfloat16(seed, offset, index) \
  fl_uniform_bfloat16_memo(fl_rng, seed, offset, index)
/* A block's window of numbers (kernel/cpu.py, BlockWindows): those of the philox calls
   first, first + 1, ..., as the memo's functions give them: element index i's at
   u[i - per * first] (per: the numbers of one call, 4, or 2 for double). The calls are
   made FL_MEMO_GROUPS at a time, as the memo's (a loop that vectorizes), so the window
   holds `calls` rounded up to a multiple of FL_MEMO_GROUPS calls' numbers. */
#define FL_WINDOW_FILL(name, type, per, number)                                              \
  static inline void name(type* __restrict__ u, uint64_t seed, uint64_t offset,             \
                          uint64_t first, long long calls) {                                \
    fl_philox_memo m;                                                                        \
    for (long long s = 0; s < calls; s += FL_MEMO_GROUPS) {                                  \
      fl_philox_window(&m, seed, first + (uint64_t)s, offset);                               \
      const uint32_t* __restrict__ r = m.r;                                                  \
      type* __restrict__ v = u + per * s;                                                    \
      for (int i = 0; i < per * FL_MEMO_GROUPS; ++i) v[i] = number;                          \
    }                                                                                        \
  }
/* word c of the call of number i (of `per` a call), in the memo's words r */
#define FL_WORD(i, per, c) r[(c) * FL_MEMO_GROUPS + (i) / (per)]
FL_WINDOW_FILL(fl_window_float, float, 4, fl_uniformf_bits(FL_WORD(i, 4, i % 4)))
FL_WINDOW_FILL(fl_window_double, double, 2,
               fl_uniform_bits(FL_WORD(i, 2, 2 * (i % 2)), FL_WORD(i, 2, 2 * (i % 2) + 1)))
FL_WINDOW_FILL(fl_window_half, float, 4, fl_half_draw(fl_raw_uniformf_bits(FL_WORD(i, 4, i % 4))))
FL_WINDOW_FILL(fl_window_bfloat16, float, 4,
               fl_bfloat16_draw(fl_raw_uniformf_bits(FL_WORD(i, 4, i % 4))))
"""
# The block's memo, declared in the grid loop of a kernel that draws numbers
MEMO_DECLARATION = [
    "    fl_philox_memo fl_rng_memo = {0};",
    "    fl_philox_memo* const fl_rng = &fl_rng_memo;",
]


def prelude(kernels: list[Kernel]) -> str:
    """What the kernels' functions are compiled after: PRELUDE, the random number
    generator where a kernel draws random numbers (with the CPU's memo, RANDOM_MEMO), and
    erf where one calls it."""
    scheduled = [k for k in kernels if k.scheduled]
    dtypes = random_dtypes(scheduled)
    memo = RANDOM_MEMO if dtypes else ""
    return PRELUDE + random_source(dtypes) + memo + math_source(scheduled)


def cpu_source(kernels: list[Kernel]) -> str:
    """The prelude and one CPU function per scheduled kernel: what compute="compiled" builds
    (a kernel too large to compile is a comment: the kernel runner computes it)."""
    parts = ["// generated by fuserlite.kernel.cpu\n", prelude(kernels)]
    for i, kernel in enumerate(k for k in kernels if k.scheduled):
        try:
            parts.append("\n" + cpu_function(kernel).source)
        except KernelTooLarge as exc:
            parts.append(f"\n// scheduled kernel {i}: not compiled, {exc}\n")
    return "".join(parts)


def _dim3(linear: str, x: int, y: int, z: int) -> str:
    """`{x, y, z}` of a linear block or thread number over dimensions x, y, z."""
    parts = [
        linear if y * z == 1 else f"{linear} % {x}",
        "0" if y == 1 else f"{linear} / {x} % {y}",
        "0" if z == 1 else f"{linear} / {x * y}",
    ]
    return "{" + ", ".join(parts) + "}"


__all__ = [
    "PARALLEL_WORK",
    "PRELUDE",
    "WAIT_POLICY",
    "CpuFunction",
    "cpu_function",
    "cpu_source",
    "prelude",
    "quiet_openmp",
]
