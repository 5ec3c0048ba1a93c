"""The teams of a group of mesh axes: the one definition of a team.

A mesh shape is a tuple of axis sizes, axis 0 outermost; a device's index is its
row-major position (the last axis varies fastest). A collective over a group of
mesh axes runs on several teams at once: DeviceMesh.teams gives them as device
ids, the planner (plan.mesh_axes re-exports these) as device indices. A leaf of
the IR, so that the planner, a pure library, can import it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence


def coords(mesh: Sequence[int]) -> list[tuple[int, ...]]:
    """Every device's mesh coordinates, in device-index (row-major) order."""
    return list(itertools.product(*(range(s) for s in mesh)))


def rank_in_team(mesh: Sequence[int], group: Sequence[int], coord: Sequence[int]) -> int:
    """A device's rank in its team of `group`: its group coordinates, outer first."""
    r = 0
    for a in group:
        r = r * mesh[a] + coord[a]
    return r


def teams(mesh: Sequence[int], group: Sequence[int]) -> list[tuple[int, ...]]:
    """The teams of the mesh axes `group` (outer -> inner) as device indices, each in
    team-rank order.

    A team is the devices whose coordinates agree on every axis outside `group`;
    teams are listed in the order of their first device.
    """
    members: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for index, c in enumerate(coords(mesh)):
        key = tuple(x for a, x in enumerate(c) if a not in group)
        members.setdefault(key, []).append((rank_in_team(mesh, group, c), index))
    return [tuple(i for _, i in sorted(m)) for m in members.values()]
