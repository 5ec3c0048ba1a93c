"""Mesh shapes: coordinates, the teams of a group of mesh axes (fuserlite.ir.teams), names.

A mesh shape is a tuple of axis sizes, axis 0 outermost; a device's index is
its row-major position (the last axis varies fastest). Its axes are named as a
DeviceMesh's (fuserlite.ir.mesh.axis_types): DIDx is the last axis, DIDy the one
before it, DIDz the one before that.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence

from fuserlite.ir.errors import RedistributionError
from fuserlite.ir.mesh import MAX_MESH_RANK, axis_types
from fuserlite.ir.teams import coords as coords  # re-exported: the IR's one definition
from fuserlite.ir.teams import rank_in_team as rank_in_team
from fuserlite.ir.teams import teams as teams

MeshShape = tuple[int, ...]
Group = tuple[int, ...]  # mesh axes of one collective, ordered outer -> inner


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
    """The parallel type of mesh axis `axis` of a rank-`rank` mesh, as DeviceMesh names it
    (fuserlite.ir.mesh.axis_types: DIDx is the last); on a planning mesh of more axes than
    a DeviceMesh has, the outer ones are 'mesh axis N'."""
    named = axis_types(min(rank, MAX_MESH_RANK))
    outer = rank - len(named)  # axes no parallel type names
    return named[axis - outer].name if axis >= outer else f"mesh axis {axis}"


def team_name(rank: int, group: Group, labels: Sequence[str] | None = None) -> str:
    """'DIDx teams', or '(DIDy, DIDx) teams' for the flattened teams of several axes; the
    mesh axes called by `labels` where given ('DIDx (tp) teams')."""
    names = [labels[a] if labels is not None else axis_name(rank, a) for a in group]
    return f"{names[0]} teams" if len(names) == 1 else f"({', '.join(names)}) teams"


def team_size(mesh: MeshShape, group: Group) -> int:
    """Devices in one team of `group`: the product of its axis sizes."""
    return math.prod(mesh[a] for a in group)


def groups(rank: int) -> list[Group]:
    """Every non-empty ordered tuple of distinct mesh axes (outer -> inner)."""
    axes = range(rank)
    return [g for n in range(1, rank + 1) for g in itertools.permutations(axes, n)]
