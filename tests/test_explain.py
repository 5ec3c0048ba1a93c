"""fl.explain and `fuserlite explain`: what needed each communication, and what it costs."""

from __future__ import annotations

import re
from pathlib import Path

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.plan import Placement, Planner
from fuserlite.schedule.shard import shard_as

REPO = Path(__file__).resolve().parents[1]
MESH = fl.DeviceMesh.for_shape([2, 4])


def alltoall_program() -> fl.Program:
    with fl.Fusion() as f:
        x = fl.tensor([8, 16], name="x")
        f.add_input(x)
        shard_as(x, MESH, Placement.parse("(S0,S0)", 2))
        y = fl.set(x)
        shard_as(y, MESH, Placement.parse("(S0,S1)", 2))
        f.add_output(fl.relu(y))
    return fl.lower(f)


def test_explain_names_the_reader_the_placements_the_steps_and_the_rejected_plan() -> None:
    text = fl.explain(alltoall_program())
    plan = Planner([8, 16], 4, MESH.shape).plan(
        Placement.parse("(S0,S0)", 2), Placement.parse("(S0,S1)", 2)
    )
    alt = plan.alternative
    lines = text.splitlines()
    assert re.fullmatch(
        r"T1 = Set\(x \(T0\)\), needed by T\d+ = \w+\(T1\), on DeviceMesh\{\{0 1 2 3\}\{4 5 6 7\}\}",
        lines[0],
    ), lines[0]
    assert lines[1] == "  DIDy: Shard(0) -> Shard(0); DIDx: Shard(0) -> Shard(1)"
    assert lines[2] == f"  (S0,S0) -> (S0,S1): AllToAll S0->S1 on DIDx teams, {plan.bytes} B/device"
    assert lines[3] == f"  rejected: via replicate: Allgather + LocalSlice, {alt.bytes} B/device"
    assert alt.bytes > plan.bytes


def test_explain_of_a_1d_program_and_of_one_without_communications() -> None:
    from fuserlite import models

    text = fl.explain(fl.lower(models.tensor_parallel_mlp(2)))
    assert "Allreduce on DIDx teams" in text and "needed by T" in text
    assert "DIDx: Partial -> Replicate" in text
    with fl.Fusion() as f:
        x = fl.tensor([4])
        f.add_input(x)
        f.add_output(fl.neg(x))
    assert fl.explain(fl.lower(f)).startswith("no communications")


def test_the_explain_command(capsys) -> None:
    code = main(["explain", str(REPO / "examples" / "tp_mlp.fus")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Allreduce on DIDx teams" in out and "rejected:" in out
