"""The program level: segment makes a Program; passes declare their level; the pipeline
checks the order when it is built; the executor runs a Program."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.errors import PassOptionError
from fuserlite.passes.base import REGISTRY, Level
from fuserlite.program import Communication, Kernel, Program
from fuserlite.schedule.shard import shard_axis


def test_a_fusion_has_no_program_slot() -> None:
    fusion = models.tensor_parallel_mlp(2)
    assert not hasattr(fusion, "segments")
    fl.lower(fusion)
    assert not hasattr(fusion, "segments") and not hasattr(fusion, "steps")


def test_lower_returns_a_program_of_kernels_and_communications() -> None:
    fusion = models.tensor_parallel_mlp(2)
    program = fl.lower(fusion)
    assert isinstance(program, Program) and program.fusion is not fusion
    assert [type(s) for s in program.steps] == [Kernel, Kernel, Kernel, Communication, Kernel]
    assert program.kernels == [s for s in program.steps if isinstance(s, Kernel)]
    assert [c.kind.value for c in program.communications] == ["Allreduce"]
    assert program.inputs == program.fusion.inputs and program.outputs == program.fusion.outputs
    # the latency its plans were chosen at (read back by fl.explain), then the steps
    assert str(program).startswith("Planner: latency_bytes=131072\n\n%kernel0 (DeviceMesh{0 1}) {")


def test_the_pipeline_returns_what_its_last_pass_produced() -> None:
    fusion = models.add_broadcast(2, True)
    before = fl.Pipeline(["propagate-shardings", "insert-reshardings"]).run(fusion)
    assert isinstance(before, fl.Fusion) and before is not fusion
    after = fl.Pipeline(["propagate-shardings", "segment"]).run(fusion)
    assert isinstance(after, Program)


def test_every_pass_declares_its_level_and_only_segment_changes_it() -> None:
    levels = {name: (cls.level, cls.output_level()) for name, cls in REGISTRY.items()}
    changes = {name for name, (a, b) in levels.items() if a is not b}
    assert changes == {"segment"}
    assert levels["segment"] == (Level.fusion, Level.program)
    for name in ("schedule-pointwise", "lower-communications", "assign-layouts"):
        assert levels[name] == (Level.program, Level.program)
    for name in ("propagate-shardings", "insert-reshardings", "reorder-sharded-axis"):
        assert levels[name] == (Level.fusion, Level.fusion)


@pytest.mark.parametrize(
    "names, message",
    [
        (["schedule-pointwise"], "schedule-pointwise works on a program, but at the start"),
        (["propagate-shardings", "assign-layouts"], "after propagate-shardings the pipeline"),
        (["segment", "reorder-sharded-axis"], "put it before segment"),
        (["segment", "segment"], "pass segment works on a fusion, but after segment"),
    ],
)
def test_an_impossible_order_is_refused_when_the_pipeline_is_built(names, message) -> None:
    with pytest.raises(PassOptionError, match=message):
        fl.Pipeline(names)


def test_a_program_pipeline_runs_program_passes_on_a_copy() -> None:
    first = ["propagate-shardings", "insert-reshardings", "reorder-sharded-axis", "segment"]
    segmented = fl.Pipeline(first).run(models.tensor_parallel_mlp(2))
    before = str(segmented)
    rest = fl.Pipeline(
        ["schedule-pointwise", "lower-communications", "assign-layouts"], input_level="program"
    )
    assert rest.input_level is rest.output_level is Level.program
    program = rest.run(segmented)
    assert str(segmented) == before  # the input program is untouched
    assert [c.kind.value for c in program.communications] == ["Allreduce"]
    assert str(program) == str(fl.lower(models.tensor_parallel_mlp(2)))
    with pytest.raises(fl.FuserliteError, match="Pipeline.run: program must be a Program"):
        rest.run(models.tensor_parallel_mlp(2))


def test_the_executor_runs_a_program_and_lowers_a_fusion() -> None:
    fusion = models.tensor_parallel_mlp(2)
    inputs = fl.random_inputs(fusion)
    program = fl.lower(fusion)
    from_program = fl.FusionExecutor(program)
    assert from_program.program is program
    from_fusion = fl.FusionExecutor(fusion)
    assert str(from_fusion.program) == str(program)
    for ex in (from_program, from_fusion):
        fl.validate(fusion, inputs, ex.run(inputs))


def test_the_executor_verifies_a_program_it_is_given() -> None:
    program = fl.lower(models.all_gather_all_reduce_reduce_scatter(4))
    program.communications[0].layout = None  # as a hand edit (or a broken tool) would
    with pytest.raises(fl.VerifyError, match="some collectives have a layout and others"):
        fl.FusionExecutor(program)


def test_a_program_clone_is_independent() -> None:
    program = fl.lower(models.tensor_parallel_mlp(2))
    copy = program.clone()
    assert str(copy) == str(program)
    assert copy.kernels[0].exprs[0] is not program.kernels[0].exprs[0]
    assert copy.kernels[-1].reference in copy.fusion.tensors_created
    copy.communications[0].layout = None
    fl.verify_program(program)  # the original still has its layout


def test_the_program_verifier_checks_the_order_and_the_cover_of_the_steps() -> None:
    program = fl.lower(models.tensor_parallel_mlp(2))
    program.steps = [program.steps[1], program.steps[0], *program.steps[2:]]
    with pytest.raises(fl.VerifyError, match=r"step 0 reads T\d+ before any step computes it"):
        fl.verify_program(program)
    program = fl.lower(models.tensor_parallel_mlp(2))
    program.steps = program.steps[:-1]
    with pytest.raises(fl.VerifyError, match=r"output T\d+ is computed by no step"):
        fl.verify_program(program)
    program = fl.lower(models.tensor_parallel_mlp(2))
    program.steps = [*program.steps, program.steps[0]]
    with pytest.raises(fl.VerifyError, match=r"is in two steps"):
        fl.verify_program(program)


def _chain_program(n: int) -> Program:
    with fl.Fusion() as fusion:
        x = fl.tensor([8], name="x")
        fusion.add_input(x)
        shard_axis(x, 0, fl.DeviceMesh.for_num_devices(2))
        t = x
        for _ in range(n):
            t = fl.tanh(t)
        fusion.add_output(t)
    return fl.lower(fusion)


def test_the_program_verifier_checks_each_kernel_computes_before_it_reads() -> None:
    program = _chain_program(3)
    (kernel,) = program.kernels
    first, second = kernel.exprs[1], kernel.exprs[2]  # after the input's cache
    kernel.exprs = [kernel.exprs[0], second, first, *kernel.exprs[3:]]
    with pytest.raises(fl.VerifyError) as caught:
        fl.verify_program(program)
    want = (
        f"kernel 0: {second.output.name} = tanh(...) reads {first.output.name}, which the "
        "kernel computes after it"
    )
    assert want in str(caught.value)
    assert str(caught.value).count("computes after it") == 1  # said once


def test_the_program_verifier_names_each_tensor_off_its_kernels_mesh_once() -> None:
    program = _chain_program(3)
    (kernel,) = program.kernels
    other = fl.DeviceMesh([2, 3])
    moved = [kernel.inputs[0], kernel.exprs[1].output]  # an input and a computed tensor
    for tv in moved:
        object.__setattr__(tv, "mesh", other)  # as a broken tool would, past the log
    with pytest.raises(fl.VerifyError) as caught:
        fl.verify_program(program)
    text = str(caught.value)
    for tv in moved:
        assert text.count(f"but {tv.name} is on {other}") == 1
    assert text.index(moved[0].name + " is on") < text.index(moved[1].name + " is on")
