"""N-D meshes for the random sharded fusions (tests/random_sharded.py): one case in
ND_SHARE is built on a 2x2, 2x3, 3x2 or 2x4 mesh, each tensor sharded over DIDx, DIDy
or both, on two tensor axes or nested on one (outer first), mostly on extents the mesh
axes do not divide. The N-D cases found steps that chunked nested shardings as
torch.chunk does, a kernel lowering that mixed up DIDx and DIDy, and a sum of a
sharded broadcast that counted it once per device (tests/test_nd_uneven.py).

Whether a case is N-D is drawn from its own generator, so the 1-D cases are the same
fusions as before N-D cases were drawn.
"""

from __future__ import annotations

import numpy as np

import fuserlite as fl
from fuserlite.ir.types import ParallelType

ND_SHARE = 0.2  # of the cases
ND_SHAPES = ([2, 2], [2, 3], [3, 2], [2, 4])
MESH_AXES = (ParallelType.DIDx, ParallelType.DIDy)


def is_nd_case(seed: int) -> bool:
    """Whether case `seed` is built on an N-D mesh (a generator of its own)."""
    return bool(np.random.default_rng([seed, 2]).random() < ND_SHARE)


class NDMeshes:
    """Mixin of random_sharded.Generator: the N-D cases' mesh and shardings."""

    def build_nd(self) -> None:
        """One mesh of ND_SHAPES; inputs and ops as build() draws them on one mesh."""
        shape = list(self.pick(ND_SHAPES))
        mesh = fl.DeviceMesh.for_shape(shape)
        self.d = shape[-1]  # extent() draws multiples of DIDx's size, and any others
        self.in_mesh = mesh
        self.build_on(mesh, None, mode="single")

    def maybe_shard_nd(self, tv: fl.TensorView, mesh: fl.DeviceMesh, p_shard: float) -> None:
        """Shard tv over each mesh axis with a chance, on a random iteration axis (or
        its reduction axes: partial values), two mesh axes on one tensor axis nested."""
        data = [i for i, ax in enumerate(tv.domain.logical) if ax.is_iteration]
        reduced = [i for i, ax in enumerate(tv.domain.logical) if ax.is_reduction]
        if reduced and self.chance(0.3):
            data = reduced
        if not data:
            return
        order = list(MESH_AXES) if self.chance(0.5) else list(reversed(MESH_AXES))
        picked = [(pt, int(self.pick(data))) for pt in order if self.chance(p_shard + 0.2)]
        for pt, i in picked:
            whole = sum(j == i for _, j in picked) == 1  # nested: outer splits only
            self.shard(tv, i, mesh, pt, whole)
