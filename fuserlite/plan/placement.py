"""Placements (fuserlite.ir.placement) and the enumerations the planner's tests use.

`Placement`, `Shard`, `Replicate` and `Partial` live with the IR, whose sharding
queries produce them; they are re-exported here for the planner's users.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from fuserlite.ir.placement import MeshAxisPlacement, Partial, Placement, Replicate, Shard

__all__ = [
    "MeshAxisPlacement",
    "Partial",
    "Placement",
    "Replicate",
    "Shard",
    "all_placements",
    "dtensor_placements",
]


def all_placements(ndim: int, mesh_rank: int, *, partial: bool = True) -> Iterator[Placement]:
    """Every placement (both nestings of a shared tensor axis), in a fixed order."""
    choices = ["R", *(["P"] if partial else []), *range(ndim)]
    for assignment in itertools.product(choices, repeat=mesh_rank):
        per_axis = [[a for a, c in enumerate(assignment) if c == t] for t in range(ndim)]
        part = tuple(a for a, c in enumerate(assignment) if c == "P")
        for nestings in itertools.product(*(itertools.permutations(axes) for axes in per_axis)):
            yield Placement(mesh_rank, tuple(nestings), part)


def dtensor_placements(ndim: int, mesh_rank: int, *, partial: bool = True) -> Iterator[Placement]:
    """The placements DTensor can name: Shard(t), Replicate or Partial per mesh axis."""
    options: list[MeshAxisPlacement] = [Replicate(), *([Partial()] if partial else [])]
    options += [Shard(t) for t in range(ndim)]
    for choice in itertools.product(options, repeat=mesh_rank):
        yield Placement.from_dtensor(ndim, choice)
