"""Compare executed outputs with expected ones, element by element, within the rounding
error actually possible there (like nvFuser's testValidate, with a bound per element).

An element matches when |out - expected| <= LAMBDA sigma, sigma the standard deviation
of the difference two correct evaluations can have at that element
(fuserlite.reference.rounding: the order of sums, math libraries, half stores; 0 where
both compute it from equal values by the same exactly rounded operations, so it must be
bit-identical there). NaN matches only NaN, an infinity only the same infinity.

`validate` compares with the float reference (fl.evaluate); `compare` with any other
evaluation of the fusion (the executor's unsharded run: runtime/validation.py), for
the differences it may have. Either returns a Comparison that says how close the
outputs came and where the error comes from; validate raises ValidationError for an
element beyond its allowance, naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fuserlite.ir import args
from fuserlite.ir.errors import ExecutionError, ValidationError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.types import DType
from fuserlite.reference.evaluator import check_inputs, evaluate
from fuserlite.reference.numpy_ops import blocks
from fuserlite.reference.rounding import (
    AGAINST_REFERENCE,
    LAMBDA,
    SOURCES,
    Bounds,
    Differences,
    Source,
    bounds,
)
from fuserlite.reference.rows import Rows, Span, row_blocks

BLOCK = 1 << 18  # elements compared at once: float64 temporaries stay a few MiB
REFERENCE = "the reference"

# What each source's rounding is, for a report ("bfloat16 rounding at kernel stores").
SOURCE_TEXT = {
    Source.ORDER: "{} sum order",
    Source.LIBRARY: "{} exp, tanh, log of another math library",
    Source.STORE: "{} rounding of intermediates at kernel stores",
}


@dataclass(frozen=True)
class Element:
    """One element of an output, compared: where, what it is and what it may be."""

    output: str
    index: tuple[int, ...]
    got: str
    expected: str
    error: float  # |got - expected|; inf where a NaN or an infinity does not match
    allowed: float  # LAMBDA sigma there (inf: unbounded; 0: must be bit-identical)
    sources: tuple[tuple[str, float], ...]  # sigma's parts: (what, share of its variance)
    exact_dtype: bool  # an integer or bool output

    @property
    def relative(self) -> float:
        """|error| / |expected| (inf where expected is 0 and the error is not)."""
        expected = abs(float(self.expected))
        if self.error == 0:
            return 0.0
        return self.error / expected if expected else float("inf")

    @property
    def used(self) -> float:
        """error / allowed: how much of its allowance the element uses."""
        if self.error == 0:
            return 0.0
        return self.error / self.allowed if self.allowed else float("inf")

    def where(self) -> str:
        return f"{self.output}{list(self.index)}"

    def why(self) -> str:
        """`error 83, allowed 0.5 = 10 sigma (float32 sum order 100%)`, or why none is."""
        if self.error == float("inf"):
            return "a NaN or an infinity matches only itself"
        if self.allowed == 0:
            if self.exact_dtype:
                return "integers and bools must be equal"
            return (
                "allowed 0: it is computed from equal values by exactly rounded operations, "
                "so it must be bit-identical"
            )
        return f"error {self.error:.3g}, allowed {self.allowed:.3g} = {LAMBDA:g} sigma of {self.origin()}"

    def origin(self) -> str:
        """Where the rounding allowed at this element comes from, largest share first."""
        shown = [(what, share) for what, share in self.sources if share >= 0.005]
        if not shown:
            return "no rounding"
        if len(shown) == 1:
            return shown[0][0]
        return ", ".join(f"{what} ({share:.0%})" for what, share in shown)


@dataclass(frozen=True)
class Comparison:
    """Outputs compared with expected ones (`against`): max abs error per output, how
    many elements differ at all, the element that uses most of its allowance and, where
    some exceed theirs, the worst of them and how many."""

    against: str
    max_errors: list[float]
    differing: int
    size: int
    nearest: Element | None  # None: every element equal
    failed: int
    worst: Element | None  # the worst element beyond its allowance (failed > 0)
    unbounded: int  # elements whose allowance is unbounded (a division near 0)

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def summary(self) -> list[str]:
        """`bit-identical`, or the max error and (a second line) the element nearest its
        allowance: its relative error, the allowance and where the error comes from."""
        if self.differing == 0:
            return [f"bit-identical ({self.size} elements)"]
        e = self.nearest
        worst = max(self.max_errors, default=0.0)
        lines = [
            f"{self.differing} of {self.size} elements differ, max error {worst:.3g}",
            f"nearest its allowance: {e.output} at {list(e.index)}: {e.got} vs {e.expected}, "
            f"error {e.error:.3g} (relative {e.relative:.2g}), {100 * e.used:.2g}% of the "
            f"{e.allowed:.3g} allowed = {LAMBDA:g} sigma of {e.origin()}",
        ]
        if self.unbounded:
            lines.append(f"{self.unbounded} elements unbounded (a division or log near 0)")
        return lines

    def failure(self) -> str:
        """The message of a comparison that failed: its worst element, and how many."""
        e = self.worst
        return (
            f"output {e.output} differs from {self.against} at {list(e.index)}: got {e.got}, "
            f"expected {e.expected} ({e.why()}); {self.failed} of {self.size} elements differ"
        )


def _checked(
    fusion: Fusion,
    outputs: Sequence[np.ndarray],
    expected: Sequence[tuple[tuple[int, ...], np.dtype]],
    against: str,
) -> list[np.ndarray]:
    """The outputs as arrays, each of the shape and dtype `expected` names."""
    accepted = "a list or tuple of arrays, one per fusion output"
    args.instance(outputs, (list, tuple), "validate", "outputs", accepted, ExecutionError)
    if len(outputs) != len(expected):
        raise ValidationError(f"expected {len(expected)} outputs, got {len(outputs)}")
    arrays = []
    for tv, out, (shape, dtype) in zip(fusion.outputs, outputs, expected):
        out = np.asarray(out)
        if out.shape != tuple(shape) or out.dtype != dtype:
            name = "the reference" if against == REFERENCE else against
            raise ValidationError(
                f"output {tv.name}: {out.dtype}{list(out.shape)}, {name} is "
                f"{np.dtype(dtype)}{list(shape)}"
            )
        arrays.append(out)
    return arrays


def validate(
    fusion: Fusion, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
) -> Comparison:
    """Raise ValidationError unless `outputs` equal evaluate(fusion, inputs) element by
    element within the rounding possible there (module doc); returns the Comparison.

    A row-wise fusion (reference/rows.py) is evaluated a block of rows at a time, its
    reference values and bounds alike: memory stays near the outputs' own."""
    args.instance(fusion, Fusion, "validate", "fusion", "a Fusion", ExecutionError)
    rows = row_blocks(fusion)
    if rows is None:
        reference = evaluate(fusion, inputs)
        found = compare(fusion, inputs, outputs, reference, AGAINST_REFERENCE, REFERENCE)
    else:
        kinds = [(t.shape, t.dtype.numpy) for t in fusion.outputs]
        arrays = _checked(fusion, outputs, kinds, REFERENCE)
        check_inputs(fusion, inputs)  # the whole inputs' errors, not a block's

        def reference(span: Span) -> list[np.ndarray]:
            return evaluate(fusion, inputs, block=(rows, span))

        found = _compared(fusion, inputs, arrays, reference, rows, AGAINST_REFERENCE, REFERENCE)
    if not found.ok:
        raise ValidationError(found.failure())
    return found


