"""A kernel the reduction scheduler scheduled, on every target: C++, CUDA, numpy.

The schedule (fuserlite.schedule.reduction) is a row per block and T threads across
it; the order of the arithmetic is the schedule's on every target, so they agree
bit for bit. For output row `row` (row-major over the kept axes of the local input)
and its n reduced elements `j` (row-major over the reduced axes):

    acc[t] = init;  for s in 0..S-1: j = s*T + t; if j < n: acc[t] = op(acc[t], x[row, j])
    for w = T/2, T/4, ..., 1:  for t < w: acc[t] = op(acc[t], acc[t + w])
    out[row] = acc[0]

in the compute dtype (half and bfloat16 in float), stored in the output's dtype. The
C++ function runs the threads of a block one after another into an array, then the
tree (a block reduction's shared memory and barriers, in order); the CUDA kernel
is that with `__shared__` and `__syncthreads()`; the kernel runner computes each
step for every row and thread at once in numpy, the predicated-off elements as the
op's init (an exact identity: -0.0 + x and max(x, -inf) are x).
"""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import numpy as np

from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.values import fact
from fuserlite.kernel.cuda import C_TYPES, COMPUTE_TYPES, _load, _scalar, _store
from fuserlite.ops.reductions import reduced_axes
from fuserlite.program.program import Kernel
from fuserlite.reference.numpy_ops import store
from fuserlite.schedule.reduction import reduction_expr, reduction_threads

_COMBINE = {
    "sum": "({0} + {1})",
    "max": "(({0} > {1} || {0} != {0}) ? {0} : {1})",  # numpy's maximum, NaN from either
}
_NUMPY = {"sum": np.add, "max": np.maximum}


class Reduction(NamedTuple):
    """What a scheduled reduction kernel computes, from its tensors' local shapes."""

    op: str
    kept: tuple[tuple[int, int], ...]  # (local extent, input stride) of each kept axis
    reduced: tuple[tuple[int, int], ...]  # likewise of each reduced axis
    rows: int
    n: int
    threads: int  # T
    steps: int  # S = ceil(n / T)
    init: float


def reduction_of(kernel: Kernel) -> Reduction | None:
    """The reduction a kernel computes, if the reduction scheduler scheduled it; else None."""
    if not kernel.scheduled:
        return None
    expr = reduction_expr(kernel)
    if expr is None:
        return None
    threads = reduction_threads(expr.output)
    if threads is None:
        return None
    return _reduction(expr.op_name, local_shape(expr.inputs[0]), reduced_axes(expr),
                      threads, float(expr.attrs["init"]))  # fmt: skip


