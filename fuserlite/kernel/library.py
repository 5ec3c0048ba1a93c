"""Library kernels: a kernel of one matmul, linear or sdpa runs a GEMM library, planned once.

nvFuser gives such a segment to ATen (its expression-evaluator executor) rather than
generating code for it; fuserlite's counterpart calls numpy's GEMM once per device
for the whole batch (numpy_ops' rows: `[(...) * m, k] @ [k, n]` as one 2-D GEMM),
its operands cast to the compute dtype, its outputs stored in their dtype: the same
numpy calls on the same arrays as the op-by-op path, so the same bits, without that
path's per-expression checks. What each device's call needs (its outputs' shapes, its
first output's global start) is worked out once per device, as the lowered program
never changes. Where the executor's gemm is "amx", a bfloat16 linear or matmul runs on
AMX tiles instead (kernel/amx.py), on the compiled and the interpreted path alike.

sdpa's dropout draws its Philox numbers inside a compiled function at each element's
global linear index (DROPOUT_SOURCE, after numerics.philox.C_SOURCE: the generator the
C++ and CUDA kernels' rand_like use) and scales or zeroes the probabilities in place,
so no mask is ever materialised; it keeps exactly the elements numpy's keep_mask keeps
(tests/test_library_kernels.py). Without a compiler (compute="interpret") the numpy
mask is drawn, bit for bit the same.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections.abc import Callable, Iterable

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.kernel.amx import BF16, AmxGemm
from fuserlite.kernel.cpu import PRELUDE, quiet_openmp
from fuserlite.numerics.attention import sdpa_fwd
from fuserlite.numerics.philox import (
    C_SOURCE,
    Block,
    apply_dropout,
    check_seed,
    dropout_scale,
)
from fuserlite.ops.registry import compute_dtype
from fuserlite.program.program import Kernel
from fuserlite.program.shards import cyclic_problem, device_box, device_shape, layout
from fuserlite.reference.numpy_ops import NUMPY, gemm_rows, sdpa_block, store

LIBRARY_OPS = ("matmul", "linear", "sdpa")
MAX_RANK = 8  # of the array a compiled dropout takes

DROPOUT_SYMBOL = "fl_dropout_inplace"
# values: a C-contiguous local array of `rank` axes (local_shape) lying at `start` of a
# global tensor of `shape`; element i's global linear index is row-major in `shape`.
DROPOUT_SOURCE = r"""
/* One row's elements at global indices first, first + 1, ...: each philox call gives the
   numbers of FL_PER neighbours (4 floats, 2 doubles). The calls of a run of whole groups
   are made together into `words` (a loop of independent calls the compiler vectorizes),
   then applied; a row's partial groups at its ends draw their numbers alone.
   An element that is +0 comes out +0 whatever its number (kept: +0 * scale, for a finite
   scale; dropped: 0), so no number is drawn for it: a lone element of a partial group,
   or the whole groups of +0 at either end of a run (a causal attention's masked
   probabilities, half of them). -0 and anything else draw as before. */
#define FL_DROP_GROUPS 64
template <typename T>
static inline T fl_drop_uniform(const uint32_t* r, int c) {
  if (sizeof(T) == 8) return (T)fl_uniform_bits(r[2 * c], r[2 * c + 1]);
  return (T)fl_uniformf_bits(r[c]);
}

template <typename T>
static inline bool fl_drop_is_plus_zero(T x) {
  unsigned long long bits = 0;
  __builtin_memcpy(&bits, &x, sizeof(T));
  return bits == 0;
}

template <typename T>
static inline bool fl_drop_zero_group(const T* w, int per) {
  for (int i = 0; i < per; ++i)
    if (!fl_drop_is_plus_zero<T>(w[i])) return false;
  return true;
}

template <typename T>
static inline void fl_drop_one(T* v, uint64_t index, int per, uint64_t seed, uint64_t offset,
                               T keep_below, T scale, bool skip_zeros) {
  if (skip_zeros && fl_drop_is_plus_zero<T>(*v)) return;
  uint32_t r[4];
  fl_philox(seed, index / per, offset, r);
  const T u = fl_drop_uniform<T>(r, (int)(index % per));
  *v = u < keep_below ? *v * scale : (T)0;
}

