"""Tensors alike share one domain value, and the scheduler's decisions about them are
facts of it (fuserlite.ir.values): each case here is a kernel with two tensors that
differ in exactly one detail; each must get the schedule and the values it gets alone.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from three_way import run_three_ways

import fuserlite as fl
from fuserlite.ir.domain import IterDomain
from fuserlite.ir.tensor import TensorView
from fuserlite.schedule import grid, pointwise
from fuserlite.schedule.axis_maps import axis_positions
from fuserlite.schedule.shard import shard_axis

MESH = fl.DeviceMesh([0, 1])


def transposed_plus_other() -> fl.Fusion:
    """transpose(a) + b, a and b alike: one signature, two axis maps onto the reference."""
    with fl.Fusion() as f:
        a, b = fl.tensor([4, 4], name="a"), fl.tensor([4, 4], name="b")
        f.add_input(a)
        f.add_input(b)
        f.add_output(fl.transpose(a, 0, 1) + b)
    return f


def broadcast_device_type() -> fl.Fusion:
    """Two broadcasts of one v, one of them bDIDx (one axis's parallel type differs)."""
    with fl.Fusion() as f:
        x, v = fl.tensor([8, 16], name="x"), fl.tensor([16], name="v")
        for t in (x, v):
            f.add_input(t)
            t.set_device_mesh(MESH)
        c1, c2 = fl.broadcast(v, [True, False]), fl.broadcast(v, [True, False])
        for c in (c1, c2):
            c.set_device_mesh(MESH)
        c1.axis(0).parallelize(fl.ParallelType.DIDx)
        f.add_output(x + c1)
        f.add_output(x + c2)
    return f


def _each_plus_one(shapes: list[list[int]], shard_first: bool = False) -> fl.Fusion:
    """x + 1 and y + 1 in one kernel, x sharded on axis 0 if asked (y then replicated)."""
    with fl.Fusion() as f:
        x, y = (fl.tensor(shape, name=name) for shape, name in zip(shapes, "xy"))
        for t in (x, y):
            f.add_input(t)
        if shard_first:
            shard_axis(x, 0, MESH)
            y.set_device_mesh(MESH)
        f.add_output(x + 1.0)
        f.add_output(y + 1.0)
    return f


def two_extents() -> fl.Fusion:
    """x[8, 16] + 1 and y[8, 32] + 1 in one kernel: only the extent of one axis differs."""
    return _each_plus_one([[8, 16], [8, 32]])


def sharded_and_not() -> fl.Fusion:
    """x sharded on axis 0, y alike but replicated: one axis's sharding differs."""
    return _each_plus_one([[8, 16], [8, 16]], shard_first=True)


def broadcast_or_not() -> fl.Fusion:
    """[1, 16] (axis 0 a broadcast) next to [8, 16], each plus a constant, and their sum."""
    with fl.Fusion() as f:
        x, v = fl.tensor([8, 16], name="x"), fl.tensor([16], name="v")
        f.add_input(x)
        f.add_input(v)
        b = fl.broadcast(v, [True, False])
        f.add_output(b * 2.0)
        f.add_output(x * 2.0)
        f.add_output(x + b)
    return f


def iteration_or_broadcast() -> fl.Fusion:
    """b[1, 16] (axis 0 a broadcast) and a[1, 16] whose axis 0 iterates: only the
    iteration type of one axis differs (the reference is a's: more free axes)."""
    with fl.Fusion() as f:
        b = fl.tensor([1, 16], name="b")
        a = TensorView(f, [IterDomain(1), IterDomain(16)])
        a.user_name = "a"
        f.add_input(b)
        f.add_input(a)
        f.add_output(b + 1.0)
        f.add_output(a + 2.0)
    return f


def loop_order() -> fl.Fusion:
    """x and y on a 2x3 mesh, sharded alike, y's device axes in the other loop order."""
    mesh = fl.DeviceMesh([[0, 1, 2], [3, 4, 5]])
    with fl.Fusion() as f:
        x, y = fl.tensor([2, 3, 8], name="x"), fl.tensor([2, 3, 8], name="y")
        for t in (x, y):
            f.add_input(t)
            t.set_device_mesh(mesh)
            t.axis(0).parallelize(fl.ParallelType.DIDy)
            t.axis(1).parallelize(fl.ParallelType.DIDx)
        y.reorder({0: 1})
        f.add_output(x + y)
    return f


def many_then_permuted() -> fl.Fusion:
    """Outputs x + k, then x.T + x: the tensors before share a signature, the last one
    reads x through two axis maps."""
    with fl.Fusion() as f:
        x = fl.tensor([4, 4], name="x")
        f.add_input(x)
        for k in range(5):
            f.add_output(x + float(k))
        f.add_output(fl.transpose(x, 0, 1) + x)
    return f


def two_dtypes() -> fl.Fusion:
    """x + 1 and cast(x, double) + 1, one domain signature: only the dtype differs (the
    locals written to each output keep their own)."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16], name="x")
        f.add_input(x)
        shard_axis(x, 0, MESH)
        f.add_output(x + 1.0)
        f.add_output(fl.cast(x, "float64") + 1.0)
    return f


CASES = [
    two_dtypes,
    transposed_plus_other,
    broadcast_device_type,
    two_extents,
    sharded_and_not,
    broadcast_or_not,
    iteration_or_broadcast,
    loop_order,
    many_then_permuted,
]


def _lowered(make: Callable[[], fl.Fusion]) -> str:
    return str(fl.FusionExecutor(make(), compute="interpret").program)


@pytest.mark.parametrize("make", CASES, ids=lambda m: m.__name__)
def test_one_detail_apart_values_equal_the_reference(make) -> None:
    f = make()
    run_three_ways(f, fl.random_inputs(f, 3))


@pytest.mark.parametrize("make", CASES, ids=lambda m: m.__name__)
def test_a_fusion_lowers_to_the_same_program_with_every_fact_forgotten(make) -> None:
    """Facts are functions of values: forgetting every answer between two lowerings (a
    fresh process would) changes nothing of the program."""
    first = _lowered(make)
    for cached in _facts():
        cached.cache_clear()
    assert _lowered(make) == first


def _facts() -> list:
    """Every fact (fuserlite.ir.values.fact) of the imported fuserlite modules."""
    import sys

    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("fuserlite"):
            for value in vars(module).values():
                if callable(getattr(value, "cache_clear", None)):
                    found.append(value)
    return found


def test_an_operand_read_through_a_permute_replays_in_its_own_order() -> None:
    """a and b have one domain but reach the reference through different axis maps:
    a's loop merges its axes the other way round (sharing b's replay read a as a.T)."""
    ex = fl.FusionExecutor(transposed_plus_other(), compute="interpret")
    (kernel,) = ex.program.kernels
    assert kernel.scheduled
    a, b = ex.program.fusion.inputs
    assert a.domain is not b.domain  # scheduled: no longer alike
    (merge_a,) = [t for t in a.domain.transforms if hasattr(t, "output")]
    (merge_b,) = [t for t in b.domain.transforms if hasattr(t, "output")]
    assert (merge_a.outer, merge_a.inner) == (1, 0)
    assert (merge_b.outer, merge_b.inner) == (0, 1)


def test_x_transposed_plus_x_after_shared_replays_is_still_left_unscheduled() -> None:
    f = many_then_permuted()
    ex = fl.FusionExecutor(f, compute="interpret")
    (kernel,) = ex.program.kernels
    assert not kernel.scheduled
    assert any("two axis maps" in note for note in kernel.notes)
    inputs = fl.random_inputs(f, 1)
    out = ex.run(inputs)
    assert np.array_equal(out[-1], inputs[0].T + inputs[0])


def test_the_grid_of_two_extents_covers_the_larger() -> None:
    ex = fl.FusionExecutor(two_extents(), compute="interpret")
    (kernel,) = ex.program.kernels
    computed = [e.output for e in kernel.exprs]
    assert [g.extent for g in grid.kernel_grid(computed)] == [2, 1, 128]


def test_a_domain_is_a_value_each_primitive_makes_anew() -> None:
    """Two tensors built alike have one domain; a split, a parallel type, a new loop
    order each give a tensor a new one, and the other, changed alike, the same one."""
    with fl.Fusion():
        a, b = fl.tensor([8, 16]), fl.tensor([8, 16])
    assert a.domain is b.domain
    for change in (
        lambda t: t.split(1, 4),
        lambda t: t.axis(0).parallelize(fl.ParallelType.BIDx),
        lambda t: t.reorder({0: 1}),
    ):
        before = a.domain
        change(a)
        assert a.domain is not before and b.domain is before
        change(b)
        assert a.domain is b.domain


def test_locals_alike_but_for_the_mesh_keep_their_own() -> None:
    """Outputs of one domain on two meshes: each local is on its output's mesh and has
    its output's sharding, one domain for both."""
    with fl.Fusion():
        a, b = fl.tensor([8, 16], name="a"), fl.tensor([8, 16], name="b")
    shard_axis(a, 0, MESH)
    shard_axis(b, 0, fl.DeviceMesh([1, 0]))
    assert a.domain is b.domain
    la, lb = pointwise.local_like(a), pointwise.local_like(b)
    assert (la.mesh, lb.mesh) == (a.mesh, b.mesh)
    assert la.domain is lb.domain and la is not lb


