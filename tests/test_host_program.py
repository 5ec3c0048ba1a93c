"""Host programs (fuserlite.program.host): streams, posts, waits, loops and buffers print,
parse back, are verified, run on the sim backend with the flat program's values, and
the timeline schedules their streams (the pipelining algebra)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import stream_cases
from host_programs import add_then_allgather, in_a_loop, single_fusion_single_comm

import fuserlite as fl
from fuserlite import models
from fuserlite.pipeline import DEFAULT_PASSES
from fuserlite.program import host
from fuserlite.program.parser import parse_printed
from fuserlite.program.streams import stream_chunks
from fuserlite.timing.timeline import COMMUNICATION, COMPUTE


def ag_matmul_chunks(chunks: int, m: int, k: int, n: int) -> fl.Program:
    return fl.lower(models.allgather_matmul(4, m, k, n, chunks))


def streamed(program: fl.Program) -> fl.Program:
    return stream_chunks(program)


def small_chunks() -> fl.Program:
    return ag_matmul_chunks(4, m=64, k=16, n=8)


def unstreamed(build) -> Callable[[], fl.Program]:
    """The program `build()` lowers to without lower-streams (its Stream axes whole)."""
    names = [p for p in DEFAULT_PASSES if p != "lower-streams"]
    return lambda: fl.Pipeline(names).run(build())


BUILT = {  # a host program and the flat program it computes as
    "single fusion, single comm": (single_fusion_single_comm, add_then_allgather),
    "in a loop": (in_a_loop, add_then_allgather),
    "four chunks streamed": (lambda: streamed(small_chunks()), small_chunks),
    # ParallelType.Stream, lowered by lower-streams: ShardByStream views of chunks
    "Stream: AG + matmul": (
        lambda: fl.lower(stream_cases.ag_matmul_blocks()),
        unstreamed(stream_cases.ag_matmul_blocks),
    ),
    "Stream: matmul + ReduceScatter": (
        lambda: fl.lower(stream_cases.matmul_reduce_scatter()),
        unstreamed(stream_cases.matmul_reduce_scatter),
    ),
}


@pytest.mark.parametrize("name", BUILT)
def test_a_host_program_prints_parses_back_and_runs_as_the_flat_one(name: str) -> None:
    build, build_flat = BUILT[name]
    program = build()
    fl.verify_program(program)
    text = str(program)
    back = parse_printed(text)
    assert str(back) == text
    assert str(back.clone()) == text
    inputs = fl.random_inputs(program.fusion, seed=3)
    want = fl.FusionExecutor(build_flat(), compute="interpret").run(inputs)
    got = fl.FusionExecutor(back, compute="interpret").run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))


def test_the_printed_form() -> None:
    text = str(in_a_loop(iterations=4))
    lines = [line for line in text.splitlines() if not line.startswith((" ", "T"))]
    assert "FOR i in range(4) {" in lines and "} // FOR i" in lines
    assert "SetCurrentStream to Stream i % 2 + 1" in lines
    assert "PostOnStream %kernel2 (DeviceMesh{0 1}) {" in lines
    assert "Wait Communication T2" in lines
    end = "} // FOR i\nSetCurrentStream to Stream 0\nSynchronize Stream 1\nSynchronize Stream 2\n"
    assert end in text
    assert any(line.startswith("PostOnStream Communication Allgather (") for line in lines)


def test_a_loop_runs_its_body_once_per_iteration() -> None:
    program = in_a_loop(iterations=3)
    steps = program.executed()
    assert [type(s).__name__ for s in steps if not isinstance(s, host.StreamEvent)] == [
        "Kernel",
        "Communication",
    ] * 3
    # the stream bookkeeping where it runs: stream i % 2 + 1, the Wait, and after the loop
    # the main stream synchronizing both
    events = [(s.what, s.stream) for s in steps if isinstance(s, host.StreamEvent)]
    per_iteration = [[("switch", i % 2 + 1), ("wait", 0)] for i in range(3)]
    assert events == [e for it in per_iteration for e in it] + [
        ("switch", 0),
        ("sync", 1),
        ("sync", 2),
    ]
    assert len(program.kernels) == 1 and len(program.communications) == 1
    tl = fl.timeline(program)
    assert len([e for e in tl.events if e.kind == COMPUTE]) == 3 * 2  # 2 devices
    assert {e.stream for e in tl.events if e.kind == COMPUTE} == {1, 2}
    assert {e.stream for e in tl.events if e.kind == COMMUNICATION} == {100}
    names = {e.name for e in tl.events if e.kind == COMPUTE}
    assert names == {f"%kernel2 (add) [i={i}]" for i in range(3)}


def test_a_posted_communication_runs_on_its_team_s_stream() -> None:
    tl = fl.timeline(single_fusion_single_comm())
    kernel, comm = (next(e for e in tl.on(0) if e.kind == k) for k in (COMPUTE, COMMUNICATION))
    assert (kernel.stream, comm.stream) == (1, 100)
    assert comm.start == kernel.end  # posted after the kernel on stream 1


@pytest.mark.parametrize("chunks", [2, 4, 8])
@pytest.mark.parametrize("shape", [(1024, 256, 512), (256, 4096, 8192)])
def test_pipelined_time_is_the_first_communication_the_chunks_and_the_last_compute(
    chunks: int, shape: tuple[int, int, int]
) -> None:
    """S chunks of Allgather (M) + matmul (C), each on its stream: the step time is
    M + (S - 1) max(M, C) + C = max(S M, S C) + min(M, C), the ideal pipelined bound
    max(C_all, M_all) + min(C_all, M_all) / S; without streams it is S (M + C). The
    first shape is communication-bound, the second compute-bound."""
    m, k, n = shape
    flat = ag_matmul_chunks(chunks, m, k, n)
    before = fl.timeline(flat)
    tl = fl.timeline(streamed(flat.clone()))
    comm = next(e for e in tl.on(0) if e.kind == COMMUNICATION).duration
    compute = next(e for e in tl.on(0) if e.kind == COMPUTE).duration
    assert before.step_time == pytest.approx(chunks * (comm + compute), rel=1e-12)
    piped = comm + (chunks - 1) * max(comm, compute) + compute
    assert tl.step_time == pytest.approx(piped, rel=1e-12)
    c_all, m_all = chunks * compute, chunks * comm
    assert tl.step_time == pytest.approx(max(c_all, m_all) + min(c_all, m_all) / chunks)
    t = tl.totals()
    assert t.communication == pytest.approx(m_all) and t.compute == pytest.approx(c_all)
    if compute >= comm:  # only the first chunk's communication has nothing beside it
        assert t.exposed == pytest.approx(comm, rel=1e-9)
    else:  # each communication is exposed but for the compute it overlaps
        assert t.exposed == pytest.approx(m_all - (chunks - 1) * compute, rel=1e-9)
    text = fl.explain(streamed(ag_matmul_chunks(chunks, m, k, n)))
    times = [line for line in text.splitlines() if line.startswith("  time: ")]
    assert times[0].endswith("exposed: no compute runs beside it")
    if compute >= comm:
        assert all(" hidden behind %kernel" in line for line in times[1:])


def program_with(steps_of) -> fl.Program:
    """add_then_allgather with its steps made by `steps_of(kernel, comm)`."""
    program = add_then_allgather()
    kernel, comm = program.steps
    program.steps = steps_of(kernel, comm)
    return program


def problems(program: fl.Program) -> str:
    with pytest.raises(fl.VerifyError) as info:
        fl.verify_program(program)
    return str(info.value)


def s(n: int) -> host.StreamIndex:
    return host.StreamIndex(n)


def test_a_wait_without_its_post() -> None:
    def twice(kernel, comm):
        post = host.PostOnStream(comm)
        return [host.PostOnStream(kernel), post, host.Wait(post), host.Wait(post)]

    assert "step 3: Wait Communication T2 without its post" in problems(program_with(twice))

    def never(kernel, comm):
        return [kernel, host.Wait(host.PostOnStream(comm))]

    text = problems(program_with(never))
    assert "Wait Communication T2 without its post" in text


def test_a_read_before_a_wait() -> None:
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([2, 8], name="x")
        x.set_device_mesh(mesh)
        f.add_input(x)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        y = fl.set(x)
        y.set_device_mesh(mesh)
        f.add_output(fl.neg(y))
    program = fl.lower(f)
    comm, kernel = program.steps
    post = host.PostOnStream(comm)
    program.steps = [post, host.PostOnStream(kernel), host.Wait(post)]
    text = problems(program)
    assert "step 1 reads T1 on stream 0 before it is ready there: posted Communication " in text
    assert "Wait Communication T1 first" in text
    # a kernel's output read on another stream needs a Synchronize
    program.steps = [
        post,
        host.Wait(post),
        host.SetCurrentStream(s(1)),
        host.PostOnStream(kernel),
        host.SetCurrentStream(s(0)),
    ]
    text = problems(program)
    assert "step 3 reads T1 on stream 1 before it is ready there" in text, text
    assert "Synchronize Stream 0 on stream 1 first" in text
    assert "output T2 is not ready on the main stream (Stream 0) at the end" in text


def test_a_stream_used_before_it_is_set_and_a_post_never_waited() -> None:
    def unset(kernel, comm):
        return [kernel, comm, host.Synchronize(s(2))]

    assert "Synchronize Stream 2 before any SetCurrentStream to Stream 2" in problems(
        program_with(unset)
    )

    def unwaited(kernel, comm):
        return [kernel, host.PostOnStream(comm)]

    assert "posts Communication Allgather -> T2 and nothing waits for it" in problems(
        program_with(unwaited)
    )


def test_buffers_are_used_inside_their_lives() -> None:
    def after_free(kernel, comm):
        return [host.Allocate(kernel.outputs[0]), kernel, host.Deallocate(kernel.outputs[0]), comm]

    assert "step 3 reads T1 after its Deallocate" in problems(program_with(after_free))

    def owned(kernel, comm):
        return [kernel, comm, host.Deallocate(comm.output)]

    assert "Deallocate T2, a fusion input or output: the caller owns its buffer" in problems(
        program_with(owned)
    )

    def late(kernel, comm):
        return [kernel, host.Allocate(kernel.outputs[0]), comm]

    assert "Allocate T1 after it is written" in problems(program_with(late))


def test_loops_are_bounded() -> None:
    program = in_a_loop()
    program.steps[0].extent = host.MAX_EXTENT + 1
    assert f"its extent {host.MAX_EXTENT + 1} is not in 1..{host.MAX_EXTENT}" in problems(program)
    program.steps[0].extent = 2
    program.steps[0].body.append(host.ForLoop("i", 2, []))
    assert "FOR i is inside a loop of the same index" in problems(program)


def parse_error(text: str) -> str:
    with pytest.raises(fl.ParseError) as info:
        parse_printed(text, "host.txt")
    return str(info.value)


def edited(old: str, new: str) -> str:
    text = str(single_fusion_single_comm())
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("Wait Communication T2", "Wait Communication T1", "no PostOnStream Communication before"),
        ("Wait Communication T2", "Wait Communication T99", "expected `Wait Communication T<n>`"),
        ("SetCurrentStream to Stream 1", "SetCurrentStream to Stream -1", "expected a stream"),
        ("SetCurrentStream to Stream 1", "SetCurrentStream to Stream i", "i is the index of no loop"),
        ("Synchronize Stream 1", "Synchronize Stream 1 % 2", "expected a stream"),
        ("SetCurrentStream to Stream 0", "SetCurrentStream Stream 0", "expected SetCurrentStream"),
        ("PostOnStream %kernel1", "PostOnStream %kernel2", "%kernel2 is step 1"),
        ("PostOnStream Communication", "PostOnStream Comm", "after PostOnStream"),
    ],
)  # fmt: skip
def test_a_mistaken_host_line_names_its_place(old: str, new: str, message: str) -> None:
    text = parse_error(edited(old, new))
    assert text.startswith("host.txt:") and message in text


def test_a_loop_s_mistakes_name_their_place() -> None:
    text = str(in_a_loop())
    zero = parse_error(text.replace("range(2)", "range(0)"))
    assert "FOR i: the extent 0 is not in 1..4096" in zero and zero.startswith("host.txt:3:16")
    assert "has no `} // FOR i`" in parse_error(text.replace("} // FOR i\n", ""))
    inner = "Wait Communication T2\nFOR i in range(2) {\n} // FOR i\n"
    nested = text.replace("Wait Communication T2\n", inner)
    assert "FOR i is inside a loop of the same index" in parse_error(nested)


def test_the_printed_host_program_reads_back_in_opt_and_timeline(tmp_path, capsys) -> None:
    from fuserlite.cli import main

    path = tmp_path / "host.txt"
    path.write_text(str(in_a_loop()))
    assert main(["opt", str(path)]) == 0
    assert capsys.readouterr().out == path.read_text()
    assert main(["timeline", str(path)]) == 0
    out = capsys.readouterr().out
    assert "devices 0-1 stream 1" in out and "devices 0-1 communication 0" in out


def test_chunks_that_depend_on_each_other_are_refused() -> None:
    """sp_mlp's ReduceScatter (the second chunk's communication, on stream 2) reads what
    the first chunk's linear computes on stream 1: no independent chunks."""
    program = fl.lower(fl.load("examples/sp_mlp.fus"))
    with pytest.raises(fl.VerifyError, match="before it is ready there"):
        stream_chunks(program)


