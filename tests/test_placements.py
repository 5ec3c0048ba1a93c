"""DTensor's placements on nvFuser's IR: fl.distribute, fl.redistribute, tv.placements and
`place` lines write exactly the splits and parallel types of the hand-written schedule."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.plan.blocks import blocks
from fuserlite.plan.placement import Placement

S, R, P = fl.Shard, fl.Replicate, fl.Partial
X, Y = fl.ParallelType.DIDx, fl.ParallelType.DIDy
MESH_1D = fl.DeviceMesh([0, 1, 2, 3])
MESH_2D = fl.DeviceMesh([[0, 1, 2, 3], [4, 5, 6, 7]])


def _fusion(shape, sharded, mesh=MESH_2D):
    """x[shape] as an input; `sharded(x)` gives it its sharding; printed IR."""
    with fl.Fusion() as f:
        x = fl.tensor(shape, name="x")
        f.add_input(x)
        sharded(x)
        f.add_output(fl.neg(x))
    return f


def _by_hand(mesh, steps):
    """The hand-written schedule: (outer_split factor or None, loop position, type)."""

    def apply(x: fl.TensorView) -> None:
        x.set_device_mesh(mesh)
        for factor, pos, pt in steps:
            if factor is not None:
                x.outer_split(pos, factor)
            x.axis(pos).parallelize(pt)

    return apply


# (shape, mesh, placements, the hand-written schedule)
SAME_IR = [
    ([8, 16], MESH_1D, [S(0)], [(4, 0, X)]),
    ([4, 16], MESH_1D, [S(0)], [(None, 0, X)]),  # extent = devices: the axis itself
    ([7, 16], MESH_1D, [S(1)], [(4, 1, X)]),
    ([9, 5], MESH_1D, [S(0)], [(4, 0, X)]),  # uneven: ceilDiv(9, 4)
    ([4, 8, 16], MESH_2D, [S(0), R()], [(2, 0, Y)]),
    ([4, 8, 16], MESH_2D, [R(), S(2)], [(4, 2, X)]),
    ([4, 8, 16], MESH_2D, [S(0), S(1)], [(2, 0, Y), (4, 2, X)]),
    ([4, 8, 16], MESH_2D, [S(2), S(0)], [(None, 0, X), (2, 2, Y)]),  # 4 rows on 4 devices
    ([16, 3], MESH_2D, [S(0), S(0)], [(2, 0, Y), (4, 1, X)]),  # nested, outer first
    ([2, 3], MESH_2D, [S(-2), R()], [(None, 0, Y)]),
]


@pytest.mark.parametrize("shape, mesh, placements, steps", SAME_IR)
def test_distribute_writes_the_hand_written_ir_byte_for_byte(shape, mesh, placements, steps):
    placed = _fusion(shape, lambda x: fl.distribute(x, mesh, placements), mesh)
    by_hand = _fusion(shape, _by_hand(mesh, steps), mesh)
    assert str(placed) == str(by_hand)
    assert placed.inputs[0].placements == tuple(
        S(q.dim % len(shape)) if isinstance(q, fl.Shard) else q for q in placements
    )


def test_a_place_line_is_the_hand_written_directives_and_to_fus_writes_it() -> None:
    head = "mesh m = [[0, 1, 2, 3], [4, 5, 6, 7]]\ninput x: float32[4, 8, 16] on m\n"
    head += "y = neg(x)\noutput y\n"
    placed = fl.parse(head + "place x on m (S0, S2)\nplace y on m (R, S1)\n")
    by_hand = fl.parse(
        head
        + "outer_split x axis 0 by 2\nparallelize x axis 0 DIDy\n"
        + "outer_split x axis 3 by 4\nparallelize x axis 3 DIDx\n"
        + "set_mesh y m\nouter_split y axis 1 by 4\nparallelize y axis 1 DIDx\n"
    )
    assert str(placed) == str(by_hand)
    for f in (placed, by_hand):
        text = fl.to_fus(f)
        assert "place T0 on m0 (S0, S2)\nplace T1 on m0 (R, S1)\n" in text
        assert "outer_split" not in text
        assert str(fl.parse(text)) == str(f)


def test_to_fus_keeps_the_directives_a_placement_does_not_write() -> None:
    text = (
        "mesh m = [0, 1]\ninput x: float32[8, 6] on m\ny = neg(x)\noutput y\n"
        "outer_split x axis 0 by 2\nparallelize x axis 0 DIDx\nsplit x axis 2 by 3\n"
    )
    f = fl.parse(text)
    written = fl.to_fus(f)
    assert "place" not in written and "split T0 axis 2 by 3" in written
    assert str(fl.parse(written)) == str(f)
    two_dids = fl.parse(  # y's broadcast axis carries DIDx too (seed 004): no place line
        "mesh m = [0, 1]\ninput x: float32[2, 4] on m\ninput y: float32[1, 4] on m\n"
        "z = add(x, y)\noutput z\nparallelize x axis 0 DIDx\nparallelize y axis 0 DIDx\n"
    )
    assert "place T0 on m0 (S0)\nparallelize T1 axis 0 DIDx" in fl.to_fus(two_dids)


def test_a_reductions_partial_values_are_placed_and_read_back() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([4, 8], name="x")
        f.add_input(x)
        s = fl.sum(x, [1])
        m = fl.max(x, [1])
        fl.distribute(s, MESH_1D, [P()])
        fl.distribute(m, MESH_1D, [P("max")])
        f.add_output(s)
        f.add_output(m)
    assert s.placements == (P("sum"),) and m.placements == (P("max"),)
    assert "rdeviceIdx.x" in str(f)
    text = fl.to_fus(f)
    assert "place T1 on m0 (P)" in text and "place T2 on m0 (P)" in text
    assert str(fl.parse(text)) == str(f)
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=1)
    fl.validate(f, inputs, ex.run(inputs))
    # x is sliced to the reduced axis' shards, each device reduces its own, and the
    # partial sums and maxima are combined before they leave the fusion.
    assert [c.kind.value for c in ex.communications] == ["LocalSlice", "Allreduce", "Allreduce"]


def test_placements_read_back_after_propagation() -> None:
    lowered = fl.lower(fl.load("examples/tp_mlp.fus"))
    names = {t.user_name: t for t in lowered.fusion.tensors_created if t.user_name}
    assert names["w1"].placements == (S(0),) and names["w2"].placements == (S(1),)
    partial = [t for t in lowered.fusion.tensors_created if t.placements == (P("sum"),)]
    assert partial, "the row-parallel linear's output holds partial sums"
    with fl.Fusion():
        assert fl.tensor([2]).placements is None  # no mesh yet


def test_distribute_by_name_on_a_built_fusions_inputs() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([8, 4], name="x")
        w = fl.tensor([6, 4], name="w")
        f.add_input(x)
        f.add_input(w)
        f.add_output(fl.linear(x, w))
    assert fl.distribute("w", MESH_1D, [R()], fusion=f) is w
    with f:
        fl.distribute("T0", MESH_1D, "(S0)")  # its number; the text form
    assert x.placements == (S(0),) and w.placements == (R(),)
    inputs = fl.random_inputs(f, seed=0)
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))


def test_redistribute_is_a_set_the_passes_lower() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([8, 12], name="x")
        f.add_input(x)
        fl.distribute(x, MESH_2D, [S(0), S(1)])
        y = fl.redistribute(x, [R(), S(0)])
        z = fl.redistribute(y, [R(), R()])
        f.add_output(z)
    assert y.definition.op_name == "set" and y.placements == (R(), S(0))
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=2)
    np.testing.assert_array_equal(ex.run(inputs)[0], inputs[0])
    assert [c.kind.value for c in ex.communications][-1] == "Allgather"


def test_distributing_twice_alike_is_nothing_and_otherwise_an_error() -> None:
    with fl.Fusion():
        x = fl.tensor([8], name="x")
        fl.distribute(x, MESH_1D, [S(0)])
        before = str(x)
        fl.distribute(x, MESH_1D, [S(0)])
        assert str(x) == before
        with pytest.raises(fl.FusionError, match=r"x \(T0\) is already sharded.*redistribute"):
            fl.distribute(x, MESH_1D, [R()])


BAD = [
    # (shape or "sum"/"max"/"sum2", mesh, placements, fragments of the message)
    ([4, 8], MESH_2D, [S(3), R()], ["x (T0)", "Shard(3) on mesh axis 0 (DIDy)", "2 axes", "Shard(0)..Shard(1)"]),
    ([4, 8], MESH_2D, [S(0)], ["x (T0)", "1 placement for 2 axes", "[Shard(0), Replicate()]"]),
    ([4, 8], MESH_1D, [S(0), R()], ["2 placements for 1 axis"]),
    ([4, 8], MESH_2D, [R(), P()], ["Partial(sum) on mesh axis 1 (DIDx)", "no reduction axis", "Replicate()"]),
    ("sum", MESH_2D, [P("max"), R()], ["Partial(max) on mesh axis 0", "sum reduction", "Partial('sum')"]),
    ("sum2", MESH_2D, [P(), P()], ["reduces 2 axes", "by hand"]),
    ([1, 8], MESH_1D, [S(0)], ["axis 0 is a broadcast axis", "Replicate() it"]),
    ([4, 8], MESH_1D, ["S0"], ["mesh axis 0 (DIDx) has placement 'S0'", "fl.Shard(d)"]),
    ([4, 8], MESH_1D, "(S0,S1)", ["x (T0)", "2 entries", "1 axis"]),
    ([4, 8], MESH_1D, "(S5)", ["x (T0)", "cannot read placement"]),
]  # fmt: skip


@pytest.mark.parametrize("shape, mesh, placements, fragments", BAD)
def test_a_wrong_placement_names_the_tensor_the_placement_the_mesh_axis_and_the_fix(
    shape, mesh, placements, fragments
):
    with fl.Fusion():
        x = fl.tensor([4, 8, 3] if isinstance(shape, str) else shape, name="x")
        if isinstance(shape, str):
            x = fl.sum(x, [1, 2] if shape == "sum2" else [1])
            x.user_name = "x"
        with pytest.raises(fl.FusionError) as info:
            fl.distribute(x, mesh, placements)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_redistribute_cannot_make_partial_values() -> None:
    with fl.Fusion():
        x = fl.tensor([4], name="x")
        fl.distribute(x, MESH_1D, [S(0)])
        with pytest.raises(fl.FusionError, match=r"Partial\(sum\) on mesh axis 0.*complete"):
            fl.redistribute(x, [P()])
        assert not x.uses  # nothing was added


def test_an_inner_first_nesting_has_no_dtensor_spelling() -> None:
    with fl.Fusion():
        x = fl.tensor([16], name="x")
        fl.distribute(x, MESH_2D, "(S0.1,S0.0)")
        with pytest.raises(fl.FusionError, match=r"mesh axes 1 then 0.*\(S0\.1,S0\.0\)"):
            x.placements  # noqa: B018


def test_nested_uneven_shards_follow_nvfusers_layout_not_dtensors() -> None:
    """5 rows as [Shard(0), Shard(0)] on 2x2 (docs/design.md): nvFuser splits the padded
    chunk of 3 into 2 + 1, so device (1, 0) holds rows 3-4 and (1, 1) none; DTensor would
    chunk the second chunk again (one row each)."""
    rows = [b[0] for b in blocks((5,), (2, 2), Placement.parse("(S0,S0)", 1))]
    assert rows == [(0, 2), (2, 3), (3, 5), (5, 5)]


@pytest.mark.parametrize("name", ["dp_tp_mlp", "transformer_block"])
def test_the_examples_write_back_as_place_lines(name: str, golden) -> None:
    """to_fus of the examples written with placements: one `place` line per sharded
    tensor (and the mesh's axis names), which reads back to the same fusion."""
    f = fl.load(f"examples/{name}.fus")
    text = fl.to_fus(f)
    golden(f"fus/{name}.fus", text)
    assert "outer_split" not in text and "parallelize" not in text
    assert str(fl.parse(text)) == str(f)
