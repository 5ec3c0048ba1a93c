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
    # The reader as the user wrote it: it reads x, which the Set T1 reshards for it.
    assert re.fullmatch(
        r"T1 = Set\(x \(T0\)\), needed by T\d+ = \w+\(x \(T0\)\), on DeviceMesh\{\{0 1 2 3\}\{4 5 6 7\}\}",
        lines[0],
    ), lines[0]
    # a [1, 16] block: a quarter of it to each of 3 team members, or all of it gathered
    assert lines[1:] == [
        "  DIDy: Shard(0) -> Shard(0); DIDx: Shard(0) -> Shard(1)",
        "  (S0,S0) -> (S0,S1): AllToAll S0->S1 on DIDx teams, 48 B/device in 1 launch",
        "  cost: 1 launch x 131072 B + 48 B = 131120 B",
        "  rejected: via replicate: Allgather + LocalSlice, 192 B/device in 1 launch",
        "  its cost: 1 launch x 131072 B + 192 B = 131264 B: it sends 144 B more in as many "
        "launches",
        "  time: AllToAll 5.01 us on NVLink 4 (3.6 us + 3 steps x 470 ns + 48 B at 450 GB/s); "
        "exposed: no compute runs beside it",
    ]
    assert (plan.bytes, alt.bytes) == (3 * 4 * 4, 3 * 16 * 4)


def explain_tp_mlp_on_2x4(latency_bytes: int | None) -> list[str]:
    """fl.explain of tp_mlp resized to 2x4, its planner's collectives costing latency_bytes."""
    names = fl.pipeline.default_pass_names(**fl.pipeline.latency_options(latency_bytes))
    tp = fl.load(REPO / "examples" / "tp_mlp.fus")
    return fl.explain(fl.Pipeline(["resize-mesh[mesh=2x4]", *names]).run(tp)).splitlines()


CHOSEN = "  (R,P) -> (R,R): "
ONE_ALLREDUCE = CHOSEN + "Allreduce on DIDx teams, 1536 B/device in 1 launch"
SLICE_REDUCE_GATHER = CHOSEN + (
    "LocalSlice R->S0 on DIDy teams (0 B) + Allreduce on DIDx teams (768 B) + Allgather "
    "S0->R on DIDy teams (512 B), 1280 B/device"
)


def test_explain_shows_both_terms_of_the_cost_and_why_the_latency_term_chose():
    """tp_mlp on 2x4: (R,P) -> (R,R) is one Allreduce (1536 B) at the default latency, and
    slice + Allreduce + gather (1280 B, 2 collectives) by bytes alone; each names the other."""
    assert explain_tp_mlp_on_2x4(None)[2:] == [
        ONE_ALLREDUCE,
        "  cost: 1 launch x 131072 B + 1536 B = 132608 B",
        "  rejected: fewest bytes: LocalSlice + Allreduce + Allgather, 1280 B/device in 2 launches",
        "  its cost: 2 launches x 131072 B + 1280 B = 263424 B: 256 B fewer do not pay for 1 "
        "launch more at 131072 B each",
        "  time: Allreduce 6.42 us on NVLink 4 (3.6 us + 6 steps x 470 ns + 1.5 KiB at 450 GB/s); "
        "exposed: no compute runs beside it",
    ]
    assert explain_tp_mlp_on_2x4(0)[2:] == [
        SLICE_REDUCE_GATHER,
        "  cost: 2 launches x 0 B + 1280 B = 1280 B",
        "  rejected: one mesh axis at a time: Allreduce, 1536 B/device",
        "  its cost: 1 launch x 0 B + 1536 B = 1536 B: it sends 256 B more (latency_bytes=0: "
        "launches cost nothing)",
        # the LocalSlice takes no time; by time the fewest bytes lose (10.5 us against 6.42)
        "  time: Allreduce 6.42 us on NVLink 4 (3.6 us + 6 steps x 470 ns + 768 B at 450 GB/s); "
        "exposed: no compute runs beside it",
        "  time: Allgather 4.07 us on NVLink 4 (3.6 us + 1 step x 470 ns + 512 B at 450 GB/s); "
        "exposed: no compute runs beside it",
    ]
    # One more launch for 256 B fewer pays while a launch costs less than 256 B; at 256 the
    # costs tie and the fewer collectives win.
    assert explain_tp_mlp_on_2x4(255)[2] == SLICE_REDUCE_GATHER + " in 2 launches"
    assert explain_tp_mlp_on_2x4(256)[2] == ONE_ALLREDUCE
    assert "the same cost: ties go to fewer collectives" in explain_tp_mlp_on_2x4(256)[5]


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
    # --mesh and --latency-bytes: the lowering `run` would do, explained
    path = str(REPO / "examples" / "tp_mlp.fus")
    code = main(["explain", path, "--mesh", "2x4", "--latency-bytes", "0"])
    assert code == 0 and capsys.readouterr().out.splitlines()[2:] == explain_tp_mlp_on_2x4(0)[2:]
    code = main(["explain", path, "--latency-bytes", "-1"])
    assert code == 1
    assert "latency_bytes must be a non-negative integer" in capsys.readouterr().err


SWAP_NESTING = """\
mesh m = [[0, 1, 2, 3], [4, 5, 6, 7]]
input x: float32[8, 16] on m
y = set(x)
z = relu(y)
output z
outer_split x axis 0 by 2
parallelize x axis 0 DIDy
outer_split x axis 1 by 4
parallelize x axis 1 DIDx
outer_split y axis 0 by 4
parallelize y axis 0 DIDx
outer_split y axis 1 by 2
parallelize y axis 1 DIDy
"""


def test_every_command_that_lowers_takes_latency_bytes(tmp_path, capsys) -> None:
    """(S0,S0) -> (S0.1,S0.0) of a 512 B tensor: one Allgather over all 8 devices and a
    slice at the default latency, three AllToAlls (136 B against 448 B) by bytes alone."""
    path = tmp_path / "swap.fus"
    path.write_text(SWAP_NESTING)

    def lines(command: str, *options: str) -> list[str]:
        assert main([command, str(path), *options]) == 0
        return capsys.readouterr().out.splitlines()

    def firsts(lines: list[str], prefix: str) -> list[str]:
        return [line[len(prefix) :].split()[0] for line in lines if line.startswith(prefix)]

    for option, want in [
        ([], ["Allgather", "LocalSlice"]),
        (["--latency-bytes", "0"], ["AllToAll"] * 3),
    ]:
        assert firsts(lines("print", "--lowered", *option), "Communication ") == want
        assert firsts(lines("show", "--communications", *option), "== ") == [k + ":" for k in want]
        report = lines("run", *option)
        end = next(i for i, row in enumerate(report) if row.startswith("sent: "))
        table = report[report.index("communications") + 2 : end]
        assert [row.split()[0] for row in table] == want
