"""The redistribution planner: optimal on every pair, docs/design.md §5 on one mesh axis, clear errors."""

from __future__ import annotations

import math

import pytest

from fuserlite.plan import (
    DEFAULT_LATENCY_BYTES,
    BruteForce,
    Cost,
    Placement,
    Planner,
    RedistributionError,
    Shard,
    Step,
    StepKind,
    all_placements,
    classic_steps,
    plan,
)
from fuserlite.plan.steps import Geometry, catalog, moves

P = Placement.parse
MESHES = [(2, 2), (2, 4), (2, 2, 2)]
SHAPES = {1: (8,), 2: (4, 8), 3: (8, 8, 16)}  # (4, 8): axis 0 cannot take every nesting


def divides(shape, mesh, p) -> bool:
    """True when every sharding of `p` divides its extent (uneven plans: test_uneven)."""
    return all(n % math.prod(mesh[a] for a in axes) == 0 for n, axes in zip(shape, p.shards))


def pairs(shape, mesh):
    """Every source whose shardings divide `shape`, and a function giving its targets:
    those that divide, complete or partial over some of the source's partial mesh axes."""
    fits = [p for p in all_placements(len(shape), len(mesh)) if divides(shape, mesh, p)]

    def targets(source: Placement) -> list[Placement]:
        return [t for t in fits if set(t.partial) <= set(source.partial)]

    return fits, targets


@pytest.mark.parametrize("latency", [0, DEFAULT_LATENCY_BYTES], ids=["bytes", "latency"])
@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: "x".join(map(str, m)))
def test_planner_equals_brute_force_on_every_pair(mesh, rank, latency):
    """No sequence of up to one step more than the longest plan beats any plan, by bytes
    alone (latency_bytes=0: the byte optimum) and by the default alpha-beta cost.

    Four steps are not always enough: on 2x2x2 some byte optima take 5 or 6 steps
    (the planner's Dijkstra has no length bound), so the brute force runs to
    the longest plan's length plus one.
    """
    shape = SHAPES[rank]
    planner, brute = Planner(shape, 4, mesh, latency), BruteForce(shape, 4, mesh, latency)
    sources, targets = pairs(shape, mesh)
    plans = {(s, t): planner.plan(s, t) for s in sources for t in targets(s)}
    bound = max(len(p.steps) for p in plans.values()) + 1
    beyond_four = 0
    for source in sources:
        by_length = brute.optima_by_length(source, bound)
        four, best = by_length[4], by_length[bound]
        for target in targets(source):
            p, o = plans[source, target], best[target]
            assert (p.cost.total, p.bytes, p.collectives) == (o.cost, o.bytes, o.collectives), (
                f"{source} -> {target}: planner {p.describe()}, brute force {o}"
            )
            assert p.cost.total <= four[target].cost
            beyond_four += p.cost.total < four[target].cost
            state = source
            for s in p.steps:  # the record chains and its bytes are the step's
                assert s.before == state and s.step.apply(state) == s.after
                assert s.bytes == planner.geometry.cost(s.step, state)
                state = s.after
            assert state == target and p.bytes == sum(s.bytes for s in p.steps)
    # Only byte optima take more than four steps: the latency term prefers short plans.
    assert (beyond_four > 0) == (len(mesh) == 3 and rank > 1 and not latency)


def test_moves_are_exactly_the_catalog_steps_that_apply():
    """The planner's neighbour generator misses no step the full catalog has."""
    for ndim, rank in [(1, 2), (3, 2), (2, 3), (3, 3)]:
        steps = catalog(ndim, rank)
        for p in all_placements(ndim, rank):
            applicable = {s for s in steps if s.apply(p) is not None}
            generated = list(moves(p))
            assert len(generated) == len(set(generated)) and set(generated) == applicable, p


