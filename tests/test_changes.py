"""The change log (fuserlite.ir.changes): every edit of the IR is heard where it is made,
the pipeline checks what a pass touched, and `verify_all` checks everything.

Each bad pass below runs after the default pipeline has found the program valid and
changes a tensor, an expression or a list it did not create: through the edit points it
is caught by the default checks; around them (`object.__setattr__`) only under
verify_all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import pytest

import fuserlite as fl
from fuserlite.ir.changes import ChangeLog, recording
from fuserlite.ir.domain import IterDomain, TensorDomain
from fuserlite.models import many_outputs
from fuserlite.passes.base import REGISTRY, Level, Pass
from fuserlite.pipeline import DEFAULT_PASSES, PassFailed, Pipeline
from fuserlite.schedule.shard import shard_axis

MESH = fl.DeviceMesh.for_num_devices(2)
P = fl.ParallelType
verify_module = importlib.import_module("fuserlite.verify.fusion")  # fl.verify is its function


def sharded_add() -> fl.Fusion:
    """x + 1 and x * 2, x[8, 16] sharded on axis 0 over 2 devices; w - 1, w replicated."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16])
        w = fl.tensor([8, 16])
        f.add_input(x)
        f.add_input(w)
        shard_axis(x, 0, MESH)
        w.set_device_mesh(MESH)
        f.add_output(x + 1.0)
        f.add_output(x * 2.0)
        f.add_output(w - 1.0)
    return f


# -- what the log hears -------------------------------------------------------------
def test_the_log_holds_what_was_made_and_changed_and_nothing_outside_a_block():
    with fl.Fusion() as f:
        x = fl.tensor([8, 16])
        f.add_input(x)
    with recording() as log:
        y = x + 1.0
        x.split(1, 4)
    assert set(log.tensors) == {id(x), id(y)} and set(log.exprs) == {id(y.definition)}
    assert log.structure  # y's definition: the graph changed
    with recording() as log:
        f.add_output(y)
        assert log.structure and id(y) in log.tensors  # an output, global now
    with recording() as quiet:
        pass
    z = y * 2.0  # outside a block: heard by none
    assert not quiet.tensors and not quiet.exprs and id(z) not in log.tensors


def test_a_nested_block_takes_the_edits_and_the_outer_one_listens_again():
    with fl.Fusion():
        x = fl.tensor([8])
    with recording() as outer:
        with recording() as inner:
            x.split(0, 2)
        x.set_device_mesh(MESH)
    assert set(inner.tensors) == set(outer.tensors) == {id(x)}
    assert isinstance(outer, ChangeLog)


LIST_EDITS = {
    "an expression's inputs": lambda f: f.outputs[0].definition.inputs.append(f.inputs[1]),
    "an expression's outputs": lambda f: f.outputs[0].definition.outputs.pop(),
    "a fusion's outputs": lambda f: f.outputs.append(f.inputs[0]),
    "a fusion's inputs": lambda f: f.inputs.clear(),
    "an item": lambda f: f.outputs.__setitem__(0, f.inputs[0]),
}


@pytest.mark.parametrize("edit", LIST_EDITS, ids=str)
def test_a_list_of_the_graph_is_never_edited_in_place(edit):
    """In-place edits would escape the log and the fusion's kept orders: refused, with
    the fix."""
    with pytest.raises(fl.FusionError, match="not edited in place: assign a new list"):
        LIST_EDITS[edit](sharded_add())


def _set_definition(f):
    f.outputs[0].definition.detach()  # y becomes a leaf: its add is no longer reached


GRAPH_CHANGES = {
    "a definition": _set_definition,
    "inputs assigned": lambda f: setattr(f.outputs[0].definition, "inputs", [f.outputs[1]]),
    "replace_input": lambda f: f.outputs[0].definition.replace_input(f.inputs[0], f.outputs[1]),
    "outputs assigned": lambda f: setattr(f, "outputs", list(reversed(f.outputs))),
    "an output added": lambda f: f.add_output(fl.neg(f.inputs[1])),
    "outputs replaced": lambda f: f.replace_outputs({f.outputs[1]: fl.neg(f.outputs[1])}),
    "an input added": lambda f: f.add_input(fl.tensor([3])),  # read by nothing: first
}


@pytest.mark.parametrize("change", GRAPH_CHANGES, ids=str)
def test_the_expression_and_tensor_orders_are_worked_out_again_after_every_change(change):
    f = sharded_add()
    exprs, tensors = f.exprs(), f.tensors()
    assert f.exprs() == exprs and f.tensors() == tensors  # kept: the same orders
    with f:
        GRAPH_CHANGES[change](f)
    fresh = f._exprs()
    assert f.exprs() == fresh and f.tensors() == f._tensors(fresh)
    assert f.tensors() != tensors


