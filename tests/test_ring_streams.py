"""The ring-based pipeline (nvFuser's swizzle1d): a swizzled Stream axis lowered to a
host loop whose step i computes chunk (i + device) mod D, each step's block brought by
a CollectivePermute; its print, parse, execution, verification and modelled time."""

from __future__ import annotations

import numpy as np
import pytest
import stream_cases as cases

import fuserlite as fl
from fuserlite.ir.streams import Chunking
from fuserlite.pipeline import DEFAULT_PASSES
from fuserlite.program import host
from fuserlite.program.communication import CommKind, Communication
from fuserlite.program.parser import parse_printed
from fuserlite.program.program import Kernel
from fuserlite.program.verify import verify_program
from fuserlite.timing.timeline import COMMUNICATION, COMPUTE

DIDx, STREAM = fl.ParallelType.DIDx, fl.ParallelType.Stream
UNSTREAMED = [p for p in DEFAULT_PASSES if p != "lower-streams"]
D = 4


def the_loop(program: fl.Program) -> host.ForLoop:
    (loop,) = [s for s in program.steps if isinstance(s, host.ForLoop)]
    return loop


def same(a: dict, b: dict) -> bool:
    """Every device's every output equal (a ring's chunks differ per device until the end)."""
    return a.keys() == b.keys() and all(
        np.array_equal(x, y) for d in a for x, y in zip(a[d], b[d], strict=True)
    )


@pytest.mark.parametrize("name", cases.RING_CASES)
@pytest.mark.parametrize("compute", ["interpret", "numpy", "compiled"])
def test_the_ring_gives_the_unstreamed_program_s_values(name: str, compute: str) -> None:
    """D steps, each one CollectivePermute of one block (shift=i) and, for AG + matmul,
    one matmul of one block; every device's values those of the unstreamed program
    (an Allgather, then the matmul whole) and the reference's."""
    fusion = cases.RING_CASES[name](D)
    program = fl.lower(fusion)
    loop = the_loop(program)
    assert loop.extent == D
    posted = [s.step for s in loop.body if isinstance(s, host.PostOnStream)]
    comms = [s for s in posted if isinstance(s, Communication)]
    assert [(c.kind, c.shift) for c in comms] == [(CommKind.CollectivePermute, "i")]
    assert not any(c.kind is CommKind.Allgather for c in program.communications)
    whole = fl.Pipeline(UNSTREAMED).run(fusion)
    (gather,) = whole.communications
    assert comms[0].bytes_per_device * (D - 1) == gather.bytes_per_device  # one block a step
    inputs = fl.random_inputs(fusion, seed=5)
    want = fl.FusionExecutor(whole, compute=compute).run_per_device(inputs)
    got = fl.FusionExecutor(program, compute=compute).run_per_device(inputs)
    assert sorted(got) == list(range(D)) and same(want, got)
    ex = fl.FusionExecutor(fusion, compute=compute)
    ex.validate(inputs, ex.run(inputs))


def test_each_step_sends_each_device_s_block_i_devices_back() -> None:
    """Step i: device t receives block (t + i) mod D from its owner and sends its own to
    device t - i (nvFuser's dispatchSwizzle1D); step 0 moves nothing."""
    program = fl.lower(cases.ag_matmul_ring(D))
    ring = [s for s in program.executed() if isinstance(s, Communication)]
    assert [c.sources for c in ring] == [tuple((r + i) % D for r in range(D)) for i in range(D)]
    assert ring[0].bytes_per_device == 0 and all(c.bytes_per_device == 64 for c in ring[1:])
    pairs = sorted((t.src, t.dst) for t in ring[1].transfers)
    assert pairs == [(t, (t - 1) % D) for t in range(D)]


