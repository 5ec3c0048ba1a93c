"""Fusions of iota, shared by tests/test_iota.py and the MPI jobs (tests/mpi_scripts):
iota as positions and masks."""

from __future__ import annotations

import numpy as np

import fuserlite as fl
from fuserlite.schedule.shard import shard_axis


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
