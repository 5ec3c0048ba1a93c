"""Communications on N-D meshes and moves between meshes by box transfers print and parse
back to equal communications (every field, fl.explain's records); a line that contradicts
its tensors is a ParseError naming the field."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_roundtrip import assert_round_trips_at_every_stage

import fuserlite as fl
from fuserlite.ir.errors import ParseError
from fuserlite.plan import Placement, all_placements
from fuserlite.program.parser import parse_printed
from fuserlite.schedule.shard import shard_as

SHAPES = ([8], [8, 16], [16, 8, 8])  # every axis divides evenly on every mesh drawn


def _mesh(rng: np.random.Generator) -> fl.DeviceMesh:
    """1 to 8 of the devices 0..7 in a random order, as a 1-D or a 2-D mesh."""
    shape = [(1,), (2,), (4,), (2, 2), (2, 4), (4, 2), (8,)][rng.integers(7)]
    devices = rng.permutation(8)[: int(np.prod(shape))].tolist()
    rows = devices if len(shape) == 1 else np.reshape(devices, shape).tolist()
    return fl.DeviceMesh(rows)


def _placement(rng: np.random.Generator, ndim: int, rank: int, partial: bool) -> Placement:
    choices = list(all_placements(ndim, rank, partial=partial))
    return choices[rng.integers(len(choices))]


def random_move(seed: int) -> fl.Fusion:
    """x on one random mesh -> set(x) (or a sum of x, partial where x is sharded on the
    summed axis) on another, each with a random placement."""
    rng = np.random.default_rng(seed)
    shape = SHAPES[rng.integers(len(SHAPES))]
    src, dst = _mesh(rng), _mesh(rng)
    with fl.Fusion() as f:
        x = fl.tensor(shape)
        f.add_input(x)
        shard_as(x, src, _placement(rng, len(shape), src.rank, False))
        y = fl.sum(x, 0) if len(shape) > 1 and rng.integers(2) else fl.set(x)
        shard_as(y, dst, _placement(rng, len(y.shape), dst.rank, False))
        f.add_output(y)
    return f


def test_random_moves_between_meshes_round_trip_at_every_stage() -> None:
    """Every field of every communication and fl.explain come back, at every stage;
    the cases include N-D meshes and moves of more than 8 transfers (printed
    abbreviated: the rest follow from the tensors)."""
    seen = {"N-D": 0, "transfers": 0, "over 8": 0}
    for seed in range(40):
        fusion = random_move(seed)
        try:
            program = fl.lower(fusion)
        except fl.FuserliteError:
            continue
        assert_round_trips_at_every_stage(fusion)
        assert fl.explain(parse_printed(str(program))) == fl.explain(program)
        for c in program.communications:
            seen["N-D"] += c.mesh is not None and c.mesh.rank > 1
            seen["transfers"] += c.transfers is not None
            seen["over 8"] += c.transfers is not None and len(c.transfers) > 8
    assert all(seen.values()), seen


def _nd_line() -> tuple[str, str]:
    """The printed examples/dp_tp_mlp lowered, and its Communication line."""
    text = str(fl.lower(fl.load("examples/dp_tp_mlp.fus")))
    (line,) = [s for s in text.splitlines() if s.startswith("Communication")]
    return text, line


def _across_meshes() -> str:
    with fl.Fusion() as f:
        x = fl.tensor([8, 12])
        f.add_input(x)
        shard_as(x, fl.DeviceMesh([0, 1]), Placement.parse("(S0)", 2))
        y = fl.set(x)
        shard_as(y, fl.DeviceMesh([2, 3, 4, 5]), Placement.parse("(S1)", 2))
        f.add_output(y)
    return str(fl.lower(f))


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("placements=(S0,P)->(S0,R)", "placements=(S0,P)->(R,R)", "the placements are those"),
        ("teams=(DIDx)", "teams=(DIDz)", "teams=(DIDz): each a parallel type of"),
        (
            "mesh=DeviceMesh{{0 1 2 3}{4 5 6 7}}, teams=(DIDx), placements=(S0,P)->(S0,R), ",
            "",
            "shows `mesh=..., teams=(...), placements=(...)->(...)`",
        ),
        ("mesh=DeviceMesh{{0 1 2 3}{4 5 6 7}}", "mesh=DeviceMesh{{4 5 6 7}{0 1 2 3}}", "but its"),
    ],
)
def test_an_nd_line_that_contradicts_its_tensors_is_a_parse_error(old, new, message) -> None:
    text, line = _nd_line()
    assert old in line
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_printed(text.replace(line, line.replace(old, new)))


def test_transfers_other_than_the_planned_move_are_a_parse_error() -> None:
    text = _across_meshes()
    assert parse_printed(text).communications[0].transfers is not None
    bad = text.replace("transfers=[0->2 [0:4, 0:3]", "transfers=[0->2 [0:4, 0:2]")
    assert bad != text
    with pytest.raises(ParseError, match="are not the move planned between"):
        parse_printed(bad)


def test_a_communication_whose_teams_do_not_make_its_placements_is_rejected() -> None:
    """Teams edited by hand: an Allreduce on the (DIDy, DIDx) teams does not take (S0,P)
    to (S0,R); it read back, and only the run failed."""
    text, line = _nd_line()
    bad = text.replace(line, line.replace("teams=(DIDx)", "teams=(DIDy DIDx)"))
    with pytest.raises(ParseError, match=r"Allreduce on \(DIDy, DIDx\) teams does not apply"):
        parse_printed(bad)


def test_a_communication_that_is_no_plan_is_explained_as_written() -> None:
    """One Allreduce of a 1 MiB (R,P) tensor on 2x4, lowered at a latency that makes it
    the plan: read back at that latency (its `Planner:` line) it is that plan; read at the
    default latency (the line dropped), where slicing over DIDy first sends fewer bytes,
    it is a valid step but not the planner's plan, and explain says so."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_shape([2, 4])
        a, b = fl.tensor([512, 256]), fl.tensor([256, 512])
        f.add_input(a)
        f.add_input(b)
        shard_as(a, mesh, Placement.parse("(R,S1)", 2))
        shard_as(b, mesh, Placement.parse("(R,S0)", 2))
        z = fl.matmul(a, b)
        z.set_device_mesh(mesh)
        f.add_output(z)
    text = str(fl.lower(f, latency_bytes=10**9))
    assert text.startswith("Planner: latency_bytes=1000000000\n")
    planned = fl.explain(parse_printed(text))
    assert "Allreduce on DIDx teams" in planned and "as written" not in planned
    program = parse_printed(text.replace("Planner: latency_bytes=1000000000\n", "", 1))
    (comm,) = program.communications
    assert comm.kind.value == "Allreduce" and comm.group_names == ("DIDx",)
    assert "Allreduce: as written, not a plan of the planner" in fl.explain(program)
