"""The .fus text format: each construct parses like the Python API builds it, every
example round-trips through to_fus and runs on the reference evaluator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from op_examples import COMPOSITE_CALLS, OP_CALLS, op_example

import fuserlite as fl
from fuserlite.ir import LoadStoreOp

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.fus"))
P = fl.ParallelType


def assert_same_print(a: fl.Fusion, b: fl.Fusion) -> None:
    assert str(a) == str(b)
    assert a.print_math() == b.print_math()


def assert_round_trip(fusion: fl.Fusion) -> str:
    text = fl.to_fus(fusion)
    assert_same_print(fl.parse(text, "round-trip.fus"), fusion)
    return text


def built(build: Callable[[], None]) -> fl.Fusion:
    with fl.Fusion() as fusion:
        build()
    return fusion


# -- each construct parses like the API builds it ---------------------------------
SEED_004 = """\
# seed 004, first test
mesh m = [0, 1]
input x: float32[2] on m
input y: float32[1] on m
z = add(x, y)
output z
parallelize y axis 0 DIDx      # the broadcast axis
"""


def test_seed_004_matches_python_api() -> None:
    def build() -> None:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x, y = fl.tensor([2]), fl.tensor([1])
        x.set_device_mesh(mesh)
        y.set_device_mesh(mesh)
        z = fl.add(x, y)
        fusion = fl.ir.active_fusion()
        fusion.add_input(x)
        fusion.add_input(y)
        fusion.add_output(z)
        y.axis(0).parallelize(P.DIDx)

    assert_same_print(fl.parse(SEED_004), built(build))


def test_declarations() -> None:
    fusion = fl.parse(
        "mesh m = [3, 1]\n"
        "tensor a: float64[4, 1] noncontiguous on m\n"
        "input b: int32[] on [0]\n"
        "input a\n"
        "c = mul(a, b)\n"
        "output c\n"
    )
    a, b = fusion.inputs[1], fusion.inputs[0]
    assert (a.name, a.dtype, a.shape, a.domain.contiguity) == (
        "a (T0)",
        fl.DType.float64,
        (4, 1),
        (False, None),
    )
    assert a.mesh == fl.DeviceMesh([3, 1]) and a.memory_type is fl.MemoryType.GLOBAL
    assert (b.name, b.shape, b.dtype, b.mesh) == ("b (T1)", (), fl.DType.int32, fl.DeviceMesh([0]))
    assert [t.ir_name for t in fusion.outputs] == ["T3"]  # T2: the implicit broadcast of b
    assert [t.name for t in fusion.tensors_created] == ["a (T0)", "b (T1)", "T2", "c (T3)"]


def test_comments_blank_lines_and_no_final_newline() -> None:
    fusion = fl.parse("\n  # only a comment\n\ninput x: float32[3]   # trailing\noutput x")
    assert [t.shape for t in fusion.inputs] == [(3,)]
    assert fusion.outputs == fusion.inputs


@pytest.mark.parametrize("op", sorted({**OP_CALLS, **COMPOSITE_CALLS}))
def test_every_op(op: str) -> None:
    fusion = op_example(op)
    assert fusion.outputs[0].definition is not None
    fl.verify(fusion)
    fl.evaluate(fusion, fl.random_inputs(fusion))
    assert_round_trip(fusion)


def test_every_builder_of_ops_has_a_call() -> None:
    from fuserlite.text.calls import signatures

    assert set(signatures()) == set(OP_CALLS) | set(COMPOSITE_CALLS)
    assert all(callable(getattr(fl, op)) for op in signatures())


def test_scalars_keep_their_type() -> None:
    fusion = fl.parse(
        "input x: float32[2]\na = add(x, 1)\nb = mul(a, 1.0)\nc = sub(b, 1e-05)\noutput c\n"
    )
    math = fusion.print_math()
    assert "int64_t(1)" in math and "double(1.0)" in math and "double(1e-05)" in math
    assert_round_trip(fusion)


def test_keepdim_and_cache_op() -> None:
    fusion = fl.parse(
        "input x: float32[4, 8]\n"
        "s = sum(x, [1], keepdim=true)\n"
        "c = set(s, cache_op=Streaming)\n"
        "output c\n"
    )
    out = fusion.outputs[0]
    assert out.shape == (4, 1) and isinstance(out.definition, LoadStoreOp)
    assert out.definition.cache_op == "Streaming"
    assert "cache_op=Streaming" in fusion.print_math()
    assert_round_trip(fusion)


def test_directives_match_python_api() -> None:
    text = """\