template <typename T>
static void fl_dropout_row(T* v, uint64_t first, int64_t n, uint64_t seed, uint64_t offset,
                           T keep_below, T scale) {
  const int per = sizeof(T) == 8 ? 2 : 4;
  const bool skip_zeros = scale - scale == (T)0; /* finite: +0 * scale is +0 */
  int64_t j = 0;
  for (; j < n && (first + (uint64_t)j) % per != 0; ++j) /* the head: a partial group */
    fl_drop_one<T>(v + j, first + (uint64_t)j, per, seed, offset, keep_below, scale, skip_zeros);
  uint32_t words[4 * FL_DROP_GROUPS];
  while (n - j >= per) {
    int64_t groups = (n - j) / per;
    if (groups > FL_DROP_GROUPS) groups = FL_DROP_GROUPS;
    const uint64_t sub = (first + (uint64_t)j) / per;
    T* w = v + j;
    int64_t lo = 0, hi = groups; /* the groups that draw: all but the +0 ones at the ends */
    if (skip_zeros) {
      while (lo < hi && fl_drop_zero_group<T>(w + lo * per, per)) ++lo;
      while (hi > lo && fl_drop_zero_group<T>(w + (hi - 1) * per, per)) --hi;
    }
    for (int64_t g = 0; g < hi - lo; ++g)
      fl_philox(seed, sub + (uint64_t)(lo + g), offset, words + 4 * g);
    T* x = w + lo * per;
    for (int64_t e = 0; e < (hi - lo) * per; ++e) {
      const T u = fl_drop_uniform<T>(words + 4 * (e / per), (int)(e % per));
      x[e] = u < keep_below ? x[e] * scale : (T)0;
    }
    j += groups * per;
  }
  for (; j < n; ++j) /* the tail: a partial group */
    fl_drop_one<T>(v + j, first + (uint64_t)j, per, seed, offset, keep_below, scale, skip_zeros);
}

template <typename T>
static void fl_dropout_block(T* values, int rank, const int64_t* shape, const int64_t* start,
                             const int64_t* local_shape, uint64_t seed, uint64_t offset,
                             T keep_below, T scale) {
  int64_t rows = 1;
  for (int a = 0; a + 1 < rank; ++a) rows *= local_shape[a];
  const int64_t width = local_shape[rank - 1];
  int64_t coord[8] = {0};
  for (int64_t row = 0; row < rows; ++row) {
    uint64_t base = 0; /* the global linear index of this row's first element */
    for (int a = 0; a < rank; ++a) base = base * (uint64_t)shape[a] + (uint64_t)(start[a] + coord[a]);
    fl_dropout_row<T>(values + row * width, base, width, seed, offset, keep_below, scale);
    for (int a = rank - 2; a >= 0; --a) { /* the next row: carry along the outer axes */
      if (++coord[a] < local_shape[a]) break;
      coord[a] = 0;
    }
  }
}

extern "C" void fl_dropout_inplace(void* values, int is_double, int rank, const int64_t* shape,
                                   const int64_t* start, const int64_t* local_shape, uint64_t seed,
                                   uint64_t offset, double keep_below, double scale) {
  if (is_double)
    fl_dropout_block<double>((double*)values, rank, shape, start, local_shape, seed, offset,
                             keep_below, scale);
  else
    fl_dropout_block<float>((float*)values, rank, shape, start, local_shape, seed, offset,
                            (float)keep_below, (float)scale);
}
"""


CAST_SYMBOLS = {  # (from, to) -> the compiled conversion of n elements
    ("bfloat16", "float32"): "fl_cast_bfloat16_float32",
    ("float32", "bfloat16"): "fl_cast_float32_bfloat16",
}
# The same, keyed by the numpy dtypes (looked up every cast: no dtype name parsed).
CAST_DTYPES = {
    (DType.parse(a).numpy, DType.parse(b).numpy): symbol for (a, b), symbol in CAST_SYMBOLS.items()
}
# After kernel.cpu's PRELUDE: its __nv_bfloat16 conversions, which store the bits
# ml_dtypes stores (tests/test_library_kernels.py checks every bfloat16 and NaN payloads).
CAST_SOURCES = {
    "fl_cast_bfloat16_float32": r"""
