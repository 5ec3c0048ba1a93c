"""A take of whole chunks of a sharded axis (ppermute in the global view) is one
CollectivePermute: point-to-point transfers, one block per device, on 1-D and N-D
meshes; it prints, parses back, explains and runs like every communication."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import check_golden
from ppermute_cases import CASES, DIDx, pair_swap, ring
from test_roundtrip import assert_round_trips_at_every_stage

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.ir.errors import ParseError
from fuserlite.plan.permute import chunk_sources, group_chunks, permute_move
from fuserlite.plan.placement import Placement
from fuserlite.program.communication import CommKind
from fuserlite.program.parser import parse_printed
from fuserlite.schedule.shard import shard_as


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_ppermute_is_one_collective_permute_of_one_block_per_device(case):
    fusion = case.fusion()
    ex = fl.FusionExecutor(fusion)
    (out,) = ex.run([case.x])
    fl.validate(fusion, [case.x], [out])
    np.testing.assert_array_equal(out, case.expected())
    (comm,) = ex.communications  # no Allgather, no LocalSlice: one point-to-point step
    assert comm.kind is CommKind.CollectivePermute
    devices = int(np.prod(case.mesh_shape))
    block = case.block_bytes
    assert comm.bytes_per_device == block
    # every device sends its one block and receives one (no device is its own source)
    assert sorted(t.src for t in comm.transfers) == list(range(devices))
    assert sorted(t.dst for t in comm.transfers) == list(range(devices))
    assert all(np.prod([hi - lo for lo, hi in t.box]) * 4 == block for t in comm.transfers)
    assert comm.group_names == (case.axis.name,)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_ppermute_program_round_trips_at_every_stage(case):
    fusion = case.fusion()
    assert_round_trips_at_every_stage(fusion)
    program = fl.lower(fusion)
    back = parse_printed(str(program))
    assert fl.explain(back) == fl.explain(program)
    (comm,) = back.communications
    np.testing.assert_array_equal(fl.FusionExecutor(back).run([case.x])[0], case.expected())
    assert comm.sources == program.communications[0].sources


@pytest.mark.parametrize("k, name", [(0, "ppermute_ring"), (4, "ppermute_pair_swap_2x4")])
def test_the_lowered_program_is_pinned(k, name, request):
    """The whole default pipeline's program (layouts assigned), kernels and all."""
    text = str(fl.lower(CASES[k].fusion()))
    check_golden(f"lowered/{name}.txt", text, bool(request.config.getoption("--update-golden")))


def test_fuserlite_opt_reads_the_lowered_program_back(tmp_path, capsys):
    text = str(fl.lower(CASES[3].fusion()))  # the ring over DIDx of a 2x4 mesh
    path = tmp_path / "ring.txt"
    path.write_text(text)
    assert main(["opt", str(path)]) == 0
    assert capsys.readouterr().out == text


def test_explain_gives_the_permute_and_the_gather_it_replaces():
    text = fl.explain(fl.lower(CASES[0].fusion()))  # the ring on 4 devices, 8 B blocks
    assert "CollectivePermute on DIDx teams, block r from block (3 0 1 2)[r]" in text
    assert "4 transfers, 8 B/device (one block)" in text
    assert "rejected: via replicate: Allgather + take + LocalSlice, 24 B/device" in text


def _nested_swap() -> fl.Fusion:
    """x [8, 8] rows over DIDy then DIDx of a 2x3 mesh (chunks 2 2 0 | 2 2 0), y =
    take(x) swapping the first two chunks of each DIDy row: one CollectivePermute whose
    rejected gather is one Allgather at the default latency, two by bytes alone."""
    mesh = fl.DeviceMesh.for_shape([2, 3])
    nested = Placement.parse("(S0.0,S0.1)", 2)
    with fl.Fusion() as f:
        x = fl.tensor([8, 8], name="x")
        f.add_input(x)
        shard_as(x, mesh, nested)
        y = fl.take(x, [2, 3, 0, 1, 6, 7, 4, 5])
        shard_as(y, mesh, nested)
        f.add_output(fl.neg(y))
    return f


