"""The kernel runner's global memory: reading a tensor at a chunk's offsets, and
writing the tensors a step stores, chunk by chunk in grid order.

A store holds a batch of tensors (fuserlite.kernel.batches: expressions that
lower alike are evaluated together, one row of values each) written at the same
offsets under the same predicate: one block of rows, each tensor's array one row
(kernel.batches bounds a batch, so a block stays a few MiB however many tensors).
"""

from __future__ import annotations

import math

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.grid_index import GridChunk, Offset


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


class Store:
    """Tensors a step writes to memory, all of one shape and layout (a batch: one row
    of a block each), filled chunk by chunk in grid order.

    While every chunk so far wrote the elements of its own grid points in order (the
    identity layout: grid point k writes element k) the elements written are a
    prefix and no mask is kept; the first chunk that writes otherwise fills the rest
    with poison and starts a mask of the elements written (and valid). Values are
    held in the tensors' compute dtype (see fuserlite.reference.numpy_ops.store)."""

    def __init__(self, tvs: list[TensorView], key: tuple, coords: list) -> None:
        self.tvs = tvs
        self.key = key
        self.coords = coords
        self.shape = local_shape(tvs[0])
        self.dtype = tvs[0].dtype.compute.numpy
        self.n = math.prod(self.shape)
        self.data = np.empty((len(tvs), self.n), dtype=self.dtype)
        self.prefix = 0  # while `mask` is None: elements [0, prefix) are written
        # ... but for these (rows, flat indices), which are not valid
        self.invalid: list[tuple[np.ndarray, np.ndarray]] = []
        self.mask: np.ndarray | None = None

    def write(self, chunk: GridChunk, value: np.ndarray, valid: np.ndarray, pred) -> None:
        """Store the chunk's values where the predicate holds (invalid ones as poison);
        `value` and `valid` are [points], or [batch, points] for one row per tensor."""
        off = chunk.offset(self.key, self.shape, self.coords)
        value = value.astype(self.dtype, copy=False)
        if valid is not pred:
            value = np.where(valid, value, poison(self.dtype))
        lo, m = off.start, off.within
        if off.identity and pred[:m].all() and not pred[m:].any():
            self.data[:, lo : lo + m] = value[..., :m]
            if self.mask is not None:
                self.mask[:, lo : lo + m] = valid[..., :m]
                return
            if valid is not pred:
                bad = ~np.broadcast_to(valid[..., :m], (len(self.tvs), m))
                if bad.any():
                    where, at = np.nonzero(bad)
                    self.invalid.append((where, lo + at))
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
        self.data[:, sel] = value[..., pred]
        self.mask[:, sel] = valid[..., pred]

    def _start_mask(self) -> None:
        if self.mask is not None:
            return
        self.mask = np.zeros(self.data.shape, dtype=bool)
        self.mask[:, : self.prefix] = True
        for where, at in self.invalid:
            self.mask[where, at] = False
        self.data[:, self.prefix :] = poison(self.dtype)

    def finish(self) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Per tensor (flat data, mask of the valid elements, or None when every element
        was written): rows of the batch's block."""
        if self.mask is None and self.prefix < self.n:
            self._start_mask()  # a grid smaller than the tensor
        if self.mask is None:
            return [(data, None) for data in self.data]
        whole = self.mask.all(axis=1)
        return [(d, None if w else m) for d, m, w in zip(self.data, self.mask, whole)]
