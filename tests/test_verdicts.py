"""Whole-IR verdicts (fuserlite.verify.verdicts.Verdicts): between passes the validator skips an IR
that nothing has changed since it was found valid, and a change of any kind, to a
stamped node or to one of the unstamped lists that hold the IR together, is still
caught (the bad passes of tests/test_stamps.py change nodes; these change lists)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import ClassVar

import pytest
from test_pipeline_scaling import many_outputs
from test_stamps import sharded_add

import fuserlite as fl
from fuserlite.ir.domain import IterDomain
from fuserlite.ir.errors import VerifyError
from fuserlite.passes.base import REGISTRY, Level, Pass
from fuserlite.pipeline import DEFAULT_PASSES, PassFailed, Pipeline
from fuserlite.printer import Namer
from fuserlite.program.program import Kernel
from fuserlite.program.verify import PROGRAM_READS, verify_program
from fuserlite.verify.verdicts import Verdicts

verify_module = importlib.import_module("fuserlite.verify.fusion")  # fl.verify is its function


def _program_pass(change, pass_name: str = "test-change"):
    """A program pass (test-only) that runs `change(program)`."""

    @dataclass(frozen=True)
    class Change(Pass):
        """Test-only: change the program."""

        name: ClassVar[str] = pass_name
        level: ClassVar[Level] = Level.program

        def run(self, program):
            change(program)

    return Change


@pytest.fixture
def program_pass():
    made = []

    def register(change):
        cls = _program_pass(change)
        REGISTRY[cls.name] = cls
        made.append(cls.name)
        return cls.name

    yield register
    for name in made:
        del REGISTRY[name]


def _elsewhere(program) -> None:
    """Change nothing of the program, but move the clock: build another fusion."""
    with fl.Fusion():
        fl.tensor([2, 3]).split(0, 2)


def test_an_unchanged_program_is_not_walked_again(program_pass, monkeypatch):
    """Passes that change nothing of the program: after assign-layouts (the record is
    made at lower-communications' boundary), a pass that changes nothing and one that
    builds another fusion meanwhile, the validator checks no tensor again (before:
    every tensor, after every pass)."""
    noop = program_pass(lambda program: None)
    other = _program_pass(_elsewhere, "test-elsewhere")
    REGISTRY[other.name] = other
    checked = []
    real = verify_module.tensor_problems
    monkeypatch.setattr(
        verify_module, "tensor_problems", lambda tv, *a: checked.append(tv) or real(tv, *a)
    )
    pipeline = Pipeline([*DEFAULT_PASSES, noop, other.name])
    counts = []
    pipeline.progress = lambda phase, done, total, current: counts.append(len(checked))
    try:
        pipeline.run(many_outputs(50))
    finally:
        del REGISTRY[other.name]
    # counts[k]: tensors checked before pass k runs; the last entry is the end
    assert counts[-1] == counts[-2] == counts[-3] == counts[-4], counts


def _kernel(program) -> Kernel:
    return program.kernels[0]


def _unused_tensor(program):
    """A tensor of the fusion that no step computes (x's read cache is computed)."""
    with program.fusion:
        return fl.tensor([8, 16])


LIST_CHANGES = {
    # a kernel's expressions, in place: one of them twice
    "kernel expression repeated": (
        lambda p: _kernel(p).exprs.append(_kernel(p).exprs[0]),
        "is in two steps",
    ),
    # the steps, in place: the kernel before the step it reads (here: no step left)
    "steps emptied": (lambda p: p.steps.clear(), "computed by no step"),
    # a kernel's inputs, in place: a tensor nothing computes
    "kernel input added": (
        lambda p: _kernel(p).inputs.append(_kernel(p).outputs[0]),
        "before any step computes it",
    ),
    # the fusion's outputs, in place: a tensor no step computes
    "output appended": (
        lambda p: p.fusion.outputs.append(_unused_tensor(p)),
        "neither computed nor an input",
    ),
    # the fusion's inputs, in place: an input dropped that an expression reads
    "input dropped": (lambda p: p.fusion.inputs.pop(0), "is not a fusion input"),
}


@pytest.mark.parametrize("change", LIST_CHANGES, ids=str)
def test_a_change_to_a_list_is_caught_though_the_program_was_valid(change, program_pass):
    edit, message = LIST_CHANGES[change]
    noop = program_pass(lambda program: None)
    bad = _program_pass(edit, "test-bad-list")
    REGISTRY[bad.name] = bad
    try:
        with pytest.raises(PassFailed) as err:
            # the no-op pass's boundary finds the program unchanged (the record is warm)
            Pipeline([*DEFAULT_PASSES, noop, bad.name]).run(sharded_add())
    finally:
        del REGISTRY[bad.name]
    assert "pass test-bad-list (after: propagate-shardings" in str(err.value)
    assert message in str(err.value)


def test_a_record_is_kept_only_for_a_valid_ir_and_its_question():
    program = Pipeline(list(DEFAULT_PASSES)).run(sharded_add())
    verdicts = Verdicts()
    runs = []

    def counted(p):
        runs.append(p)
        verify_program(p)

    verdicts.check(program, "program", counted, PROGRAM_READS)
    verdicts.check(program, "program", counted, PROGRAM_READS)
    assert len(runs) == 1
    verdicts.check(program, "another question", counted, PROGRAM_READS)
    verdicts.check(program.clone(), "another question", counted, PROGRAM_READS)
    assert len(runs) == 3
    program.fusion.outputs.append(_unused_tensor(program))
    for _ in range(2):  # an invalid program is never recorded: both runs raise
        with pytest.raises(VerifyError, match="neither computed nor an input"):
            verdicts.check(program, "program", counted, PROGRAM_READS)
    assert len(runs) == 5


def _counting(monkeypatch, module, name: str) -> list:
    """Record every call of module.name (its first argument)."""
    seen: list = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda x, *a: seen.append(x) or real(x, *a))
    return seen


def test_the_program_validator_keeps_the_fusion_validators_marks(monkeypatch):
    """A tensor with a mesh found valid between fusion passes (where meshes may still be
    inherited) is valid at the program level too: segment's boundary checks none again."""
    checked = _counting(monkeypatch, verify_module, "ownership_problems")  # on a miss only
    pipeline = Pipeline(["propagate-shardings", "insert-reshardings", "segment"])
    counts = []
    pipeline.progress = lambda phase, done, total, current: counts.append(len(checked))
    pipeline.run(many_outputs(20))
    assert counts[-1] == counts[-2], counts  # segment and the program validator after it


def test_a_changed_program_checks_again_only_the_expressions_that_changed(
    program_pass, monkeypatch
):
    """One tensor changes (to the same memory type: a stamp, a valid program): the
    validator walks the program again, but asks whether data moves, and whether it is
    local, at most of the expressions that read or write that tensor (none here: its
    structure is unchanged, so program.verify.locality_key decides them)."""
    program_verify = importlib.import_module("fuserlite.program.verify")
    moves = _counting(monkeypatch, program_verify, "moves_data")
    local = _counting(monkeypatch, verify_module, "non_local_inputs")

    tensor = None

    def touch(program):
        nonlocal tensor
        tensor = out = program.fusion.outputs[3]
        out.memory_type = out.memory_type
        moves.clear()
        local.clear()

    Pipeline([*DEFAULT_PASSES, program_pass(touch)]).run(many_outputs(30))
    touched = {id(e) for e in tensor.uses} | {id(tensor.definition)}
    assert len(moves) <= 1 and len(local) <= 1, (moves, local)
    assert all(id(e) in touched for e in (*moves, *local)), (moves, local)


# -- the one-walk check of a changed tensor ----------------------------------------------
P = fl.ParallelType
MESH2 = fl.DeviceMesh.for_num_devices(2)


def _tensor(shape, mesh=MESH2):
    with fl.Fusion() as f:
        x = fl.tensor(shape)
        if mesh is not None:
            x.set_device_mesh(mesh)
        other = fl.tensor(shape)
    return f, x, other


def _bad(edit, shape=(8, 16), mesh=MESH2):
    def make():
        f, x, other = _tensor(list(shape), mesh)
        edit(x, other)
        return x

    return make


def _slot(ax, pt) -> None:
    ax.parallel_type = pt  # a slot write: the primitive would refuse most of these


BAD_TENSORS = {
    "two TIDx": _bad(lambda x, o: (_slot(x.axis(0), P.TIDx), _slot(x.axis(1), P.TIDx))),
    "two DIDx after a split": _bad(
        lambda x, o: (x.outer_split(0, 2), _slot(x.axis(0), P.DIDx), _slot(x.axis(1), P.DIDx))
    ),
    "TIDx over 1024": _bad(lambda x, o: _slot(x.axis(0), P.TIDx), shape=(2048,)),
    "DIDx without a mesh": _bad(lambda x, o: _slot(x.axis(0), P.DIDx), mesh=None),
    "DIDx on an axis of 8 over 2 devices": _bad(lambda x, o: _slot(x.axis(0), P.DIDx)),
    "DIDy on a mesh of rank 1": _bad(lambda x, o: (x.outer_split(0, 2), _slot(x.axis(0), P.DIDy))),
    "DIDx on a merge": _bad(lambda x, o: (x.merge(0), x.split(0, 2), _slot(x.axis(0), P.DIDx))),
    "inner split of 10 by 6 for chunks of 5": _bad(
        lambda x, o: (x.split(0, 6), _slot(x.axis(0), P.DIDx)), shape=(10,)
    ),
    "loop axis no transform made": _bad(lambda x, o: x.domain.loop.append(IterDomain(3))),
    "loop axis dropped": _bad(lambda x, o: (x.split(0, 2), x.domain.loop.pop())),
    "another tensor's domain": _bad(lambda x, o: setattr(x, "domain", o.domain)),
    "a split's output owned elsewhere": _bad(
        lambda x, o: (x.split(1, 4), setattr(x.domain.loop[1], "owner", o))
    ),
    "a merge's output owned elsewhere": _bad(
        lambda x, o: (x.merge(0), setattr(x.domain.loop[0], "owner", o))
    ),
    "a logical axis owned by none": _bad(
        lambda x, o: x.domain.logical.__setitem__(0, IterDomain(8))
    ),
}


@pytest.mark.parametrize("bad", BAD_TENSORS, ids=str)
def test_the_one_walk_check_sees_every_problem_of_a_tensor(bad):
    """verify.tensor_problems asks one walk (_plainly_valid) first and the checks one by
    one only where it says no: it must say no wherever they find a problem."""
    x = BAD_TENSORS[bad]()
    namer = Namer(x.fusion)
    problems = verify_module.ownership_problems(x) + verify_module._domain_problems(x, namer, False)
    assert problems, "the case must be invalid"
    assert not verify_module._plainly_valid(x, False)
    assert verify_module.tensor_problems(x, namer, False) == problems


def test_the_one_walk_check_finds_scheduled_tensors_valid():
    """It is the fast path for the common case: every tensor of a scheduled program."""
    program = fl.lower(many_outputs(5))
    tensors = program.fusion.tensors()
    assert any(tv.domain.transforms for tv in tensors)
    assert all(verify_module._plainly_valid(tv, False) for tv in tensors)
