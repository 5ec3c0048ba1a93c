"""One fusion, three ways: the reference, the interpreted kernel runner, the compiled kernels.

The differential, adversarial and example tests run every case through each
`compute` path of fl.FusionExecutor and validate each against fl.evaluate. The
compiled and the interpreted results must also be bit-identical (NaN equal to
any NaN) wherever the arithmetic is the same: +, -, *, /, sqrt, max, min,
comparisons, conversions and float16 / bfloat16 rounding are exact IEEE-754
operations in both. exp, log, tanh, sin, cos and pow (and gelu, which uses tanh, and erf,
whose polynomial fuserlite.numerics.erf evaluates alike everywhere but for its exp) are not: the
compiled kernels call the C library (glibc, vectorized by libmvec), the kernel
runner numpy's own SIMD implementations, and on the machines measured they
differ in the last bit for 5-40 % of float32 arguments (sigmoid, through exp, too). For an output computed
through any of them the reference check is what decides (fl.validate's
tolerance, a few hundred ulps); numpy is the reference for "same arithmetic"
only where both sides round exactly.

Compiling one kernel is one compiler launch of ~50 ms; `precompile` builds the
kernels of a whole batch of cases in one launch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

import fuserlite as fl
from fuserlite.kernel.compile import find_compiler
from fuserlite.kernel.cuda import CUDA
from fuserlite.runtime.compute import compile_kernels

HAVE_COMPILER = find_compiler() is not None
PATHS = ("compiled", "interpret", "numpy") if HAVE_COMPILER else ("interpret", "numpy")
# Ops whose C text calls exp, log, tanh, sin, cos or pow (gelu, sigmoid, erf's fl_erf ...):
# not correctly rounded anywhere.
# (A conversion's row is a function of the expression; none calls libm.)
LIBM_OPS = frozenset(
    op
    for op, text in CUDA.items()
    if isinstance(text, str) and re.search(r"\b(exp|log|tanh|sin|cos|pow|fl_erf)\(", text)
)


def libm_outputs(fusion: fl.Fusion) -> list[bool]:
    """Per output: whether an exp, log, tanh, sin, cos or pow is on its way from the inputs."""
    tainted: set[int] = set()
    for expr in fusion.exprs():
        if expr.op_name in LIBM_OPS or any(id(t) in tainted for t in expr.inputs):
            tainted.update(id(t) for t in expr.outputs)
    return [id(t) in tainted for t in fusion.outputs]


def bits_differ(a: np.ndarray, b: np.ndarray) -> str | None:
    """Where two arrays differ bit for bit (any NaN equals any NaN), or None."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    same = a.view(np.uint8).reshape(*a.shape, -1) == b.view(np.uint8).reshape(*b.shape, -1)
    same = same.all(axis=-1)
    if fl.DType.from_numpy(a.dtype).is_float:
        same |= np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    if same.all():
        return None
    where = tuple(int(i) for i in np.argwhere(~same)[0])
    return f"{int((~same).sum())} of {a.size} differ, first at {list(where)}: {a[where]!r} vs {b[where]!r}"


def compiled_differs(
    fusion: fl.Fusion, compiled: list[np.ndarray], interpreted: list[np.ndarray]
) -> str | None:
    """The first output computed without libm whose compiled and interpreted bits differ."""
    for k, (libm, c, i) in enumerate(zip(libm_outputs(fusion), compiled, interpreted)):
        diff = None if libm else bits_differ(c, i)
        if diff is not None:
            return f"output {k} ({fusion.outputs[k].name}): compiled vs interpreted: {diff}"
    return None


def run_three_ways(
    fusion: fl.Fusion,
    inputs: list[np.ndarray],
    executor: fl.FusionExecutor | None = None,
    pipeline: fl.Pipeline | None = None,
) -> dict[str, list[np.ndarray]]:
    """Every compute path's outputs, each validated against the reference (AssertionError
    naming the path otherwise); `executor`, one of them already lowered, is reused, the
    others lower the fusion with `pipeline` (default: the default pipeline)."""
    runs = {}
    for compute in PATHS:
        ex = executor if executor is not None and executor.compute == compute else None
        ex = ex or fl.FusionExecutor(fusion, compute=compute, pipeline=pipeline)
        runs[compute] = ex.run(inputs)
        try:
            fl.validate(fusion, inputs, runs[compute])
        except fl.FuserliteError as exc:
            raise AssertionError(f"compute={compute}: {type(exc).__name__}: {exc}") from None
    if HAVE_COMPILER:
        diff = compiled_differs(fusion, runs["compiled"], runs["interpret"])
        if diff is not None:
            raise AssertionError(diff)
    return runs


def precompile(executors: Iterable[fl.FusionExecutor]) -> None:
    """Compile every scheduled kernel of the executors' programs with one compiler launch."""
    if HAVE_COMPILER:
        compile_kernels(k for ex in executors for k in ex.program.kernels)
