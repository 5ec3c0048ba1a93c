"""The kernel runner's global memory: reading a tensor at a chunk's offsets, and
writing the tensors a step stores, chunk by chunk in grid order.

A store holds a batch of tensors (fuserlite.runtime.kernel_runner: expressions
that lower alike are evaluated together, one row of values each) written at the
same offsets under the same predicate; each tensor keeps its own array and its own
mask, so one of them can be freed before the others.
"""

from __future__ import annotations

import math

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.runtime.kernel_grid import GridChunk, Offset


def poison(dtype: np.dtype) -> object:
    """The value of an element no valid grid point wrote."""
    if dtype.kind == "f":
        return np.nan
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    return True


def gather(
    flat: np.ndarray, written: np.ndarray | None, off: Offset, pred: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The array's elements at a chunk's offsets, and where they are valid."""
    ok = pred
    if off.identity:  # grid point k reads element k: a slice, no gather
        lo, m = off.start, off.within
        if m == pred.size:
            value = flat[lo : lo + m]  # read in place
        else:
            value = np.empty(pred.shape, dtype=flat.dtype)
            value[:m] = flat[lo : lo + m]
            value[m:] = flat[0] if off.n else 0
            ok = ok & (np.arange(pred.size) < m)  # past the end: nothing to read
        if written is not None:
            ok = ok & np.concatenate([written[lo : lo + m], np.zeros(pred.size - m, bool)])
        return value, ok
    if off.periodic and written is None:
        return np.tile(flat, pred.size // off.n), ok
    value = np.take(flat, off.off, mode="clip")
    if not off.in_bounds:
        ok = ok & (off.off >= 0) & (off.off < off.n)
    if written is not None:
        ok = ok & np.take(written, off.off, mode="clip")
    return value, ok


def rows(values: np.ndarray, count: int) -> list[np.ndarray] | np.ndarray:
    """A batch's values per member: the rows of a [count, points] array, or one
    [points] array that every member shares."""
    return values if values.ndim == 2 else [values] * count


class Store:
    """Tensors a step writes to memory, all of one shape and layout (a batch), filled
    chunk by chunk in grid order.

    While every chunk so far wrote the elements of its own grid points in order (the
    identity layout: grid point k writes element k) the elements written are a
    prefix and no mask is kept; the first chunk that writes otherwise fills the rest
    with poison and starts a mask of the elements written (and valid). Values are
    held in the tensors' compute dtype (see fuserlite.runtime.numpy_ops.store)."""

    def __init__(self, tvs: list[TensorView], key: tuple, coords: list) -> None:
        self.tvs = tvs
        self.key = key
        self.coords = coords
        self.shape = local_shape(tvs[0])
        self.dtype = tvs[0].dtype.compute.numpy
        self.n = math.prod(self.shape)
        self.data = [np.empty(self.n, dtype=self.dtype) for _ in tvs]
        self.prefix = 0  # while `mask` is None: elements [0, prefix) are written
        # ... of which these flat indices are not valid, per tensor
        self.invalid: list[list[np.ndarray]] = [[] for _ in tvs]
        self.mask: list[np.ndarray] | None = None

    def write(self, chunk: GridChunk, value: np.ndarray, valid: np.ndarray, pred) -> None:
        """Store the chunk's values where the predicate holds (invalid ones as poison);
        `value` and `valid` are [points], or [batch, points] for one row per tensor."""
        off = chunk.offset(self.key, self.shape, self.coords)
        value = value.astype(self.dtype, copy=False)
        if valid is not pred:
            value = np.where(valid, value, poison(self.dtype))
        count = len(self.tvs)
        values, valids = rows(value, count), rows(valid, count)
        lo, m = off.start, off.within
        if off.identity and pred[:m].all() and not pred[m:].any():
            for data, v in zip(self.data, values):
                data[lo : lo + m] = v[:m]
            if self.mask is not None:
                for mask, ok in zip(self.mask, valids):
                    mask[lo : lo + m] = ok[:m]
                return
            if valid is not pred:
                for invalid, ok in zip(self.invalid, valids):
                    if not ok[:m].all():
                        invalid.append(lo + np.flatnonzero(~ok[:m]))
            if m:
                self.prefix = lo + m
            return
        self._start_mask()
        sel = off.at(pred)  # a broadcast row: the first chunk holds all its points
        if sel.size and (sel.min() < 0 or sel.max() >= off.n):
            raise ExecutionError(
                f"run_kernel: {self.tvs[0].name} is written out of bounds (flat index "
                f"{sel.max()} of {off.n}); its schedule does not match its shape"
            )
        for data, mask, v, ok in zip(self.data, self.mask, values, valids):
            data[sel] = v[pred]
            mask[sel] = ok[pred]

    def _start_mask(self) -> None:
        if self.mask is not None:
            return
        self.mask = []
        for data, invalid in zip(self.data, self.invalid):
            mask = np.zeros(self.n, dtype=bool)
            mask[: self.prefix] = True
            for where in invalid:
                mask[where] = False
            data[self.prefix :] = poison(self.dtype)
            self.mask.append(mask)

    def finish(self) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Per tensor (flat data, mask of the valid elements, or None when every element
        was written)."""
        if self.mask is None and self.prefix < self.n:
            self._start_mask()  # a grid smaller than the tensor
        if self.mask is None:
            return [(data, None) for data in self.data]
        return [(data, None if m.all() else m) for data, m in zip(self.data, self.mask)]