def test_positional_maps_alike_but_for_an_iteration_type_are_their_own() -> None:
    """Set(p) of [iS{8}, rS{16}] and of [rS{16}, iS{8}] onto alike [iS{8}]: the axis
    maps differ by the producer's reduction axis."""
    from fuserlite.ir.expr import LoadStoreOp
    from fuserlite.ir.types import IterType

    red = IterType.REDUCTION
    with fl.Fusion() as f:
        p1 = TensorView(f, [IterDomain(8), IterDomain(16, red)])
        p2 = TensorView(f, [IterDomain(16, red), IterDomain(8)])
        c1, c2 = TensorView(f, [IterDomain(8)]), TensorView(f, [IterDomain(8)])
    e1, e2 = LoadStoreOp(c1, p1), LoadStoreOp(c2, p2)
    assert c1.domain is c2.domain
    assert axis_positions(e1, p1) == ((0, 0),)
    assert axis_positions(e2, p2) == ((1, 0),)


def test_an_op_alike_but_for_its_kind_is_refused_on_its_own() -> None:
    """x + 1 and expand(b) have one output domain: the scheduler still refuses the
    expand."""
    from fuserlite.program.program import Kernel

    with fl.Fusion() as f:
        x, b = fl.tensor([8, 16]), fl.tensor([1, 16])
        f.add_input(x)
        f.add_input(b)
        y, z = x + 1.0, fl.expand(b, [8, 16])
        f.add_output(y)
        f.add_output(z)
    assert y.domain is z.domain
    kernel = Kernel(f.exprs(), f.inputs, f.outputs, None)
    assert pointwise.unsupported_reason(kernel) == (
        f"{z.name} = expand(...) is not a pointwise, broadcast or set"
    )