extern "C" void fl_cast_bfloat16_float32(const void* from, void* to, long long n) {
  const unsigned short* a = (const unsigned short*)from;
  float* b = (float*)to;
  for (long long i = 0; i < n; ++i) b[i] = __bfloat162float(__nv_bfloat16{a[i]});
}
""",
    "fl_cast_float32_bfloat16": r"""
extern "C" void fl_cast_float32_bfloat16(const void* from, void* to, long long n) {
  const float* a = (const float*)from;
  unsigned short* b = (unsigned short*)to;
  for (long long i = 0; i < n; ++i) b[i] = __float2bfloat16(a[i]).bits;
}
""",
}


# A launch's device threads (runtime/threads.py) may ask for the functions at once,
# the first time: one builds and loads them, the others then find them loaded.
_LOADING = threading.Lock()


def library_functions(compiler) -> dict[str, Callable]:
    """sdpa's dropout and the casts, compiled together (one build, kept on disk and
    loaded once by `compiler`, a KernelCompiler); safe to call from several threads."""
    quiet_openmp()
    sources = {DROPOUT_SYMBOL: DROPOUT_SOURCE, **CAST_SOURCES}
    labels = {s: "a library kernel's dropout and casts" for s in sources}
    with _LOADING:
        return compiler.functions(PRELUDE + C_SOURCE, sources, labels)


class CompiledCasts:
    """`astype` and the store into an output stack (np.copyto), bfloat16 <-> float32 of
    C-contiguous arrays in C (one vectorized loop, the bits ml_dtypes gives); any other
    conversion through numpy."""

    def __init__(self, compiler) -> None:
        """`compiler`: a fuserlite.kernel.compile.KernelCompiler; built at the first call."""
        self.compiler = compiler
        self._functions: dict[tuple[str, str], Callable] | None = None

    def _function(self, source: np.dtype, target: np.dtype) -> Callable | None:
        if (source, target) not in CAST_DTYPES:  # np.dtype equality: no name parsed a call
            return None
        if self._functions is None:
            loaded = library_functions(self.compiler)
            for s in CAST_SYMBOLS.values():
                loaded[s].argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
                loaded[s].restype = None
            self._functions = {key: loaded[s] for key, s in CAST_DTYPES.items()}
        return self._functions[(source, target)]

    def cast(self, array: np.ndarray, dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
        """array.astype(dtype, copy=False); a conversion is written into `out` where it is
        given (of array's shape, in dtype)."""
        if not isinstance(dtype, np.dtype):
            dtype = np.dtype(dtype)
        if array.dtype == dtype:
            return array
        if out is not None:
            self.store(out, array)
            return out
        function = self._function(array.dtype, dtype) if array.flags.c_contiguous else None
        if function is None:
            return array.astype(dtype, copy=False)
        out = np.empty(array.shape, dtype)
        function(array.ctypes.data, out.ctypes.data, array.size)
        return out

    def store(self, out: np.ndarray, value: np.ndarray) -> None:
        """np.copyto(out, value, "unsafe"): value (of out's shape) converted into out."""
        function = None
        if out.flags.c_contiguous and value.flags.c_contiguous and out.shape == value.shape:
            function = self._function(value.dtype, out.dtype)
        if function is None:
            np.copyto(out, value, "unsafe")
        else:
            function(value.ctypes.data, out.ctypes.data, value.size)


class NumpyCasts:
    """CompiledCasts' interface through numpy alone (no compiler)."""

    @staticmethod
    def cast(array: np.ndarray, dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
        """array.astype(dtype, copy=False); a conversion into `out` where it is given."""
        if out is None or array.dtype == dtype:
            return array.astype(dtype, copy=False)
        np.copyto(out, array, "unsafe")
        return out

    @staticmethod
    def store(out: np.ndarray, value: np.ndarray) -> None:
        """np.copyto(out, value, "unsafe")."""
        np.copyto(out, value, "unsafe")


class CompiledDropout:
    """numerics.philox.apply_dropout, its numbers drawn in C into the values in place
    (float32 or float64, C-contiguous; anything else is copied to that first)."""

    def __init__(self, compiler) -> None:
        """`compiler`: a fuserlite.kernel.compile.KernelCompiler; built at the first call."""
        self.compiler = compiler
        self._function = None

    def _load(self):
        function = library_functions(self.compiler)[DROPOUT_SYMBOL]
        function.argtypes = [  # the three int64 rows by address (no ctypes pointer made)
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_uint64,
            ctypes.c_uint64,
            ctypes.c_double,
            ctypes.c_double,
        ]
        function.restype = None
        self._function = function
        return function

    def __call__(
        self, values: np.ndarray, p: float, seed: int, offset: int, block: Block
    ) -> np.ndarray:
        """Dropout of `values` at `block`, as apply_dropout; returns `values` (or its copy)."""
        if not 0.0 <= p <= 1.0:
            raise ExecutionError(f"dropout: the probability must be in [0, 1], got {p}")
        seed, offset = check_seed(seed, offset)
        local = block.check(values.shape)
        if not 1 <= len(local) <= MAX_RANK:
            raise ExecutionError(
                f"compiled dropout: a {len(local)}-d array; it takes 1 to {MAX_RANK} axes"
            )
        dtype = np.float64 if values.dtype == np.float64 else np.float32
        if values.dtype != dtype or not values.flags.c_contiguous or not values.flags.writeable:
            values = np.array(values, dtype, order="C")
        if values.size == 0:
            return values
        # compared in the values' type, as keep_mask compares u < 1 - p (float32 for float32)
        keep_below = float(np.dtype(dtype).type(1.0 - p))
        scale = float(dropout_scale(p, dtype))
        shapes = np.array([block.shape, block.start, local], np.int64)
        at, row = shapes.ctypes.data, shapes.strides[0]  # C-contiguous [3, rank]
        rows = [at, at + row, at + 2 * row]
        function = self._function or self._load()
        function(values.ctypes.data, dtype == np.float64, len(local), *rows, seed, offset,
                 keep_below, scale)  # fmt: skip
        return values


def library_expr(kernel: Kernel) -> Expr | None:
    """The kernel's expression if the kernel is one matmul, linear or sdpa (else None)."""
    if kernel.scheduled or len(kernel.exprs) != 1:
        return None
    expr = kernel.exprs[0]
    return expr if expr.op_name in LIBRARY_OPS else None


def _amx_rows(amx, operands: list[tuple[np.ndarray, bool]], out: np.ndarray, linear: bool):
    """Every device's product (and bias) by `amx` into its row of `out` ([rows, ..., n],
    in the output's dtype), in one call: x is [..., k] shared or [rows, ..., k]; w is
    [n, k] (linear) or [k, n], shared (packed once) or a row per device; a bias [n]
    (float32) likewise."""
    (x, x_one), (w, w_one), *bias = operands
    rows, n, k = out.shape[0], out.shape[-1], x.shape[-1]
    a = x.reshape(-1, k)[None] if x_one else x.reshape(rows, -1, k)
    b = w[None] if w_one else w
    add = None
    if bias:
        c, c_one = bias[0]
        add = c.reshape(1, n) if c_one else c.reshape(rows, n)
    flat = (
        out.reshape(rows, -1, n)
        if out.flags.c_contiguous
        else np.empty((rows, a.shape[1], n), out.dtype)
    )
    amx.rows(
        np.broadcast_to(a, (rows, *a.shape[1:])),
        np.broadcast_to(b, (rows, *b.shape[1:])),
        flat,
        linear,
        None if add is None else np.broadcast_to(add, (rows, n)),
    )
    if not out.flags.c_contiguous:
        out[...] = flat.reshape(out.shape)


class _Plan:
    """One library kernel's call: its expression, compute dtype and, per device, its
    outputs' shapes and its first output's global start; `stacks` says if it runs every
    device's call at once (run_stacked)."""

    def __init__(self, kernel: Kernel, expr: Expr) -> None:
        self.kernel = kernel
        self.expr = expr
        self.compute = [t.dtype.compute.numpy for t in expr.outputs]
        self.dtype = compute_dtype(expr).numpy  # the operands', as eval_outputs casts them
        self.row = NUMPY[expr.op_name]
        self._devices: dict[int, tuple[list[tuple[int, ...]], tuple[int, ...]]] = {}
        self._buffers: dict[object, np.ndarray] = {}  # _scratch's, by slot
        ranks = [len(t.shape) for t in expr.inputs]
        if expr.op_name == "sdpa":
            self.stacks = len(ranks) == 3
        elif expr.op_name == "linear":  # x[..., k] @ w[n, k]^T (+ bias[n])
            self.stacks = ranks[0] >= 2 and ranks[1] == 2 and all(r == 1 for r in ranks[2:])
        else:  # matmul: a[..., k] @ b[k, n]
            self.stacks = ranks[0] >= 2 and ranks[1] == 2
        # What an AmxGemm computes: a stacked linear or matmul of bfloat16 x and w (as
        # stored: a library kernel's inputs) in float32, stored in float32 or bfloat16.
        self.on_amx = (
            self.stacks
            and expr.op_name != "sdpa"
            and self.dtype == np.float32
            and all(t.dtype.numpy == BF16 for t in expr.inputs[:2])
            and expr.output.dtype.numpy in (np.float32, BF16)
        )

    def where(self, device: int) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
        """(the outputs' shapes, the first output's start) on `device`."""
        found = self._devices.get(device)
        if found is None:
            shapes = [device_shape(t, device) for t in self.expr.outputs]
            if layout(self.expr.output).boxes is None:
                if self.expr.op_name == "sdpa":  # its causal diagonal and dropout read it
                    raise cyclic_problem(
                        self.expr.output, "sdpa, which reads where its rows start,"
                    )
                start = ()  # a cyclic shard's rows: a GEMM of them reads no start
            else:
                start = tuple(s for s, _ in device_box(self.expr.output, device))
            found = self._devices[device] = (shapes, start)
        return found

    def work(self, devices: list[int]) -> int:
        """Multiply-adds of every device's call (as DeviceThreads.spreads weighs a launch)."""
        shapes = [device_shape(t, devices[0]) for t in self.expr.inputs]
        out = self.where(devices[0])[0][0]
        if self.expr.op_name == "sdpa":  # scores and probabilities @ values
            (*_, e), (*_, s, _), (*_, ev) = shapes[:3]
            return len(devices) * math.prod(out[:-1]) * s * (e + ev)
        return len(devices) * math.prod(out) * shapes[0][-1]

    def run_stacked(
        self,
        operands: list[tuple[np.ndarray, bool]],
        devices: list[int],
        dropout=None,
        threads=None,
        casts=NumpyCasts,
        gemm=None,
    ) -> list[np.ndarray]:
        """Every device's call at once: `operands` each (a stack of a row per device,
        False) or (one array every device reads, True), in any dtype; returns each output
        as a stack [devices, *local], stored in its dtype. The same numpy calls on the
        same rows as `LibraryKernels.run` per device (one GEMM per device, attention over
        a leading device axis, dropout per device at its block), so the same bits, with
        one cast of each shared operand instead of one per device. `dropout`: a
        CompiledDropout, or None (numpy's philox.apply_dropout); `threads`: a
        runtime.threads.DeviceThreads that computes ranges of the rows at once (each
        range casts its operands' rows, computes and stores into its rows of the
        outputs), or None (the calling thread computes every row); `casts`: a
        CompiledCasts (or NumpyCasts) for the operands' casts and the outputs' stores;
        `gemm`: an AmxGemm (kernel/amx.py) that computes a linear's or matmul's product of
        bfloat16 operands from their bits (not BLAS's bits), or None."""
        expr = self.expr
        amx = gemm if gemm is not None and self.on_amx else None
        rows = len(devices)
        shapes = self.where(devices[0])[0]
        outs = [np.empty((rows, *s), tv.dtype.numpy) for tv, s in zip(expr.outputs, shapes)]
        # AMX reads the product's two operands as they are (bfloat16): only a bias is cast.
        kept = 2 if amx is not None else 0
        shared = [
            (casts.cast(a, self.dtype, self._scratch(j, a.shape, a.dtype)), one)
            if one and j >= kept
            else (a, one)
            for j, (a, one) in enumerate(operands)
        ]
        # Where a stacked operand is cast, each range casts its rows into its rows of one
        # buffer of the plan's (made here, before the ranges run on their threads).
        into_cast = [
            None if one or j < kept else self._scratch(j, a.shape, a.dtype)
            for j, (a, one) in enumerate(shared)
        ]
        direct = expr.op_name != "sdpa" and outs[0].dtype == self.dtype == self.compute[0]
        # The GEMMs' result in the compute dtype: the output stack itself where it is stored
        # in that dtype, else the plan's buffer, stored from into the outputs' dtype.
        result = None
        if expr.op_name != "sdpa" and amx is None:
            result = outs[0] if direct else self._scratch("gemm", outs[0].shape, outs[0].dtype)

        def work(start: int, stop: int) -> None:
            part = [
                (a, True)
                if one
                else (a[start:stop], False)
                if j < kept
                else (
                    casts.cast(a[start:stop], self.dtype, None if buf is None else buf[start:stop]),
                    False,
                )
                for j, ((a, one), buf) in enumerate(zip(shared, into_cast))
            ]
            if amx is not None:  # the products, their bias and the store in one call each
                _amx_rows(amx, part, outs[0][start:stop], expr.op_name == "linear")
                return
            with np.errstate(all="ignore"):  # numpy's error state is the thread's own
                if expr.op_name == "sdpa":
                    values = self._sdpa(part, devices[start:stop], dropout)
                else:  # the GEMMs write their rows of `result`
                    values = (self._gemm(part, stop - start, result[start:stop]),)
                for out, value, compute in zip(outs, values, self.compute):
                    if not direct:
                        # store(): the compute dtype's value rounded to the output's dtype
                        casts.store(out[start:stop], value.astype(compute, copy=False))

        if threads is None:
            work(0, rows)
        else:
            threads.run(work, rows)
        return outs

    def _scratch(self, slot: object, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        """The plan's buffer `slot` for a value of `shape` in the compute dtype, made at the
        first run and written again by every run (no fresh pages each step); None where
        `dtype` is the compute dtype already (no conversion to write). What it holds lives
        only inside run_stacked (cast operands, the GEMMs' result before its store): never
        an output, so a later run overwrites nothing a caller holds."""
        shape = tuple(shape)
        if slot != "gemm" and np.dtype(dtype) == self.dtype:
            return None
        found = self._buffers.get(slot)
        if found is None or found.shape != shape or found.dtype != self.dtype:
            found = self._buffers[slot] = np.empty(shape, self.dtype)
        return found

    def _gemm(
        self, operands: list[tuple[np.ndarray, bool]], rows: int, out: np.ndarray | None = None
    ) -> np.ndarray:
        """numpy_ops' _linear / _matmul of each device's row: gemm_rows' BLAS calls per
        device (every device's in one gemm_rows: the calls it makes on each device alone,
        so the same bits) into its row of the output (`out`, in the compute dtype: the
        plan's buffer or the output stack; else a new array), the bias added to all rows
        at once."""
        (x, x_one), (w, w_one), *bias = operands
        local = x.shape if x_one else x.shape[1:]
        k = local[-1]
        m = math.prod(local[:-1])
        b = np.swapaxes(w, -1, -2) if self.expr.op_name == "linear" else w  # [k, n] a device
        n = b.shape[-1]
        if out is None:
            out = np.empty((rows, *local[:-1], n), self.dtype)
        # Every device's calls in one gemm_rows: a device's rows [m, k] against its (or the
        # shared) b, out's rows [m, n] a device (a view: out is C-contiguous).
        a = x.reshape(m, k) if x_one else x.reshape(rows, m, k)
        if out.flags.c_contiguous:  # its reshape a view
            gemm_rows(a, b, out.reshape(rows, m, n))
        else:
            out[...] = gemm_rows(a, b, np.empty((rows, m, n), self.dtype)).reshape(out.shape)
        if bias:
            (b, b_one), ones = bias[0], [1] * (len(local) - 1)
            out += b if b_one else b.reshape(rows, *ones, n)
        return out

    def _sdpa(self, operands, devices: list[int], dropout) -> tuple[np.ndarray, np.ndarray]:
        """sdpa_fwd over a leading device axis: the causal diagonal at the devices' common
        query start, each device's probabilities dropped at its own block."""
        rows = len(devices)
        q, k, v = (a if not one else np.broadcast_to(a, (rows, *a.shape)) for a, one in operands)
        qt, kt = self.expr.inputs[:2]  # numpy_ops.sdpa_block's: the device's query rows
        shape = (*qt.shape[:-1], kt.shape[-2])
        blocks = [Block(shape, (*self.where(d)[1][:-1], 0)) for d in devices]
        first = blocks[0]
        block = Block((rows, *first.shape), (0, *first.start))  # the stack's rows: devices
        drop = dropout or apply_dropout

        def per_device(values: np.ndarray, p: float, seed: int, offset: int, _: Block):
            for r, b in enumerate(blocks):
                got = drop(values[r], p, seed, offset, b)
                if got is not values[r]:
                    values[r] = got
            return values

        a = self.expr.attrs
        out, lse, _, _ = sdpa_fwd(
            q, k, v, a["dropout_p"], a["is_causal"], a["scale"], seed=a["seed"],
            offset=a["offset"], block=block, dropout=per_device,
        )  # fmt: skip
        return out, lse

    def same_rows(self, devices: list[int]) -> bool:
        """True if run_stacked can run these devices: every one's outputs of one shape,
        none empty, and (sdpa) one query start (the causal diagonal's)."""
        found = [self.where(d) for d in devices]
        shapes = {tuple(map(tuple, s)) for s, _ in found}
        if not self.stacks or len(shapes) != 1 or any(0 in s for s in found[0][0]):
            return False
        return self.expr.op_name != "sdpa" or len({start[-2] for _, start in found}) == 1


class LibraryKernels:
    """The library kernels of a program (library_expr), each planned once; `compiler`
    (a KernelCompiler, or None: numpy draws dropout's mask) compiles sdpa's dropout;
    `gemm`: None (numpy's BLAS, on float32 copies of the operands) or an AmxGemm
    (bfloat16 products on AMX tiles, kernel/amx.py), the same on every compute path."""

    def __init__(
        self, kernels: Iterable[Kernel], compiler=None, gemm: AmxGemm | None = None
    ) -> None:
        self._plans = {
            id(k): _Plan(k, expr) for k in kernels if (expr := library_expr(k)) is not None
        }
        self.dropout = CompiledDropout(compiler) if compiler is not None else None
        self.casts = CompiledCasts(compiler) if compiler is not None else NumpyCasts
        self.gemm = gemm

    def on_amx(self) -> int:
        """How many of the kernels an AmxGemm computes (0 without one)."""
        return sum(p.on_amx for p in self._plans.values()) if self.gemm is not None else 0

    def __contains__(self, kernel: Kernel) -> bool:
        return id(kernel) in self._plans

    def plan(self, kernel: Kernel) -> _Plan:
        """The kernel's plan (for a launch of every device's call at once)."""
        return self._plans[id(kernel)]

    def run(
        self, kernel: Kernel, local: dict[TensorView, np.ndarray], device: int
    ) -> dict[TensorView, np.ndarray]:
        """The kernel's outputs on `device` from its local inputs, stored in their dtypes."""
        plan = self._plans[id(kernel)]
        expr = plan.expr
        shapes, start = plan.where(device)
        rows = [(local[t][None], False) for t in expr.inputs]  # this device's, as a stack
        if self.gemm is not None and plan.on_amx:
            # run_stacked's products on one device: the bits of its launch of every device
            stacks = plan.run_stacked(rows, [device], self.dropout, None, self.casts, self.gemm)
            return {tv: stack[0] for tv, stack in zip(expr.outputs, stacks)}
        operands = [local[t].astype(plan.dtype, copy=False) for t in expr.inputs]
        with np.errstate(all="ignore"):
            if expr.op_name == "sdpa":
                values = sdpa_block(expr, operands, start, self.dropout)
            else:
                values = (plan.row(expr, operands, shapes[0]),)
        outputs = {}
        for tv, value, shape, compute in zip(expr.outputs, values, shapes, plan.compute):
            value = np.asarray(value).astype(compute, copy=False)
            if value.shape != shape:
                raise ExecutionError(
                    f"{expr!r} produced shape {value.shape}, expected {shape} for {tv.name}"
                )
            outputs[tv] = store(tv, value)
        return outputs


__all__ = [
    "DROPOUT_SOURCE",
    "CompiledCasts",
    "CompiledDropout",
    "LibraryKernels",
    "NumpyCasts",
    "library_expr",
    "library_functions",
]