MPI_RUN = """
import sys, numpy as np, fuserlite as fl
from fuserlite.program.parser import load_any
for path in sys.argv[1:]:
    program = load_any(path)
    inputs = fl.random_inputs(program.fusion, seed=3)
    with fl.FusionExecutor(program, backend="mpi", compute="interpret") as ex:
        got = ex.run(inputs)
    if got is not None:
        sim = fl.FusionExecutor(load_any(path), compute="interpret").run(inputs)
        same = all(np.array_equal(a, b) for a, b in zip(got, sim))
        print(path, "same" if same else "DIFFERENT")
"""


def test_the_mpi_backend_runs_host_programs_as_sim_does(tmp_path) -> None:
    """One 2-rank job over every host program above, read from its printed text."""
    import shutil
    import subprocess
    import sys

    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("mpiexec not found: pip install '.[mpi]' (mpich)")
    paths = []
    for k, (build, _) in enumerate(BUILT.values()):
        paths.append(tmp_path / f"host{k}.txt")
        paths[-1].write_text(str(build()))
    script = tmp_path / "run.py"
    script.write_text(MPI_RUN)
    proc = subprocess.run(
        [mpiexec, "-n", "4", sys.executable, str(script), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [w for p in paths for w in (str(p), "same")]


def test_chunk_i_plus_1_is_posted_before_chunk_i_computes_and_waited_after() -> None:
    """The overlap itself: in a Stream loop of Allgather + matmul the executor posts
    chunk i+1's Allgather before chunk i's matmul and waits for it only after, with the
    values of the unstreamed program, bit for bit."""
    from overlap_order import by_chunk, pipelined_order, run_recorded, same_bits

    from fuserlite.runtime.backends.sim import SimCommunicator

    build = lambda: stream_cases.ag_matmul(4, m=8, k=8, n=6)  # noqa: E731
    inputs = fl.random_inputs(build(), seed=5)
    got, events = run_recorded(fl.lower(build()), SimCommunicator(), inputs)
    assert by_chunk(events) == pipelined_order(events)
    assert len(events) == 3 * 4  # 4 chunks: each posted, waited and run
    flat = fl.FusionExecutor(unstreamed(build)(), compute="interpret").run(inputs)
    assert same_bits(got, flat)


@pytest.mark.parametrize(
    "build", [stream_cases.matmul_reduce_scatter, stream_cases.matmul_allreduce], ids=["RS", "AR"]
)
def test_chunk_i_plus_1_computes_before_chunk_i_s_reduction_is_waited(build) -> None:
    """matmul + ReduceScatter and matmul + Allreduce streamed: chunk i's collective is
    posted after chunk i's matmul (it reads it), chunk i+1's matmul runs before chunk
    i's wait, and the wait comes before chunk i's store (its reader) or the loop's end;
    the values are the unstreamed program's, bit for bit."""
    from overlap_order import by_chunk, reduce_pipelined_order, run_recorded, same_bits

    from fuserlite.runtime.backends.sim import SimCommunicator

    inputs = fl.random_inputs(build(4), seed=5)
    got, events = run_recorded(fl.lower(build(4)), SimCommunicator(), inputs, stores=True)
    assert by_chunk(events) == reduce_pipelined_order(events)
    assert len(events) == 4 * 4  # 4 chunks: each computed, posted, waited and stored
    flat = fl.FusionExecutor(unstreamed(lambda: build(4))(), compute="interpret").run(inputs)
    assert same_bits(got, flat)