def compare(
    fusion: Fusion,
    inputs: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
    expected: Sequence[np.ndarray],
    differences: Differences,
    against: str,
) -> Comparison:
    """`outputs` against `expected` (both evaluations of `fusion` on `inputs`), each
    element within LAMBDA sigma of the `differences` the two may have; the rounding
    bounds are evaluated only where some element differs at all (of a row-wise fusion:
    only for the blocks of rows where some does)."""
    expected = [np.asarray(e) for e in expected]
    arrays = _checked(fusion, outputs, [(e.shape, e.dtype) for e in expected], against)
    identical = _identical(arrays, expected)
    rows = None if all(identical) else row_blocks(fusion)
    return _compared(
        fusion,
        inputs,
        arrays,
        lambda span: [_rows(e, span) for e in expected],
        rows,
        differences,
        against,
        identical,
    )


def _compared(
    fusion: Fusion,
    inputs: Sequence[np.ndarray],
    arrays: list[np.ndarray],
    expected: Callable[[Span | None], list[np.ndarray]],
    rows: Rows | None,
    differences: Differences,
    against: str,
    identical: list[bool] | None = None,
) -> Comparison:
    """compare's work: the outputs block of rows by block (`rows`; None: whole), each
    against `expected(span)`, with the bounds of a block only where some element in it
    differs (`identical`: per output, whether all of it is equal, where already known:
    those outputs are not compared again block by block)."""
    counts = [sum(a.size for a in arrays), 0, 0, 0]  # elements: all, differing, failed, unbounded
    errors = [0.0] * len(arrays)
    nearest: Element | None = None
    worst: Element | None = None
    for span in [None] if rows is None else rows.spans():
        refs = expected(span)
        outs = [_rows(a, span) for a in arrays]
        differ = _differing(outs, refs, identical, whole=rows is None)
        if not differ:
            continue
        found = bounds(fusion, inputs, differences, None if rows is None else (rows, span))
        for i in differ:
            starts = () if span is None else tuple(s.start for s in span)
            result = _compare_one(fusion, i, outs[i], refs[i], found, starts)
            errors[i] = max(errors[i], result[0])
            for k, n in enumerate(result[1:4]):
                counts[k + 1] += n
            near, bad = result[4], result[5]
            if near is not None and (nearest is None or _closer(near, nearest)):
                nearest = near
            if bad is not None and (worst is None or _closer(bad, worst)):
                worst = bad
    return Comparison(against, errors, counts[1], counts[0], nearest, counts[2], worst, counts[3])