def test_the_kept_orders_are_copies_for_each_caller_and_other_lists_are_their_own():
    f = sharded_add()
    first, shown = f.exprs(), f.tensors()
    first.clear()
    shown.clear()
    assert len(f.exprs()) == 3 and len(f.tensors()) == 5
    assert f.tensors(f.exprs()[:1]) == f._tensors(f.exprs()[:1])  # not the fusion's order


# -- bad passes ---------------------------------------------------------------------
def _on_input(program):
    return program.fusion.inputs[0]


def _mul(program):
    return next(e for k in program.kernels for e in k.exprs if e.op_name == "mul")


def _replaced_axis(tv: fl.TensorView, p: int, ax: IterDomain) -> TensorDomain:
    """tv's domain with axis `p` replaced by `ax`, everything else as it is."""
    dom = tv.domain
    axes = tuple(ax if k == p else a for k, a in enumerate(dom.axes))
    return TensorDomain.made(
        axes,
        dom.n_logical,
        dom.transforms,
        dom.loop_positions,
        dom.allocation_positions,
        dom.contiguity,
    )


def _device_position(tv: fl.TensorView) -> int:
    return next(ax.position for ax in tv.loop if ax.is_device_parallel)


def _duplicate_did(program):
    x = _on_input(program)
    ax = next(a for a in x.loop if not a.is_device_parallel)
    ax.parallel_type = P.DIDx  # the unchecked setter, not parallelize()


def _loop_of_no_transform(program):
    x = _on_input(program)
    x.domain = x.domain.with_loop(tuple(range(x.domain.n_logical)))  # the split's input


def _input_swapped(program):
    e = _mul(program)
    e.inputs = [program.fusion.inputs[1], *e.inputs[1:]]  # replicated w for x's shards


def _operand_unsharded(program):
    operand = _mul(program).inputs[0]  # valid alone, but its readers no longer local
    next(a for a in operand.loop if a.is_device_parallel).parallel_type = P.Serial


def _output_axis_extent(program):
    out = program.fusion.outputs[1]
    p = _device_position(out)
    out.domain = _replaced_axis(out, p, IterDomain(4, out.domain.axes[p].iter_type, P.DIDx))


BAD_CHANGES = {
    "duplicate DIDx by the unchecked setter": (_duplicate_did, "same parallel type (deviceIdx.x)"),
    "a loop domain no transform gives": (
        _loop_of_no_transform,
        "does not match its recorded transforms",
    ),
    "mesh replaced": (
        lambda p: _on_input(p).set_device_mesh(fl.DeviceMesh.for_num_devices(4)),
        "has 4 devices",
    ),
    "expression input swapped": (_input_swapped, "not local"),
    "operand of an expression unsharded": (_operand_unsharded, "computes T"),
    "axis extent changed": (_output_axis_extent, "has extent 4"),
    "kernel expression repeated": (
        lambda p: setattr(p.kernels[0], "exprs", [*p.kernels[0].exprs, p.kernels[0].exprs[0]]),
        "is in two steps",
    ),
    "steps emptied": (lambda p: setattr(p, "steps", []), "computed by no step"),
    "kernel input added": (
        lambda p: setattr(p.kernels[0], "inputs", [*p.kernels[0].inputs, p.kernels[0].outputs[0]]),
        "before any step computes it",
    ),
    "input dropped": (
        lambda p: setattr(p.fusion, "inputs", p.fusion.inputs[1:]),
        "is not a fusion input",
    ),
}


@contextmanager
def _program_passes(**runs: Callable) -> Iterator[None]:
    """Test-only program passes, by name: each runs its function on the program."""
    made = []
    for name, fn in runs.items():

        @dataclass(frozen=True)
        class Made(Pass):
            """Test-only: a program pass."""

            level: ClassVar[Level] = Level.program
            body: ClassVar[Callable] = staticmethod(fn)

            def run(self, program):
                self.body(program)

        Made.name = name
        REGISTRY[name] = Made
        made.append(name)
    try:
        yield
    finally:
        for name in made:
            del REGISTRY[name]


def _run_with(change: Callable, *, verify_all: bool = False) -> PassFailed | None:
    """The default pipeline, a pass that changes nothing, then `change` as a program
    pass: the PassFailed it raises, or None."""
    with _program_passes(**{"test-nothing": lambda program: None, "test-bad-change": change}):
        try:
            Pipeline(
                [*DEFAULT_PASSES, "test-nothing", "test-bad-change"], verify_all=verify_all
            ).run(sharded_add())
        except PassFailed as exc:
            return exc
    return None