@pytest.mark.parametrize("d", [2, 4, 8])
def test_one_mesh_axis_costs_are_design_section_5(d):
    """B = bytes of the global tensor; the table of docs/design.md §5, row by row."""
    shape, b = (16, 8), 16 * 8 * 4
    cases = {
        ("(S0)", "(S0)"): ([], 0),
        ("(R)", "(S0)"): ([StepKind.LocalSlice], 0),
        ("(S0)", "(R)"): ([StepKind.Allgather], (d - 1) * b // d),
        ("(S0)", "(S1)"): ([StepKind.AllToAll], (d - 1) * b // (d * d)),
        ("(P)", "(R)"): ([StepKind.Allreduce], 2 * (d - 1) * b // d),  # B_out = B
        ("(P)", "(S1)"): ([StepKind.ReduceScatter], (d - 1) * b // d),  # B_in_local = B
    }
    for (source, target), (kinds, sent) in cases.items():
        p = plan(shape, 4, (d,), P(source, 2), P(target, 2))
        assert [s.step.kind for s in p.steps] == kinds and p.bytes == sent, (source, target)


def test_allreduce_of_an_element_count_the_team_does_not_divide_sends_padded_chunks():
    p = plan((3,), 4, (2, 2), P("(P,P)", 1), P("(R,R)", 1))
    assert [s.step for s in p.steps] == [Step(StepKind.Allreduce, (0, 1))]
    assert p.bytes == 2 * 3 * 1 * 4  # 2(D-1) chunks of ceil(3/4) = 1 element


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: "x".join(map(str, m)))
def test_a_shard_to_shard_move_on_one_mesh_axis_is_one_alltoall(mesh):
    """Never through replicated when an AllToAll does the move: every such pair, every mesh axis."""
    planner = Planner((8, 8, 16), 4, mesh)
    for source in all_placements(3, len(mesh), partial=False):
        for axis in range(len(mesh)):
            here = source.of_mesh_axis(axis)
            if not isinstance(here, Shard) or source.shards[here.dim][-1] != axis:
                continue
            t = here.dim
            for u in range(3):
                target = Step(StepKind.AllToAll, (axis,), t, u).apply(source) if u != t else None
                if target is None or not divides((8, 8, 16), mesh, target):
                    continue
                steps = [s.step for s in planner.plan(source, target).steps]
                assert steps == [Step(StepKind.AllToAll, (axis,), t, u)], (source, target)


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: "x".join(map(str, m)))
def test_partials_over_every_mesh_axis_complete_in_one_allreduce(mesh):
    rank = len(mesh)
    p = plan(
        (8, 8),
        4,
        mesh,
        Placement(rank, ((), ()), tuple(range(rank))),
        P("(" + ",".join("R" * rank) + ")", 2),
    )
    assert [s.step for s in p.steps] == [Step(StepKind.Allreduce, tuple(range(rank)))]
    classic = Planner((8, 8), 4, mesh).planned(p.source, classic_steps(p.source, p.target))
    assert sum(s.bytes for s in classic) > p.bytes


DESCRIBED = [
    ((2, 4), "(S1,S1)", "(S1,S2)"),
    ((2, 2), "(P,P)", "(R,R)"),
    ((2, 4), "(P,S0)", "(S1,S0)"),
    ((2, 2), "(S0,R)", "(R,R)"),
    ((2, 2), "(R,R)", "(S0,S1)"),
    ((2, 2), "(S0,R)", "(S0,R)"),
    ((2, 2), "(S0,S0)", "(S0.1,S0.0)"),
    ((2, 2), "(S2,S2)", "(R,S2)"),
    ((2, 4), "(S2,R)", "(R,S2)"),
    ((2, 2, 2), "(P,P,P)", "(R,R,R)"),
    ((2, 2, 2), "(P,S1,P)", "(S0,S0,S2)"),
    ((2, 2, 2), "(S2,S1,R)", "(S1,S2,R)"),
    ((2, 2, 2), "(R,P,P)", "(S0.1,R,S0.0)"),
    ((2, 4), "(P,P)", "(S0,P)"),  # partial targets: the values of DIDx stay partial
    ((2, 2, 2), "(P,S1,P)", "(P,S0,R)"),
]


def test_describe_names_the_steps_their_teams_bytes_and_the_rejected_plan(golden):
    text = plan((8, 8, 16), 4, (2, 4), P("(S1,S1)", 3), P("(S1,S2)", 3)).describe()
    assert text == (
        "(S1,S1) -> (S1,S2): AllToAll S1->S2 on DIDx teams, 384 B/device in 1 launch; "
        "via replicate: Allgather + LocalSlice, 1536 B/device in 1 launch"
    )
    for latency, name in [(0, "describe"), (DEFAULT_LATENCY_BYTES, "describe_latency")]:
        lines = [
            f"{'x'.join(map(str, mesh))}: "
            + plan((8, 8, 16), 4, mesh, P(s, 3), P(t, 3), latency).describe()
            for mesh, s, t in DESCRIBED
        ]
        golden(f"plan/{name}.txt", "\n".join(lines) + "\n")


def test_the_alternative_is_a_real_plan_never_cheaper_than_the_chosen_one():
    planner = Planner((8, 8, 16), 4, (2, 4))
    sources, targets = pairs((8, 8, 16), (2, 4))
    for source in sources[::3]:
        for target in targets(source):
            p = planner.plan(source, target)
            alt = p.alternative
            assert (alt is None) == (p.bytes == 0)
            if alt is None:
                continue
            state = source
            for s in alt.steps:
                assert s.step.apply(state) == s.after
                state = s.after
            assert state == target and [s.step for s in alt.steps] != [s.step for s in p.steps]
            assert (alt.cost.total, alt.cost.launches) >= (p.cost.total, p.collectives)


@pytest.mark.parametrize("mesh, every", [((2, 4), 1), ((2, 2, 2), 4)], ids=["2x4", "2x2x2"])
def test_classic_plans_go_one_mesh_axis_at_a_time_and_arrive(mesh, every):
    sources, targets = pairs((8, 8, 16), mesh)
    single = {StepKind.Allgather, StepKind.Allreduce, StepKind.LocalSlice}
    for source in sources[::every]:
        for target in targets(source):
            state = source
            for step in classic_steps(source, target):
                assert step.kind in single and len(step.group) == 1
                state = step.apply(state)
            assert state == target


def test_plans_are_deterministic():
    a = Planner((8, 8, 16), 4, (2, 2, 2)).plan(P("(P,S1,P)", 3), P("(S0,S0,S2)", 3))
    b = plan((8, 8, 16), 4, (2, 2, 2), P("(P,S1,P)", 3), P("(S0,S0,S2)", 3))
    assert a.steps == b.steps and a.describe() == b.describe()


@pytest.mark.parametrize(
    "shape, source, target, message",
    [
        (
            (8, 8),
            "(S0,R)",
            "(S0,P)",
            "cannot redistribute a [8, 8] tensor of 4-byte elements on a 2x4 mesh from (S0,R) "
            "to (S0,P): the target is partial over DIDx, where the source is not; a "
            "redistribution combines partial values, it never makes them (they come only from "
            "a reduction); make the target replicated or sharded on those mesh axes",
        ),
        (
            (8, 8),
            "(P,S0)",
            "(P,P)",
            "cannot redistribute a [8, 8] tensor of 4-byte elements on a 2x4 mesh from (P,S0) "
            "to (P,P): the target is partial over DIDx, where the source is not; a "
            "redistribution combines partial values, it never makes them (they come only from "
            "a reduction); make the target replicated or sharded on those mesh axes",
        ),
    ],
    ids=["partial-from-complete", "partial-on-another-mesh-axis"],
)
def test_an_impossible_target_is_an_error_naming_both_placements(shape, source, target, message):
    with pytest.raises(RedistributionError) as e:
        plan(shape, 4, (2, 4), P(source, 2), P(target, 2))
    assert str(e.value) == message


def test_an_uneven_target_is_planned_with_padded_bytes():
    """[6, 8] to (S0,S0) on 2x4: 6 rows over 8 devices (1 1 1 1 1 1 0 0, torch.chunk's
    chunks nested as the IR splits them); each step costs its largest chunk."""
    found = plan((6, 8), 4, (2, 4), P("(S1,R)", 2), P("(S0,S0)", 2))
    assert found.steps and all(s.bytes >= 0 for s in found.steps)
    assert Geometry((6, 8), 4, (2, 4)).local_elements(P("(S0,S0)", 2)) == 8  # 1 row of 8


def test_bad_arguments_are_errors():
    with pytest.raises(
        RedistributionError, match=r"the source \(S0\) is for a rank-1 tensor on a rank-1 mesh"
    ):
        plan((8, 8), 4, (2, 4), P("(S0)", 1), P("(R,R)", 2))
    with pytest.raises(RedistributionError, match="non-empty list of positive axis sizes"):
        plan((8,), 4, (2, 0), P("(R,R)", 1), P("(R,R)", 1))
    with pytest.raises(RedistributionError, match="non-negative extents"):
        plan((-1,), 4, (2,), P("(R)", 1), P("(R)", 1))
    for latency in (-1, 1.5, True, "8"):
        with pytest.raises(RedistributionError, match=r"latency_bytes must be a non-negative "):
            Planner((8,), 4, (2,), latency)
        with pytest.raises(RedistributionError, match=r"latency_bytes must be a non-negative "):
            BruteForce((8,), 4, (2,), latency)


@pytest.mark.parametrize("planner", [Planner, BruteForce])
@pytest.mark.parametrize(
    "shape, itemsize, mesh, message",
    [
        ((-1,), 4, (2,), r"got shape \(-1,\) and itemsize 4"),
        ((2.5,), 4, (2,), r"got shape \(2.5,\)"),
        (8, 4, (2,), r"got shape 8 and itemsize 4"),
        ((8,), 0, (2,), r"non-negative extents and a positive element size.*itemsize 0"),
        ((8,), 4, (2, 0), "non-empty list of positive axis sizes"),
    ],
    ids=["negative", "fraction", "not-a-list", "itemsize-0", "empty-mesh-axis"],
)
def test_the_planner_and_the_brute_force_check_their_question_alike(
    planner, shape, itemsize, mesh, message
):
    """One check of the tensor and the mesh for both: the brute force took a negative or
    fractional extent and an itemsize of 0 and answered (an Allgather of -1 rows: 0 B)."""
    with pytest.raises(RedistributionError, match=message):
        planner(shape, itemsize, mesh)


def test_the_cost_is_launches_times_the_latency_plus_bytes():
    """plan.cost: a LocalSlice launches nothing; the terms and their sum are explained."""
    p = plan((8, 8, 16), 4, (2, 4), P("(R,P)", 3), P("(R,R)", 3), latency_bytes=1025)
    assert [s.step.kind for s in p.steps] == [StepKind.Allreduce]
    assert (p.cost.launches, p.cost.bytes, p.cost.total) == (1, 6144, 7169)
    assert p.cost.describe() == "1 launch x 1025 B + 6144 B = 7169 B"
    alt = p.alternative  # slicing over the idle DIDy axis sends less, in two collectives
    assert alt.label == "fewest bytes" and (alt.cost.launches, alt.bytes) == (2, 5120)
    assert p.cost.why_not(alt.cost) == "1024 B fewer do not pay for 1 launch more at 1025 B each"
    cheap = plan((8, 8, 16), 4, (2, 4), P("(R,P)", 3), P("(R,R)", 3), latency_bytes=1023)
    assert [s.step.kind for s in cheap.steps][1:] == [StepKind.Allreduce, StepKind.Allgather]
    assert cheap.cost.total == 2 * 1023 + 5120 < 1023 + 6144


def test_numpy_integers_are_extents_and_sizes_too():
    import numpy as np

    p = plan((np.int64(8),), np.int64(4), (np.int64(2),), P("(S0)", 1), P("(R)", 1))
    assert p.bytes == 16 and p.geometry.shape == (8,) and type(p.geometry.shape[0]) is int


@pytest.mark.parametrize(
    "rejected, why",
    [
        ((3, 500), "500 B fewer do not pay for 1 launch more at 1000 B each"),
        ((1, 2500), "1 launch fewer save 1000 B but it sends 1500 B more"),
        ((2, 1100), "it sends 100 B more in as many launches"),
        ((3, 1000), "it sends as many bytes in 1 launch more"),
        ((4, 1500), "it sends 500 B more in 2 launches more"),
        ((1, 2000), "the same cost: ties go to fewer collectives, then fewer steps"),
    ],
)
def test_why_a_plan_lost_names_the_terms_that_differ(rejected, why):
    chosen = Cost(2, 1000, 1000)  # 3000 B-equivalent: no rejected plan costs less
    assert Cost(*rejected, 1000).total >= chosen.total
    assert chosen.why_not(Cost(*rejected, 1000)) == why
    assert "latency_bytes=0" in Cost(2, 1000, 0).why_not(Cost(1, 1200, 0))
