"""Placements, mesh axes and the block model of fuserlite.plan; the package stays a leaf."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_layering import ROOT, imported_modules

import fuserlite as fl
from fuserlite.ir.mesh import axis_types
from fuserlite.plan import (
    Partial,
    Placement,
    RedistributionError,
    Replicate,
    Shard,
    all_placements,
    axis_name,
    blocks,
    chunk_bounds,
    dtensor_placements,
    team_name,
    teams,
)

PLAN = sorted((ROOT / "fuserlite" / "plan").glob("*.py"))


@pytest.mark.parametrize("path", PLAN, ids=lambda p: p.name)
def test_plan_imports_only_itself_and_the_ir_leaves(path: Path):
    """The planner stays a pure library: the IR's errors, placements, teams and mesh axis
    names (ir.mesh.axis_types), nothing else."""
    leaves = (
        "fuserlite.ir.errors",
        "fuserlite.ir.placement",
        "fuserlite.ir.teams",
        "fuserlite.ir.mesh",
    )
    bad = [
        f"{path.name}:{line}: {mod}"
        for line, mod in imported_modules(path)
        if not mod.startswith("fuserlite.plan") and mod not in leaves
    ]
    assert bad == []


def test_dtensor_lists_and_text_forms():
    cases = [
        ([Shard(1), Shard(1)], ((), (0, 1), ()), (), "(S1,S1)"),
        ([Shard(1), Shard(2), Replicate()], ((), (0,), (1,)), (), "(S1,S2,R)"),
        ([Partial(), Shard(0)], ((1,), (), ()), (0,), "(P,S0)"),
    ]
    for dtensor, shards, partial, text in cases:
        p = Placement.from_dtensor(3, dtensor)
        assert (p.shards, p.partial, str(p)) == (shards, partial, text)
        assert Placement.parse(text, 3) == p
        assert [p.of_mesh_axis(a) for a in range(p.mesh_rank)] == dtensor


def test_the_other_nesting_is_a_distinct_placement_with_its_own_text():
    inner_first = Placement(2, ((1, 0),))
    assert str(inner_first) == "(S0.1,S0.0)"
    assert inner_first != Placement.parse("(S0,S0)", 1)
    assert Placement.parse("(S0.1,S0.0)", 1) == inner_first


def test_every_placement_reads_back_from_its_text_and_dtensor_names_the_ascending_ones():
    every = list(all_placements(3, 3))
    assert len(every) == len(set(every)) == 176
    assert all(Placement.parse(str(p), 3) == p for p in every)
    named = set(dtensor_placements(3, 3))
    assert len(named) == 125 and named <= set(every)
    assert all(list(s) == sorted(s) for p in named for s in p.shards)


def test_bad_placements_are_errors():
    with pytest.raises(RedistributionError, match="each mesh axis 0..1 shards at most one"):
        Placement(2, ((0,), (0,)))
    with pytest.raises(RedistributionError, match="each mesh axis 0..1 shards at most one"):
        Placement(2, ((2,),))
    with pytest.raises(
        RedistributionError, match=r"cannot read placement '\(S3,R\)' of a rank-2 tensor at 'S3'"
    ):
        Placement.parse("(S3,R)", 2)
    with pytest.raises(RedistributionError, match=r"Shard\(2\) on mesh axis 1 of a rank-2 tensor"):
        Placement.from_dtensor(2, [Replicate(), Shard(2)])


def test_mesh_axes_are_named_from_the_inside_out():
    assert [axis_name(3, a) for a in range(3)] == ["DIDz", "DIDy", "DIDx"]
    for rank in (1, 2, 3):  # one naming: the planner's names are DeviceMesh's
        mesh = fl.DeviceMesh.for_shape([2] * rank)
        assert [axis_name(rank, a) for a in range(rank)] == [t.name for t in mesh.parallel_types]
    assert axis_name(1, 0) == "DIDx" and axis_name(4, 0) == "mesh axis 0"
    assert axis_name(4, 1) == "DIDz" and axis_name(5, 4) == "DIDx"
    with pytest.raises(fl.FusionError, match="a mesh has 1 to 3 axes, not 4"):
        axis_types(4)
    assert team_name(2, (1,)) == "DIDx teams"
    assert team_name(2, (0, 1)) == "(DIDy, DIDx) teams"


def test_teams_in_team_rank_order():
    assert teams((2, 4), (1,)) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert teams((2, 4), (0,)) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert teams((2, 4), (0, 1)) == [tuple(range(8))]
    assert teams((2, 4), (1, 0)) == [(0, 4, 1, 5, 2, 6, 3, 7)]
    assert teams((2, 2, 2), (0, 2)) == [(0, 1, 4, 5), (2, 3, 6, 7)]


def test_chunk_bounds_follow_torch_chunk():
    """torch.chunk: chunks of ceil(n/d); trailing chunks short or empty."""
    table = {
        (8, 4): [(0, 2), (2, 4), (4, 6), (6, 8)],
        (5, 4): [(0, 2), (2, 4), (4, 5), (5, 5)],
        (6, 4): [(0, 2), (2, 4), (4, 6), (6, 6)],
        (3, 4): [(0, 1), (1, 2), (2, 3), (3, 3)],
        (0, 2): [(0, 0), (0, 0)],
    }
    for (n, d), want in table.items():
        assert [chunk_bounds(n, d, i) for i in range(d)] == want


def test_blocks_nest_outer_mesh_axis_first():
    both = [b[0] for b in blocks((8,), (2, 2), Placement.parse("(S0,S0)", 1))]
    assert both == [(0, 2), (2, 4), (4, 6), (6, 8)]
    other = [b[0] for b in blocks((8,), (2, 2), Placement.parse("(S0.1,S0.0)", 1))]
    assert other == [(0, 2), (4, 6), (2, 4), (6, 8)]
    uneven = [b[0] for b in blocks((7,), (2, 2), Placement.parse("(S0,S0)", 1))]
    assert uneven == [(0, 2), (2, 4), (4, 6), (6, 7)]
    grid = blocks((4, 6), (2, 3), Placement.parse("(S1,S0)", 2))
    assert grid[:4] == [((0, 2), (0, 3)), ((2, 4), (0, 3)), ((4, 4), (0, 3)), ((0, 2), (3, 6))]


@pytest.mark.parametrize("shape", [(8, 8, 16), (5, 3, 7)])
def test_blocks_cover_every_element_once_per_replica(shape):
    """Uneven extents too: the boxes of every placement tile the tensor."""
    mesh = (2, 2, 2)
    for p in all_placements(3, 3):
        count = np.zeros(shape, int)
        for box in blocks(shape, mesh, p):
            count[tuple(slice(a, b) for a, b in box)] += 1
        replicas = int(np.prod([mesh[a] for a in (*p.replicated_axes(), *p.partial)]))
        assert (count == replicas).all(), p


def test_a_placement_is_hashed_once_by_value():
    """A placement's hash is worked out when it is made (it is an argument of facts):
    equal placements hash alike, a copy or a pickled one too, and other ones apart."""
    import dataclasses
    import pickle

    from fuserlite.ir.placement import Placement

    p, q = Placement(2, ((0,), (1,))), Placement(2, ((0,), (1,)))
    other = Placement(2, ((1,), (0,)))
    assert p._hash == hash(p) == hash(q) and p == q and {p: 1}[q] == 1
    assert hash(pickle.loads(pickle.dumps(p))) == hash(p)
    assert hash(dataclasses.replace(p, shards=((1,), (0,)))) == hash(other) != hash(p)
    assert Placement(2, ((0,), ()), cyclic=(0,)).block == (1,)  # filled in before hashing
    assert hash(Placement(2, ((0,), ()), cyclic=(0,))) == hash(
        Placement(2, ((0,), ()), cyclic=(0,), block=(1,))
    )