@pytest.mark.parametrize("bad", BAD_CHANGES, ids=str)
def test_a_bad_edit_is_caught_where_the_pass_made_it(bad):
    change, message = BAD_CHANGES[bad]
    err = _run_with(change)
    assert err is not None, "the bad pass was not caught"
    assert "pass test-bad-change (after: propagate-shardings" in str(err)
    assert message in str(err)


def _behind_the_log(program):
    """Corrupt x's domain around the edit points: two DIDx loop axes."""
    x = _on_input(program)
    dom = x.domain
    loop = dom.loop_positions
    object.__setattr__(x, "domain", dom.parallelize(loop[-1], P.DIDx))


def test_an_edit_behind_the_log_is_caught_under_verify_all():
    """The default checks read the log, which never heard this edit; verify_all checks
    the whole program after every pass and names the pass."""
    assert _run_with(_behind_the_log) is None
    err = _run_with(_behind_the_log, verify_all=True)
    assert err is not None and "pass test-bad-change (after: propagate-shardings" in str(err)
    assert "same parallel type (deviceIdx.x)" in str(err)


# -- what is checked after a pass ---------------------------------------------------
def _counting(monkeypatch, module, name: str) -> list:
    """Record every call of module.name (its first argument)."""
    seen: list = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda x, *a: seen.append(x) or real(x, *a))
    return seen


def _checked_per_pass(pipeline: Pipeline, fusion: fl.Fusion, seen: list) -> dict[str, int]:
    """How many calls `seen` gained during each pass and the checks after it."""
    marks: list[tuple[str, int]] = []
    pipeline.progress = lambda phase, done, total, current: marks.append((current, len(seen)))
    pipeline.run(fusion)
    return {a: nb - na for (a, na), (_, nb) in zip(marks, marks[1:])}


def test_a_pass_that_changes_nothing_is_followed_by_no_check_of_a_tensor(monkeypatch):
    """After a pass that changes nothing, the validator checks no tensor again (before
    the change log, and without verify_all: every tensor after every pass)."""
    checked = _counting(monkeypatch, verify_module, "domain_is_valid")
    names = [*DEFAULT_PASSES, "test-nothing"]
    with _program_passes(**{"test-nothing": lambda program: None}):
        quiet = _checked_per_pass(Pipeline(names), many_outputs(50), checked)
        checked.clear()
        loud = _checked_per_pass(Pipeline(names, verify_all=True), many_outputs(50), checked)
    assert quiet["assign-layouts"] == 0 and loud["assign-layouts"] > 100, (quiet, loud)


def test_a_changed_tensor_is_checked_with_the_expressions_next_to_it(monkeypatch):
    """One output changes (its memory type, to itself): the validator asks whether data
    moves, and whether it is local, only of the expressions that read or write it."""
    program_verify = importlib.import_module("fuserlite.program.verify")
    moves = _counting(monkeypatch, program_verify, "moves_data")
    tensor = None

    def touch(program):
        nonlocal tensor
        tensor = out = program.fusion.outputs[3]
        out.memory_type = out.memory_type
        moves.clear()

    with _program_passes(**{"test-touch": touch}):
        Pipeline([*DEFAULT_PASSES, "test-touch"]).run(many_outputs(30))
    near = {id(e) for e in tensor.uses} | {id(tensor.definition)}
    assert 1 <= len(moves) <= 2 and all(id(e) in near for e in moves), moves


def test_the_program_checks_work_out_the_expressions_next_to_a_change_once(monkeypatch):
    """After a program pass the fusion's checks and the kernels' locality read the same
    expressions next to the change log's: near_changes runs once per check."""
    verify_module_program = importlib.import_module("fuserlite.program.verify")
    calls = _counting(monkeypatch, verify_module_program, "near_changes")
    monkeypatch.setattr(verify_module, "near_changes", verify_module_program.near_changes)

    def touch(program):
        out = program.fusion.outputs[3]
        out.memory_type = out.memory_type
        calls.clear()

    with _program_passes(**{"test-touch": touch}):
        Pipeline([*DEFAULT_PASSES, "test-touch"]).run(many_outputs(30))
    assert len(calls) == 1, calls


def test_giving_a_fusion_its_own_outputs_again_is_no_edit():
    """replace_outputs with nothing to replace (insert-reshardings' when no output is
    partial) keeps the kept orders and the log hears no structure change; replacing
    one is an edit of both."""
    fusion = many_outputs(4)
    order = fusion._kept_order()
    with recording() as log:
        fusion.replace_outputs({})
        fusion.inputs = list(fusion.inputs)
    assert fusion._order is order and not log.structure
    new = fl.neg(fusion.outputs[0])
    with recording() as log:
        fusion.replace_outputs({fusion.outputs[0]: new})
    assert fusion._order is None and log.structure
    assert new.definition in fusion.exprs()
