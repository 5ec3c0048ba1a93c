"""Compare executed outputs with the reference evaluator (like nvFuser's testValidate).

Element by element, as numpy's allclose: `out` matches `ref` where
|out - ref| <= atol + rtol * |ref|, with (rtol, atol) from TOLERANCES by dtype
(see output_tolerances); integers and bools must be equal. NaN matches only NaN,
an infinity only the same infinity.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from fuserlite.ir import args
from fuserlite.ir.errors import ExecutionError, ValidationError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.reference.evaluator import evaluate
from fuserlite.reference.magnitude import magnitudes
from fuserlite.reference.numpy_ops import blocks

# (rtol, atol) per float dtype; every other dtype is compared exactly. The executor
# sums and multiplies in other orders than the reference (per-device partial sums,
# GEMM blocking), and it rounds a half or bfloat16 tensor wherever a kernel stores it
# while the reference keeps it in float up to the fusion's outputs: those two get the
# widest margins, both about 20 units of their rounding (2**-11 for half, 2**-8 for
# bfloat16). torch's defaults (half 1e-3, bfloat16 1.6e-2) allow one or two roundings,
# fewer than a chain of kernels makes.
TOLERANCES: dict[DType, tuple[float, float]] = {
    DType.float64: (1e-9, 1e-9),
    DType.float32: (1e-5, 1e-5),
    DType.float16: (1e-2, 1e-2),
    DType.bfloat16: (8e-2, 8e-2),
}
Tolerance = tuple[float, float] | None  # (rtol, atol); None: exactly equal


def tolerance(dtypes: Iterable[DType]) -> Tolerance:
    """The loosest tolerance among `dtypes` (an output's and those it is computed from)."""
    found = [TOLERANCES[d] for d in dtypes if d in TOLERANCES]
    return (max(r for r, _ in found), max(a for _, a in found)) if found else None


def output_tolerances(fusion: Fusion) -> list[Tolerance]:
    """Per output: the tolerance of its dtype and of every tensor computed on its way.

    A float32 output computed from a half intermediate carries that intermediate's
    rounding (where the executor stores it), so it is compared with half's tolerance.
    """
    none: frozenset[DType] = frozenset()
    grown: dict[tuple[frozenset[DType], DType], frozenset[DType]] = {}

    def plus(seen: frozenset[DType], dtype: DType) -> frozenset[DType]:
        """seen | {dtype}, one set per distinct value (outputs alike share one)."""
        if dtype in seen:
            return seen
        hit = grown.get((seen, dtype))
        if hit is None:
            hit = grown[(seen, dtype)] = seen | {dtype}
        return hit

    upstream: dict[TensorView, frozenset[DType]] = {t: none for t in fusion.inputs}
    for expr in fusion.exprs():
        sets = [upstream.get(t, none) for t in expr.inputs]
        seen = sets[0] if len(sets) == 1 else none.union(*sets)
        for out in expr.outputs:
            upstream[out] = plus(seen, out.dtype)
    found: dict[frozenset[DType], Tolerance] = {}
    tolerances = []
    for t in fusion.outputs:
        dtypes = plus(upstream.get(t, none), t.dtype)
        if dtypes not in found:
            found[dtypes] = tolerance(dtypes)
        tolerances.append(found[dtypes])
    return tolerances


@dataclass(frozen=True)
class Mismatch:
    """The worst element of an output that differs from the reference."""

    index: tuple[int, ...]
    got: str
    expected: str
    error: float  # |got - expected|; inf where a NaN or an infinity does not match
    allowed: float  # atol + rtol * scale at that element
    scale: float | None  # None: |expected|; else the magnitude of the element's terms
    count: int  # elements that differ
    size: int

    def describe(self, tol: Tolerance) -> str:
        """`at [1, 2]: got -1, expected 50 (error 51, allowed 0.0005 = ...); 3 of 8 differ`."""
        if tol is None:
            why = "integers and bools must be equal"
        elif self.error == float("inf"):
            why = "a NaN or an infinity matches only itself"
        else:
            rtol, atol = tol
            scale = "|expected|" if self.scale is None else f"{self.scale:.3g}"
            why = f"error {self.error:.3g}, allowed {self.allowed:.3g} = atol {atol:g} + rtol {rtol:g} * {scale}"
            if self.scale is not None:
                why += ", the magnitude of the terms that element is computed from"
        return (
            f"at {list(self.index)}: got {self.got}, expected {self.expected} ({why}); "
            f"{self.count} of {self.size} elements differ"
        )


BLOCK = 1 << 18  # elements compared at once: float64 temporaries stay a few MiB


def _errors(o: np.ndarray, r: np.ndarray, tol: Tolerance, s: np.ndarray | None):
    """(differs, |o - r|) of one flat block; the error is inf where a NaN or an inf is."""
    if tol is None:  # compared in the dtype itself: an int64 does not fit a float64
        with np.errstate(over="ignore"):
            return o != r, np.abs(o.astype(np.float64) - r.astype(np.float64))
    rtol, atol = tol
    o, r = o.astype(np.float64), r.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, nan - x
        error = np.abs(o - r)
        allowed = atol + rtol * (np.abs(r) if s is None else s)
        same = (o == r) | (np.isnan(o) & np.isnan(r))
        finite = np.isfinite(o) & np.isfinite(r)
    return ~same & ~(finite & (error <= allowed)), np.where(finite, error, np.inf)


def mismatch(
    out: np.ndarray, ref: np.ndarray, tol: Tolerance, scale: np.ndarray | None = None
) -> Mismatch | None:
    """The element of `out` farthest from `ref` among those outside `tol` (None: must be
    equal), or None if every element matches. The error allowed at an element is
    atol + rtol * scale, where scale is |ref| unless given (see fuserlite.reference.magnitude)."""
    out, ref = np.asarray(out), np.asarray(ref)
    o, r = out.reshape(-1), ref.reshape(-1)
    s = None if scale is None else np.broadcast_to(scale, out.shape).reshape(-1)
    count, worst, worst_error = 0, 0, -1.0
    for b in blocks(out.size, BLOCK):
        bad, error = _errors(o[b], r[b], tol, None if s is None else s[b])
        n = int(np.count_nonzero(bad))
        if n:
            k = int(np.argmax(np.where(bad, error, -1.0)))
            if error[k] > worst_error:
                worst, worst_error = b.start + k, float(error[k])
        count += n
    if count == 0:
        return None
    magnitude = abs(float(r[worst])) if s is None else float(s[worst])
    allowed = 0.0 if tol is None else tol[1] + tol[0] * magnitude
    return Mismatch(
        tuple(int(k) for k in np.unravel_index(worst, out.shape)),
        str(o[worst]),
        str(r[worst]),
        worst_error,
        allowed,
        None if s is None else magnitude,
        count,
        out.size,
    )


def max_errors(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> list[float]:
    """Largest absolute difference per output, over the elements where both are finite."""
    errors = []
    for out, ref in zip(outputs, reference):
        o, r, worst = np.asarray(out).reshape(-1), np.asarray(ref).reshape(-1), 0.0
        for b in blocks(o.size, BLOCK):
            with np.errstate(invalid="ignore", over="ignore"):  # inf - inf
                error = np.abs(o[b].astype(np.float64) - r[b].astype(np.float64))
            error = error[np.isfinite(error)]
            worst = max(worst, float(error.max())) if error.size else worst
        errors.append(worst)
    return errors


def validate(
    fusion: Fusion, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
) -> list[float]:
    """Raise ValidationError unless `outputs` equal evaluate(fusion, inputs) element by
    element within their tolerance (see output_tolerances); returns the max errors."""
    return _validate(fusion, inputs, outputs)


def _validate(
    fusion: Fusion, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
) -> list[float]:
    reference = evaluate(fusion, inputs)
    accepted = "a list or tuple of arrays, one per fusion output"
    args.instance(outputs, (list, tuple), "validate", "outputs", accepted, ExecutionError)
    if len(outputs) != len(reference):
        raise ValidationError(f"expected {len(reference)} outputs, got {len(outputs)}")
    arrays = []
    for tv, out, ref in zip(fusion.outputs, outputs, reference):
        out = np.asarray(out)
        if out.shape != ref.shape or out.dtype != ref.dtype:
            raise ValidationError(
                f"output {tv.name}: {out.dtype}{list(out.shape)}, the reference is "
                f"{ref.dtype}{list(ref.shape)}"
            )
        arrays.append(out)
    tolerances = output_tolerances(fusion)
    scales = None
    errors: list[float] = []
    for run in _runs(arrays, tolerances):
        outs, refs, tol = arrays[run], reference[run], tolerances[run.start]
        suspects, worst = _compare(outs, refs, tol)
        for k in suspects:  # in order: the first output that differs is the one reported
            i = run.start + k
            bad = mismatch(arrays[i], reference[i], tol)
            if bad is not None and tol is not None:
                # Near-cancellations carry the error of their terms: allow that, and pay
                # for the magnitudes only when |ref| alone was not enough.
                scales = scales or magnitudes(fusion, inputs)
                bad = mismatch(arrays[i], reference[i], tol, scales[i])
            if bad is not None:
                raise ValidationError(
                    f"output {fusion.outputs[i].name} differs from the reference "
                    f"{bad.describe(tol)}"
                )
        errors.extend(worst)
    return errors


def _runs(arrays: list[np.ndarray], tolerances: list[Tolerance]) -> list[slice]:
    """The outputs as runs of consecutive ones of one shape, dtype and tolerance and at
    most BLOCK elements together (compared as one stacked array), or alone."""
    runs: list[slice] = []
    start, size = 0, 0
    for i, (a, tol) in enumerate(zip(arrays, tolerances)):
        first = arrays[start]
        alike = a.shape == first.shape and a.dtype == first.dtype and tol == tolerances[start]
        if i > start and not (alike and size + a.size <= BLOCK):
            runs.append(slice(start, i))
            start, size = i, 0
        size += a.size
    if arrays:
        runs.append(slice(start, len(arrays)))
    return runs


def _compare(
    outs: list[np.ndarray], refs: list[np.ndarray], tol: Tolerance
) -> tuple[list[int], list[float]]:
    """(the outputs of a run with an element outside `tol`, each output's max error); a
    single output is compared block by block, a run of several as one stacked block."""
    if len(outs) == 1:
        out, ref = outs[0], refs[0]
        return ([] if mismatch(out, ref, tol) is None else [0]), max_errors([out], [ref])
    shape = (len(outs), outs[0].size)  # not -1: outputs of no elements have no rows to infer
    o, r = np.stack(outs).reshape(shape), np.stack(refs).reshape(shape)
    if np.array_equal(o, r):  # every element equal (what _errors counts as no error)
        return [], [0.0] * len(outs)
    bad, _ = _errors(o.reshape(-1), r.reshape(-1), tol, None)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf
        error = np.abs(o.astype(np.float64) - r.astype(np.float64))
    worst = np.where(np.isfinite(error), error, -np.inf).max(axis=1, initial=-np.inf)
    suspects = np.flatnonzero(bad.reshape(shape).any(axis=1))
    return [int(k) for k in suspects], [max(0.0, float(w)) for w in worst]
