"""The sharding queries (ir.sharding) are facts of a tensor's domain and its mesh's
shape, shared by every tensor laid out alike: two tensors that differ in one detail the
answers depend on get their own answers, whichever was asked first."""

from __future__ import annotations

import pytest

import fuserlite as fl
from fuserlite.ir.sharding import (
    data_positions,
    is_partial,
    is_uneven,
    local_shape,
    logical_placement,
    placement,
    shardings,
)
from fuserlite.schedule.shard import shard_axis

DIDX, DIDY = fl.ParallelType.DIDx, fl.ParallelType.DIDy


def _tensor(shape=(8, 16), mesh=None, axis: int | None = 0) -> fl.TensorView:
    with fl.Fusion():
        x = fl.tensor(list(shape))
        if mesh is not None:
            if axis is None:
                x.set_device_mesh(mesh)
            else:
                shard_axis(x, axis, mesh)
    return x


def _nested(first: fl.ParallelType) -> fl.TensorView:
    """x[8, 16] on a 2x2 mesh, axis 0 split over `first`, then its chunks over the other."""
    second = DIDX if first is DIDY else DIDY
    with fl.Fusion():
        x = fl.tensor([8, 16]).set_device_mesh(fl.DeviceMesh.for_shape([2, 2]))
        x.outer_split(0, 2)
        x.axis(0).parallelize(first)
        x.outer_split(1, 2)
        x.axis(1).parallelize(second)
    return x


def _partial(reduced: bool) -> fl.TensorView:
    """sum(x, [1]) with its reduction axis sharded (partial), or x + 1 with axis 1 sharded."""
    with fl.Fusion():
        x = fl.tensor([8, 16]).set_device_mesh(fl.DeviceMesh.for_num_devices(2))
        y = fl.sum(x, [1]) if reduced else x + 1.0
        y.set_device_mesh(x.mesh)
        y.outer_split(1, 2)
        y.axis(1).parallelize(DIDX)
    return y


def _answers(tv: fl.TensorView) -> tuple:
    return (
        dict(shardings(tv)),
        str(placement(tv)),
        logical_placement(tv).shards,
        local_shape(tv),
        is_uneven(tv),
        is_partial(tv),
        data_positions(tv),
    )


MESH2, MESH4 = fl.DeviceMesh.for_num_devices(2), fl.DeviceMesh.for_num_devices(4)
MESH2X2 = fl.DeviceMesh.for_shape([2, 2])

# (what differs, make a, make b, a's (placement, local shape, uneven, partial), b's)
PAIRS = [
    (
        "mesh size",
        lambda: _tensor(mesh=MESH2),
        lambda: _tensor(mesh=MESH4),
        ("(S0)", (4, 16), False, False),
        ("(S0)", (2, 16), False, False),
    ),
    (
        "mesh rank",
        lambda: _tensor(mesh=MESH4),
        lambda: _tensor(mesh=MESH2X2),
        ("(S0)", (2, 16), False, False),
        ("(R,S0)", (4, 16), False, False),
    ),
    (
        "an extent",
        lambda: _tensor((8, 16), MESH2),
        lambda: _tensor((7, 16), MESH2),
        ("(S0)", (4, 16), False, False),
        ("(S0)", (4, 16), True, False),
    ),
    (
        "the sharded axis",
        lambda: _tensor(mesh=MESH2, axis=0),
        lambda: _tensor(mesh=MESH2, axis=1),
        ("(S0)", (4, 16), False, False),
        ("(S1)", (8, 8), False, False),
    ),
    (
        "a mesh or none",
        lambda: _tensor(mesh=MESH2, axis=None),
        lambda: _tensor(),
        ("(R)", (8, 16), False, False),
        ("(R)", (8, 16), False, False),
    ),
    (
        "the nesting order",
        lambda: _nested(DIDY),
        lambda: _nested(DIDX),
        ("(S0,S0)", (2, 16), False, False),
        ("(S0.1,S0.0)", (2, 16), False, False),
    ),
    (
        "a reduction axis",
        lambda: _partial(False),
        lambda: _partial(True),
        ("(S1)", (8, 8), False, False),
        ("(P)", (8,), False, True),
    ),
]


@pytest.mark.parametrize("order", ["a first", "b first"])
@pytest.mark.parametrize(
    ("what", "make_a", "make_b", "want_a", "want_b"), PAIRS, ids=[p[0] for p in PAIRS]
)
def test_tensors_that_differ_in_one_detail_get_their_own_answers(
    order, what, make_a, make_b, want_a, want_b
) -> None:
    a, b = make_a(), make_b()
    first, second = (a, b) if order == "a first" else (b, a)
    _answers(first)
    _answers(second)
    for tv, (where, shape, uneven, partial) in ((a, want_a), (b, want_b)):
        assert (str(placement(tv)), local_shape(tv), is_uneven(tv), is_partial(tv)) == (
            where,
            shape,
            uneven,
            partial,
        ), what
    assert _answers(a) != _answers(b) or what == "a mesh or none"


def test_the_nesting_order_and_the_mesh_axes_are_kept_apart() -> None:
    assert logical_placement(_nested(DIDY)).shards == ((0, 1), ())
    assert logical_placement(_nested(DIDX)).shards == ((1, 0), ())
    assert shardings(_tensor(mesh=MESH2X2))[DIDX].num_devices == 2
    assert shardings(_tensor(mesh=MESH4))[DIDX].num_devices == 4


def test_an_invalid_sharding_split_is_no_sharding_though_laid_out_like_a_valid_one() -> None:
    good = _tensor(mesh=MESH2)
    with fl.Fusion():
        bad = fl.tensor([8, 16]).set_device_mesh(MESH2)
        bad.split(0, 2)  # inner split: the outer part has extent 4, not 2
        bad.axis(0).parallelize(DIDX)
    assert shardings(good) and not shardings(bad)
    assert str(placement(bad)) == "(R)" and local_shape(bad) == (8, 16)


def test_laid_out_alike_tensors_share_their_domain_and_a_change_is_seen() -> None:
    a, b = _tensor(mesh=MESH2), _tensor(mesh=MESH2)
    assert a.domain is b.domain and placement(a) is placement(b)  # one value, one fact
    b.axis(0).parallel_type = fl.ParallelType.Serial
    assert str(placement(b)) == "(R)" and str(placement(a)) == "(S0)"
