"""The validator decides a tensor's structural checks, and a kernel expression's locality,
once per structure (fuserlite.verify.structures): tensors alike share the answer, and a tensor that
differs from a valid one in any detail the answer reads, or in its identity, which the
structure leaves out, is still caught and named."""

from __future__ import annotations

import importlib

import pytest
from test_pipeline_scaling import many_outputs

import fuserlite as fl
from fuserlite.ir.errors import VerifyError
from fuserlite.ir.signature import domain_signature
from fuserlite.ir.types import IterType, ParallelType
from fuserlite.program.verify import verify_program
from fuserlite.verify.structures import structure

verify_module = importlib.import_module("fuserlite.verify.fusion")  # fl.verify is its function
program_verify = importlib.import_module("fuserlite.program.verify")


def lowered(n: int = 3):
    """A lowered, validated program of n outputs `x + k`, laid out alike."""
    program = fl.lower(many_outputs(n))
    verify_program(program)  # every structure is now found valid
    return program


def test_outputs_alike_share_a_structure_and_are_checked_axis_by_axis_once(monkeypatch):
    """50 outputs (and their 50 kernel-local copies) after schedule-pointwise: a few
    one-walk checks, one per structure, not one per tensor."""
    walks = []
    real = verify_module._plainly_valid
    monkeypatch.setattr(
        verify_module, "_plainly_valid", lambda tv, *a: walks.append(tv) or real(tv, *a)
    )
    asked = []
    real_movement = program_verify.movement_problems
    monkeypatch.setattr(
        program_verify,
        "movement_problems",
        lambda e, fix: asked.append(e) or real_movement(e, fix),
    )
    stage = []
    progress = lambda phase, done, total, current: stage.append((current, len(walks), len(asked)))  # noqa: E731
    fl.Pipeline.default(progress=progress).run(many_outputs(50))
    names = [s[0] for s in stage]
    before, after = (
        stage[names.index("schedule-pointwise")],
        stage[names.index("lower-communications")],
    )
    assert after[1] - before[1] <= 4  # x, its read cache, the local copies, the outputs
    assert after[2] - before[2] <= 4  # 100 kernel expressions, their kinds and structures
    program = fl.lower(many_outputs(5))
    structures = {id(structure(t)) for t in program.fusion.outputs}
    assert len(structures) == 1 and structure(program.fusion.outputs[0]) is not None


def _with_mesh(mesh):
    return lambda tv, other: tv.set_device_mesh(mesh)


def _device_axis(tv):
    return next(ax for ax in tv.domain.loop if ax.parallel_type is ParallelType.DIDx)


def _thread_axis(tv):
    return next(ax for ax in tv.domain.loop if ax.parallel_type is ParallelType.TIDx)


