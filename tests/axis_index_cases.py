"""Fusions of iota and shard_map's axis_index, shared by tests/test_iota.py,
tests/test_axis_index.py and the MPI jobs (tests/mpi_scripts): JAX's documented uses
of axis_index and iota as positions and masks."""

from __future__ import annotations

import numpy as np

import fuserlite as fl
from fuserlite.schedule.shard import shard_axis

DIDx, DIDy = fl.ParallelType.DIDx, fl.ParallelType.DIDy


def positions(num_devices: int, n: int, dtype: str = "float32") -> fl.Fusion:
    """x[3, n] sharded on its columns, scaled by an iota of its columns sharded alike
    (positions, as rotary embeddings take them), and masked where the position is
    below 5 (torch.arange(n) < 5); both iotas sharded, so nothing moves."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(num_devices)
        x = fl.tensor([3, n], dtype, name="x")
        fusion.add_input(x)
        shard_axis(x, 1, mesh)
        where = fl.iota(n, "float32", 0.5, 0.25)
        shard_axis(where, 0, mesh)
        count = fl.iota(n)  # int64 0, 1, ...
        shard_axis(count, 0, mesh)
        fusion.add_output(fl.mul(x, where))
        fusion.add_output(fl.where(fl.lt(count, 5), x, 0.0))
        fusion.add_output(where)
    return fusion


def positions_expected(x: np.ndarray) -> list[np.ndarray]:
    """What `positions` computes, by numpy."""
    n = x.shape[1]
    where = (0.5 + 0.25 * np.arange(n)).astype(np.float32)
    return [x * where, np.where(np.arange(n) < 5, x, 0).astype(x.dtype), where]


def scaled_by_index(num_devices: int, local: int = 3) -> fl.Fusion:
    """JAX's `x * axis_index('i')` in a shard_map over a 1-D mesh, with the one-hot of
    the index (iota(D) == axis_index, as abs(iota - i) < 1) and the index itself."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_num_devices(num_devices)
        x = fl.tensor([num_devices * local], name="x")
        fusion.add_input(x)
        spec = (DIDx,)

        @fl.shard_map(mesh=mesh, in_specs=[spec], out_specs=[spec, spec, spec])
        def fn(x):
            i = fl.axis_index(DIDx)
            hot = fl.lt(fl.abs(fl.sub(fl.iota(num_devices, "int32"), i)), 1)
            return fl.mul(x, i), fl.where(hot, 1.0, 0.0), fl.reshape(i, [1])

        for out in fn(x):
            fusion.add_output(out)
    return fusion


def scaled_by_index_expected(x: np.ndarray, num_devices: int) -> list[np.ndarray]:
    """What `scaled_by_index` computes: device d's block times d, row d of the identity,
    and the indices 0..D-1."""
    d = np.repeat(np.arange(num_devices), x.size // num_devices)
    return [
        (x * d).astype(np.float32),
        np.eye(num_devices, dtype=np.float32).reshape(-1),
        np.arange(num_devices, dtype=np.int32),
    ]


def grid_indices(rows: int = 2, cols: int = 4) -> fl.Fusion:
    """On a rows x cols mesh (DIDy x DIDx), each device's block of x[2 rows, 3 cols]
    becomes 10 * axis_index(DIDy) + axis_index(DIDx) plus x; its DIDx index alone is
    replicated over DIDy (an index names one axis only)."""
    with fl.Fusion() as fusion:
        mesh = fl.DeviceMesh.for_shape([rows, cols])
        x = fl.tensor([2 * rows, 3 * cols], name="x")
        fusion.add_input(x)

        @fl.shard_map(mesh=mesh, in_specs=[(DIDy, DIDx)], out_specs=[(DIDy, DIDx), (DIDx,)])
        def fn(x):
            i, j = fl.axis_index("DIDx"), fl.axis_index(DIDy)
            return fl.add(x, fl.add(fl.mul(j, 10), i)), fl.reshape(i, [1])

        for out in fn(x):
            fusion.add_output(out)
    return fusion


def grid_indices_expected(x: np.ndarray, rows: int = 2, cols: int = 4) -> list[np.ndarray]:
    """What `grid_indices` computes."""
    j = np.repeat(np.arange(rows), x.shape[0] // rows)[:, None]
    i = np.repeat(np.arange(cols), x.shape[1] // cols)[None, :]
    return [(x + 10 * j + i).astype(np.float32), np.arange(cols, dtype=np.int32)]
