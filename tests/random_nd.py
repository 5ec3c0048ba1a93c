"""Shardings for the random sharded fusions (tests/random_sharded.py), and N-D meshes: one case in
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
from fuserlite.schedule.shard import shard_axis

ND_SHARE = 0.2  # of the cases
ND_SHAPES = ([2, 2], [2, 3], [3, 2], [2, 4])
MESH_AXES = (ParallelType.DIDx, ParallelType.DIDy)


def is_nd_case(seed: int) -> bool:
    """Whether case `seed` is built on an N-D mesh (a generator of its own)."""
    return bool(np.random.default_rng([seed, 2]).random() < ND_SHARE)


class Shardings:
    """Mixin of random_sharded.Generator: every case's shardings (1-D meshes too) and the
    N-D cases' meshes."""

    def maybe_shard(self, tv: fl.TensorView, p_shard: float, p_bcast: float) -> None:
        """Shard one axis of tv with a chance (a broadcast axis with p_bcast)."""
        mesh = self.mesh_of[id(tv)]
        if mesh is None:
            return
        if any(ax.parallel_type.is_device for ax in tv.domain.loop):
            return
        if mesh.rank > 1:
            return self.maybe_shard_nd(tv, mesh, p_shard)
        data = [i for i, ax in enumerate(tv.domain.logical) if not ax.is_reduction]
        # Any extent: one the mesh does not divide is chunked as torch.chunk does.
        shardable = [i for i in data if tv.domain.logical[i].is_iteration]
        bcast = [i for i in data if tv.domain.logical[i].is_broadcast]
        # A reduction axis over devices (rDIDx): partial values, complete once an output.
        reduced = [i for i, ax in enumerate(tv.domain.logical) if ax.is_reduction]
        if reduced and self.chance(0.3):
            shardable = reduced
        if shardable and self.chance(p_shard):
            i = int(self.pick(shardable))
            pos = tv.domain.loop_positions.index(i)
            if tv.domain.logical[i].extent == mesh.size > 1 and self.chance(0.5):
                # the same sharding as shard_axis gives, written as an outer split by D
                # whose inner part has extent 1
                tv.outer_split(pos, mesh.size).axis(pos).parallelize(ParallelType.DIDx)
                self.emit(
                    f"{self.name(tv)}.outer_split({pos}, {mesh.size}).axis({pos})"
                    ".parallelize(fl.ParallelType.DIDx)"
                )
            else:
                self.shard(tv, i, mesh)
            self.sharded = True
        elif bcast and self.chance(p_bcast):
            i = int(self.pick(bcast))
            pos = tv.domain.loop_positions.index(i)
            tv.axis(pos).parallelize(ParallelType.DIDx)
            self.sharded = True
            self.emit(f"{self.name(tv)}.axis({pos}).parallelize(fl.ParallelType.DIDx)")

    def shard(self, tv: fl.TensorView, i: int, mesh, pt=ParallelType.DIDx, whole=True) -> None:
        """shard_axis(tv, i, mesh, pt), written into the script."""
        shard_axis(tv, i, mesh, pt, whole=whole)
        how = "" if pt is ParallelType.DIDx and whole else f", fl.ParallelType.{pt.name}"
        how += "" if whole else ", whole=False"
        self.emit(f"shard_axis({self.name(tv)}, {i}, {self.mesh_text(mesh)}{how})")
        self.sharded = True

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