@pytest.mark.parametrize(
    ("latency", "planner_line", "rejected"),
    [
        (None, None, "Allgather + take + LocalSlice, 320 B/device"),
        (0, "Planner: latency_bytes=0", "Allgather + Allgather + take + LocalSlice, 256 B/device"),
    ],
)
def test_the_rejected_gather_of_a_permute_is_planned_at_the_lowerings_latency(
    latency, planner_line, rejected
):
    """explain planned it at the default latency whatever the lowering's, and a program
    of permutes alone printed no `Planner:` line to read it back from: it is recorded,
    and printed where it is not the default (the parser's without a line)."""
    program = fl.lower(_nested_swap(), **({} if latency is None else {"latency_bytes": latency}))
    assert [c.kind.value for c in program.communications] == ["CollectivePermute"]
    text = fl.explain(program)
    assert f"rejected: via replicate: {rejected}\n" in text
    printed = str(program)
    first = printed.splitlines()[0]
    assert first == planner_line if planner_line else not first.startswith("Planner:")
    back = fl.explain(parse_printed(printed))
    assert back == text.replace("x (T0)", "T0")  # the printed dialect shows no names


def _global_take(n: int, devices: int, indices: list[int], out_sharded: bool = True):
    """x[n, 3] row-sharded on `devices`, y = take(x, indices) sharded alike (or not)."""
    mesh = fl.DeviceMesh.for_num_devices(devices)
    with fl.Fusion() as f:
        x = fl.tensor([n, 3], name="x")
        f.add_input(x)
        shard_as(x, mesh, Placement.parse("(S0)", 2))
        y = fl.take(x, indices)
        shard_as(y, mesh, Placement.parse("(S0)" if out_sharded else "(R)", 2))
        f.add_output(fl.neg(y))
    return f


def _kinds_and_check(fusion) -> list[str]:
    x = fl.random_inputs(fusion, 0)
    ex = fl.FusionExecutor(fusion)
    fl.validate(fusion, x, ex.run(x))
    return [c.kind.value for c in ex.communications]


def test_a_global_take_of_whole_blocks_is_a_collective_permute():
    blocks = [4, 5, 6, 7, 0, 1, 2, 3]  # blocks 2 3 0 1 of 2 rows on 4 devices
    assert _kinds_and_check(_global_take(8, 4, blocks)) == ["CollectivePermute"]


def test_a_take_of_whole_blocks_keeps_its_inputs_sharding():
    """propagate-shardings gives an unsharded take of whole blocks x's sharding (its
    chunks only change devices): one CollectivePermute, the result sharded like x."""
    mesh = fl.DeviceMesh.for_num_devices(4)
    with fl.Fusion() as f:
        x = fl.tensor([8, 3], name="x")
        f.add_input(x)
        shard_as(x, mesh, Placement.parse("(S0)", 2))
        y = fl.take(x, [4, 5, 6, 7, 0, 1, 2, 3])
        f.add_output(fl.neg(y))
    assert _kinds_and_check(f) == ["CollectivePermute"]
    (comm,) = fl.lower(f).communications
    assert comm.after == Placement.parse("(S0)", 2) and comm.sources == (2, 3, 0, 1)


@pytest.mark.parametrize(
    "indices, kinds",
    [
        # uneven 3 3 3 1: chunks 0 and 1 (3 rows each) swap, 2 and 3 stay
        ([3, 4, 5, 0, 1, 2, 6, 7, 8, 9], ["CollectivePermute"]),
        # chunk 0 gets the 1-row chunk 3: no whole chunk; gathered, taken, sliced
        ([9, 0, 1, 2, 3, 4, 5, 6, 7, 8], ["Allgather", "LocalSlice"]),
    ],
)
def test_uneven_chunks_permute_where_the_chunks_match(indices, kinds):
    assert _kinds_and_check(_global_take(10, 4, indices)) == kinds


def test_a_take_that_is_no_block_permutation_keeps_the_gather():
    """Rows swapped inside blocks, or a result replicated: correct the old way."""
    rows = [1, 0, 3, 2, 5, 4, 7, 6]
    assert _kinds_and_check(_global_take(8, 4, rows)) == ["Allgather", "LocalSlice"]
    blocks = [4, 5, 6, 7, 0, 1, 2, 3]
    assert _kinds_and_check(_global_take(8, 4, blocks, out_sharded=False)) == ["Allgather"]


