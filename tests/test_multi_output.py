"""An op with several outputs sharded differently (sdpa, sdpa_bwd) computes once, in
one placement of its inputs (the cheapest, passes/multi_output.py), and reshards the
other outputs after it: checked against the reference, with the kinds, teams and bytes
of what moves pinned. The mpi backend runs the same cases in tests/test_mpi.py's
4-rank launch (tests/mpi_scripts/equivalence.py)."""

from __future__ import annotations

import pytest
from multi_output_cases import MOVES, cases, sdpa_bwd_partials_on_two_meshes
from test_differential import run_case

import fuserlite as fl
from fuserlite.ir.sharding import mesh_placement
from fuserlite.ops.registry import all_ops
from fuserlite.passes import multi_output
from fuserlite.pipeline import Pipeline
from fuserlite.plan.mesh_axes import team_name


def moves(ex: fl.FusionExecutor) -> list[tuple]:
    """(kind, team, bytes per device, before, after) of each communication."""
    return [
        (
            c.kind.value,
            team_name(c.mesh.rank, c.group) if c.mesh else "{" + " ".join(map(str, c.team)) + "}",
            c.bytes_per_device,
            str(c.before),
            str(c.after),
        )
        for c in ex.communications
    ]


@pytest.mark.parametrize("size, name", [(s, n) for s in (2, 4) for n in cases(s)])
def test_outputs_sharded_differently_compute_once_and_match_the_reference(size, name):
    f = cases(size)[name](size)
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, 3)
    fl.validate(f, inputs, ex.run(inputs))
    assert fl.FusionExecutor(f, compute="numpy").run(inputs) is not None
    if (size, name) in MOVES:
        assert moves(ex) == MOVES[size, name]
    ops = [e for e in fl.lower(f).fusion.exprs() if e.op_name in ("sdpa", "sdpa_bwd")]
    assert len(ops) == len({e.op_name for e in ops})  # each computed once, never twice


def test_the_cheapest_placement_computes():
    """sdpa with q, k, v on the heads and logsumexp asked on the rows: in the output's
    placement only logsumexp moves; in logsumexp's, q, k, v and the output would: the
    output's is chosen, the cheaper, and its inputs are read as they lie."""
    f = Pipeline(["propagate-shardings"]).run(cases(4)["sdpa-out-heads-lse-rows"](4))
    (sdpa,) = [e for e in f.exprs() if e.op_name == "sdpa"]
    users = list(sdpa.outputs)
    heads, rows = (
        multi_output.candidate(sdpa, multi_output.needs(sdpa, k), users, k) for k in (0, 1)
    )
    assert multi_output.choose(sdpa, users) == heads
    assert heads.needs == tuple(mesh_placement(t) for t in sdpa.inputs)
    assert heads.cost < rows.cost


def test_refused_differential_seeds_lower_and_match():
    """Seeds of tests/random_sharded.py the pass refused with 'need ... sharded
    differently; shard them alike' (sdpa 3, 396; sdpa_bwd 104, 335), and two whose
    cheapest-looking placement would have moved a partial grad_key between meshes (a
    move between meshes makes complete values: 3136, 5530): each lowers and matches
    the reference on every compute path."""
    for seed in (3, 104, 335, 396, 3136, 5530):
        assert run_case(seed) == ("ok", ""), seed


def test_partial_outputs_no_placement_makes_are_refused_naming_each_output():
    """grad_key partial on one mesh and grad_value on another: no placement computes
    both (computing sdpa_bwd twice is not lowering it), so the error names the op,
    each output with its sharding, and what to change."""
    f = sdpa_bwd_partials_on_two_meshes()
    with pytest.raises(fl.LoweringError) as caught:
        fl.lower(f)
    text = str(caught.value)
    assert "sdpa_bwd(" in text
    for sharding in (
        "T6 on DeviceMesh{0 1}, replicated",
        "T7 on DeviceMesh{0 1}, partial sums over reduction axis 4 (deviceIdx.x)",
        "T8 on DeviceMesh{2 3}, partial sums over reduction axis 4 (deviceIdx.x)",
    ):
        assert sharding in text, sharding
    assert "put the partial outputs on one mesh, partial over the same mesh axes" in text
    assert text.count("\n") <= 1  # one paragraph


def test_the_registry_multi_output_ops_are_covered():
    """Every op with several outputs (an outputs axis map) has a case here."""
    several = {d.name for d in all_ops() if d.outputs_axis_map is not None}
    covered = {n.split("-")[0] for n in cases(4)}
    assert several <= covered, several - covered
