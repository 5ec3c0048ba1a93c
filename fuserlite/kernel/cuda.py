"""CUDA source for scheduled kernels: one `__global__` function per compute kernel.

The loop nest is the kernel grid (fuserlite.schedule.grid.kernel_grid):
blockIdx/threadIdx positions read the hardware indices, the others (Unswitch,
Vectorize, Serial) are `for` loops. Each tensor's coordinates and predicate are
the very index expressions the numpy kernel runner evaluates (`lower_tensor`),
printed as C. Inlined tensors are registers (`t5`); a tensor that is not inlined
is recomputed at the coordinates its consumer needs; global loads and stores
are guarded by the predicate of the tensor that loads or stores.

Launch each kernel with gridDim / blockDim as printed in its header comment.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import NamedTuple

from fuserlite.ir import args
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, ParallelType
from fuserlite.kernel.indexing import (
    Ix,
    c_expr,
    device_indices,
    flat_offset,
    global_index,
    loop_var,
    lower_tensor,
)
from fuserlite.numerics.erf import C_SOURCE as ERF_SOURCE
from fuserlite.numerics.philox import C_SOURCE
from fuserlite.ops.registry import compute_dtype, is_indexed, is_scalar
from fuserlite.program.program import Kernel, Program
from fuserlite.schedule.axis_maps import producer_coords
from fuserlite.schedule.grid import GridAxis, kernel_grid

C_TYPES = {
    DType.float32: "float",
    DType.float64: "double",
    DType.float16: "__half",
    DType.bfloat16: "__nv_bfloat16",
    DType.int32: "int",
    DType.int64: "long long",
    DType.bool: "bool",
}

# Registers hold each value in its compute dtype (DType.compute: half and bfloat16 as
# float, as nvFuser does); loads convert from the storage type, stores round back to it
# (round to nearest even, as numpy and ml_dtypes round).
COMPUTE_TYPES = {dt: C_TYPES[dt.compute] for dt in DType}
_TO_COMPUTE = {DType.float16: "__half2float", DType.bfloat16: "__bfloat162float"}
_TO_STORAGE = {DType.float16: "__float2half", DType.bfloat16: "__float2bfloat16"}
_FROM_DOUBLE = {DType.float16: "__double2half", DType.bfloat16: "__double2bfloat16"}
_HEADERS = {DType.float16: "#include <cuda_fp16.h>\n", DType.bfloat16: "#include <cuda_bf16.h>\n"}


def _load(tv: TensorView, text: str) -> str:
    return f"{_TO_COMPUTE[tv.dtype]}({text})" if tv.dtype in _TO_COMPUTE else text


def _store(tv: TensorView, text: str) -> str:
    return f"{_TO_STORAGE[tv.dtype]}({text})" if tv.dtype in _TO_STORAGE else text


def _cast(expr: Expr) -> str:
    """The C expression of a cast from its operand {0} in the operand's compute type:
    to half or bfloat16 rounded once (double and integers through the round-to-odd
    `__double2*`), to an integer truncated and saturated with NaN as 0 (cvt.rzi, in
    plain C so that the CPU target computes the same)."""
    src, dst = expr.inputs[0].dtype, expr.attrs["dtype"]
    ctype = COMPUTE_TYPES[dst]
    if dst in _TO_STORAGE and src.compute is DType.float32:
        return f"{_TO_COMPUTE[dst]}({_TO_STORAGE[dst]}({{0}}))"
    if dst in _TO_STORAGE:
        return f"{_TO_COMPUTE[dst]}({_FROM_DOUBLE[dst]}(static_cast<double>({{0}})))"
    if dst in (DType.int32, DType.int64) and src.is_float:
        bits = 31 if dst is DType.int32 else 63
        lo, hi = f"{-(2**bits)}.0", f"{2**bits}.0"
        low = f"static_cast<{ctype}>({-(2**bits) + 1}LL - 1)"
        high = f"static_cast<{ctype}>({2**bits - 1}LL)"
        return (
            f"({{0}} != {{0}} ? static_cast<{ctype}>(0) : {{0}} >= {hi} ? {high}"
            f" : {{0}} < {lo} ? {low} : static_cast<{ctype}>({{0}}))"
        )
    if src is DType.bool and dst is not DType.bool:
        return _from_bool("{0}", ctype)
    return f"static_cast<{ctype}>({{0}})"


def _from_bool(text: str, ctype: str) -> str:
    """A bool as 1 or 0 of `ctype`: a select, which GCC's vectorizer takes where it
    refuses a conversion from a bool (dropout's x * (u < 1 - p)); the same values."""
    return f"({text} ? static_cast<{ctype}>(1) : static_cast<{ctype}>(0))"


# rand_like's number in each dtype's compute type: fuserlite.numerics.philox's generator
# (C_SOURCE); half and bfloat16 round the float draw to their type (RANDOM_ROUNDED).
_UNIFORM = {
    DType.float32: "fl_uniformf",
    DType.float64: "fl_uniform",
    DType.float16: "fl_uniform_half",
    DType.bfloat16: "fl_uniform_bfloat16",
}
RANDOM_ROUNDED = r"""
/* rand_like's {name} number: the float draw rounded to {name}, a rounded 1 mapped to 0,
   as fuserlite.numerics.philox.uniform_from_bits */
FL_RNG_FN float fl_uniform_{name}(uint64_t seed, uint64_t offset, uint64_t index) {{
  const float u = {to_compute}({to_storage}(fl_raw_uniformf(seed, offset, index)));
  return u == 1.0f ? 0.0f : u;
}}
"""


def _uniform(expr: Expr) -> str:
    """rand_like's C expression at the element whose global linear index is {index}."""
    seed, offset = expr.attrs["seed"], expr.attrs["offset"]
    fn = _UNIFORM[expr.output.dtype]
    return f"{fn}({seed}ULL, {offset}ULL, static_cast<unsigned long long>({{index}}))"


def _iota(expr: Expr) -> str:
    """iota's C expression, start + step * i, at the element whose global index is {index}."""
    ctype = COMPUTE_TYPES[expr.output.dtype]
    start, step = (_scalar(x, ctype) for x in expr.operands())
    return f"({start} + {step} * static_cast<{ctype}>({{index}}))"


def random_source(dtypes: set[DType]) -> str:
    """The random number generator for kernels drawing numbers of these dtypes (after the
    half and bfloat16 types are defined: CUDA's headers or the CPU prelude); nothing for
    kernels that draw none."""
    if not dtypes:
        return ""
    # Each part guarded: the sources of several programs concatenated into one file
    # (two programs that draw dropout masks) define each function once.
    parts = [_guarded("FL_RANDOM_SOURCE", C_SOURCE)]
    for dtype in (DType.float16, DType.bfloat16):
        if dtype in dtypes:
            name = _UNIFORM[dtype].removeprefix("fl_uniform_")
            to = {"to_compute": _TO_COMPUTE[dtype], "to_storage": _TO_STORAGE[dtype]}
            text = RANDOM_ROUNDED.format(name=name, **to)
            parts.append(_guarded(f"FL_RANDOM_SOURCE_{name.upper()}", text))
    return "".join(parts)


def _guarded(macro: str, text: str) -> str:
    return f"#ifndef {macro}\n#define {macro}\n{text}\n#endif\n"


def math_source(kernels: list[Kernel]) -> str:
    """The math functions the kernels' C text calls beyond the C library's (fl_erf, after
    exp is declared), for the scheduled kernels that call them; else nothing."""
    calls = any(CUDA.get(e.op_name) == "fl_erf({0})" for k in kernels for e in k.exprs)
    return ERF_SOURCE if calls else ""


def random_dtypes(kernels: list[Kernel]) -> set[DType]:
    """The dtypes of the random numbers the kernels draw (empty: they draw none)."""
    return {e.output.dtype for k in kernels for e in k.exprs if is_draw(e)}


# One row per pointwise op: its C expression, from its operands' C expressions ({0},
# {1}, ...) in the compute type {T}. Each gives numpy's bits: maximum / minimum (and relu,
# numpy's maximum(x, 0)) propagate a NaN from either side and, when the two compare equal
# (-0.0 and 0.0), give the second operand; C's `a > b ? a : b` drops a NaN in `a`, and
# fmax drops any NaN. A conversion's row (OpDef.converts) is a function of the expression
# giving that text, and its operands stay in their own compute types; so is an indexed
# op's (OpDef.indexed), whose text reads {index}, the element's global linear index.
CUDA: dict[str, str | Callable[[Expr], str]] = {
    "set": "{0}",
    "broadcast": "{0}",  # its operand is read at the output's coordinates: a copy
    "permute": "{0}",  # likewise, at the coordinates its axis map permutes
    "neg": "(-{0})",
    "exp": "exp({0})",
    "tanh": "tanh({0})",
    "relu": "(({0} > 0 || {0} != {0}) ? {0} : static_cast<{T}>(0))",
    "abs": "({0} < 0 ? -{0} : {0} + static_cast<{T}>(0))",  # + 0: abs(-0.0) is +0.0
    "gelu": (
        "(static_cast<{T}>(0.5) * {0} * (static_cast<{T}>(1) + tanh("
        "static_cast<{T}>(0.7978845608028654) * ({0} + static_cast<{T}>(0.044715)"
        " * {0} * {0} * {0}))))"
    ),
    "erf": "fl_erf({0})",  # fuserlite.numerics.erf's C_SOURCE, in every kernel that calls it
    "sqrt": "sqrt({0})",
    "log": "log({0})",
    "sigmoid": "(static_cast<{T}>(1) / (static_cast<{T}>(1) + exp(-{0})))",
    "silu": "({0} / (static_cast<{T}>(1) + exp(-{0})))",
    "sin": "sin({0})",
    "cos": "cos({0})",
    "rsqrt": "(static_cast<{T}>(1) / sqrt({0}))",  # CUDA's rsqrtf is not correctly rounded
    "where": "({0} ? {1} : {2})",
    "cast": _cast,
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "pow": "pow({0}, {1})",
    "maximum": "(({0} > {1} || {0} != {0}) ? {0} : {1})",
    "minimum": "(({0} < {1} || {0} != {0}) ? {0} : {1})",
    "lt": "({0} < {1})",
    "rand_like": _uniform,
    "rand": _uniform,
    "iota": _iota,
}
_HW_INDEX = {
    ParallelType.BIDx: "blockIdx.x",
    ParallelType.BIDy: "blockIdx.y",
    ParallelType.BIDz: "blockIdx.z",
    ParallelType.TIDx: "threadIdx.x",
    ParallelType.TIDy: "threadIdx.y",
    ParallelType.TIDz: "threadIdx.z",
}


def is_scheduled(kernel: Kernel) -> bool:
    """True if schedule-pointwise scheduled the kernel (a sharding split alone is no schedule)."""
    return kernel.scheduled


def launch_dims(grid: list[GridAxis]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(gridDim, blockDim) of a kernel grid."""
    dims = {pt: g.extent for g in grid for pt in (g.parallel_type,)}
    grid_dim = tuple(
        dims.get(pt, 1) for pt in (ParallelType.BIDx, ParallelType.BIDy, ParallelType.BIDz)
    )
    block_dim = tuple(
        dims.get(pt, 1) for pt in (ParallelType.TIDx, ParallelType.TIDy, ParallelType.TIDz)
    )
    return grid_dim, block_dim  # type: ignore[return-value]


def _offset(tv: TensorView, coords: list) -> str:
    """Row-major offset into tv's local shard."""
    return c_expr(flat_offset(local_shape(tv), coords))


class Statement(NamedTuple):
    """What one thread computes for one expression, at the loop nest's innermost level."""

    lines: tuple[str, ...]
    register: str  # the register it defines: `t5`
    ctype: str  # the register's C type
    uses: tuple[str, ...]  # the registers of other statements it reads
    buffers: tuple[str, ...]  # the kernel parameters (buffers) it loads or stores


# What a draw's C text is, from the rand_like expression and the C text of the global
# linear index it draws at (kernel_statements' `draw`; default: the generator's call).
DrawText = Callable[[Expr, str], str]


def is_draw(expr: Expr) -> bool:
    """Whether the expression draws random numbers (rand_like, rand)."""
    return CUDA.get(expr.op_name) is _uniform


class _KernelWriter:
    """Builds the statements of one kernel."""

    def __init__(self, kernel: Kernel, grid: list[GridAxis], draw: DrawText | None = None) -> None:
        self.kernel = kernel
        self.grid = grid
        self.draw = draw
        self.inputs = {id(t) for t in kernel.inputs}
        self.statements: list[Statement] = []
        self._uses: dict[str, None] = {}  # of the statement being written, in order
        self._buffers: dict[str, None] = {}

    def coords(self, tv: TensorView) -> tuple[list[Ix], str]:
        ti = lower_tensor(tv, self.grid)
        data = [ix for ix, ax in zip(ti.logical, tv.domain.logical) if not ax.is_reduction]
        pred = " && ".join(f"{c_expr(ix)} < {bound}" for ix, bound in ti.predicates)
        return data, pred or "true"

    def value_at(self, tv: TensorView, coords: list) -> str:
        """`tv` at the given coordinates: a global load or a recomputation."""
        if id(tv) in self.inputs or tv.definition is None:
            self._buffers[tv.ir_name] = None
            return _load(tv, f"{tv.ir_name}[{_offset(tv, coords)}]")
        expr = tv.definition
        args = [self.value_at(p, producer_coords(expr, p, coords)) for p in expr.inputs]
        return self.text(expr, args, coords)

    def text(self, expr: Expr, args: list[str], coords: list) -> str:
        """The expression's C text at `coords` (a draw's as `draw` writes it, if given)."""
        if self.draw is not None and is_draw(expr):
            return self.draw(expr, _index(expr, coords))
        return _op_text(expr, args, _index(expr, coords))

    def operand(self, expr: Expr, tv: TensorView, coords: list, pred: str) -> str:
        if tv.compute_at_pos > 0 and id(tv) not in self.inputs:
            self._uses[f"t{tv.number}"] = None
            return f"t{tv.number}"
        zero = f"static_cast<{COMPUTE_TYPES[tv.dtype]}>(0)"
        return f"({pred} ? {self.value_at(tv, producer_coords(expr, tv, coords))} : {zero})"

    def write(self, indent: str) -> None:
        outputs = {id(t) for t in self.kernel.outputs}
        for expr in self.kernel.exprs:
            out = expr.output
            stored = id(out) in outputs
            if out.compute_at_pos == 0 and not stored:
                continue  # not inlined: its consumers recompute it where they need it
            self._uses, self._buffers = {}, {}
            lines = []
            coords, pred = self.coords(out)
            p = f"p{out.number}"
            args = [self.operand(expr, t, coords, p) for t in expr.inputs]
            if stored or any(p in a for a in args):
                lines.append(f"{indent}const bool {p} = {pred};")
            ctype = COMPUTE_TYPES[out.dtype]
            text = self.text(expr, args, coords)
            lines.append(f"{indent}const {ctype} t{out.number} = {text};")
            if stored:
                offset = _offset(out, coords)
                value = _store(out, f"t{out.number}")
                lines.append(f"{indent}if ({p}) {out.ir_name}[{offset}] = {value};")
                self._buffers[out.ir_name] = None
            register = f"t{out.number}"
            uses = tuple(self._uses)
            self.statements.append(
                Statement(tuple(lines), register, ctype, uses, tuple(self._buffers))
            )


_BIT_CASTS = {
    "float": ("__uint_as_float", "<I", "<f", "u"),
    "double": ("__longlong_as_double", "<q", "<d", "LL"),
}


def _scalar(value: bool | int | float, ctype: str) -> str:
    """A Python scalar as a C constant of the compute type; integer types keep every
    digit (through a double an int64 would not), inf and NaN are written as bits."""
    if ctype not in _BIT_CASTS:  # an integer or bool result: its scalars are integers
        n = int(value)
        text = f"({n + 1}LL - 1)" if n == -(2**63) else f"{n}LL"  # -2**63 is no C literal
        return f"static_cast<{ctype}>({text})"
    if math.isfinite(value):
        return f"static_cast<{ctype}>({float(value)!r})"
    cast, int_format, float_format, suffix = _BIT_CASTS[ctype]
    bits = struct.unpack(int_format, struct.pack(float_format, value))[0]
    return f"{cast}({bits}{suffix})"


def _index(expr: Expr, coords: list) -> str | None:
    """The C expression of the global linear index an indexed op's output reads at
    `coords` (its local data coordinates), or None for any other op."""
    return c_expr(global_index(expr.output, coords)) if is_indexed(expr) else None


def _op_text(expr: Expr, args: list[str], index: str | None = None) -> str:
    """The C expression of one pointwise expression (`index`: see _index)."""
    ctype = COMPUTE_TYPES[compute_dtype(expr)]
    row = CUDA.get(expr.op_name)
    if row is None:
        raise ExecutionError(f"codegen: no CUDA for {expr!r}; only pointwise kernels are emitted")
    if callable(row):  # a conversion (its operand stays in its own type) or an indexed op
        return row(expr).format(*args, T=ctype, index=index)
    cast = [
        a
        if COMPUTE_TYPES[t.dtype] == ctype
        else _from_bool(a, ctype)
        if t.dtype is DType.bool
        else f"static_cast<{ctype}>({a})"
        for a, t in zip(args, expr.inputs)
    ]
    it = iter(cast)
    operands = [_scalar(x, ctype) if is_scalar(x) else next(it) for x in expr.operands()]
    return row.format(*operands, T=ctype)


def kernel_params(kernel: Kernel) -> list[str]:
    """The kernel's parameters: its inputs (const), then its outputs, as C pointers, then
    the device indices its uneven shardings' predicates read (`didx`)."""
    params = [f"const {C_TYPES[t.dtype]}* __restrict__ {t.ir_name}" for t in kernel.inputs]
    params += [f"{C_TYPES[t.dtype]}* __restrict__ {t.ir_name}" for t in kernel.outputs]
    return params + [f"const long long {name}" for name in device_indices(kernel.tensors)]


def kernel_header(kernel: Kernel, name: str, grid: list[GridAxis]) -> list[str]:
    """Comment lines naming the kernel's reference, local shards and launch dimensions."""
    grid_dim, block_dim = launch_dims(grid)
    ref = kernel.reference.ir_name if kernel.reference is not None else "-"
    shapes = ", ".join(
        f"{t.ir_name}{list(local_shape(t))}" for t in (*kernel.inputs, *kernel.outputs)
    )
    return [
        f"// {name}: reference {ref}; local shards {shapes}",
        f"// launch: gridDim = dim3{grid_dim}, blockDim = dim3{block_dim}",
    ]


def loop_nest(grid: list[GridAxis], indent: str = "  ") -> tuple[list[str], str, list[str]]:
    """(the lines that open the grid's loops, the indentation inside them, the lines that
    close them): blockIdx/threadIdx positions read `blockIdx` and `threadIdx`, the others
    are loops; position j's index is loop_var(j)."""
    opening, closing = [], []
    for j, g in enumerate(grid):
        v = loop_var(j)
        hw = _HW_INDEX.get(g.parallel_type)
        if hw is not None:
            opening.append(f"{indent}const long long {v} = {hw};")
        else:
            opening.append(
                f"{indent}for (long long {v} = 0; {v} < {g.extent}; ++{v}) {{  // {g.parallel_type.value}"
            )
            closing.insert(0, f"{indent}}}")
            indent += "  "
    return opening, indent, closing


def kernel_statements(
    kernel: Kernel, grid: list[GridAxis], indent: str, draw: DrawText | None = None
) -> list[Statement]:
    """The statements one thread runs inside the loop nest, in order (one per expression
    computed where it is; the others are recomputed inside their consumers'). `draw`, if
    given, writes each random draw's C text (the CPU's block windows, kernel/cpu.py)."""
    writer = _KernelWriter(kernel, grid, draw)
    writer.write(indent)
    return writer.statements


def kernel_body(kernel: Kernel, grid: list[GridAxis], indent: str = "  ") -> list[str]:
    """What one thread runs, one target-independent text for every target: the loop nest
    and, inside it, the kernel's statements."""
    opening, inner, closing = loop_nest(grid, indent)
    statements = kernel_statements(kernel, grid, inner)
    return opening + [line for s in statements for line in s.lines] + closing


def kernel_source(kernel: Kernel, name: str) -> str:
    """One `extern "C" __global__` function for a scheduled kernel."""
    from fuserlite.kernel.reduction import cuda_reduction, reduction_of  # it writes with ours

    reduction = reduction_of(kernel)
    if reduction is not None:
        return cuda_reduction(kernel, reduction, name)
    grid = kernel_grid([e.output for e in kernel.exprs])
    lines = kernel_header(kernel, name, grid)
    lines.append(f'extern "C" __global__ void {name}({", ".join(kernel_params(kernel))}) {{')
    lines += kernel_body(kernel, grid)
    lines.append("}")
    return "\n".join(lines) + "\n"


def cuda_source(target: Program | Kernel | list[Kernel], prefix: str = "fuserlite_kernel") -> str:
    """CUDA source with one `__global__` kernel per scheduled compute kernel."""
    if isinstance(target, Program):
        kernels = target.kernels
    elif isinstance(target, Kernel):
        kernels = [target]
    elif isinstance(target, (list, tuple)) and all(isinstance(k, Kernel) for k in target):
        kernels = list(target)
    else:
        raise args.fail(
            "cuda_source",
            "target",
            "a Program, a Kernel or a list of Kernels (fl.lower(fusion) gives a Program)",
            target,
            ExecutionError,
        )
    parts = ["// generated by fuserlite.kernel.cuda\n"]
    used = {t.dtype for k in kernels for t in k.tensors}
    parts += [header for dtype, header in _HEADERS.items() if dtype in used]
    scheduled = [k for k in kernels if is_scheduled(k)]
    parts += [random_source(random_dtypes(scheduled)), math_source(scheduled)]
    for i, kernel in enumerate(kernels):
        if not is_scheduled(kernel):
            parts.append(
                f"// {prefix}_{i}: not scheduled ({'; '.join(kernel.notes) or 'no schedule'})\n"
            )
            continue
        parts.append("\n" + kernel_source(kernel, f"{prefix}_{i}"))
    return "".join(parts)


__all__ = [
    "cuda_source",
    "is_scheduled",
    "Statement",
    "kernel_body",
    "kernel_header",
    "kernel_params",
    "kernel_source",
    "is_draw",
    "kernel_statements",
    "launch_dims",
    "loop_nest",
    "math_source",
    "random_dtypes",
    "random_source",
]