# One detail changed in an output laid out as its valid neighbours, each making it
# invalid, with the message expected: each part of the structure (the signature's extents,
# parallel types, loop and transforms; the mesh) and what it leaves out (the axes'
# owners and definitions).
MUTATIONS = {
    "logical extent": (
        lambda tv, other: setattr(tv.domain.logical[0], "extent", 6),
        "chunks are ceil",
    ),
    "parallel type twice": (
        lambda tv, other: setattr(_device_axis(tv), "parallel_type", ParallelType.TIDx),
        "multiple loop IterDomains with the same parallel type",
    ),
    "thread extent": (
        lambda tv, other: setattr(_thread_axis(tv), "extent", 2048),
        "exceeds",
    ),
    "loop axis dropped": (
        lambda tv, other: tv.domain.loop.pop(),
        "loop domain does not match its recorded transforms",
    ),
    "transform dropped": (
        lambda tv, other: tv.domain.transforms.pop(),
        "loop domain does not match its recorded transforms",
    ),
    "reduction axis (a partial output)": (
        lambda tv, other: setattr(tv.domain.logical[0], "iter_type", IterType.REDUCTION),
        "holds partial results",
    ),
    "mesh of other devices": (
        _with_mesh(fl.DeviceMesh.for_num_devices(4)),
        "has 4 devices",
    ),
    "axis owned by another tensor": (
        lambda tv, other: setattr(_thread_axis(tv), "owner", other),
        "belong to",
    ),
    "sharded axis defined by another tensor's split": (
        lambda tv, other: setattr(_device_axis(tv), "definition", _device_axis(other).definition),
        "must be on a logical axis",
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=str)
def test_a_tensor_laid_out_as_valid_ones_but_for_one_detail_is_caught(mutation):
    change, message = MUTATIONS[mutation]
    program = lowered()
    good, bad = program.fusion.outputs[0], program.fusion.outputs[1]
    assert structure(bad) is structure(good) and structure(good).valid
    change(bad, good)
    domain_signature(bad)  # known, as the scheduler leaves it
    with pytest.raises(VerifyError) as err:
        verify_program(program)
    assert message in str(err.value)
    lines = [line for line in str(err.value).splitlines() if message in line]
    assert any(bad.name in line for line in lines), str(err.value)
    assert not any(good.name + ":" in line for line in lines)


def test_a_structure_found_valid_with_an_inferable_mesh_is_not_valid_where_one_is_required():
    """Before propagate-shardings a sharded tensor without a mesh is accepted (it will
    inherit one); the same structure without a mesh where one is required is not."""
    program = lowered()
    good, bad = program.fusion.outputs[0], program.fusion.outputs[1]
    for tv in (good, bad):
        tv.mesh = None
        domain_signature(tv)
    namer = verify_module.LazyNamer(program.fusion)
    assert verify_module.tensor_problems(good, namer, mesh_inferable=True) == []
    assert structure(good) is structure(bad) and structure(bad).valid == {True}
    problems = verify_module.tensor_problems(bad, namer, mesh_inferable=False)
    assert problems and all(bad.name in p and "no device mesh" in p for p in problems)


def test_a_kernel_copy_laid_out_as_local_ones_but_on_other_devices_is_caught():
    """A kernel's Set whose output moved to other devices (a valid tensor of another
    structure): its locality is decided again, and it moves data."""
    program = lowered()
    kernel = program.kernels[0]
    copies = [e for e in kernel.exprs if e.op_name == "set" and e.output in program.fusion.outputs]
    bad = copies[1].output
    assert program_verify.locality_key(copies[0]) == program_verify.locality_key(copies[1])
    bad.set_device_mesh(fl.DeviceMesh([2, 3]))
    with pytest.raises(VerifyError, match=f"{bad.name} = Set.* moves data between devices"):
        verify_program(program)
    assert program_verify.locality_key(copies[1]) != program_verify.locality_key(copies[0])


def test_a_kernel_copy_laid_out_as_local_ones_but_replicated_is_caught():
    """The same with its sharding dropped (another signature, known as the scheduler
    leaves it)."""
    program = lowered()
    kernel = program.kernels[0]
    copies = [e for e in kernel.exprs if e.op_name == "set" and e.output in program.fusion.outputs]
    bad = copies[1].output
    _device_axis(bad).parallel_type = ParallelType.Serial
    domain_signature(bad)
    with pytest.raises(VerifyError, match=f"{bad.name} = Set.* moves data between devices"):
        verify_program(program)


def test_a_tensor_whose_transform_reads_an_axis_outside_its_domain_has_no_structure():
    """Its domain has no signature to work out (domain_signature would find no position
    for the axis): it is checked axis by axis, which names it, and nothing crashes."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16])
        other = fl.tensor([8, 16])
        f.add_input(x)
        f.add_output(x + 1.0)
    x.split(1, 4)
    x.domain.transforms[0].input = other.domain.logical[1]  # Split is unstamped: stamp x
    x.domain.transforms = list(x.domain.transforms)
    assert structure(x) is None
    with pytest.raises(VerifyError, match=f"{x.name}: loop domain does not match"):
        fl.verify(f)


def test_the_sharding_passes_boundaries_decide_locality_once_per_structure(monkeypatch):
    """After propagate-shardings the outputs' signatures are known (its replays) and the
    input's is worked out once: insert-reshardings' contract and the kernel checks after
    segment ask non_local_inputs of a few expressions, not of each of 50."""
    asked = []
    real = verify_module.non_local_inputs
    monkeypatch.setattr(verify_module, "non_local_inputs", lambda e: asked.append(e) or real(e))
    stage = []
    progress = lambda phase, done, total, current: stage.append((current, len(asked)))  # noqa: E731
    fl.Pipeline.default(progress=progress).run(many_outputs(50))
    counts = dict(stage)
    assert counts["reorder-sharded-axis"] - counts["insert-reshardings"] <= 2  # its ensures
    assert counts["schedule-pointwise"] - counts["segment"] <= 2  # verify_program
