"""Compare executed outputs with the reference evaluator (like nvFuser's testValidate)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.fusion import Fusion
from fuserlite.runtime.reference import evaluate

_TOLERANCE = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-10}


class ValidationError(ExecutionError):
    """Executed outputs differ from the reference."""


def max_errors(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> list[float]:
    """Largest absolute difference per output, over the elements where both are finite
    (matching infinities and NaNs count as equal)."""
    errors = []
    for o, r in zip(outputs, reference):
        o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
        both = np.isfinite(o) & np.isfinite(r)
        errors.append(float(np.max(np.abs(o[both] - r[both]))) if both.any() else 0.0)
    return errors


def validate(
    fusion: Fusion, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
) -> list[float]:
    """Raise ValidationError unless `outputs` equal evaluate(fusion, inputs) within
    a dtype-aware tolerance (exact for integers); returns the max errors."""
    reference = evaluate(fusion, inputs)
    if len(outputs) != len(reference):
        raise ValidationError(f"expected {len(reference)} outputs, got {len(outputs)}")
    for tv, out, ref in zip(fusion.outputs, outputs, reference):
        out = np.asarray(out)
        if out.shape != ref.shape:
            raise ValidationError(
                f"output {tv.name}: shape {list(out.shape)}, reference {list(ref.shape)}"
            )
        tol = _TOLERANCE.get(ref.dtype.name)
        if tol is None:
            ok = np.array_equal(out, ref)
        else:
            finite = np.abs(ref[np.isfinite(ref)])
            scale = max(1.0, float(finite.max())) if finite.size else 1.0
            with np.errstate(invalid="ignore"):  # inf - inf in isclose's own arithmetic
                ok = np.allclose(out, ref, rtol=tol, atol=tol * scale, equal_nan=True)
        if not ok:
            err = max_errors([out], [ref])[0]
            raise ValidationError(
                f"output {tv.name} differs from the reference: max error {err:.3g}"
            )
    return max_errors(outputs, reference)
