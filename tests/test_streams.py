"""ParallelType.Stream: the validator's rules, lower-streams' host loops, their
execution (equal to the unstreamed program and the reference) and their modelled time."""

from __future__ import annotations

import numpy as np
import pytest
import stream_cases as cases

import fuserlite as fl
from fuserlite.ir.streams import Chunking
from fuserlite.pipeline import DEFAULT_PASSES
from fuserlite.program import host
from fuserlite.program.communication import Communication
from fuserlite.program.parser import parse_printed
from fuserlite.program.program import Kernel
from fuserlite.program.verify import verify_program
from fuserlite.timing.timeline import COMMUNICATION, COMPUTE

STREAM = fl.ParallelType.Stream
UNSTREAMED = [p for p in DEFAULT_PASSES if p != "lower-streams"]


def loops(program: fl.Program) -> list[host.ForLoop]:
    return [s for s in program.steps if isinstance(s, host.ForLoop)]


@pytest.mark.parametrize("name", cases.CASES)
def test_each_case_runs_its_chunks_in_a_loop_as_the_unstreamed_program(name: str) -> None:
    """One loop of S chunks, each communication inside it on chunks (1/S of the bytes),
    the values those of the program lowered without lower-streams, and the reference's."""
    fusion = cases.CASES[name]()
    whole = fl.Pipeline(UNSTREAMED).run(fusion)
    program = fl.lower(fusion)
    (loop,) = loops(program)
    chunks = cases.CHUNKS.get(name, cases.S)
    assert loop.extent == chunks
    inside = [s.step for s in loop.body if isinstance(s, host.PostOnStream)]
    comms = [c for c in inside if isinstance(c, Communication)]
    assert [c.kind for c in comms] == [c.kind for c in whole.communications]
    for chunk, full in zip(comms, whole.communications):
        assert chunk.bytes_per_device * chunks == full.bytes_per_device
        assert chunk.output.nbytes * chunks == full.output.nbytes
    assert "istreamIdx" in str(program)
    inputs = fl.random_inputs(fusion, seed=5)
    want = fl.FusionExecutor(whole, compute="interpret").run(inputs)
    got = fl.FusionExecutor(program, compute="interpret").run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    ex = fl.FusionExecutor(fusion, compute="interpret")  # lowered as above
    ex.validate(inputs, ex.run(inputs))  # against the reference: raises where it differs


@pytest.mark.parametrize("compute", ["numpy", "interpret", "compiled"])
@pytest.mark.parametrize(
    "name", [*cases.CASES, *(f"{n}, rounding size" for n in cases.ROUNDING)], ids=str
)
def test_every_case_has_the_unstreamed_bits_on_every_compute_path(name: str, compute: str) -> None:
    """Streamed and unstreamed, every output equal bit for bit (not within rounding):
    a chunk of a matmul's rows has the bits of those rows of the whole product."""
    from overlap_order import same_bits

    build = cases.ROUNDING[name.removesuffix(", rounding size")] if name.endswith("size") else None
    fusion = build() if build else cases.CASES[name]()
    inputs = fl.random_inputs(fusion, seed=12)
    want = fl.FusionExecutor(fl.Pipeline(UNSTREAMED).run(fusion), compute=compute).run(inputs)
    program = fl.lower(fusion)
    assert loops(program)
    got = fl.FusionExecutor(program, compute=compute).run(inputs)
    assert same_bits(want, got)


@pytest.mark.parametrize("compute", ["numpy", "compiled"])
def test_every_compute_path_runs_the_loop(compute: str) -> None:
    fusion = cases.ag_matmul_blocks()
    inputs = fl.random_inputs(fusion, seed=6)
    want = fl.FusionExecutor(fl.Pipeline(UNSTREAMED).run(fusion), compute=compute).run(inputs)
    ex = fl.FusionExecutor(fusion, compute=compute)
    got = ex.run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    ex.validate(inputs, got)


def test_the_printed_loop() -> None:
    """nvFuser's shape: each chunk on stream i + 1, which first synchronizes the main
    stream; views of the chunks read and written; the main stream waits for all."""
    text = str(fl.lower(cases.ag_matmul_blocks()))
    lines = [t for t in text.splitlines() if not t.startswith((" ", "T", "%", "}"))]
    body = lines[lines.index("FOR i in range(4) {") :]
    assert body[1:3] == ["SetCurrentStream to Stream i + 1", "Synchronize Stream 0"]
    views = [t for t in body if t.startswith("ShardByStream")]
    assert len(views) == 2 and all(t.endswith("chunk i of 4 of 2 blocks") for t in views)
    assert body[-5:] == ["SetCurrentStream to Stream 0"] + [
        f"Synchronize Stream {s}" for s in range(1, 5)
    ]


