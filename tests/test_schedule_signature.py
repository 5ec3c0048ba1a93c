"""Schedules decided once per domain signature (fuserlite.schedule.signature).

The scheduler replays the reference, makes output locals and checks the grid and the
inline positions once per distinct signature. Each case here is a kernel with two
tensors that differ in exactly one detail; each must get the schedule (and values) it
gets when nothing is shared, which a signature or key missing that detail would break.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from three_way import run_three_ways

import fuserlite as fl
from fuserlite.ir import signature as domain_signatures
from fuserlite.ir.domain import IterDomain
from fuserlite.ir.signature import Signature, domain_signature
from fuserlite.ir.tensor import TensorView
from fuserlite.schedule import grid, pointwise, propagate, signature
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


@pytest.fixture
def unshared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tensor a signature of its own: nothing is decided for two tensors at once."""
    counter = itertools.count()

    def unique(tv: fl.TensorView) -> Signature:
        return Signature(("unshared", next(counter)))

    for module in (signature, propagate, pointwise, grid):
        if hasattr(module, "domain_signature"):
            monkeypatch.setattr(module, "domain_signature", unique)


def _lowered(make: Callable[[], fl.Fusion]) -> str:
    return str(fl.FusionExecutor(make(), compute="interpret").program)


@pytest.mark.parametrize("make", CASES, ids=lambda m: m.__name__)
def test_a_shared_decision_is_the_one_each_tensor_gets_alone(make, request) -> None:
    shared = _lowered(make)
    request.getfixturevalue("unshared")
    assert _lowered(make) == shared


@pytest.mark.parametrize("make", CASES, ids=lambda m: m.__name__)
def test_one_detail_apart_values_equal_the_reference(make) -> None:
    f = make()
    run_three_ways(f, fl.random_inputs(f, 3))


def test_an_operand_read_through_a_permute_replays_in_its_own_order() -> None:
    """a and b have one signature but reach the reference through different axis maps:
    a's loop merges its axes the other way round (sharing b's replay read a as a.T)."""
    ex = fl.FusionExecutor(transposed_plus_other(), compute="interpret")
    (kernel,) = ex.program.kernels
    assert kernel.scheduled
    a, b = ex.program.fusion.inputs
    assert domain_signature(a) != domain_signature(b)  # scheduled: no longer alike
    (merge_a,) = [t for t in a.domain.transforms if hasattr(t, "output")]
    (merge_b,) = [t for t in b.domain.transforms if hasattr(t, "output")]
    assert (merge_a.outer, merge_a.inner) == tuple(reversed(a.domain.logical))
    assert (merge_b.outer, merge_b.inner) == tuple(b.domain.logical)


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


def x_plus_k(n: int) -> fl.Fusion:
    """x + k for k < n, x[8, 16] sharded on axis 0: n outputs of one signature."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16])
        f.add_input(x)
        shard_axis(x, 0, MESH)
        for k in range(n):
            f.add_output(x + float(k))
    return f


def test_a_replayed_tensor_has_the_signature_its_domain_gives() -> None:
    """Replayed.apply records the signature it built: it must be the one computed."""
    f = x_plus_k(4)
    ex = fl.FusionExecutor(f, compute="interpret")
    for tv in ex.program.tensors():
        assert domain_signature(tv) == Signature(domain_signatures._domain_key(tv)), tv.name


def test_a_signature_follows_every_change_of_the_domain() -> None:
    """domain_signature is a fact on change stamps: a split, a parallel type, a new loop
    order each give the tensor a new one (and two tensors alike again share one)."""
    with fl.Fusion():
        a, b = fl.tensor([8, 16]), fl.tensor([8, 16])
    assert domain_signature(a) == domain_signature(b)
    for change in (
        lambda t: t.split(1, 4),
        lambda t: t.axis(0).parallelize(fl.ParallelType.BIDx),
        lambda t: t.reorder({0: 1}),
    ):
        before = domain_signature(a)
        change(a)
        assert domain_signature(a) != before
        assert domain_signature(a) == Signature(domain_signatures._domain_key(a))
        change(b)
        assert domain_signature(a) == domain_signature(b)


def test_the_signatures_the_scheduler_built_reach_the_runtime(monkeypatch) -> None:
    """A replayed copy's signature is a fact of its domain: setting the tensor's inline
    position afterwards keeps it, so the executor does not work it out again for each of
    the tensors (it did for all of them: the stamps had moved)."""
    f = x_plus_k(50)
    ex = fl.FusionExecutor(f, compute="interpret")
    worked_out = []
    key = domain_signatures._domain_key
    monkeypatch.setattr(
        domain_signatures, "_domain_key", lambda tv: worked_out.append(tv) or key(tv)
    )
    inputs = fl.random_inputs(f)
    out = ex.run(inputs)
    assert len(worked_out) <= 4, [tv.name for tv in worked_out]
    fl.validate(f, inputs, out)


def test_locals_alike_but_for_the_mesh_keep_their_own() -> None:
    """Outputs of one domain signature on two meshes: each local is on its output's mesh
    and has its output's sharding, as when made alone."""
    with fl.Fusion():
        a, b = fl.tensor([8, 16], name="a"), fl.tensor([8, 16], name="b")
    shard_axis(a, 0, MESH)
    shard_axis(b, 0, fl.DeviceMesh([1, 0]))
    assert domain_signature(a) == domain_signature(b)
    made = pointwise._Locals()
    la, lb = made.like(a), made.like(b)
    assert (la.mesh, lb.mesh) == (a.mesh, b.mesh)
    alone = pointwise._local_like(b)
    assert domain_signature(lb) == domain_signature(alone) == domain_signature(la)