mesh m = [0, 1]
input x: float32[8, 6, 4]
set_mesh x m
outer_split x axis 0 by 2
parallelize x axis 0 deviceIdx.x
merge x axes 2 1
split x axis 2 by 3
reorder x {1: 3}
parallelize x axis 1 threadIdx.x
parallelize x axis 3 Unswitch
output x
"""

    def build() -> None:
        x = fl.tensor([8, 6, 4])
        fusion = fl.ir.active_fusion()
        fusion.add_input(x)
        fusion.add_output(x)
        x.set_device_mesh(fl.DeviceMesh([0, 1]))
        x.outer_split(0, 2)
        x.axis(0).parallelize(P.DIDx)
        x.merge(2, 1)
        x.split(2, 3)
        x.reorder({1: 3})
        x.axis(1).parallelize(P.TIDx)
        x.axis(3).parallelize(P.Unswitch)

    assert_same_print(fl.parse(text), built(build))


def test_directives_may_come_before_later_ops() -> None:
    fusion = fl.parse(
        "input x: float32[4]\nsplit x axis 0 by 2\ny = exp(x)\nsplit y axis 0 by 2\noutput y\n"
    )
    assert [len(t.domain.loop) for t in fusion.tensors()] == [2, 2]
    assert_round_trip(fusion)


# -- round trip ---------------------------------------------------------------------
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_round_trips(path: Path) -> None:
    fusion = fl.load(path)
    text = assert_round_trip(fusion)
    assert fl.to_fus(fl.parse(text)) == text  # the written form is a fixed point


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_verifies_and_evaluates(path: Path) -> None:
    fusion = fl.load(path)
    fl.verify(fusion)
    inputs = fl.random_inputs(fusion)
    outputs = fl.evaluate(fusion, inputs)
    assert [o.shape for o in outputs] == [t.shape for t in fusion.outputs]
    assert all(np.all(np.isfinite(o)) for o in outputs)


def test_required_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "add_broadcast_parallelized.fus",
        "add_broadcast_not_parallelized.fus",
        "softmax.fus",
        "bias_gelu.fus",
    } <= names


def test_seed_004_examples_shard_as_the_seed() -> None:
    par = fl.load(ROOT / "examples/add_broadcast_parallelized.fus")
    x, y = par.inputs
    assert y.axis(0).parallel_type is P.DIDx and x.axis(0).parallel_type is P.Serial
    nopar = fl.load(ROOT / "examples/add_broadcast_not_parallelized.fus")
    x, y = nopar.inputs
    z = nopar.outputs[0]
    assert x.axis(0).parallel_type is P.DIDx and z.axis(0).parallel_type is P.DIDx
    assert y.axis(0).parallel_type is P.Serial and y.mesh is not None and z.mesh is None


def test_softmax_example_is_softmax() -> None:
    fusion = fl.load(ROOT / "examples/softmax.fus")
    (x,) = fl.random_inputs(fusion)
    (y,) = fl.evaluate(fusion, [x])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5)


def test_round_trip_of_a_hand_built_schedule() -> None:
    """Transforms in odd orders, types given before a split, dead tensors, input order."""

    def build() -> None:
        fusion = fl.ir.active_fusion()
        a = fl.tensor([6, 1], contiguous=False)
        b = fl.tensor([6, 4], dtype="float64")
        dead = fl.neg(b)  # created, never used: it still takes a number
        c = fl.maximum(a, b)
        d = fl.set(c)
        d.definition.cache_op = "AllLevels"
        fusion.add_input(b)  # inputs not in creation order
        fusion.add_input(a)
        fusion.add_output(d)
        fusion.add_output(fl.div(True, d))
        a.axis(1).parallelize(P.DIDx)  # a broadcast DID axis, then split
        a.split(1, 2)
        a.reorder({0: 2})
        d.axis(0).parallelize(P.TIDx)
        d.split(0, 3)
        d.merge(2, 0)  # outer after inner
        d.axis(1).parallelize(P.BIDx)
        dead.set_device_mesh(fl.DeviceMesh([0]))

    fusion = built(build)
    text = assert_round_trip(fusion)
    assert "tensor T0" in text and "input T1" in text


def test_round_trip_of_an_empty_fusion() -> None:
    assert_round_trip(fl.Fusion())
    assert str(fl.parse("")) == str(fl.Fusion())


def test_to_fus_rejects_what_it_cannot_express() -> None:
    fusion = fl.parse("input x: float32[4]\ny = exp(x)\noutput y\n")
    fusion.outputs[0].compute_at_pos = 1
    with pytest.raises(fl.FusionError, match="compute-at"):
        fl.to_fus(fusion)


def test_load_missing_file() -> None:
    with pytest.raises(fl.ParseError, match="cannot read"):
        fl.load(ROOT / "examples" / "no_such_file.fus")


MESH_3D = """\
mesh m = [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
input x: float32[2, 6, 8] on m
y = relu(x)
output y
outer_split x axis 2 by 2
parallelize x axis 2 DIDx
outer_split x axis 1 by 2
parallelize x axis 1 DIDy
parallelize x axis 0 DIDz
"""


def test_a_3d_mesh_reads_writes_prints_and_runs() -> None:
    """docs/fus-format.md: a mesh has rank 1, 2 or 3 (a 3-D one was 'lists nest at most 2
    deep'); it writes back, prints, reads back from the print at every stage, and runs."""
    from fuserlite.program.parser import parse_printed

    fusion = fl.parse(MESH_3D)
    assert fusion.inputs[0].mesh.shape == (2, 2, 2)
    text = fl.to_fus(fusion)
    assert "mesh m0 = [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]" in text
    assert fl.to_fus(fl.parse(text)) == text
    printed = str(fusion)
    assert "(DeviceMesh{{{0 1}{2 3}}{{4 5}{6 7}}})" in printed
    assert str(parse_printed(printed)) == printed
    lowered = str(fl.lower(fusion))
    assert str(parse_printed(lowered)) == lowered
    inputs = fl.random_inputs(fusion)
    fl.validate(fusion, inputs, fl.FusionExecutor(fusion).run(inputs))


def test_lists_nest_at_most_three_deep() -> None:
    with pytest.raises(fl.ParseError, match=r"^t.fus:1:13: lists nest at most 3 deep"):
        fl.parse("mesh m = [[[[0]]]]\n", "t.fus")