@fact
def _reduction(
    op: str, shape: tuple[int, ...], axes: tuple[int, ...], threads: int, init: float
) -> Reduction:
    strides = [math.prod(shape[a + 1 :]) for a in range(len(shape))]
    kept = tuple((shape[a], strides[a]) for a in range(len(shape)) if a not in axes)
    reduced = tuple((shape[a], strides[a]) for a in axes)
    rows = math.prod(e for e, _ in kept)
    n = math.prod(e for e, _ in reduced)
    return Reduction(op, kept, reduced, rows, n, threads, -(-n // threads), init)


def _offset(linear: str, axes: tuple[tuple[int, int], ...]) -> str:
    """The C expression of the input offset of a linear index over `axes` (row-major)."""
    terms, inner = [], 1
    for extent, stride in reversed(axes):
        coord = linear if inner == 1 else f"({linear} / {inner})"
        if inner * extent < math.prod(e for e, _ in axes):
            coord = f"({coord} % {extent})"
        if extent > 1:
            terms.append(coord if stride == 1 else f"{coord} * {stride}")
        inner *= extent
    return " + ".join(reversed(terms)) or "0"


def _body(kernel: Kernel, r: Reduction, cuda: bool) -> tuple[list[str], str, str]:
    """(the lines of one block's reduction, the input's name, the output's name)."""
    (inp,), out = kernel.inputs, kernel.outputs[0]
    ctype = COMPUTE_TYPES[out.dtype]
    init = _scalar(r.init, ctype)
    combine = _COMBINE[r.op]
    load = _load(inp, f"{inp.ir_name}[fl_row_base + {_offset('fl_j', r.reduced)}]")
    row = "blockIdx.x" if cuda else "fl_row"
    lines = [f"    const long long fl_row_base = {_offset(row, r.kept)};"]
    if cuda:
        lines += [
            "    const long long fl_t = threadIdx.x;",
            f"      {ctype} fl_acc = {init};",
            f"      for (long long fl_s = 0; fl_s < {r.steps}; ++fl_s) {{",
            f"        const long long fl_j = fl_s * {r.threads} + fl_t;",
            f"        if (fl_j < {r.n}) fl_acc = {combine.format('fl_acc', load)};",
            "      }",
            "      fl_part[fl_t] = fl_acc;",
            "    __syncthreads();",
        ]
    else:
        # The threads one after another, each step's across them: thread t's accumulator
        # takes its elements in the order the schedule's loop does (s = 0, 1, ...), the
        # threads' loads of a step are consecutive elements, and the loop over them
        # vectorizes (thread by thread, each step's loads a stride of T apart did not).
        # The full steps need no predicate; the last, partial one guards its threads.
        full, tail = divmod(r.n, r.threads)
        step = combine.format("fl_part[fl_t]", load)
        lines += [
            f"    for (long long fl_t = 0; fl_t < {r.threads}; ++fl_t) fl_part[fl_t] = {init};",
            f"    for (long long fl_s = 0; fl_s < {full}; ++fl_s) {{",
            f"      for (long long fl_t = 0; fl_t < {r.threads}; ++fl_t) {{  // threadIdx.x",
            f"        const long long fl_j = fl_s * {r.threads} + fl_t;",
            f"        fl_part[fl_t] = {step};",
            "      }",
            "    }",
        ]
        if tail:
            lines += [
                f"    for (long long fl_t = 0; fl_t < {tail}; ++fl_t) {{  // the last step's threads",
                f"      const long long fl_j = {full * r.threads} + fl_t;",
                f"      fl_part[fl_t] = {step};",
                "    }",
            ]
    lines += [f"    for (long long fl_w = {r.threads // 2}; fl_w > 0; fl_w /= 2) {{"]
    if cuda:
        lines += [
            f"      if (fl_t < fl_w) fl_part[fl_t] = {combine.format('fl_part[fl_t]', 'fl_part[fl_t + fl_w]')};",
            "      __syncthreads();",
        ]
    else:
        lines += [
            "      for (long long fl_t = 0; fl_t < fl_w; ++fl_t)",
            f"        fl_part[fl_t] = {combine.format('fl_part[fl_t]', 'fl_part[fl_t + fl_w]')};",
        ]
    lines.append("    }")
    stored = f"    {out.ir_name}[{row}] = {_store(out, 'fl_part[0]')};"
    lines.append(stored.replace("    ", "    if (threadIdx.x == 0) ", 1) if cuda else stored)
    return lines, inp.ir_name, out.ir_name


def _header(kernel: Kernel, r: Reduction, name: str) -> list[str]:
    (inp,), out = kernel.inputs, kernel.outputs[0]
    return [
        f"// {name}: {r.op} of {inp.ir_name}{list(local_shape(inp))} into "
        f"{out.ir_name}{list(local_shape(out))}: {r.rows} rows of {r.n}, a row per block, "
        f"{r.threads} threads",
        f"// launch: gridDim = dim3({r.rows}, 1, 1), blockDim = dim3({r.threads}, 1, 1)",
    ]


def _params(kernel: Kernel) -> list[str]:
    (inp,), out = kernel.inputs, kernel.outputs[0]
    return [
        f"const {C_TYPES[inp.dtype]}* __restrict__ {inp.ir_name}",
        f"{C_TYPES[out.dtype]}* __restrict__ {out.ir_name}",
    ]


_NAME = "__FL_KERNEL_NAME__"


def cpu_reduction(kernel: Kernel, r: Reduction, symbol: str | None = None) -> tuple[str, str]:
    """(symbol, source) of the C++ function of a scheduled reduction kernel, called with
    the array of its buffers' addresses as every CPU kernel (fuserlite.kernel.cpu);
    named `symbol`, else by a hash of its text."""
    body, inp, out = _body(kernel, r, cuda=False)
    ctype = COMPUTE_TYPES[kernel.outputs[0].dtype]
    in_t, out_t = (C_TYPES[t.dtype] for t in (kernel.inputs[0], kernel.outputs[0]))
    lines = _header(kernel, r, _NAME) + [
        f'extern "C" void {_NAME}(void* const* fl_args) {{',
        f"  const {in_t}* __restrict__ {inp} = (const {in_t}*)fl_args[0];",
        f"  {out_t}* __restrict__ {out} = ({out_t}*)fl_args[1];",
        f"  for (long long fl_row = 0; fl_row < {r.rows}; ++fl_row) {{  // blockIdx.x",
        f"    {ctype} fl_part[{r.threads}];",
        *body,
        "  }",
        "}",
    ]
    text = "\n".join(lines) + "\n"
    symbol = symbol or "fl_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    return symbol, text.replace(_NAME, symbol)


def cuda_reduction(kernel: Kernel, r: Reduction, name: str) -> str:
    """The `extern "C" __global__` function of a scheduled reduction kernel."""
    body, _, _ = _body(kernel, r, cuda=True)
    ctype = COMPUTE_TYPES[kernel.outputs[0].dtype]
    lines = _header(kernel, r, name) + [
        f'extern "C" __global__ void {name}({", ".join(_params(kernel))}) {{',
        f"    __shared__ {ctype} fl_part[{r.threads}];",
        *body,
        "}",
    ]
    return "\n".join(lines) + "\n"


def run_reduction(
    kernel: Kernel, r: Reduction, local_inputs: dict[TensorView, np.ndarray]
) -> dict[TensorView, np.ndarray]:
    """The kernel runner's evaluation of a scheduled reduction: each step of the C++ and
    CUDA kernels for every row and thread at once (see the module)."""
    (inp,), out = kernel.inputs, kernel.outputs[0]
    compute = out.dtype.compute.numpy
    x = np.asarray(local_inputs[inp]).astype(compute).reshape(local_shape(inp))
    axes = reduced_axes(kernel.exprs[0])
    kept = [a for a in range(x.ndim) if a not in axes]
    x = x.transpose(*kept, *axes).reshape(r.rows, r.n)
    init = compute.type(r.init)
    padded = np.full((r.rows, r.steps * r.threads), init, compute)
    padded[:, : r.n] = x
    padded = padded.reshape(r.rows, r.steps, r.threads)
    combine = _NUMPY[r.op]
    acc = np.full((r.rows, r.threads), init, compute)
    with np.errstate(all="ignore"):
        for s in range(r.steps):
            acc = combine(acc, padded[:, s, :])
        w = r.threads // 2
        while w > 0:
            acc = combine(acc[:, :w], acc[:, w : 2 * w])
            w //= 2
    return {out: store(out, acc[:, 0].reshape(local_shape(out)))}


__all__ = ["Reduction", "cpu_reduction", "cuda_reduction", "reduction_of", "run_reduction"]