def test_a_missing_synchronize_is_found() -> None:
    program = fl.lower(cases.ag_matmul())
    program.steps = [s for s in program.steps if not isinstance(s, host.Synchronize)]
    with pytest.raises(fl.VerifyError, match="not ready on the main stream"):
        verify_program(program)


def test_a_view_of_the_wrong_shape_is_found() -> None:
    program = fl.lower(cases.allgather())
    (loop,) = loops(program)
    view = next(s for s in loop.body if isinstance(s, host.ShardByStream))
    view.chunking = Chunking(0, 2)  # the chunk is a quarter of the rows, not a half
    with pytest.raises(fl.VerifyError, match="is not a chunk of"):
        verify_program(program)


@pytest.mark.parametrize("name", list(cases.CASES))
def test_a_streamed_program_prints_parses_back_and_runs_as_before(name: str) -> None:
    """The whole tensor a loop fills through views is computed by no expression when
    read back: the views say it is computed, where it is an output and where a later
    kernel reads it (the Allgather read thrice: that failed to parse back)."""
    fusion = cases.CASES[name]()
    program = fl.lower(fusion)
    text = str(program)
    back = parse_printed(text)
    assert str(back) == text
    inputs = fl.random_inputs(fusion, seed=7)
    want = fl.FusionExecutor(program, compute="interpret").run(inputs)
    got = fl.FusionExecutor(back, compute="interpret").run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))


def test_a_loop_whose_kernel_is_gone_is_refused() -> None:
    """Without the kernel that computes y's chunks, nothing fills y: the verifier says
    so before anything runs (never a y of uninitialized memory)."""
    program = fl.lower(cases.ag_matmul())
    (loop,) = loops(program)
    loop.body = [s for s in loop.body if not isinstance(getattr(s, "step", None), Kernel)]
    with pytest.raises(fl.VerifyError, match="computed by no step"):
        verify_program(program)


def _fusion(shape, body):
    with fl.Fusion() as f:
        x = fl.tensor(shape, name="x")
        f.add_input(x)
        y = body(x)
        f.add_output(y)
    return f


@pytest.mark.parametrize(
    "schedule, message",
    [
        (
            lambda y: (
                y.outer_split(0, 2),
                y.axis(0).parallelize(STREAM),
                y.axis(1).parallelize(STREAM),
            ),
            "at most one Stream axis",
        ),
        (lambda y: (y.outer_split(0, 3), y.axis(0).parallelize(STREAM)), "do not divide it"),
        (
            lambda y: (y.outer_split(0, 2), y.axis(1).parallelize(STREAM)),
            "outer part of an outer split",
        ),
    ],
    ids=["two Stream axes", "uneven chunks", "inner part"],
)
def test_the_validator_says_what_is_wrong(schedule, message: str) -> None:
    def body(x):
        y = fl.neg(x)
        schedule(y)
        return y

    with pytest.raises(fl.FuserliteError, match=message):
        fl.verify(_fusion([8, 4], body))


def test_a_device_split_inside_a_stream_split_is_refused() -> None:
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([8, 4], name="x")
        x.set_device_mesh(mesh)
        f.add_input(x)
        y = fl.neg(x)
        y.set_device_mesh(mesh)
        y.outer_split(0, 2)
        y.axis(0).parallelize(STREAM)
        y.outer_split(1, 2)
        y.axis(1).parallelize(fl.ParallelType.DIDx)
        f.add_output(y)
    with pytest.raises(fl.FuserliteError, match="inside a Stream split: a device would hold"):
        fl.verify(f)


def test_a_stream_axis_on_a_reduction_is_refused() -> None:
    def body(x):
        y = fl.sum(x, [1])
        y.axis(1).parallelize(STREAM)
        return y

    with pytest.raises(fl.FuserliteError, match="on a reduction axis"):
        fl.verify(_fusion([8, 4], body))