def test_a_copied_local_is_a_tensor_of_its_own() -> None:
    """Locals made alike are new tensors, each with its own axes, owned by it: changing
    one changes neither the first made nor its signature."""
    with fl.Fusion() as f:
        a, b = fl.tensor([8, 16], name="a"), fl.tensor([8, 16], name="b")
    for t in (a, b):
        shard_axis(t, 0, MESH)
    made = pointwise._Locals()
    la, lb = made.like(a), made.like(b)
    sig_a = domain_signature(la)
    assert domain_signature(lb) is sig_a and la is not lb and lb in f.tensors_created
    assert lb.number == la.number + 1
    axes_a = set(map(id, la.domain.ids_between_logical_and_loop()))
    axes_b = lb.domain.ids_between_logical_and_loop()
    assert not axes_a & set(map(id, axes_b)) and all(ax.owner is lb for ax in axes_b)
    lb.split(1, 2)
    assert domain_signature(la) == sig_a != domain_signature(lb)


def test_a_replayed_copy_owns_its_new_axes() -> None:
    """Replayed.apply builds the new axes directly: they are the copy's (changing one
    stamps it: its signature follows) and equal to the replayed tensor's."""
    with fl.Fusion():
        a, b = fl.tensor([8, 16]), fl.tensor([8, 16])
    before = signature.Before.of(a)
    a.merge(0).split(0, 32).axis(1).parallelize(fl.ParallelType.TIDx)
    signature.Replayed.taken(a, before).apply(b)
    assert str(b.domain.loop) == str(a.domain.loop)
    assert domain_signature(b) == domain_signature(a) == Signature(domain_signatures._domain_key(b))
    assert all(ax.owner is b for ax in b.domain.ids_between_logical_and_loop())
    b.axis(0).parallelize(fl.ParallelType.BIDx)
    assert domain_signature(b) == Signature(domain_signatures._domain_key(b)) != domain_signature(a)


def test_positional_maps_alike_but_for_an_iteration_type_are_their_own() -> None:
    """Set(p) of [iS{8}, rS{16}] and of [rS{16}, iS{8}] onto alike [iS{8}]: the axis
    maps, shared per pair of signatures, differ by the producer's reduction axis."""
    from fuserlite.ir.expr import LoadStoreOp
    from fuserlite.ir.types import IterType

    red = IterType.REDUCTION
    with fl.Fusion() as f:
        p1 = TensorView(f, [IterDomain(8), IterDomain(16, red)])
        p2 = TensorView(f, [IterDomain(16, red), IterDomain(8)])
        c1, c2 = TensorView(f, [IterDomain(8)]), TensorView(f, [IterDomain(8)])
    e1, e2 = LoadStoreOp(c1, p1), LoadStoreOp(c2, p2)
    assert domain_signature(c1) == domain_signature(c2)
    edges = propagate.Edges([e1, e2])
    assert edges.positions(e1, p1) == ((0, 0),)
    assert edges.positions(e2, p2) == ((1, 0),)


def test_an_op_alike_but_for_its_kind_is_refused_on_its_own() -> None:
    """x + 1 and expand(b) have one output signature: whether the scheduler takes an
    expression is decided per (op, output signature), so the expand is still refused."""
    from fuserlite.program.program import Kernel

    with fl.Fusion() as f:
        x, b = fl.tensor([8, 16]), fl.tensor([1, 16])
        f.add_input(x)
        f.add_input(b)
        y, z = x + 1.0, fl.expand(b, [8, 16])
        f.add_output(y)
        f.add_output(z)
    assert domain_signature(y) == domain_signature(z)
    kernel = Kernel(f.exprs(), f.inputs, f.outputs, None)
    assert pointwise.unsupported_reason(kernel) == (
        f"{z.name} = expand(...) is not a pointwise, broadcast or set"
    )
