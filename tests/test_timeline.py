"""The step-time model (fuserlite.timing): op costs, the roofline and alpha-beta times,
the schedule on streams, the Chrome trace, the chart, explain's time lines, machines."""

from __future__ import annotations

import io
import json
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from op_examples import OP_CALLS, op_example

import fuserlite as fl
from fuserlite import models
from fuserlite.cli import main
from fuserlite.ops.registry import all_ops, definition
from fuserlite.program.communication import CommKind
from fuserlite.program.program import Kernel
from fuserlite.program.shards import device_shape
from fuserlite.timing import Event, Timeline, machine
from fuserlite.timing.chart import plain, rows
from fuserlite.timing.explain import hiding
from fuserlite.timing.machine import read_machine
from fuserlite.timing.model import algorithm_steps, communication_time, kernel_time
from fuserlite.timing.svg import svg
from fuserlite.timing.timeline import COMMUNICATION, COMPUTE, length, overlap, union
from fuserlite.timing.units import bytes_text, rate_text, seconds_text

REPO = Path(__file__).resolve().parents[1]
H100 = machine("h100-nvlink")

# FLOPs of each op's example (tests/op_examples.py: x[4, 8], w[1, 8], k[8, 3], k2[3, 8]):
# one per element of the largest tensor by default, 0 for what only moves data, 2 m n k
# for contractions, attention's two matmuls (causal: half), its backward 2.5 times that.
FLOPS = {
    **dict.fromkeys(
        ["neg", "exp", "tanh", "relu", "abs", "sqrt", "log", "where", "add", "sub", "mul"], 32
    ),
    **dict.fromkeys(["div", "maximum", "minimum", "sum", "max", "lt"], 32),
    **dict.fromkeys(["sin", "cos", "rsqrt", "pow", "min"], 32),
    **dict.fromkeys(
        ["cast", "set", "broadcast", "expand", "reshape", "permute", "take", "squeeze"], 0
    ),
    **dict.fromkeys(["select", "slice", "cat"], 0),
    "gelu": 8 * 32,
    "erf": 24 * 32,
    "embedding": 0,  # a gather moves data only
    "embedding_backward": 64,  # an add per element of its largest tensor, the [8, 8] output
    "sigmoid": 3 * 32,
    "silu": 4 * 32,
    "rand_like": 10 * 32,
    "rand": 10 * 32,
    "iota": 8,
    "matmul": 2 * 4 * 3 * 8,
    "linear": 2 * 4 * 3 * 8 + 4 * 3,  # + the bias
    "grouped_mm": 2 * 4 * 3 * 8,
    "sdpa": 2 * 4 * 4 * (8 + 8) // 2,
    "sdpa_bwd": 5 * (2 * 4 * 4 * (8 + 8) // 2) // 2,
}
MATMUL_UNITS = {"matmul", "linear", "grouped_mm", "sdpa", "sdpa_bwd"}


def test_every_op_has_a_cost_in_its_definition() -> None:
    assert set(FLOPS) == {d.name for d in all_ops()} == set(OP_CALLS)
    for op in FLOPS:
        (e,) = [e for e in op_example(op).exprs() if e.op_name == op]
        cost = definition(e).cost(e, lambda t: t.shape)
        io = sum(math.prod(t.shape) * t.dtype.itemsize for t in (*e.inputs, *e.outputs))
        assert (cost.flops, cost.bytes, cost.matmul) == (FLOPS[op], io, op in MATMUL_UNITS), op


def test_a_sharded_contraction_counts_only_its_own_block() -> None:
    """sp_mlp's second linear: h [2, 8, 64] and w2 [16, 64] both sharded on the 64, so
    each device does 2 m n (k / 2); its output is partial sums."""
    program = fl.lower(fl.load(REPO / "examples" / "sp_mlp.fus"))
    kernel = [k for k in program.kernels if k.exprs[0].op_name == "linear"][1]
    (e,) = kernel.exprs
    cost = definition(e).cost(e, lambda t: device_shape(t, 1))
    assert cost.flops == 2 * (2 * 8 * 16) * 32
    t = kernel_time(H100, kernel, 1)
    assert t.flops == cost.flops and t.compute == pytest.approx(cost.flops / 67e12)  # fp32


def test_kernel_time_is_the_roofline_plus_the_launch() -> None:
    program = fl.lower(fl.load(REPO / "examples" / "sp_mlp.fus"))
    for kernel in program.kernels:
        t = kernel_time(H100, kernel, 0)
        assert t.memory == pytest.approx(t.bytes / 3.35e12)
        assert t.seconds == pytest.approx(2e-6 + max(t.compute, t.memory))
    fused = next(k for k in program.kernels if k.scheduled)
    io = sum(
        math.prod(device_shape(x, 0)) * x.dtype.itemsize for x in (*fused.inputs, *fused.outputs)
    )
    assert kernel_time(H100, fused, 0).bytes == io  # intermediates stay on chip


def test_a_bfloat16_matmul_runs_at_the_tensor_core_peak() -> None:
    with fl.Fusion() as f:
        a, b = fl.tensor([256, 512], "bfloat16"), fl.tensor([512, 128], "bfloat16")
        f.add_input(a)
        f.add_input(b)
        f.add_output(fl.matmul(a, b))
    (kernel,) = fl.lower(f).kernels
    t = kernel_time(H100, kernel, 0)
    assert t.compute == pytest.approx(2 * 256 * 128 * 512 / 989.4e12)
    assert kernel_time(machine("cpu"), kernel, 0).compute == pytest.approx(
        2 * 256 * 128 * 512 / 160e9  # no bfloat16 rate: the vector units' float32
    )


@pytest.mark.parametrize(
    "kind, d, steps",
    [
        (CommKind.Allgather, 8, 7),
        (CommKind.ReduceScatter, 4, 3),
        (CommKind.AllToAll, 2, 1),
        (CommKind.Allreduce, 8, 14),
        (CommKind.Broadcast, 4, 3),
        (CommKind.SendRecv, 2, 1),
        (CommKind.CollectivePermute, 4, 1),
        (CommKind.LocalSlice, 4, 0),
    ],
)
def test_algorithm_steps_are_nccl_s_counts(kind: CommKind, d: int, steps: int) -> None:
    assert algorithm_steps(kind, d) == steps


def test_a_communication_takes_latency_plus_steps_plus_bytes_over_bandwidth() -> None:
    program = fl.lower(models.tensor_parallel_mlp(8))
    (comm,) = program.communications
    t = communication_time(H100, comm, comm.teams[0])
    assert comm.kind is CommKind.Allreduce and t.steps == 14
    expect = 3.6e-6 + 14 * 0.47e-6 + comm.bytes_per_device / 450e9
    assert t.seconds == pytest.approx(expect)


def flat_timeline_checks(tl: Timeline, program: fl.Program) -> None:
    """What holds on one stream: each device's events in program order, never overlapping,
    each starting where the one before it ended (nothing else waits) or when its team
    has arrived; a collective's members start and end together."""
    for d in tl.devices:
        events = tl.on(d)
        assert [e.step for e in events] == sorted(e.step for e in events)
        for a, b in zip(events, events[1:]):
            assert b.start >= a.end - 1e-15
        assert {e.stream for e in events} == {0}
    for i, step in enumerate(program.steps):
        events = [e for e in tl.events if e.step == i]
        if not isinstance(step, Kernel):
            for team in step.teams:
                mine = [e for e in events if e.device in team]
                assert len({e.start for e in mine}) == 1 and len({e.end for e in mine}) == 1
    t = tl.totals()
    assert t.exposed == pytest.approx(t.communication)  # one stream: nothing hides anything


@pytest.mark.parametrize(
    "example", ["tp_mlp", "sp_mlp", "dp_tp_mlp", "transformer_block", "seed_000", "softmax"]
)
def test_without_streams_the_step_time_is_the_sum_of_the_steps(example: str) -> None:
    """Every example runs each step on all its devices: the step time is the sum over
    steps of the longest device's time (nothing overlaps)."""
    program = fl.lower(fl.load(REPO / "examples" / f"{example}.fus"))
    tl = fl.timeline(program)
    flat_timeline_checks(tl, program)
    per_step = {}
    for e in tl.events:
        per_step[e.step] = max(per_step.get(e.step, 0.0), e.duration)
    assert tl.step_time == pytest.approx(sum(per_step.values()))
    d0 = tl.device_totals(tl.devices[0])
    assert d0.compute + d0.communication == pytest.approx(tl.step_time)


def test_a_device_waits_for_its_team_at_a_collective() -> None:
    """An uneven sharding (13 rows over 4) makes device 3's kernel shorter; the Allgather
    after it starts on every device when the slowest one arrives."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x = fl.tensor([13, 1 << 16])
        x.set_device_mesh(mesh)
        f.add_input(x)
        y = fl.exp(x)
        z = fl.set(y)
        f.add_output(fl.neg(z))
        for t in (x, y):
            t.outer_split(0, 4)
            t.axis(0).parallelize(fl.ParallelType.DIDx)
        z.set_device_mesh(mesh)
    program = fl.lower(f)
    tl = fl.timeline(program, "h100-nvlink")
    first = [e for e in tl.events if e.step == 0]
    assert len({e.duration for e in first}) == 2  # 4 4 4 1 rows: device 3 is done first
    gather = [e for e in tl.events if e.kind == COMMUNICATION]
    assert {e.start for e in gather} == {max(e.end for e in first)}
    flat_timeline_checks(tl, program)


def test_union_length_and_overlap() -> None:
    assert union([(3, 4), (0, 1), (0.5, 2), (2, 2.5), (5, 5)]) == [(0, 2.5), (3, 4)]
    assert length([(0, 1), (0.5, 2)]) == 2
    assert overlap([(0, 2), (3, 5)], [(1, 4)]) == 2
    assert overlap([(0, 1)], [(1, 2)]) == 0


def hand_made() -> Timeline:
    """Device 0: a kernel on stream 0 hides 3 of a 4-s communication on stream 1; device 1
    communicates alone."""
    return Timeline(
        H100,
        [
            Event(0, 0, COMPUTE, "%kernel0 (matmul)", 0.0, 3.0, 0),
            Event(0, 1, COMMUNICATION, "Allgather a -> b", 0.0, 4.0, 1),
            Event(1, 1, COMMUNICATION, "Allgather a -> b", 0.0, 4.0, 1),
            Event(0, 0, COMPUTE, "%kernel2 (add)", 4.0, 5.0, 2),
        ],
    )


def test_exposed_communication_is_what_no_compute_of_its_device_overlaps() -> None:
    tl = hand_made()
    assert tl.step_time == 5.0
    assert tl.device_totals(0) == fl.timing.Totals(4.0, 4.0, 1.0)
    assert tl.device_totals(1).exposed == 4.0
    assert tl.totals() == fl.timing.Totals(4.0, 4.0, 4.0)
    assert [tl.exposed(e) for e in tl.events if e.kind == COMMUNICATION] == [1.0, 4.0]
    assert hiding(tl, 1) == "4 s of 4 s exposed, the rest behind %kernel0 (matmul)"
    only_device_0 = Timeline(H100, [e for e in tl.events if e.device == 0])
    assert hiding(only_device_0, 1) == "1 s of 4 s exposed, the rest behind %kernel0 (matmul)"
    hidden = Timeline(H100, [*only_device_0.events, Event(0, 0, COMPUTE, "k", 3.0, 4.0, 3)])
    assert hiding(hidden, 1) == "hidden behind %kernel0 (matmul), k"


def test_the_chrome_trace() -> None:
    tl = fl.timeline(fl.lower(fl.load(REPO / "examples" / "dp_tp_mlp.fus")))
    trace = json.loads(json.dumps(tl.to_chrome_trace()))
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(tl.events) == 5 * 8
    for t, e in zip(complete, tl.events):
        assert (t["name"], t["cat"], t["pid"], t["tid"]) == (e.name, e.kind, e.device, e.stream)
        assert t["ts"] == pytest.approx(e.start * 1e6) and t["dur"] == pytest.approx(
            e.duration * 1e6
        )
    names = {(e["pid"], e["args"].get("name")) for e in trace["traceEvents"] if e["ph"] == "M"}
    assert (3, "device 3") in names


def test_the_chart_and_its_marks() -> None:
    tl = hand_made()
    chart = rows(tl, width=10)
    assert [r.label for r in chart] == [
        "device 0 stream 0",
        "device 0 stream 1",
        "device 1 stream 1",
    ]
    assert chart[0].cells == "######  ##"
    assert chart[1].cells == "========  "  # mostly hidden
    assert chart[2].cells == "!!!!!!!!  "  # exposed
    text = plain(tl, width=10)
    assert text.startswith("step time 5 s on h100-nvlink")
    assert "compute 4 s, communication 4 s, exposed communication 4 s" in text


def test_a_short_event_still_marks_its_column() -> None:
    events = [
        Event(0, 0, COMPUTE, "a", 0.0, 1.0, 0),
        Event(0, 0, COMMUNICATION, "x", 1.52, 1.521, 1),
        Event(0, 0, COMPUTE, "b", 2.0, 3.0, 2),
    ]
    assert rows(Timeline(H100, events), width=30)[0].cells == "#" * 10 + "     !    " + "#" * 10


def test_the_timeline_command_golden(capsys, golden, tmp_path: Path) -> None:
    trace, picture = tmp_path / "t.json", tmp_path / "t.svg"
    path = str(REPO / "examples" / "sp_mlp.fus")
    code = main(["timeline", path, "--trace", str(trace), "--svg", str(picture)])
    out = capsys.readouterr().out
    assert code == 0, out
    golden("cli/timeline_sp_mlp.txt", out.replace(str(tmp_path), "TMP"))
    assert len(json.loads(trace.read_text())["traceEvents"]) > 12
    root = ET.fromstring(picture.read_text())
    assert sum(1 for r in root.iter("{http://www.w3.org/2000/svg}rect")) == 12


def test_the_timeline_command_reads_printed_programs_and_names_unknown_machines(
    capsys, monkeypatch
) -> None:
    printed = str(fl.lower(fl.load(REPO / "examples" / "tp_mlp.fus")))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(printed.encode())))
    assert main(["timeline", "-", "--machine", "cpu"]) == 0
    assert "on cpu (one x86 server core" in capsys.readouterr().out
    assert main(["timeline", str(REPO / "examples" / "tp_mlp.fus"), "--machine", "tpu"]) == 1
    err = capsys.readouterr().err
    assert "unknown machine 'tpu'" in err and "(choose one of h100-nvlink" in err


def test_explain_says_each_communication_s_time_and_that_it_is_exposed() -> None:
    text = fl.explain(fl.lower(fl.load(REPO / "examples" / "sp_mlp.fus")))
    times = [line for line in text.splitlines() if line.startswith("  time: ")]
    assert times == [
        "  time: Allgather 4.07 us on NVLink 4 (3.6 us + 1 step x 470 ns + 512 B at "
        "450 GB/s); exposed: no compute runs beside it",
        "  time: ReduceScatter 4.07 us on NVLink 4 (3.6 us + 1 step x 470 ns + 512 B at "
        "450 GB/s); exposed: no compute runs beside it",
    ]
    cpu = fl.explain(fl.lower(fl.load(REPO / "examples" / "sp_mlp.fus")), machine="cpu")
    assert "on shared memory (1 us + 1 step x 500 ns + 512 B at 8 GB/s)" in cpu


def sixteen_devices() -> fl.Program:
    return fl.lower(models.tensor_parallel_mlp(16))


def test_more_devices_than_a_node_take_the_multinode_machine() -> None:
    program = sixteen_devices()
    tl = fl.timeline(program)
    assert tl.machine.name == "h100-multinode"
    (comm,) = program.communications
    (event,) = {e.detail for e in tl.events if e.kind == COMMUNICATION}
    assert event.startswith("InfiniBand NDR: 3.6 us + 30 steps x 2.7 us")
    with pytest.raises(fl.FuserliteError, match="uses devices up to 15, but machine h100-nvlink"):
        fl.timeline(program, "h100-nvlink")


def two_per_node(tmp_path: Path) -> Path:
    entry = json.loads((REPO / "fuserlite" / "timing" / "machines.json").read_text())
    small = dict(entry["h100-multinode"], devices_per_node=2)
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps(small))
    return path


def test_a_team_inside_a_node_uses_the_node_link_one_across_nodes_the_network(
    tmp_path: Path,
) -> None:
    """dp_tp_mlp on 2x4 Allreduces over DIDx teams (0 1 2 3), (4 5 6 7): with nodes of 2
    they cross nodes; on a 4x2 mesh each DIDx team is a pair, inside one node."""
    pairs = str(two_per_node(tmp_path))
    tl = fl.timeline(fl.lower(fl.load(REPO / "examples" / "dp_tp_mlp.fus")), pairs)
    assert tl.machine.name == "pairs"
    assert {e.detail.split(":")[0] for e in tl.events if e.kind == COMMUNICATION} == {
        "InfiniBand NDR"
    }
    tp = fl.Pipeline(["resize-mesh[mesh=4x2]", *fl.pipeline.default_pass_names()])
    program = tp.run(fl.load(REPO / "examples" / "dp_tp_mlp.fus"))
    tl = fl.timeline(program, pairs)
    assert {e.detail.split(":")[0] for e in tl.events if e.kind == COMMUNICATION} == {"NVLink 4"}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"nodes": 0}, "nodes must be a positive integer or null, got 0"),
        ({"memory_bandwidth": -1}, "memory_bandwidth must be a positive number"),
        ({"kernel_launch": "2us"}, "kernel_launch must be a non-negative number"),
        ({"vector_flops": {"float64": 1e12}}, "vector_flops must give float32's rate"),
        ({"matmul_flops": {"fp8": 1e15}}, "matmul_flops: unknown dtype 'fp8'"),
        ({"colour": "green"}, "unknown fields colour"),
        ({"links": {"node": {"name": "x", "bandwidth": 1}}}, "missing fields latency"),
        ({"links": {"node": {"name": "x", "bandwidth": 1, "latency": 0, "step_latency": 0}}},
         "needs links.network"),
    ],
)  # fmt: skip
def test_a_machine_file_is_checked_field_by_field(tmp_path: Path, change, message) -> None:
    entry = json.loads(two_per_node(tmp_path).read_text())
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**entry, **change}))
    with pytest.raises(fl.FuserliteError, match=f"machine bad \\({path}\\).*{message}"):
        read_machine(path)


def test_a_machine_file_that_is_not_json_or_too_big(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(fl.FuserliteError, match="is not JSON"):
        machine(str(path))
    path.write_text(" " * (2 << 20))
    with pytest.raises(fl.FuserliteError, match="is over 1048576 bytes"):
        machine(str(path))
    with pytest.raises(fl.FuserliteError, match="expected a machine name"):
        machine(3)  # type: ignore[arg-type]


def test_the_built_in_machines_cite_their_sources() -> None:
    for name in fl.timing.built_in_names():
        m = machine(name)
        assert m.sources and all(len(s) > 20 for s in m.sources), name


def test_units() -> None:
    assert [seconds_text(x) for x in (0, 8.5e-7, 1.234e-5, 0.00125, 2.0)] == [
        "0 s",
        "850 ns",
        "12.3 us",
        "1.25 ms",
        "2 s",
    ]
    assert [bytes_text(n) for n in (512, 1536, 3 << 20)] == ["512 B", "1.5 KiB", "3 MiB"]
    assert rate_text(3.35e12) == "3.35 TB/s" and rate_text(450e9) == "450 GB/s"


def test_svg_is_one_document_with_a_box_per_event() -> None:
    tl = hand_made()
    root = ET.fromstring(svg(tl))
    rects = list(root.iter("{http://www.w3.org/2000/svg}rect"))
    assert len(rects) == len(tl.events)


def test_the_coloured_chart_is_the_plain_one_in_colour() -> None:
    from fuserlite.timing.chart import coloured

    tl = hand_made()
    text = coloured(tl, width=10)
    marks = str.maketrans({"#": "█", "=": "█", "!": "█"})
    chart_lines = [line for line in plain(tl, width=10).splitlines() if line.endswith("|")]
    expected = "\n".join(
        line.split("|")[0] + "|" + line.split("|")[1].translate(marks) + "|" for line in chart_lines
    )
    shown = [line for line in text.plain.splitlines() if line.endswith("|")]
    assert "\n".join(shown) == expected
    assert {span.style for span in text.spans} == {"green", "cyan", "bold red"}


def test_a_program_before_lower_communications_is_refused(capsys, tmp_path: Path) -> None:
    names = fl.pipeline.DEFAULT_PASSES[:5]
    program = fl.Pipeline(list(names)).run(fl.load(REPO / "examples" / "sp_mlp.fus"))
    with pytest.raises(fl.LoweringError, match="step 0, T10 = set.*run lower-communications"):
        fl.timeline(program)
    path = tmp_path / "early.txt"
    path.write_text(str(program))
    assert main(["timeline", str(path)]) == 1
    err = capsys.readouterr().err
    assert "is a program before lower-communications" in err and "| fuserlite timeline -" in err


def test_a_chunked_communication_is_hidden_chunk_by_chunk() -> None:
    """Two chunks of one posted communication (one program step, named by the loop
    index): the exposed time is the sum of the chunks', each kernel named once."""
    comm = [
        Event(0, 100, COMMUNICATION, f"Allgather a -> b [i={i}]", 2.0 * i, 2.0 * i + 2, 1)
        for i in range(2)
    ]
    compute = [Event(0, 1, COMPUTE, "%kernel2 (linear) [i=0]", 2.0, 3.0, 2)]
    tl = Timeline(H100, [*comm, *compute])
    assert hiding(tl, 1) == "3 s of 4 s exposed, the rest behind %kernel2 (linear)"
    alone = Timeline(H100, [comm[0]])
    assert hiding(alone, 1) == "exposed: no compute runs beside it"


def test_explain_says_what_hides_each_chunked_communication_of_the_streamed_block(
    capsys,
) -> None:
    """--streams 4 on the SP block: each of its four communications runs in 4 chunks,
    partly behind the kernels of its loop (the q/k/v Allgather behind all three
    projections)."""
    from fuserlite.cli import main

    assert main(["explain", "examples/transformer_block_overlap.fus", "--streams", "4"]) == 0
    times = [t for t in capsys.readouterr().out.splitlines() if t.startswith("  time: ")]
    assert [t.split()[1] for t in times] == [
        "Allgather",
        "ReduceScatter",
        "Allgather",
        "ReduceScatter",
    ]
    assert all(" 4 chunks of " in t and ", the rest behind %kernel" in t for t in times)
    assert times[0].count("(linear)") == 3


def test_the_streamed_block_s_trace_has_a_track_per_stream(tmp_path) -> None:
    """README's `timeline ... --streams 4 --trace block.json`: on every device the main
    stream, the 4 chunks' streams and the team's communication stream, each named."""
    from fuserlite.cli import main

    trace = tmp_path / "block.json"
    path = str(REPO / "examples" / "transformer_block_overlap.fus")
    assert main(["timeline", path, "--streams", "4", "--trace", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    tids = {e["tid"] for e in events if e["ph"] == "X" and e["pid"] == 0}
    assert tids == {0, 1, 2, 3, 4, 100}
    named = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert tids <= named