def test_the_swizzle_prints_parses_back_and_runs_as_before() -> None:
    fusion = cases.ag_matmul_ring(D)
    assert "= Swizzle1D(iS5{4}, parallelType=deviceIdx.x)" in str(fusion)
    program = fl.lower(fusion)
    text = str(program)
    assert "ShardByStream T4 = T2 axis 0 chunk (i + DIDx) % 4 of 4" in text
    assert "CollectivePermute (team=(0 1 2 3), shift=i, input=" in text
    back = parse_printed(text)
    assert str(back) == text
    inputs = fl.random_inputs(fusion, seed=7)
    assert same(
        fl.FusionExecutor(program).run_per_device(inputs),
        fl.FusionExecutor(back).run_per_device(inputs),
    )
    assert "block r from block (r + i) % 4" in fl.explain(program)


def test_a_view_without_its_swizzle_is_refused() -> None:
    """Chunk i on every device is not what the ring's chunk tensor holds: the verifier
    says so before anything runs."""
    program = fl.lower(cases.ag_matmul_ring(D))
    view = next(s for s in the_loop(program).body if isinstance(s, host.ShardByStream))
    view.chunking = Chunking(0, D)
    with pytest.raises(fl.VerifyError, match="is not a chunk of"):
        verify_program(program)


def test_a_ring_step_without_its_loop_is_refused() -> None:
    program = fl.lower(cases.ag_matmul_ring(D))
    loop = the_loop(program)
    post = next(s for s in loop.body if isinstance(getattr(s, "step", None), Communication))
    with pytest.raises(fl.VerifyError, match="shift=i is the index of no loop"):
        host.executed([post])


def test_a_ring_without_its_matmul_computes_nothing() -> None:
    program = fl.lower(cases.ag_matmul_ring(D))
    loop = the_loop(program)
    loop.body = [s for s in loop.body if not isinstance(getattr(s, "step", None), Kernel)]
    with pytest.raises(fl.VerifyError, match="computed by no step"):
        verify_program(program)


def test_the_ring_s_time_is_the_model_s_algebra() -> None:
    """D steps of one permute (M) and one matmul (C): step 0's permute moves nothing, so
    T = (D - 1) max(C, M) + C; without the swizzle, an Allgather then the whole matmul.
    At nvFuser's AG + GEMM sizes on 8 H100s (compute-bound) and at small ones (latency-
    bound communication)."""
    for m, k, n in ((1024, 4096, 8192), (2, 8, 6)):
        f = cases.ag_matmul_ring(8, m=m, k=k, n=n, dtype="bfloat16")
        tl = fl.timeline(fl.lower(f))
        on0 = tl.on(0)
        comm = [e.duration for e in on0 if e.kind == COMMUNICATION]
        compute = [e.duration for e in on0 if e.kind == COMPUTE]
        assert len(comm) == len(compute) == 8 and comm[0] == 0
        big, c = comm[1], compute[0]
        assert all(x == pytest.approx(big) for x in comm[1:])
        assert tl.step_time == pytest.approx(7 * max(big, c) + c, rel=1e-9)
        plain = fl.timeline(fl.Pipeline(UNSTREAMED).run(f))
        (gather,) = [e.duration for e in plain.on(0) if e.kind == COMMUNICATION]
        assert gather > big  # an Allgather of D - 1 blocks against one block a step
        if m > 2:
            assert tl.step_time < plain.step_time  # compute hides all but nothing
            assert c > big


@pytest.mark.parametrize(
    "schedule, error, message",
    [
        (lambda y: y.swizzle1d(0, fl.ParallelType.TIDx), fl.ScheduleError, "device parallel"),
        (lambda y: y.swizzle1d(0, DIDx), fl.FuserliteError, "on a Stream axis only"),
        (
            lambda y: (y.axis(0).parallelize(STREAM), y.swizzle1d(0, DIDx)),
            fl.ScheduleError,
            "swizzle a serial iteration axis",
        ),
    ],
    ids=["not a device type", "not a Stream axis", "after Stream"],
)
def test_a_swizzle_that_cannot_be_lowered_says_why(schedule, error, message: str) -> None:
    with pytest.raises(error, match=message):
        with fl.Fusion() as f:
            mesh = fl.DeviceMesh.for_num_devices(D)
            x = fl.tensor([D, 4], name="x")
            x.set_device_mesh(mesh)
            f.add_input(x)
            x.axis(0).parallelize(DIDx)
            y = fl.set(x)
            y.set_device_mesh(mesh)
            schedule(y)
            f.add_output(y)
        fl.verify(f)


