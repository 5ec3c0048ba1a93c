"""A host loop's chunk views as the executor runs them (program.host.ChunkView).

`ShardByStream C = W axis a chunk i of S [of B blocks]` makes C the i-th of S chunks
of W along its data axis a (fuserlite.ir.streams): on each device, the local part of
that axis is B/d blocks (d: the devices sharding it) of equal rows, and the chunk is
the i-th 1/S of every block. A read view is a numpy view of W's local array; a written
one is stored into W's local array (allocated at the first chunk) after the loop's
steps of chunk i computed C. A ring's view (`chunk (i + DIDx) % D of D`) takes, on the
device of DIDx index t, chunk (i + t) mod D: C is a ring chunk (fuserlite.schedule.ring),
whose local block is that chunk.
"""

from __future__ import annotations

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.tensor import TensorView
from fuserlite.program.host import ChunkView
from fuserlite.program.shards import device_shape
from fuserlite.schedule.streams import device_count


def _rows(whole: TensorView, view: ChunkView, shape: tuple[int, ...]) -> tuple[int, tuple]:
    """(data axis, index) of chunk `view.number` in a local array of `shape`."""
    c = view.view.chunking
    axis = sum(1 for ax in whole.domain.logical[: c.axis] if not ax.is_reduction)
    local_blocks = c.blocks // device_count(whole, c.axis)
    return axis, (local_blocks, c.chunks, shape[axis] // (local_blocks * c.chunks))


def _chunk(array: np.ndarray, axis: int, split: tuple, i: int) -> np.ndarray:
    """Chunk i of `array` along `axis`, cut as `split` (blocks, chunks, rows): a view
    where the blocks are one, else a copy."""
    blocks, chunks, rows = split
    if blocks == 1:
        index = [slice(None)] * array.ndim
        index[axis] = slice(i * rows, (i + 1) * rows)
        return array[tuple(index)]
    shape = array.shape
    cut = array.reshape(shape[:axis] + (blocks, chunks, rows) + shape[axis + 1 :])
    part = np.take(cut, i, axis=axis + 1)
    return part.reshape(shape[:axis] + (blocks * rows,) + shape[axis + 1 :])


def run_view(view: ChunkView, values: dict[int, dict[TensorView, np.ndarray]]) -> None:
    """Make or store the chunk of `view` on every hosted device that holds its tensors."""
    whole, chunk = view.view.whole, view.view.chunk
    for d, local in values.items():
        i = view.number_on(d)  # a ring's chunk is the device's own (i + index) mod D
        if not view.writes:
            if whole not in local:
                continue
            axis, split = _rows(whole, view, local[whole].shape)
            local[chunk] = _chunk(local[whole], axis, split, i)
            continue
        if chunk not in local:
            if whole.mesh is None or d in whole.mesh.devices:  # never a whole missing a chunk
                raise ExecutionError(
                    f"device {d}: chunk {i} of {whole.name} ({chunk.name}) was not computed"
                )
            continue
        part = local[chunk]
        if whole not in local:
            local[whole] = np.empty(device_shape(whole, d), part.dtype)
        target = local[whole]
        axis, split = _rows(whole, view, target.shape)
        blocks, chunks, rows = split
        if part.shape[axis] != blocks * rows:
            raise ExecutionError(
                f"device {d}: chunk {i} of {whole.name} has {part.shape[axis]} rows, not "
                f"{blocks * rows}"
            )
        shape = target.shape
        cut = target.reshape(shape[:axis] + (blocks, chunks, rows) + shape[axis + 1 :])
        index = [slice(None)] * cut.ndim
        index[axis + 1] = i
        cut[tuple(index)] = part.reshape(shape[:axis] + (blocks, rows) + shape[axis + 1 :])