def test_chunk_sources_and_permute_moves():
    assert group_chunks(10, (4,), (0,)) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert chunk_sources(8, (4,), (0,), [6, 7, 0, 1, 2, 3, 4, 5]) == (3, 0, 1, 2)
    assert chunk_sources(8, (4,), (0,), [7, 0, 1, 2, 3, 4, 5, 6]) is None  # not whole
    assert chunk_sources(8, (4,), (0,), [0, 1, 2, 3]) is None  # another extent
    # nested over both axes of 2x4 (team rank = 4y + x): 9 rows, chunks 2 2 1 0 2 2 0 0
    assert chunk_sources(9, (2, 4), (0, 1), [5, 6, 7, 8, 4, 0, 1, 2, 3]) == (4, 5, 2, 3, 0, 1, 6, 7)
    # a device that is its own source moves nothing; a replicated axis balances senders
    p = Placement.parse("(R,S0)", 1)  # on 2x4: sharded over DIDx, replicated over DIDy
    move, _, need = permute_move((8,), (2, 4), range(8), p, 0, (1, 0, 2, 3), 4)
    assert [(t.src, t.dst) for t in move.transfers] == [(1, 0), (0, 1), (5, 4), (4, 5)]
    assert need[0] == (0, ((2, 4),))


@pytest.mark.parametrize("perm", [ring(4), pair_swap(4)])
def test_ppermute_runs_on_the_devices_it_names(perm):
    """run_per_device: device d holds its source's block."""
    case = CASES[0] if perm == ring(4) else CASES[1]
    per_device = fl.FusionExecutor(case.fusion()).run_per_device([case.x])
    for src, dst in perm:
        np.testing.assert_array_equal(per_device[dst][0], case.x[2 * src : 2 * src + 2])


def _line(text: str) -> str:
    (line,) = [s for s in text.splitlines() if s.startswith("Communication CollectivePermute")]
    return line


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("sources=(3 0 1 2), ", "", "a CollectivePermute shows its sources=(...)"),
        ("sources=(3 0 1 2)", "sources=(3 0 1 9)", "no move from"),
        ("transfers=[3->0", "transfers=[2->0", "are not the move planned between"),
    ],
)
def test_a_permute_line_that_contradicts_itself_is_a_parse_error(old, new, message):
    text = str(fl.lower(CASES[0].fusion()))
    line = _line(text)
    assert old in line
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_printed(text.replace(line, line.replace(old, new)))


def test_sources_on_another_communication_is_a_parse_error():
    text = str(fl.lower(_global_take(8, 4, [1, 0, 3, 2, 5, 4, 7, 6])))
    (line,) = [s for s in text.splitlines() if s.startswith("Communication Allgather")]
    bad = line.replace(", input=", ", sources=(0 1 2 3), input=")
    with pytest.raises(ParseError, match="no other communication does"):
        parse_printed(text.replace(line, bad))


def test_a_ppermute_of_a_replicated_value_permutes_its_copies():
    """A value the same on every device: each device's copy is its source's (the same)."""
    x = np.arange(8, dtype=np.float32)
    with fl.Fusion() as fusion:
        t = fl.tensor([8])
        fusion.add_input(t)
        mesh = fl.DeviceMesh.for_num_devices(4)
        f = fl.shard_map(lambda b: fl.ppermute(b, DIDx, ring(4)), mesh, [None], [(DIDx,)])
        fusion.add_output(f(t))
    ex = fl.FusionExecutor(fusion)
    (out,) = ex.run([x])
    np.testing.assert_array_equal(out, np.tile(x, 4))
    assert "CollectivePermute" in [c.kind.value for c in ex.communications]


RING_FUS = """\
mesh m = [0, 1, 2, 3]
input x: float32[8] on m
shard_map m (x [DIDx]) -> (y [DIDx])
    y = ppermute(x, axis=DIDx, perm=[[0, 1], [1, 2], [2, 3], [3, 0]])
    return y
end
output y
"""


def test_the_commands_show_the_permute_of_a_fus_file(tmp_path, capsys):
    path = tmp_path / "ring.fus"
    path.write_text(RING_FUS)
    assert main(["run", str(path), "--compute", "interpret"]) == 0
    report = capsys.readouterr().out
    assert re.search(r"CollectivePermute +T1 +T2 +0-3 +pinned\{0, 1\} +8\n", report)
    assert "validation: ok" in report
    assert main(["show", str(path), "--communications"]) == 0
    assert "== CollectivePermute (block r from block (3 0 1 2)[r]): before, after" in (
        capsys.readouterr().out
    )