def test_a_swizzle_of_the_wrong_extent_says_outer_split() -> None:
    def body(x, w):
        y = fl.matmul(x, w)
        y.swizzle1d(1, DIDx)  # extent 4, on cases.D = 2 devices
        y.axis(1).parallelize(STREAM)
        return y

    f = cases._fusion([("x", [cases.D, 4, 8], {0: "DIDx"}), ("w", [8, 6], {})], body)
    with pytest.raises(fl.FuserliteError, match="outer_split the axis by 2 first"):
        fl.verify(f)


def test_a_ring_over_an_allreduce_is_refused() -> None:
    """The ring replaces an Allgather by permutes; a sum over devices is no such one."""

    def body(x):
        y = fl.sum(x, [1])  # [S, r(D), 8]: an Allreduce
        y.swizzle1d(0, DIDx)
        y.axis(0).parallelize(STREAM)
        return y

    f = cases._fusion([("x", [cases.D, cases.D, 8], {1: "DIDx"})], body)
    with pytest.raises(fl.LoweringError, match="a ring replaces an Allgather"):
        fl.lower(f)


def test_the_fus_format_writes_and_reads_the_swizzle() -> None:
    """`swizzle1d y axis 0 DIDx` is a .fus directive: to_fus writes it, parse reads it
    back to the same fusion, and a swizzle by a non-device type is located."""
    for make in cases.RING_CASES.values():
        fusion = make(D)
        text = fl.to_fus(fusion)
        assert "swizzle1d T" in text and " axis 0 DIDx\n" in text
        back = fl.parse(text)
        assert str(back) == str(fusion) and fl.to_fus(back) == text
    bad = "mesh m = [0, 1]\ninput x: float32[2, 4] on m\ny = neg(x)\nswizzle1d y axis 0 TIDx\n"
    with pytest.raises(fl.ParseError, match=r":4:1: swizzle1d: y \(T1\) axis 0: swizzle by a"):
        fl.parse(bad)


def test_the_example_runs_and_pipelines() -> None:
    """examples/overlap_ag_matmul_ring.fus: 8 steps, validated against the reference.
    (At its small size each permute is mostly latency, so the model gives the ring 7
    latencies against the Allgather's one: benchmarks/overlap.py compares at size.)"""
    fusion = fl.load("examples/overlap_ag_matmul_ring.fus")
    ex = fl.FusionExecutor(fusion)
    inputs = fl.random_inputs(fusion, seed=1)
    ex.validate(inputs, ex.run(inputs))
    assert the_loop(fl.lower(fusion)).extent == 8


@pytest.mark.parametrize("compute", ["numpy", "compiled"])
def test_a_ring_over_a_replicated_input_reads_views_and_moves_nothing(compute: str) -> None:
    """y = neg(exp(x)), x replicated: each step reads its chunk of x in place (a ring
    view), no communication; the kernel runs op by op (the pointwise scheduler leaves a
    swizzled tensor to the loop), every device's values the unstreamed program's."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(D)
        x = fl.tensor([D, 4], name="x")
        x.set_device_mesh(mesh)
        f.add_input(x)
        y = fl.neg(fl.exp(x))
        y.set_device_mesh(mesh)
        y.swizzle1d(0, DIDx)
        y.axis(0).parallelize(STREAM)
        f.add_output(y)
    program = fl.lower(f)
    views = [s for s in the_loop(program).body if isinstance(s, host.ShardByStream)]
    assert len(views) == 2 and not program.communications
    inputs = fl.random_inputs(f, seed=2)
    want = fl.FusionExecutor(fl.Pipeline(UNSTREAMED).run(f), compute=compute)
    got = fl.FusionExecutor(program, compute=compute)
    assert same(want.run_per_device(inputs), got.run_per_device(inputs))
