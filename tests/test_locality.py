"""non_local_inputs answers a positional op as a fact of its tensors' layouts:
expressions alike but for one detail (asked one after the other, the first answer
cached) each get their own answer, the one working it out from the expression gives."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite.ops import sharding as sharding_ops
from fuserlite.ops.sharding import has_unmapped_sharding, needed_placement, non_local_inputs
from fuserlite.schedule.shard import shard_axis

MESH = fl.DeviceMesh.for_num_devices(2)
OTHER = fl.DeviceMesh([2, 3])  # the same shape, other devices
TALL = fl.DeviceMesh([[0], [1]])  # the same devices, another shape


def _add(x_axis, out_axis, x_mesh=MESH, out_mesh=MESH, same=False):
    """(x + w or x + x, x, w): x[8, 16] and w sharded on x_axis (None: replicated) on
    x_mesh, the output on out_axis on out_mesh."""
    with fl.Fusion():
        x, w = fl.tensor([8, 16]), fl.tensor([8, 16])
        for t in (x, w):
            if x_axis is None:
                t.set_device_mesh(x_mesh)
            else:
                shard_axis(t, x_axis, x_mesh)
        y = x + (x if same else w)
        if out_axis is None:
            y.set_device_mesh(out_mesh)
        else:
            shard_axis(y, out_axis, out_mesh)
    return y.definition, x, w


@pytest.mark.parametrize(
    "local, other",
    [
        ({"x_axis": 0, "out_axis": 0}, {"x_axis": 1, "out_axis": 0}),  # operand sharding
        ({"x_axis": 0, "out_axis": 0}, {"x_axis": 0, "out_axis": 1}),  # output sharding
        ({"x_axis": None, "out_axis": None}, {"x_axis": 0, "out_axis": None}),
        ({"x_axis": 0, "out_axis": 0}, {"x_axis": 0, "out_axis": 0, "out_mesh": OTHER}),
        ({"x_axis": 0, "out_axis": 0}, {"x_axis": 0, "out_axis": 0, "x_mesh": OTHER}),
        ({"x_axis": None, "out_axis": None}, {"x_axis": None, "out_axis": None, "x_mesh": TALL}),
    ],
    ids=["operand-axis", "output-axis", "replicated", "output-mesh", "operand-mesh", "mesh-shape"],
)
def test_one_differing_detail_gets_its_own_answer(local, other):
    """The first expression is local (and cached); the second differs in one detail
    and is not: both inputs are named."""
    expr, _, _ = _add(**local)
    assert non_local_inputs(expr) == []
    expr, x, w = _add(**other)
    assert non_local_inputs(expr) == [x, w]
    expr, _, _ = _add(**local)
    assert non_local_inputs(expr) == []  # the other answer did not replace the first


def test_a_tensor_read_twice_is_named_once():
    """x + w and x + x share every signature; x + x names x once."""
    expr, x, w = _add(1, 0)
    assert non_local_inputs(expr) == [x, w]
    expr, x, _ = _add(1, 0, same=True)
    assert non_local_inputs(expr) == [x]


def test_a_tensor_changed_in_place_is_asked_again():
    """x found local, then sharded (a pass's edit, a new domain): the expression is now
    not local."""
    expr, x, w = _add(None, None)
    assert non_local_inputs(expr) == []
    shard_axis(x, 0, MESH)
    assert non_local_inputs(expr) == [x]


def _needs(expr):
    """needed_placement of each operand of `expr` for its output, and has_unmapped_sharding."""
    return [needed_placement(expr, expr.output, p) for p in range(len(expr.inputs))], (
        has_unmapped_sharding(expr, expr.output)
    )


def _worked_out(expr):
    """_needs read from the expression itself (its own axis maps), with no fact."""
    view = sharding_ops.ExprView(expr)
    return [sharding_ops._needed(view, 0, p) for p in range(len(expr.inputs))], (
        sharding_ops._has_unmapped(view, 0)
    )


def _row_plus_matrix(out_axis):
    """x[8, 16] + v[16] (v broadcast to [1, 16] first), x sharded on axis 0, the
    output on out_axis: the two operands need different placements."""
    with fl.Fusion():
        x, v = fl.tensor([8, 16]), fl.tensor([16])
        shard_axis(x, 0, MESH)
        v.set_device_mesh(MESH)
        y = x + v
        shard_axis(y, out_axis, MESH)
        y.definition.inputs[1].set_device_mesh(MESH)
    return y.definition


@pytest.mark.parametrize(
    "make",
    [
        lambda: _add(0, 0)[0],
        lambda: _add(0, 1)[0],  # output sharding
        lambda: _add(1, 0)[0],  # operand sharding
        lambda: _add(0, 0, out_mesh=OTHER)[0],  # output mesh
        lambda: _add(None, None, x_mesh=TALL, out_mesh=TALL)[0],  # mesh shape
        lambda: _row_plus_matrix(0),  # operand position: a broadcast operand
        lambda: _row_plus_matrix(1),
    ],
)
def test_what_an_operand_needs_is_what_the_expression_itself_gives(make):
    """needed_placement and has_unmapped_sharding answer a positional op from its
    layouts: asked of expressions one detail apart in turn, each gets what working it
    out from the expression gives."""
    for other in (lambda: _add(0, 0)[0], lambda: _add(0, 1)[0], lambda: _row_plus_matrix(0)):
        _needs(other())
        expr = make()
        assert _needs(expr) == _worked_out(expr)
    expr = _row_plus_matrix(0)
    needs, _ = _needs(expr)
    assert needs[0] != needs[1]  # the position is part of the question


def test_which_ops_read_layouts_only_is_a_fact_of_each_definition():
    """OpDef.reads_layouts_only and indexed_pointwise, worked out once per definition,
    say what the definition's fields do: a positional op, one axis map for all its
    outputs, that never permutes blocks; an indexed pointwise op."""
    from fuserlite.ops.registry import Category, all_ops, positional

    ops = all_ops()
    assert any(d.reads_layouts_only for d in ops) and not all(d.reads_layouts_only for d in ops)
    for d in ops:
        assert d.reads_layouts_only == (
            d.axis_map is positional and d.outputs_axis_map is None and d.sharding.permutes is None
        ), d.name
        assert d.indexed_pointwise == (d.indexed and d.category is Category.POINTWISE), d.name


def test_a_view_is_the_value_of_its_layouts():
    """The view of a positional expression is the PositionalView of its tensors'
    (domain, mesh) pairs, however it is made."""
    expr, x, w = _add(0, 0)
    v = sharding_ops.view(expr)
    assert type(v) is sharding_ops.PositionalView
    layouts = tuple((t.domain, t.mesh) for t in expr.inputs)
    assert v == sharding_ops.PositionalView(layouts, ((expr.output.domain, MESH),), False)
    assert v.inputs == layouts and v.indexed is False