def _differing(
    outs: list[np.ndarray], refs: list[np.ndarray], identical: list[bool] | None, whole: bool
) -> list[int]:
    """The outputs that differ somewhere in a block (`whole`: the block is all of them):
    `identical` says it, where known, for a whole block; a block of rows compares those
    not known to be equal throughout."""
    if identical is not None and whole:
        return [i for i, equal in enumerate(identical) if not equal]
    check = [i for i in range(len(outs)) if identical is None or not identical[i]]
    same = _identical([outs[i] for i in check], [refs[i] for i in check])
    return [i for i, equal in zip(check, same) if not equal]


def _rows(a: np.ndarray, span: Span | None) -> np.ndarray:
    """The block `span` of `a` (None: all of it)."""
    return a if span is None else a[span]


def _closer(a: Element, b: Element) -> bool:
    """Whether `a` uses more of its allowance than `b` (then the larger error)."""
    return (a.used, a.error) > (b.used, b.error)


def _identical(outs: list[np.ndarray], refs: list[np.ndarray]) -> list[bool]:
    """Per output: every element equal to the expected one (NaN to NaN). Outputs of one
    shape and dtype are compared stacked (20000 small outputs: a few numpy calls)."""
    found = [False] * len(outs)
    start = 0
    while start < len(outs):
        stop, size = start + 1, outs[start].size
        while (
            stop < len(outs)
            and outs[stop].shape == outs[start].shape
            and outs[stop].dtype == outs[start].dtype
            and size + outs[stop].size <= BLOCK
        ):
            size += outs[stop].size
            stop += 1
        if stop - start == 1:
            found[start] = _equal(outs[start].reshape(-1), refs[start].reshape(-1))
        else:
            shape = (stop - start, outs[start].size)
            same = _same(
                np.stack(outs[start:stop]).reshape(shape), np.stack(refs[start:stop]).reshape(shape)
            )
            found[start:stop] = [bool(row) for row in same.all(axis=1)]
        start = stop
    return found


