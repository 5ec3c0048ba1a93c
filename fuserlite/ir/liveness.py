"""Liveness: after which step each value is dead, so evaluators can free it.

The reference evaluator (one step per expression), the executor (one step per
kernel or communication, on every device) and its op-by-op kernels (one step
per expression inside a kernel) keep a value only until the last step that
reads it; what the caller must return (`keep`) is never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from typing import TypeVar

from fuserlite.ir.tensor import TensorView

Step = TypeVar("Step")
Value = TypeVar("Value", bound=Hashable)  # a tensor, or a key naming a value


def dead_after(
    steps: Sequence[Step],
    reads: Callable[[Step], Iterable[Value]],
    writes: Callable[[Step], Iterable[Value]],
    keep: Collection[Value] = (),
) -> list[list[Value]]:
    """Per step, the tensors it reads or writes that no later step reads (not in `keep`):
    the values to drop once that step has run. A value written and never read is
    dropped right after the step that wrote it."""
    last: dict[Value, int] = {}
    for i, step in enumerate(steps):
        for t in (*reads(step), *writes(step)):
            last[t] = i
    kept = set(keep)
    dead: list[list[Value]] = [[] for _ in steps]
    for t, i in last.items():
        if t not in kept:
            dead[i].append(t)
    return dead


def read_anywhere(
    steps: Iterable[Step], reads: Callable[[Step], Iterable[TensorView]]
) -> set[TensorView]:
    """Every tensor some step reads (inputs no step reads need not be held at all)."""
    return {t for step in steps for t in reads(step)}


def peak_live(
    steps: Sequence[Step],
    reads: Callable[[Step], Iterable[TensorView]],
    writes: Callable[[Step], Iterable[TensorView]],
    size: Callable[[TensorView], int],
    exclude: Collection[TensorView] = (),
) -> int:
    """The largest total `size` of the tensors live at once, a tensor being live from
    the step that writes it through the last step that reads it (`exclude`d ones,
    e.g. inputs and outputs, not counted)."""
    first: dict[TensorView, int] = {}
    last: dict[TensorView, int] = {}
    for i, step in enumerate(steps):
        for t in writes(step):
            first.setdefault(t, i)
            last[t] = i
        for t in reads(step):
            last[t] = i
    change = [0] * (len(steps) + 1)
    skip = set(exclude)
    for t, i in first.items():
        if t not in skip:
            change[i] += size(t)
            change[last[t] + 1] -= size(t)
    peak = live = 0
    for delta in change:
        live += delta
        peak = max(peak, live)
    return peak
