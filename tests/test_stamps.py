"""Change stamps (ir.stamps): what is derived from a tensor, and the validator's
"checked and valid" marks, last exactly as long as nothing they read changes.

Between passes the validator checks again only what a pass changed. These tests
make sure a change cannot slip past it: each bad pass below runs after the
validator has already found every tensor and expression valid (the marks are
warm), changes a tensor or an expression it did not create, by each route a pass
could take, and must still be caught.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
from test_pipeline_scaling import calls, many_outputs

import fuserlite as fl
from fuserlite.ir.domain import IterDomain
from fuserlite.ir.sharding import shardings
from fuserlite.ir.stamps import domain_derived, domain_known, version
from fuserlite.passes.base import REGISTRY, Level, Pass
from fuserlite.pipeline import DEFAULT_PASSES, PassFailed, Pipeline
from fuserlite.program.verify import verify_program
from fuserlite.schedule.shard import shard_axis

MESH = fl.DeviceMesh.for_num_devices(2)


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


# -- stamps move on every change ------------------------------------------------
CHANGES = {
    "mesh": lambda tv: tv.set_device_mesh(fl.DeviceMesh.for_num_devices(4)),
    "split": lambda tv: tv.split(1, 4),
    "parallelize": lambda tv: tv.axis(1).parallelize("TIDx"),
    "parallel_type slot": lambda tv: setattr(tv.axis(1), "parallel_type", fl.ParallelType.TIDx),
    "loop list in place": lambda tv: tv.domain.loop.reverse(),
    "loop item": lambda tv: tv.domain.loop.__setitem__(0, tv.domain.loop[0]),
    "loop assigned": lambda tv: setattr(tv.domain, "loop", list(tv.domain.loop)),
    "transforms appended": lambda tv: tv.domain.transforms.append(tv.domain.transforms[0]),
    "domain replaced": lambda tv: setattr(tv, "domain", tv.domain),
    "extent": lambda tv: setattr(tv.domain.logical[1], "extent", 17),
}


@pytest.mark.parametrize("change", CHANGES, ids=str)
def test_every_change_to_a_tensor_moves_its_version(change):
    f = sharded_add()
    x = f.inputs[0]
    before = version(x)
    CHANGES[change](x)
    assert version(x) > before


def test_a_derived_fact_is_computed_again_after_a_change():
    f = sharded_add()
    x = f.inputs[0]
    assert fl.ParallelType.DIDx in shardings(x)
    x.domain.loop[0].parallel_type = fl.ParallelType.Serial  # no parallelize() call
    assert shardings(x) == {}


DOMAIN_CHANGES = {k: v for k, v in CHANGES.items() if k not in ("mesh", "domain replaced")}
DOMAIN_CHANGES["another domain"] = lambda tv: setattr(tv, "domain", tv.domain.copy_for(tv, {}))
TENSOR_ONLY_CHANGES = {
    "mesh": CHANGES["mesh"],
    "inline position": lambda tv: setattr(tv, "compute_at_pos", 1),
    "user name": lambda tv: setattr(tv, "_user_name", "x1"),
    "its own domain again": CHANGES["domain replaced"],
}


def counting_fact(tv):
    """A domain fact of tv that says how many times it was worked out."""
    asked = []

    def fact():
        return domain_derived("test question", tv, lambda: asked.append(1) or len(asked))

    return fact


@pytest.mark.parametrize("change", DOMAIN_CHANGES, ids=str)
def test_a_domain_fact_is_computed_again_after_every_change_to_the_domain(change):
    f = sharded_add()
    x = f.inputs[0]
    fact = counting_fact(x)
    assert fact() == 1 and fact() == 1
    DOMAIN_CHANGES[change](x)
    assert fact() == 2


@pytest.mark.parametrize("change", TENSOR_ONLY_CHANGES, ids=str)
def test_a_domain_fact_outlives_a_change_to_the_tensor_alone(change):
    f = sharded_add()
    x = f.inputs[0]
    fact = counting_fact(x)
    assert fact() == 1
    before = version(x)
    TENSOR_ONLY_CHANGES[change](x)
    assert version(x) > before  # the tensor's own facts are derived again
    assert fact() == 1


def test_an_axis_given_to_another_tensor_stamps_both_domains():
    f = sharded_add()
    x, w = f.inputs
    for tv in (x, w):
        domain_derived("test question", tv, lambda: "first")
    x.domain.logical[1].owner = w
    assert domain_derived("test question", x, lambda: "again") == "again"
    assert domain_derived("test question", w, lambda: "again") == "again"


@pytest.mark.parametrize("change", DOMAIN_CHANGES, ids=str)
def test_a_known_domain_fact_is_known_only_while_the_domain_is_unchanged(change):
    """domain_known peeks at what domain_derived keeps: nothing before it is worked out,
    the fact while the domain is unchanged (a tensor-only change keeps it), nothing
    once the domain changes; it never works the fact out itself."""
    f = sharded_add()
    x = f.inputs[0]
    assert domain_known("test question", x) is None
    domain_derived("test question", x, lambda: "fact")
    TENSOR_ONLY_CHANGES["mesh"](x)
    assert domain_known("test question", x) == "fact"
    DOMAIN_CHANGES[change](x)
    assert domain_known("test question", x) is None
    assert domain_known("test question", x) is None  # still not worked out


def test_expression_changes_move_its_stamp():
    f = sharded_add()
    e = f.outputs[0].definition
    before = e._stamp
    e.inputs[0] = e.inputs[0]
    assert e._stamp > before
    before = e._stamp
    e.op_name = e.op_name
    assert e._stamp > before


def test_a_clone_derives_its_facts_afresh():
    f = sharded_add()
    x = f.inputs[0]
    assert shardings(x)
    copy, mapping = f.clone()
    assert mapping[x]._facts == {} and shardings(mapping[x]) == shardings(x)
    mapping[x].domain.loop[0].parallel_type = fl.ParallelType.Serial
    assert shardings(mapping[x]) == {} and shardings(x)


def test_a_clone_owns_every_axis_of_its_copy_and_stamps_only_itself():
    f = sharded_add()
    y = f.outputs[0]
    y.split(1, 4).merge(1, 2)
    y.domain.allocation = list(y.domain.loop)
    copy, mapping = f.clone()
    assert str(copy) == str(f)
    for old in f.tensors_created:
        new = mapping[old]
        axes = new.domain.ids_between_logical_and_loop()
        assert all(ax.owner is new for ax in axes)
        assert [mapping[a] for a in old.domain.ids_between_logical_and_loop()] == axes
        assert new.definition is (None if old.definition is None else mapping[old.definition])
        assert new.uses == [mapping[e] for e in old.uses]
    assert mapping[y].domain.allocation == [mapping[a] for a in y.domain.allocation]
    before, old_version = version(mapping[y]), version(y)
    mapping[y].domain.loop[1].parallel_type = fl.ParallelType.TIDx
    assert version(mapping[y]) > before and version(y) == old_version
    assert y.domain.loop[1].parallel_type is fl.ParallelType.Serial


# -- a bad pass is caught though the validator's marks are warm -------------------
def _on_input(program):
    return program.fusion.inputs[0]


def _mul(program):
    return next(e for k in program.kernels for e in k.exprs if e.op_name == "mul")


def _duplicate_did(program):
    x = _on_input(program)
    ax = next(a for a in x.domain.loop if not a.is_device_parallel)
    ax.parallel_type = fl.ParallelType.DIDx  # a slot write, not parallelize()


def _loop_in_place(program):
    x = _on_input(program)
    x.domain.loop.append(IterDomain(3))  # an axis no transform made


def _mesh_replaced(program):
    _on_input(program).mesh = fl.DeviceMesh.for_num_devices(4)


def _domain_shared(program):
    x = _on_input(program)
    x.domain = program.fusion.outputs[0].domain  # another tensor's axes


def _input_swapped(program):
    e = _mul(program)
    e.inputs[0] = program.fusion.inputs[1]  # replicated w where the shards of x were


def _operand_unsharded(program):
    operand = _mul(program).inputs[0]  # valid alone, but its readers no longer local
    next(
        a for a in operand.domain.loop if a.is_device_parallel
    ).parallel_type = fl.ParallelType.Serial


def _output_axis_extent(program):
    out = program.fusion.outputs[1]
    next(a for a in out.domain.loop if a.is_device_parallel).extent = 4


BAD_CHANGES = {
    "duplicate DIDx by slot write": (_duplicate_did, "same parallel type (deviceIdx.x)"),
    "loop list changed in place": (_loop_in_place, "does not match its recorded transforms"),
    "mesh replaced": (_mesh_replaced, "has 4 devices"),
    "domain of another tensor": (_domain_shared, "every tensor owns its own axes"),
    "expression input swapped in place": (_input_swapped, "not local"),
    "operand of an expression unsharded": (_operand_unsharded, "computes T"),
    "axis extent changed": (_output_axis_extent, "has extent 4"),
}


@pytest.mark.parametrize("bad", BAD_CHANGES, ids=str)
def test_a_bad_pass_is_caught_after_the_validator_marked_everything_valid(bad):
    change, message = BAD_CHANGES[bad]

    @dataclass(frozen=True)
    class Bad(Pass):
        """Test-only: change a tensor or an expression the pass did not make."""

        name: ClassVar[str] = "test-bad-change"
        level: ClassVar[Level] = Level.program

        def run(self, program):
            change(program)

    REGISTRY[Bad.name] = Bad
    try:
        with pytest.raises(PassFailed) as err:
            Pipeline([*DEFAULT_PASSES, Bad.name]).run(sharded_add())
    finally:
        del REGISTRY[Bad.name]
    msg = str(err.value)
    assert "pass test-bad-change (after: propagate-shardings" in msg
    assert message in msg


def test_an_unchanged_program_is_checked_again_at_a_fraction_of_the_cost():
    """The pipeline's validator marked every tensor and expression valid; checking the
    unchanged program again reads stamps, not shardings (a copy, unmarked, is checked
    in full)."""
    program = fl.lower(many_outputs(200))
    fresh = program.clone()
    warm = calls(lambda: verify_program(program))
    cold = calls(lambda: verify_program(fresh))
    assert warm < 0.4 * cold, f"{warm} calls unchanged vs {cold} for a fresh copy"


# -- a fusion's expression order is kept while the graph is unchanged ------------------
def _set_definition(f):
    y = f.outputs[0]
    y.definition.detach()  # y becomes a leaf: its add is no longer reached


def _inputs_assigned(f):
    e = f.outputs[0].definition
    e.inputs = [f.outputs[1]]  # now reads x * 2: the mul comes first


def _inputs_in_place(f):
    f.outputs[0].definition.inputs[0] = f.outputs[1]


def _new_expression(f):
    z = f.outputs[1]
    f.outputs[1] = fl.neg(z)  # an output replaced in the list, in place


GRAPH_CHANGES = {
    "a definition": _set_definition,
    "inputs assigned": _inputs_assigned,
    "inputs in place": _inputs_in_place,
    "replace_input": lambda f: f.outputs[0].definition.replace_input(f.inputs[0], f.outputs[1]),
    "outputs appended in place": lambda f: f.outputs.append(fl.neg(f.inputs[1])),
    "outputs assigned": lambda f: setattr(f, "outputs", list(reversed(f.outputs))),
    "outputs replaced in place": _new_expression,
}


def _input_added(f):
    f.add_input(fl.tensor([3]))  # read by nothing: printed first


@pytest.mark.parametrize("change", [*GRAPH_CHANGES, "inputs"])
def test_the_expression_and_tensor_orders_are_worked_out_again_after_every_change(change):
    f = sharded_add()
    exprs, tensors = f.exprs(), f.tensors()
    assert f.exprs() == exprs and f.tensors() == tensors  # kept: the same orders
    with f:
        GRAPH_CHANGES.get(change, _input_added)(f)
    fresh = f._exprs()
    assert f.exprs() == fresh and f.tensors() == f._tensors(fresh)
    assert f.tensors() != tensors
    if change != "inputs":
        assert fresh != exprs


def test_the_kept_orders_are_copies_for_each_caller_and_other_lists_are_their_own():
    f = sharded_add()
    first, shown = f.exprs(), f.tensors()
    first.clear()
    shown.clear()
    assert len(f.exprs()) == 3 and len(f.tensors()) == 5
    assert f.tensors(f.exprs()[:1]) == f._tensors(f.exprs()[:1])  # not the fusion's order
