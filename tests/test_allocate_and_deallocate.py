"""allocate-and-deallocate: each intermediate buffer allocated right before its first
writer and freed right after its last reader (in a host program, once no stream can
still read it), idempotent, printed and read back, changing neither values nor time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from host_programs import in_a_loop, single_fusion_single_comm

import fuserlite as fl
from fuserlite.ir.liveness import dead_after
from fuserlite.passes.allocate_and_deallocate import buffers
from fuserlite.program import host
from fuserlite.program.parser import parse_printed

REPO = Path(__file__).resolve().parents[1]
PASS = "allocate-and-deallocate"


def with_buffers(program: fl.Program) -> fl.Program:
    return fl.Pipeline([PASS], input_level="program").run(program)


def flat(name: str) -> fl.Program:
    return fl.lower(fl.load(REPO / "examples" / f"{name}.fus"))


@pytest.mark.parametrize("name", ["sp_mlp", "transformer_block", "dp_tp_mlp", "seed_000"])
def test_each_buffer_lives_from_its_first_writer_to_its_last_reader(name: str) -> None:
    program = flat(name)
    done = with_buffers(program)
    steps = done.steps
    owned = buffers(done)
    io = {id(t) for t in (*done.inputs, *done.outputs)}
    assert owned and all(id(t) not in io for t in owned)
    runs = [s for s in steps if host.executable(s) is not None]
    dead = dead_after(runs, lambda s: s.inputs, lambda s: s.outputs)
    for t in owned:
        (a,) = [k for k, s in enumerate(steps) if isinstance(s, host.Allocate) and s.tensor is t]
        (d,) = [k for k, s in enumerate(steps) if isinstance(s, host.Deallocate) and s.tensor is t]
        writer = next(k for k, s in enumerate(steps) if s in runs and t in s.outputs)
        assert a == writer - 1 or all(isinstance(s, host.Allocate) for s in steps[a:writer])
        last = next(k for k, s in enumerate(steps) if s in runs and t in dead[runs.index(s)])
        assert all(isinstance(s, host.Deallocate) for s in steps[last + 1 : d + 1])
    assert str(with_buffers(done)) == str(done)  # idempotent
    assert str(parse_printed(str(done))) == str(done)
    inputs = fl.random_inputs(program.fusion, seed=2)
    want = fl.FusionExecutor(program, compute="interpret").run(inputs)
    got = fl.FusionExecutor(parse_printed(str(done)), compute="interpret").run(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(want, got))
    assert fl.timeline(done).step_time == fl.timeline(program).step_time


def test_in_a_host_program_a_buffer_is_freed_once_no_stream_reads_it() -> None:
    done = with_buffers(in_a_loop())
    kinds = [type(s).__name__ for s in done.steps]
    assert kinds == [
        "Allocate",
        "ForLoop",
        "SetCurrentStream",
        "Synchronize",
        "Synchronize",
        "Deallocate",
    ]  # T1 is read on streams 1 and 2: freed after the main stream synchronizes both
    one = with_buffers(single_fusion_single_comm())
    kinds = [type(s).__name__ for s in one.steps]
    assert kinds[kinds.index("Wait") + 1] == "Deallocate"  # on stream 1, after the wait


def test_a_deallocate_while_a_stream_may_read_is_an_error() -> None:
    program = with_buffers(in_a_loop())
    *steps, free = program.steps
    steps.insert(2, free)  # right after the loop (on stream 2), before the synchronizes
    program.steps = steps
    with pytest.raises(
        fl.VerifyError, match=r"Deallocate T1 on stream 2 while step 3 \(i=0\) may still use it"
    ):
        fl.verify_program(program)


def test_the_pass_requires_a_lowered_program() -> None:
    program = fl.Pipeline(fl.pipeline.DEFAULT_PASSES[:4]).run(fl.load(REPO / "examples/sp_mlp.fus"))
    with pytest.raises(fl.FuserliteError, match="run lower-communications first"):
        with_buffers(program)