def test_chunks_of_whole_rows_through_an_allgather_are_refused() -> None:
    """Rows [i n/S, (i+1) n/S) of a gathered x are on some devices only: no Allgather
    of chunks makes them; the error says how to cut each device's block instead."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([8, 4], name="x")
        x.set_device_mesh(mesh)
        f.add_input(x)
        x.outer_split(0, 2)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        y = fl.set(x)
        y.set_device_mesh(mesh)
        y.outer_split(0, 4)
        y.axis(0).parallelize(STREAM)
        f.add_output(y)
    with pytest.raises(fl.LoweringError, match="cut each device's block instead"):
        fl.lower(f)


def test_an_op_whose_rows_depend_on_other_rows_is_refused() -> None:
    def body(x):
        y = fl.reshape(x, [32])  # a row of y is a piece of a row of x
        y.outer_split(0, 4)
        y.axis(0).parallelize(STREAM)
        return y

    with pytest.raises(fl.LoweringError, match="does not compute its rows"):
        fl.lower(_fusion([4, 8], body))


def test_the_pipelined_time_is_the_model_s_algebra() -> None:
    """S chunks: the first chunk's communication, then S - 1 times the longer of a
    chunk's compute and communication, then the last chunk's compute (C/S + (S-1) max
    + M/S); without Stream, C + M; AG+matmul at nvFuser's sizes on 8 devices."""
    cases_d = cases.D
    cases.D = 8
    try:
        times = {}
        for s in (1, 4):
            f = cases.ag_matmul(s, m=8192 // (s * 8), k=4096, n=8192, dtype="bfloat16")
            if s == 1:
                f.outputs[0].axis(0).parallelize(fl.ParallelType.Serial)
            tl = fl.timeline(fl.lower(f))
            on0 = tl.on(0)
            comm = [e.duration for e in on0 if e.kind == COMMUNICATION]
            compute = [e.duration for e in on0 if e.kind == COMPUTE]
            times[s] = tl.step_time, comm, compute
    finally:
        cases.D = cases_d
    t1, (c,), (m,) = times[1]
    assert t1 == pytest.approx(c + m, rel=1e-9)
    t4, comm, compute = times[4]
    assert len(comm) == len(compute) == 4
    cs, ms = comm[0], compute[0]
    assert t4 == pytest.approx(cs + 3 * max(cs, ms) + ms, rel=1e-9)
    assert t4 < t1


def test_streams_flag_pipelines_the_pairs_without_editing_the_file(capsys) -> None:
    """--streams 2 on sp_mlp: its Allgather + linear and linear + ReduceScatter in two
    loops, the run equal to the unstreamed one; a bad count and a lowered program are
    errors that say why."""
    from fuserlite.cli import main

    steps = []
    for flags in ([], ["--streams", "2"]):
        assert main(["timeline", "examples/sp_mlp.fus", *flags]) == 0
        out = capsys.readouterr().out
        steps.append(next(t for t in out.splitlines() if t.startswith("step time")))
    assert steps[0] != steps[1]  # two loops of two chunks: each pays its latency twice
    assert main(["run", "examples/sp_mlp.fus", "--streams", "2", "--compute", "interpret"]) == 0
    streamed = capsys.readouterr().out
    assert main(["run", "examples/sp_mlp.fus", "--compute", "interpret"]) == 0
    plain = capsys.readouterr().out
    sums = [line for line in plain.splitlines() if line.startswith("out ")]
    assert sums and sums == [line for line in streamed.splitlines() if line.startswith("out ")]
    assert "validation: ok" in streamed
    assert main(["timeline", "examples/sp_mlp.fus", "--streams", "1"]) == 1
    assert "chunks=1" in capsys.readouterr().err


def test_the_transformer_block_streams_all_four_of_its_pairs() -> None:
    """Megatron-SP's four pairs, each a loop: the q/k/v Allgather with the three
    projections that read it (one Allgather a chunk, then each projection's chunk), the
    output projection + ReduceScatter, the MLP's Allgather + linear, and gelu, the second
    linear + ReduceScatter; the layer norms run whole before their Allgathers, the head
    reshapes of q, k and v whole after the first loop."""
    names = fl.pipeline.default_pass_names(**{"lower-streams": "chunks=2"})
    program = fl.Pipeline(names).run(fl.load("examples/transformer_block.fus"))
    bodies = []
    for loop in loops(program):
        posted = [s.step for s in loop.body if isinstance(s, host.PostOnStream)]
        bodies.append(
            [s.kind.value if isinstance(s, Communication) else s.exprs[-1].op_name for s in posted]
        )
    assert bodies == [
        ["Allgather", "linear", "linear", "linear"],
        ["linear", "ReduceScatter"],
        ["Allgather", "linear"],
        ["set", "linear", "ReduceScatter"],  # the gelu kernel ends in a set
    ]
    first = program.steps.index(loops(program)[0])
    after = [s for s in program.steps[first:] if isinstance(s, Kernel)]
    assert [e.op_name for e in after[0].exprs][0] == "reshape"  # q's heads, from the whole


def _posted(loop: host.ForLoop) -> list[str]:
    """What a loop's body posts: a communication's kind, a kernel's last op."""
    return [
        s.step.kind.value if isinstance(s.step, Communication) else s.step.exprs[-1].op_name
        for s in loop.body
        if isinstance(s, host.PostOnStream)
    ]


@pytest.mark.parametrize("compute", ["numpy", "compiled"])
def test_one_allgather_feeds_every_reader_that_can_compute_chunks(compute: str) -> None:
    """x gathered once per chunk in one loop, both products' chunks after it; the
    transpose (scheduled: its axes merged) reads the whole x after the loop. The values
    are the unstreamed program's; --streams gives the same program as the hand-written
    Stream axes."""
    fusion = cases.allgather_read_thrice()
    program = fl.lower(fusion)
    (loop,) = loops(program)
    assert _posted(loop) == ["Allgather", "matmul", "matmul"]
    text = str(program)
    host_lines = [t.split(" (")[0] for t in text.splitlines() if not t.startswith((" ", "T"))]
    body = host_lines[host_lines.index("FOR i in range(4) {") :]
    gathered = next(t for t in body if t.startswith("Wait")).split()[-1]
    (view,) = [t for t in body if t.startswith(f"ShardByStream {gathered} = ")]
    whole = view.split()[3]  # the whole gathered x, written a chunk at a time
    assert [t.split(" %")[0] for t in body if t.startswith(("PostOnStream", "Wait"))] == [
        "PostOnStream Communication Allgather",
        f"Wait Communication {gathered}",
        "PostOnStream",
        "PostOnStream",
    ]
    assert body[body.index("} // FOR i") + 6].startswith("%kernel")  # after the Synchronizes
    after = [s for s in program.steps[program.steps.index(loop) :] if isinstance(s, Kernel)]
    assert len(after) == 1 and "permute" in [e.op_name for e in after[0].exprs]
    assert [t.ir_name for t in after[0].inputs] == [whole]
    names = fl.pipeline.default_pass_names(**{"lower-streams": f"chunks={cases.S}"})
    given = fl.Pipeline(names).run(cases.allgather_read_thrice(streams=False))
    assert str(given) == text
    inputs = fl.random_inputs(fusion, seed=8)
    want = fl.FusionExecutor(fl.Pipeline(UNSTREAMED).run(fusion), compute=compute).run(inputs)
    ex = fl.FusionExecutor(fusion, compute=compute)
    got = ex.run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    ex.validate(inputs, got)


def test_print_streams_prints_the_host_program_with_its_loops(capsys) -> None:
    """`print PATH --streams S` is the default pipeline with lower-streams[chunks=S], as
    timeline --streams lowers it; with --passes it is an error that says what to write."""
    from fuserlite.cli import main

    assert main(["print", "examples/sp_mlp.fus", "--streams", "2"]) == 0
    printed = capsys.readouterr().out
    names = fl.pipeline.default_pass_names(**{"lower-streams": "chunks=2"})
    assert printed == str(fl.Pipeline(names).run(fl.load("examples/sp_mlp.fus")))
    assert printed.count("FOR i in range(2) {") == 2
    assert main(["print", "examples/sp_mlp.fus", "--passes", "segment", "--streams", "2"]) == 1
    assert "write that pass instead" in capsys.readouterr().err


@pytest.mark.parametrize("compute", ["numpy", "interpret", "compiled"])
def test_the_streamed_block_computes_the_unstreamed_values(compute: str) -> None:
    """transformer_block_overlap.fus in 4 chunks (four loops, the first with three
    projections): the unstreamed program's values bit for bit (each linear's chunk of
    rows rounds as those rows of the whole: numpy_ops.gemm_rows; before it, 2 of 8192
    elements differed by one bfloat16 step), the reference's within its allowance."""
    from overlap_order import same_bits

    fusion = fl.load("examples/transformer_block_overlap.fus")
    names = fl.pipeline.default_pass_names(**{"lower-streams": "chunks=4"})
    program = fl.Pipeline(names).run(fusion)
    assert [len(_posted(loop)) for loop in loops(program)] == [4, 2, 2, 3]
    inputs = fl.random_inputs(fusion, seed=9)
    whole = fl.Pipeline(UNSTREAMED).run(fusion)
    want = fl.FusionExecutor(whole, compute=compute).run(inputs)
    got = fl.FusionExecutor(program, compute=compute).run(inputs)
    assert same_bits(want, got)
    fl.validate(fusion, inputs, got)


def test_streams_that_stream_nothing_say_why(capsys) -> None:
    """--streams 4 on transformer_block.fus (2 positions a device: no 4 chunks of a
    device's rows) and --streams 2 on softmax.fus (no pair) are errors, never the
    unstreamed timeline as if streamed."""
    from fuserlite.cli import main

    assert main(["timeline", "examples/transformer_block.fus", "--streams", "4"]) == 1
    err = capsys.readouterr().err
    assert "q2 (T33): its axis 1 of 16 rows is not axis 1 in 4 chunks of 8 blocks" in err
    assert "and 4 more" in err and "Traceback" not in err
    assert main(["timeline", "examples/softmax.fus", "--streams", "2"]) == 1
    assert "ReduceScatter pair to stream" in capsys.readouterr().err


def test_a_chunk_kernel_is_scheduled_as_its_whole_and_keeps_its_bits_compiled() -> None:
    """--streams 2 on the sequence-parallel MLP (examples/sp_mlp.fus): the gelu between
    the two loops' linears is computed in chunks. A chunk's kernel used to run op by op
    (numpy's tanh) while the unstreamed one ran compiled (the C kernel's), so compiled
    runs differed in 68 of 256 elements; it is now scheduled as its whole is and runs
    compiled, with the unstreamed program's bits."""
    from fuserlite import models
    from fuserlite.pipeline import default_pass_names

    fusion = models.tensor_parallel_mlp(2, sequence_parallel=True)
    program = fl.Pipeline(default_pass_names(**{"lower-streams": "chunks=2"})).run(fusion)
    chunked = [
        s.step
        for loop in loops(program)
        for s in loop.body
        if isinstance(getattr(s, "step", None), Kernel) and s.step.exprs
    ]
    gelu = [k for k in chunked if any(e.op_name == "gelu" for e in k.exprs)]
    assert gelu and all(k.scheduled and k.reference is not None for k in gelu)
    assert not any("op by op" in n for k in chunked for n in k.notes)
    inputs = fl.random_inputs(fusion, seed=4)
    want = fl.FusionExecutor(fl.Pipeline(UNSTREAMED).run(fusion), compute="compiled")
    got = fl.FusionExecutor(program, compute="compiled").run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want.run(inputs), got))


