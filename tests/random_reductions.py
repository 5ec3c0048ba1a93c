"""Random sum/max/min programs on meshes of 1 to 3 axes: x (rank 2-3, extents the mesh axes
divide or not) sharded at random, s = sum or max of x over one or two axes with s sharded
at random too, its reduction axes included (partial values over mesh axes x's reduced
axes may not be sharded on), s an output or read by neg.

The planner never makes partial values, so a partial s over a mesh axis its input is not
sharded on over the reduced axes was refused (63 of seeds 0..999); insert-reshardings
now reshards x so that the reduction makes them. `python tests/random_reductions.py
[first last]` prints how many cases of seeds first..last-1 lower, and each refusal.
"""

from __future__ import annotations

import re
import sys
from collections import Counter

import numpy as np

import fuserlite as fl
from fuserlite.ir.placement import Placement
from fuserlite.schedule.shard import shard_as

MESH_SHAPES = ([2], [3], [4], [2, 2], [2, 3], [3, 2], [2, 4], [2, 2, 2])
EXTENTS = (2, 3, 4, 5, 6, 7, 8, 12)


def random_placement(rng: np.random.Generator, rank: int, mesh_rank: int) -> Placement:
    """Each mesh axis, in a random order, shards a random tensor axis with a chance
    (nested where two pick one axis)."""
    shards: list[list[int]] = [[] for _ in range(rank)]
    for a in rng.permutation(mesh_rank):
        if rng.random() < 0.65:
            shards[int(rng.integers(rank))].append(int(a))
    return Placement(mesh_rank, tuple(tuple(s) for s in shards))


def reduction_case(seed: int) -> fl.Fusion:
    """Case `seed`: x, s = op(x, axes) placed at random, output s or neg(s)."""
    rng = np.random.default_rng([seed, 19])
    mesh = fl.DeviceMesh.for_shape(list(MESH_SHAPES[rng.integers(len(MESH_SHAPES))]))
    rank = int(rng.integers(2, 4))
    shape = [int(rng.choice(EXTENTS)) for _ in range(rank)]
    axes = sorted(int(i) for i in rng.choice(rank, size=1 + int(rng.random() < 0.3), replace=False))
    r = rng.random()
    op = fl.sum if r < 0.5 else fl.max if r < 0.75 else fl.min
    with fl.Fusion() as f:
        x = fl.tensor(shape, name="x")
        f.add_input(x)
        shard_as(x, mesh, random_placement(rng, rank, mesh.rank))
        x.set_device_mesh(mesh)
        s = op(x, axes, keepdim=bool(rng.random() < 0.3))
        shard_as(s, mesh, random_placement(rng, len(s.domain.logical), mesh.rank))
        s.set_device_mesh(mesh)
        f.add_output(fl.neg(s) if rng.random() < 0.5 else s)
    return f


def outcome(seed: int) -> str:
    """'ok' (lowered, run on sim and validated) or the error that refused case `seed`."""
    f = reduction_case(seed)
    try:
        inputs = fl.random_inputs(f, seed)
        fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))
    except fl.FuserliteError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


if __name__ == "__main__":
    first, last = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (0, 1000)
    seen = Counter()
    for seed in range(first, last):
        got = outcome(seed)
        seen["ok" if got == "ok" else re.sub(r"\d+", "#", got)[:200]] += 1
        if got != "ok":
            print(f"seed {seed}: {got}")
    print(f"{seen['ok']} of {last - first} cases lower and validate; {dict(seen)}")