def _same(o: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Element by element: equal, or both NaN."""
    same = o == r
    if DType.from_numpy(o.dtype).is_float:
        same |= np.isnan(o) & np.isnan(r)
    return same


def _equal(o: np.ndarray, r: np.ndarray) -> bool:
    """Whether two flat arrays are equal (NaN to NaN), BLOCK elements at a time: no
    temporary of their size, and done at the first block that differs."""
    return all(bool(_same(o[b], r[b]).all()) for b in blocks(o.size, BLOCK))


def _compare_one(
    fusion: Fusion,
    i: int,
    out: np.ndarray,
    ref: np.ndarray,
    found: Bounds,
    offset: tuple[int, ...] = (),
):
    """(max error, differing, failed, unbounded, nearest, worst) of output i (`out` and
    `ref`: its rows from `offset` on, where `found` bounds a block of rows)."""
    tv = fusion.outputs[i]
    err = found.errs[i]
    parts = None if err is None else np.broadcast_to(err.parts, (len(SOURCES), *out.shape))
    o, r = out.reshape(-1), ref.reshape(-1)
    flat = None if parts is None else parts.reshape(len(SOURCES), -1)
    max_error, differing, failed, unbounded = 0.0, 0, 0, 0
    found_at: list = [None, None]  # nearest its allowance, worst beyond it: (used, error, k)
    exact_dtype = not tv.dtype.is_float
    for b in blocks(o.size, BLOCK):
        ob, rb = o[b].astype(np.float64), r[b].astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, nan - x
            error = np.abs(ob - rb)
            if exact_dtype:  # in their own dtype: an int64 does not fit a float64
                same = o[b] == r[b]
                error = np.where(same, 0.0, np.maximum(error, 1.0))
            else:
                same = (ob == rb) | (np.isnan(ob) & np.isnan(rb))
            finite = np.isfinite(ob) & np.isfinite(rb)
            error = np.where(same, 0.0, np.where(finite, error, np.inf))
            sigma = np.zeros(error.shape) if flat is None else np.sqrt((flat[:, b] ** 2).sum(0))
            allowed = LAMBDA * sigma
            beyond = error > allowed
            used = np.divide(
                error, allowed, out=np.where(error > 0, np.inf, 0.0), where=allowed > 0
            )
        fin = error[np.isfinite(error)]
        max_error = max(max_error, float(fin.max())) if fin.size else max_error
        differing += int(np.count_nonzero(~same))
        failed += int(np.count_nonzero(beyond))
        unbounded += int(np.count_nonzero(np.isinf(allowed) & ~same))
        for mask, which in ((~same, 0), (beyond, 1)):
            k = _most(mask, used, error)
            if k is not None and (
                found_at[which] is None or (used[k], error[k]) > found_at[which][:2]
            ):
                found_at[which] = (float(used[k]), float(error[k]), b.start + k)
    near, bad = found_at

    def element(at) -> Element | None:
        if at is None:
            return None
        k = at[2]
        shares: tuple = ()
        if flat is not None:
            var = flat[:, k] ** 2
            total = float(var.sum())
            if total > 0 and np.isfinite(total):
                shares = tuple(
                    sorted(
                        (
                            (_source_text(s, found), float(v) / total)
                            for s, v in zip(SOURCES, var)
                            if v > 0
                        ),
                        key=lambda x: -x[1],
                    )
                )
        sigma = 0.0 if flat is None else float(np.sqrt((flat[:, k] ** 2).sum()))
        return Element(
            tv.name,
            tuple(
                int(j) + (offset[a] if a < len(offset) else 0)
                for a, j in enumerate(np.unravel_index(k, out.shape))
            ),
            str(o[k]),
            str(r[k]),
            at[1],
            LAMBDA * sigma,
            shares,
            exact_dtype,
        )

    return max_error, differing, failed, unbounded, element(near), element(bad)


def _most(mask: np.ndarray, used: np.ndarray, error: np.ndarray) -> int | None:
    """The index among `mask` of the largest (used, error), NaN used the largest, the
    last of equals; None if the mask is empty."""
    if not mask.any():
        return None
    u = np.where(mask, used, -1.0)
    nan = np.isnan(u)
    candidates = np.flatnonzero(nan) if nan.any() else np.flatnonzero(u == u.max())
    e = error[candidates]
    return int(candidates[len(e) - 1 - int(np.argmax(e[::-1]))])


def _source_text(source: Source, found: Bounds) -> str:
    dtypes = sorted(d.name for d in found.dtypes.get(source, ())) or ["float"]
    return SOURCE_TEXT[source].format("/".join(dtypes))