@pytest.mark.parametrize("compute", ["interpret", "compiled"])
def test_a_chunked_reduction_kernel_keeps_the_whole_s_threads_and_bits(compute: str) -> None:
    """A sum computed in Stream chunks: the chunk's kernel is scheduled by the reduction
    scheduler with the whole's threads (op by op, numpy's sum order gave other bits in
    22 of 64 elements, interpreted and compiled)."""
    fusion = cases.allgather_then_sum()
    program = fl.lower(fusion)
    (loop,) = loops(program)
    posted = [s.step for s in loop.body if isinstance(getattr(s, "step", None), Kernel)]
    (chunk,) = [k for k in posted if [e.op_name for e in k.exprs] == ["sum"]]
    assert chunk.scheduled and chunk.reference is not None
    inputs = fl.random_inputs(fusion, seed=1)
    want = fl.FusionExecutor(fl.Pipeline(UNSTREAMED).run(fusion), compute=compute).run(inputs)
    got = fl.FusionExecutor(program, compute=compute).run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))


def test_a_chunk_kernel_the_scheduler_refuses_runs_op_by_op_and_says_why(monkeypatch) -> None:
    """Where a chunk's copy cannot be scheduled, the attempt is undone (the copy's
    expressions and links as they were: the program still verifies) and the kernel runs
    op by op, its note saying why; the values are still the unstreamed program's on the
    path that runs both op by op."""
    from fuserlite import models
    from fuserlite.ir.errors import ScheduleError
    from fuserlite.pipeline import default_pass_names

    def refuse(*args, **kwargs):
        raise ScheduleError("no schedule for this chunk")

    monkeypatch.setattr("fuserlite.passes.lower_streams.schedule_supported", refuse)
    fusion = models.tensor_parallel_mlp(2, sequence_parallel=True)
    program = fl.Pipeline(default_pass_names(**{"lower-streams": "chunks=2"})).run(fusion)
    posted = [s.step for loop in loops(program) for s in loop.body if hasattr(s, "step")]
    kernels = [k for k in posted if isinstance(k, Kernel)]
    (gelu,) = [k for k in kernels if any(e.op_name == "gelu" for e in k.exprs)]
    assert not gelu.scheduled and gelu.reference is None
    assert any("run op by op: no schedule for this chunk" in n for n in gelu.notes)
    assert [e.op_name for e in gelu.exprs] == ["set", "gelu", "set"]  # the copy, restored
    inputs = fl.random_inputs(fusion, seed=4)
    want = fl.FusionExecutor(fl.Pipeline(UNSTREAMED).run(fusion), compute="numpy").run(inputs)
    got = fl.FusionExecutor(program, compute="numpy").run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
