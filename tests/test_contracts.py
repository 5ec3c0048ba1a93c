"""Pass contracts in code: requires / ensures run by the pipeline around each pass, option
types from the dataclass field types, one way to declare a pass's name, resize-mesh."""

from __future__ import annotations

import re
import typing
from typing import ClassVar

import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.errors import PassFailed, PassOptionError
from fuserlite.passes.base import REGISTRY, make_pass, option_types
from fuserlite.pipeline import DEFAULT_PASSES, default_pass_names
from fuserlite.program import Kernel

# A pass that does nothing: each pass's ensures must notice its work is missing.
NOT_DONE = {
    "propagate-shardings": "mixes tensors with and without a device mesh",
    "insert-reshardings": "not local; insert a Set before it",
    "reorder-sharded-axis": "does not have its device axis outermost",
    "schedule-pointwise": "neither scheduled nor says why",
    "lower-communications": "is not lowered to a Communication",
    "assign-layouts": "has layout None, not pinned as pin=all asks",
}


@pytest.mark.parametrize("name", sorted(NOT_DONE))
def test_a_pass_that_does_not_do_its_work_breaks_its_contract(monkeypatch, name: str) -> None:
    monkeypatch.setattr(REGISTRY[name], "run", lambda self, ir: None)
    # shard_map places every tensor of seed 000 itself; the MLP leaves its activations
    # to propagate-shardings.
    seed = name != "propagate-shardings"
    fusion = (
        models.all_gather_all_reduce_reduce_scatter(2) if seed else models.tensor_parallel_mlp(2)
    )
    with pytest.raises(PassFailed) as err:
        fl.lower(fusion)
    before = ", ".join(DEFAULT_PASSES[: DEFAULT_PASSES.index(name)]) or "none"
    msg = str(err.value)
    assert f"pass {name} (after: {before}) broke its contract: its result:" in msg
    assert NOT_DONE[name] in msg


def test_segment_ensures_a_reduction_is_a_kernel_of_its_own(monkeypatch) -> None:
    segment = REGISTRY["segment"]
    original = segment.run

    def one_kernel(self, fusion):  # everything in one kernel: a reduction among pointwise ops
        program = original(self, fusion)
        exprs = [e for k in program.kernels for e in k.exprs]
        program.steps = [Kernel(exprs, list(fusion.inputs), list(fusion.outputs), None)]
        return program

    monkeypatch.setattr(segment, "run", one_kernel)
    with pytest.raises(
        PassFailed, match=r"(?s)pass segment .*broke its contract.*not all pointwise"
    ):
        fl.Pipeline(["segment"]).run(fl.parse(SOFTMAX))


SOFTMAX = """
input x: float32[4, 8]
m = max(x, [1])
b = broadcast(m, [false, true])
s = sub(x, b)
output s
"""


def test_a_pass_whose_input_breaks_its_requires_is_refused_with_the_fix() -> None:
    names = [n for n in default_pass_names() if n != "lower-communications"]
    with pytest.raises(PassFailed) as err:
        fl.Pipeline(names).run(models.tensor_parallel_mlp(2))
    msg = str(err.value)
    assert "pass assign-layouts (after: propagate-shardings, " in msg
    assert "cannot run: its input:" in msg and "run lower-communications first" in msg
    with fl.Fusion() as f:  # insert-reshardings needs every mesh propagated
        x = fl.tensor([4])
        x.set_device_mesh(fl.DeviceMesh([0, 1]))
        f.add_input(x)
        f.add_output(fl.neg(x))
    with pytest.raises(PassFailed, match=r"(?s)insert-reshardings .*run propagate-shardings first"):
        fl.Pipeline(["insert-reshardings"]).run(f)


def test_the_contracts_hold_on_every_example_pipeline() -> None:
    for fusion in (
        models.tensor_parallel_mlp(4),
        models.tensor_parallel_mlp(2, sequence_parallel=True),
        models.all_gather_all_reduce_reduce_scatter(4),
        models.add_broadcast(2, True),
    ):
        fl.lower(fusion)
        fl.lower(fusion, verify_each=False)  # the checks are skipped together


def test_a_contract_lists_ten_problems_and_counts_the_rest(monkeypatch) -> None:
    monkeypatch.setattr(REGISTRY["schedule-pointwise"], "run", lambda self, ir: None)
    with fl.Fusion() as f:
        x = fl.tensor([4])
        f.add_input(x)
        for k in range(12):  # twelve outputs: 24 kernels (each add, then its sum)
            f.add_output(fl.sum(x + float(k), [0]))
    with pytest.raises(PassFailed) as err:
        fl.lower(f)
    msg = str(err.value)
    assert msg.count("neither scheduled nor says why") == 10 and "... and 14 more" in msg


# -- options ------------------------------------------------------------------------------
def test_option_types_come_from_the_field_types() -> None:
    types = option_types(REGISTRY["schedule-pointwise"])
    assert types == {"block_size": int, "vectorize": bool}
    assert option_types(REGISTRY["assign-layouts"]) == {"pin": typing.Literal["all", "none"]}
    assert make_pass("schedule-pointwise[block_size=64,vectorize=on]").block_size == 64


@pytest.mark.parametrize(
    "spec, message",
    [
        ("schedule-pointwise[block_size=big]", "option block_size expects an integer, got 'big'"),
        ("schedule-pointwise[vectorize=maybe]", "option vectorize expects true/false"),
        ("assign-layouts[pin=some]", "option pin expects one of all, none, got 'some'"),
        (
            "resize-mesh",
            "pass resize-mesh needs option devices or mesh: write resize-mesh[devices=",
        ),
        ("resize-mesh[devices=0]", "needs option devices or mesh"),
        ("resize-mesh[devices=-2]", "the number of devices must be an integer in 1..4096"),
        ("resize-mesh[mesh=2by4]", "a mesh shape is axis sizes joined by x, like 8, 2x4"),
        ("resize-mesh[mesh=64x65]", "4096"),
        ("resize-mesh[devices=2,mesh=2x4]", "devices or mesh, not both"),
    ],
)
def test_bad_options_are_refused_when_the_pass_is_made(spec: str, message: str) -> None:
    with pytest.raises(PassOptionError, match=re.escape(message)):
        make_pass(spec)


def test_options_given_in_python_are_checked_too() -> None:
    cls = REGISTRY["schedule-pointwise"]
    with pytest.raises(PassOptionError, match="block_size expects an integer, got '64'"):
        cls(block_size="64")
    with pytest.raises(PassOptionError, match="vectorize expects true/false, got 1"):
        cls(vectorize=1)


def test_every_pass_declares_its_name_as_a_class_variable() -> None:
    for name, cls in REGISTRY.items():
        assert "name" in vars(cls)["__annotations__"], name  # declared in the class itself
        assert typing.get_type_hints(cls)["name"] == ClassVar[str], name
        assert cls.name == name


# -- resize-mesh --------------------------------------------------------------------------
def test_resize_mesh_is_a_fusion_pass_the_run_command_puts_first() -> None:
    fusion = fl.load("examples/tp_mlp.fus")
    program = fl.Pipeline(["resize-mesh[devices=4]", *default_pass_names()]).run(fusion)
    assert program.communications[0].team == (0, 1, 2, 3)
    assert {tv.mesh.devices for tv in fusion.tensors() if tv.mesh} == {(0, 1)}  # a copy moved
    inputs = fl.random_inputs(fusion)
    fl.validate(fusion, inputs, fl.FusionExecutor(program).run(inputs))
    same = fl.Pipeline(["resize-mesh[devices=2]"]).run(fusion)  # already there: unchanged
    assert str(same) == str(fusion)
