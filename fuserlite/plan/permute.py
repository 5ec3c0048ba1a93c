"""Block permutations: each device's chunk of a sharded axis sent whole to another device.

A tensor axis sharded over a group of mesh axes (`p.shards[axis]`, outer -> inner)
is cut into one chunk per team rank (plan.blocks). A block permutation gives
chunk r of the result the rows of chunk `sources[r]`, in every team at once (the
devices that agree on the other mesh axes each permute among themselves): XLA's
collective-permute, JAX's ppermute. It is a move on one mesh, planned by
plan.cross_mesh like a move between meshes: each device needs the box its
source holds, and receives exactly that from a device that holds it (where
another mesh axis replicates it, the senders are balanced), so every device
sends one block and receives one; a device that is its own source moves nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite.ir.errors import RedistributionError
from fuserlite.plan.blocks import Box, Interval, device_box
from fuserlite.plan.cross_mesh import Holding, Move, holdings, plan_move
from fuserlite.plan.mesh_axes import Group, MeshShape, coords, rank_in_team, team_size
from fuserlite.plan.placement import Placement
from fuserlite.plan.steps import StepKind


def at_rank(mesh: MeshShape, group: Group, coord: Sequence[int], rank: int) -> tuple[int, ...]:
    """`coord` moved to team rank `rank` of its team of `group` (rank_in_team's inverse)."""
    out = list(coord)
    for a in reversed(group):
        out[a], rank = rank % mesh[a], rank // mesh[a]
    return tuple(out)


def group_chunks(n: int, mesh: MeshShape, group: Group) -> list[Interval]:
    """The rows of an axis of extent n that each team rank of `group` holds."""
    p = Placement(len(mesh), (tuple(group),))
    origin = (0,) * len(mesh)
    return [
        device_box((n,), mesh, p, at_rank(mesh, group, origin, r))[0]
        for r in range(team_size(mesh, group))
    ]


def chunk_sources(
    n: int, mesh: MeshShape, group: Group, rows: Sequence[int]
) -> tuple[int, ...] | None:
    """Where picking `rows` (n of them) along an axis of extent n chunked over `group` moves
    whole chunks: the source chunk of each chunk of the result (an empty chunk is its
    own); None where some chunk of the result is not one whole chunk of the source."""
    if len(rows) != n:
        return None
    chunks = group_chunks(n, mesh, group)
    starting = {lo: s for s, (lo, hi) in enumerate(chunks) if lo < hi}
    sources = []
    for r, (lo, hi) in enumerate(chunks):
        s = starting.get(rows[lo]) if lo < hi else r
        if s is None or list(rows[lo:hi]) != list(range(*chunks[s])):
            return None
        sources.append(s)
    return tuple(sources)


def permute_move(
    shape: Sequence[int],
    mesh: MeshShape,
    devices: Sequence[int],
    p: Placement,
    axis: int,
    sources: Sequence[int],
    itemsize: int,
) -> tuple[Move, list[Holding], list[tuple[int, Box]]]:
    """The transfers of the block permutation `sources` of tensor axis `axis` under the
    complete placement `p`, with every device's holding and the box it needs (its
    source's)."""
    group = p.shards[axis] if 0 <= axis < len(p.shards) else ()
    size = team_size(mesh, group)
    if (
        not group
        or not p.is_complete
        or len(sources) != size
        or not all(0 <= s < size for s in sources)
    ):
        raise RedistributionError(
            f"a block permutation of axis {axis} needs a complete placement sharding it and "
            f"one source (a team rank 0..{size - 1}) per team rank; got {p} and sources "
            f"{list(sources)}"
        )
    held = holdings(shape, mesh, devices, p)
    need = [
        (
            dev,
            device_box(
                shape, mesh, p, at_rank(mesh, group, c, sources[rank_in_team(mesh, group, c)])
            ),
        )
        for dev, c in zip(devices, coords(mesh))
    ]
    move = plan_move(held, need, itemsize)
    return Move(StepKind.CollectivePermute, (), move.transfers, itemsize), held, need
