"""JAX's ppermute examples as shard_map fusions, with the values they must give: shared by
tests/test_shard_map.py (sim) and tests/mpi_scripts/teams.py (the same under mpiexec)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import fuserlite as fl

DIDx, DIDy = fl.ParallelType.DIDx, fl.ParallelType.DIDy


def ring(d: int) -> list[tuple[int, int]]:
    """JAX's ring shift: device i sends to i + 1."""
    return [(i, (i + 1) % d) for i in range(d)]


def pair_swap(d: int) -> list[tuple[int, int]]:
    """Devices 2k and 2k + 1 swap their blocks."""
    return [(i, i ^ 1) for i in range(d)]


@dataclass(frozen=True)
class PermuteCase:
    """ppermute over one mesh axis of x (blocks of 2 along each sharded axis)."""

    name: str
    mesh_shape: tuple[int, ...]
    axis: fl.ParallelType
    perm: tuple[tuple[int, int], ...]
    spec: tuple | None = None  # x's and the result's; None: every axis of the mesh shards one

    @property
    def specs(self) -> list[tuple]:
        if self.spec is not None:
            return [self.spec]
        return [(DIDx,)] if len(self.mesh_shape) == 1 else [(DIDy, DIDx)]

    @property
    def x(self) -> np.ndarray:
        """arange over the global shape: every block holds different values."""
        shape = [2 * s for s in self.mesh_shape]
        return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)

    @property
    def block_bytes(self) -> int:
        """The bytes of one device's block of x."""
        mesh = fl.DeviceMesh.for_shape(list(self.mesh_shape))
        used = [pt for pt in self.specs[0] if pt is not None]
        return self.x.nbytes // int(np.prod([mesh.axis_size(pt) for pt in used]))

    def fusion(self) -> fl.Fusion:
        mesh = fl.DeviceMesh.for_shape(list(self.mesh_shape))
        with fl.Fusion() as fusion:
            x = fl.tensor(list(self.x.shape), name="x")
            fusion.add_input(x)
            f = fl.shard_map(
                lambda b: fl.ppermute(b, self.axis, list(self.perm)), mesh, self.specs, self.specs
            )
            fusion.add_output(f(x))
        return fusion

    def expected(self) -> np.ndarray:
        """Block dst along the permuted axis is block src of x (JAX's semantics)."""
        dim = 0 if self.axis is DIDy or len(self.mesh_shape) == 1 else 1
        out = np.empty_like(self.x)
        for src, dst in self.perm:
            take = [slice(None)] * self.x.ndim
            put = list(take)
            take[dim], put[dim] = slice(2 * src, 2 * src + 2), slice(2 * dst, 2 * dst + 2)
            out[tuple(put)] = self.x[tuple(take)]
        return out


CASES = [
    PermuteCase("ring on 4", (4,), DIDx, tuple(ring(4))),
    PermuteCase("pair swap on 4", (4,), DIDx, tuple(pair_swap(4))),
    PermuteCase("ring on 8", (8,), DIDx, tuple(ring(8))),
    PermuteCase("ring over DIDx of 2x4", (2, 4), DIDx, tuple(ring(4))),
    PermuteCase("pair swap over DIDx of 2x4", (2, 4), DIDx, tuple(pair_swap(4))),
    PermuteCase("pair swap over DIDy of 2x4", (2, 4), DIDy, tuple(pair_swap(2))),
    # the same on both DIDy rows: each DIDx team permutes its own copy
    PermuteCase(
        "ring over DIDx of 2x4, DIDy replicated", (2, 4), DIDx, tuple(ring(4)), (None, DIDx)
    ),
]


def cases_on(n_ranks: int) -> list[PermuteCase]:
    """The cases whose mesh has n_ranks devices."""
    return [c for c in CASES if int(np.prod(c.mesh_shape)) == n_ranks]
