"""A kernel's grid as numpy index arrays, in bounded chunks of whole blocks.

The grid is the kernel's loop nest (`blockIdx x Unswitch x threadIdx`, see
fuserlite.schedule.grid.kernel_grid). Its points are evaluated a chunk at
a time: a chunk is a run of consecutive points of at most CHUNK_POINTS, made
of whole values of the outer loops (whole blocks), so the index arrays of a
chunk stay a few MiB however large the tensors are. Loop variables are open
(broadcastable) aranges, so index arithmetic on outer loops costs little;
results are flattened to one value per point of the chunk.

Predicates and offsets are cached per chunk for grids of at most CACHE_POINTS
points (a kernel run again reuses them, like a compiled kernel); a GridCache,
owned by the executor, keeps them under CACHE_BYTES.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.indexing import (
    Ix,
    TensorIndex,
    evaluate,
    flat_offset,
    loop_var,
    lower_tensor,
    lowering_key,
)
from fuserlite.schedule.grid import GridAxis

CHUNK_POINTS = 2**16  # points evaluated at once: arrays of a few hundred KiB, in cache
CACHE_POINTS = 2**22  # grids up to this size keep their index arrays between runs
CACHE_BYTES = 2**28  # all cached index arrays together
MAX_GRID_POINTS = 2**31  # beyond this a schedule multiplies extents far past its tensors


class Offset:
    """Flat offsets of one access over a chunk, and the layouts that need no gather."""

    def __init__(self, off: np.ndarray, n: int, start: int) -> None:
        size = off.size
        self.n = n
        self.start = start
        self.in_bounds = bool(size == 0 or (off.min() >= 0 and off.max() < n))
        # Point k of the grid reads element k, and the points past the end fall past it.
        m = self.within = max(0, min(n - start, size))
        self.identity = np.array_equal(off[:m], np.arange(start, start + m)) and bool(
            (off[m:] >= n).all()
        )
        # Point k reads element k % n (a broadcast over outer axes), in whole periods.
        self.periodic = (
            not self.identity
            and 0 < n < size
            and size % n == 0
            and start % n == 0
            and np.array_equal(off.reshape(-1, n), np.broadcast_to(np.arange(n), (size // n, n)))
        )
        # These two layouts are cheaper to rebuild than to keep (in the cache).
        self._off = None if self.identity or self.periodic else off
        self.size = size

    @property
    def off(self) -> np.ndarray:
        """The offsets, one per point of the chunk."""
        if self._off is not None:
            return self._off
        points = np.arange(self.start, self.start + self.size)
        return points if self.identity else points % self.n

    def at(self, points: np.ndarray) -> np.ndarray:
        """The offsets of the chunk's points where the bool mask `points` holds (a
        rebuilt layout costs only the points selected)."""
        if self._off is not None:
            return self._off[points]
        k = self.start + np.flatnonzero(points)
        return k if self.identity else k % self.n

    def nbytes(self) -> int:
        return 0 if self._off is None else self._off.nbytes


class GridChunk:
    """Points [start, start + size) of a grid, with their predicates and offsets."""

    def __init__(self, grid: Grid, start: int, env: dict[str, np.ndarray], extents) -> None:
        self.grid = grid
        self.start = start
        self.env = env
        self.extents = tuple(extents)
        self.size = math.prod(self.extents)
        self._memo: dict[tuple, np.ndarray] = {}
        self._preds: dict[tuple, np.ndarray] = {}
        self._offsets: dict[tuple, Offset] = {}

    def flat(self, value: np.ndarray) -> np.ndarray:
        """One entry per point of the chunk, in grid order."""
        return np.broadcast_to(value, self.extents).reshape(-1)

    def pred(self, key: tuple, ti: TensorIndex, device: dict[str, int]) -> np.ndarray:
        """Where the tensor lowered to `ti` (structure `key`) is in bounds on the device
        whose indices `device` gives ({"didx": 2}; read by uneven shardings' predicates)."""
        env = self.env
        if not ti.predicates:
            key = ()  # always in bounds: one array of True serves every such tensor
        elif ti.devices:
            key = (key, *(device[name] for name in ti.devices))
            env = {**env, **{name: np.int64(device[name]) for name in ti.devices}}
        hit = self._preds.get(key)
        if hit is None:
            pred = np.ones(self.extents, dtype=bool)
            for ix, bound in ti.predicates:
                pred = pred & (evaluate(ix, env, self._memo) < bound)
            hit = self._preds[key] = self.flat(pred)
        return hit

    def values(self, ix: Ix, device: dict[str, int]) -> np.ndarray:
        """An index expression's value at each point of the chunk, on the device whose
        indices `device` gives (an element's global index reads them)."""
        env = {**self.env, **{name: np.int64(i) for name, i in device.items()}}
        return self.flat(evaluate(ix, env, self._memo))

    def offset(self, key: tuple, shape: tuple[int, ...], coords: list) -> Offset:
        """Flat offsets into an array of `shape` at `coords` (cached by `key`)."""
        hit = self._offsets.get(key)
        if hit is None:
            off = self.flat(evaluate(flat_offset(shape, coords), self.env, self._memo))
            hit = self._offsets[key] = Offset(off, math.prod(shape), self.start)
        return hit

    def done(self) -> None:
        """The chunk's points were evaluated: drop intermediate index arrays."""
        self._memo.clear()

    def nbytes(self) -> int:
        return sum(p.nbytes for p in self._preds.values()) + sum(
            o.nbytes() for o in self._offsets.values()
        )


class Grid:
    """A kernel grid: its symbolic lowerings, and its points chunk by chunk."""

    def __init__(self, grid: list[GridAxis], chunk_points: int | None = None) -> None:
        self.grid = grid
        self.extents = tuple(g.extent for g in grid)
        self.size = math.prod(self.extents)
        if self.size > MAX_GRID_POINTS:
            raise ExecutionError(
                f"the kernel grid {list(self.extents)} has {self.size} points; the kernel runner "
                f"evaluates at most {MAX_GRID_POINTS} (its loop extents multiply far beyond "
                "its tensors: give every tensor of the kernel the same schedule)"
            )
        self.chunk_points = chunk_points or CHUNK_POINTS
        self._chunks: list[GridChunk] | None = None

    def lower(self, tv: TensorView) -> tuple[tuple, TensorIndex]:
        """(lowering key, symbolic index) of a tensor the kernel computes: what its
        predicates and offsets are cached by."""
        return lowering_key(tv), lower_tensor(tv, self.grid)

    @property
    def cached(self) -> bool:
        return self.size <= CACHE_POINTS

    def chunks(self) -> Iterator[GridChunk]:
        """The grid's points, a chunk at a time, in grid order."""
        if not self.cached:
            yield from self._make_chunks()
            return
        if self._chunks is None:
            self._chunks = list(self._make_chunks())
        yield from self._chunks

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self._chunks or [])

    def _make_chunks(self) -> Iterator[GridChunk]:
        ext = self.extents
        n = len(ext)
        # Split at the outermost loop whose inner loops fit in a chunk; loops outside
        # it take one value per chunk, loops inside it are whole.
        k = 0
        while k < n and math.prod(ext[k + 1 :]) > self.chunk_points:
            k += 1
        if k == n:  # a grid without loops (a kernel of scalars): one point
            yield GridChunk(self, 0, {}, ())
            return
        inner = math.prod(ext[k + 1 :])
        step = max(1, self.chunk_points // inner)
        start = 0
        for outer in np.ndindex(*ext[:k]):
            for lo in range(0, ext[k], step):
                hi = min(lo + step, ext[k])
                env = {}
                for j in range(n):
                    shape = [1] * n
                    if j < k:
                        values = np.full(1, outer[j], dtype=np.int64)
                    elif j == k:
                        values, shape[j] = np.arange(lo, hi, dtype=np.int64), hi - lo
                    else:
                        values, shape[j] = np.arange(ext[j], dtype=np.int64), ext[j]
                    env[loop_var(j)] = values.reshape(shape)
                extents = [1] * k + [hi - lo, *ext[k + 1 :]]
                chunk = GridChunk(self, start, env, extents)
                start += chunk.size
                yield chunk


class GridCache:
    """Grids by their axes, most recently used last, their index arrays kept under
    CACHE_BYTES. An executor owns one for its kernels (runs reuse its indices, like a
    compiled kernel); nothing is kept past its owner."""

    def __init__(self) -> None:
        self._grids: dict[tuple[GridAxis, ...], Grid] = {}

    def grid(self, axes: list[GridAxis]) -> Grid:
        """The grid of `axes`: everything cached in it is keyed by structure."""
        key = tuple(axes)
        hit = self._grids.pop(key, None) or Grid(axes)
        self._grids[key] = hit  # most recently used last
        return hit

    def trim(self) -> None:
        """Forget the least recently used grids while they hold over CACHE_BYTES."""
        grids = self._grids
        total = sum(g.nbytes() for g in grids.values())
        for key in list(grids)[:-1]:  # never the grid just used
            if total <= CACHE_BYTES:
                break
            total -= grids.pop(key).nbytes()
        last = next(reversed(grids), None)
        if last is not None and total > CACHE_BYTES:
            del grids[last]

    def clear(self) -> None:
        self._grids.clear()

    def __len__(self) -> int:
        return len(self._grids)
