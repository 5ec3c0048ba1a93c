"""Mesh shapes: coordinates, the teams of a group of mesh axes, and their names.

A mesh shape is a tuple of axis sizes, axis 0 outermost; a device's index is
its row-major position (the last axis varies fastest). nvFuser names the mesh
axes from the inside out: DIDx is the last axis, DIDy the one before it, DIDz
the one before that.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence

from fuserlite.ir.errors import RedistributionError

MeshShape = tuple[int, ...]
Group = tuple[int, ...]  # mesh axes of one collective, ordered outer -> inner

_DID_NAMES = ("DIDx", "DIDy", "DIDz")


def mesh_shape(sizes: Sequence[int]) -> MeshShape:
    """`sizes` as a mesh shape, or a RedistributionError saying what is wrong."""
    shape = integers(sizes)
    if not shape or any(s < 1 for s in shape):
        raise RedistributionError(
            f"a mesh shape is a non-empty list of positive axis sizes, got {list(sizes)}"
        )
    return shape


def integers(values: Sequence[int]) -> tuple[int, ...] | None:
    """`values` as plain ints (numpy integers too), or None if one is not an integer."""
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        return None


def axis_name(rank: int, axis: int) -> str:
    """The parallel type of mesh axis `axis` of a rank-`rank` mesh: DIDx is the last."""
    inner = rank - 1 - axis
    return _DID_NAMES[inner] if inner < len(_DID_NAMES) else f"mesh axis {axis}"


def team_name(rank: int, group: Group) -> str:
    """'DIDx teams', or '(DIDy, DIDx) teams' for the flattened teams of several axes."""
    names = [axis_name(rank, a) for a in group]
    return f"{names[0]} teams" if len(names) == 1 else f"({', '.join(names)}) teams"


def team_size(mesh: MeshShape, group: Group) -> int:
    """Devices in one team of `group`: the product of its axis sizes."""
    return math.prod(mesh[a] for a in group)


def coords(mesh: MeshShape) -> list[tuple[int, ...]]:
    """Every device's mesh coordinates, in device-index (row-major) order."""
    return list(itertools.product(*(range(s) for s in mesh)))


def rank_in_team(mesh: MeshShape, group: Group, coord: Sequence[int]) -> int:
    """A device's rank in its team of `group`: its group coordinates, outer first."""
    r = 0
    for a in group:
        r = r * mesh[a] + coord[a]
    return r


def teams(mesh: MeshShape, group: Group) -> list[tuple[int, ...]]:
    """The teams of `group` as device indices, each in team-rank order.

    A team is the devices whose coordinates agree on every axis outside `group`;
    teams are listed in the order of their first device.
    """
    members: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for index, c in enumerate(coords(mesh)):
        key = tuple(x for a, x in enumerate(c) if a not in group)
        members.setdefault(key, []).append((rank_in_team(mesh, group, c), index))
    return [tuple(i for _, i in sorted(m)) for m in members.values()]


def groups(rank: int) -> list[Group]:
    """Every non-empty ordered tuple of distinct mesh axes (outer -> inner)."""
    axes = range(rank)
    return [g for n in range(1, rank + 1) for g in itertools.permutations(axes, n)]
