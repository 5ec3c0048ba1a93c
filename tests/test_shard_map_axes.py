"""JAX's shard_map in full: spec entries of several mesh axes, collectives and axis_index
over a tuple of axes (one flattened team, the first axis outermost), pmin, tiled and
untiled gathers and scatters on multi-axis teams.

The expected values are JAX's semantics written in numpy (checked once against
jax.shard_map on 8 host devices with jax 0.10.2; the tests need no JAX): on a mesh
("dp", "tp") of 2 x 4, device (i, j) is member i * 4 + j of the team ("dp", "tp") and
member j * 2 + i of ("tp", "dp").
"""

from __future__ import annotations

import numpy as np
import pytest
from three_way import HAVE_COMPILER

import fuserlite as fl
from fuserlite import PartitionSpec as P

MESH = fl.DeviceMesh([[0, 1, 2, 3], [4, 5, 6, 7]], axis_names=("dp", "tp"))
X = np.arange(48, dtype=np.float32).reshape(16, 3) - 20
X[5, 1] = -100.0
COMPUTE = ["numpy", "interpret", *(["compiled"] if HAVE_COMPILER else [])]


def fwd(i: int, j: int) -> int:  # member of (dp, tp)
    return i * 4 + j


def rev(i: int, j: int) -> int:  # member of (tp, dp)
    return j * 2 + i


DEVICES = [(i, j) for i in range(2) for j in range(4)]


def blocks(x: np.ndarray, n: int = 8) -> list[np.ndarray]:
    return np.split(x, n, axis=0)


def _by(member, values) -> np.ndarray:
    """The blocks of `values` (one per device) concatenated in the order of `member`."""
    order = sorted(DEVICES, key=lambda d: member(*d))
    return np.concatenate([values[d] for d in order], axis=0)


B = blocks(X)
X8 = X[:8]
CASES = {
    # name: (body, in spec, out spec, input, expected)
    "identity": (lambda b: b, P(("dp", "tp"), None), P(("dp", "tp"), None), X, X),
    "identity, tp outer": (lambda b: b, P(("tp", "dp")), P(("tp", "dp")), X, X),
    "in tp outer, out dp outer": (
        lambda b: b,
        P(("tp", "dp")),
        P(("dp", "tp")),
        X,
        _by(fwd, {d: B[rev(*d)] for d in DEVICES}),
    ),
    "axis_index of the team": (
        lambda b: b * fl.cast(fl.axis_index(("dp", "tp")), "float32"),
        P(("dp", "tp")),
        P(("dp", "tp")),
        X,
        _by(fwd, {d: B[fwd(*d)] * fwd(*d) for d in DEVICES}),
    ),
    "axis_index, tp outer": (
        lambda b: b * fl.cast(fl.axis_index(("tp", "dp")), "float32"),
        P(("dp", "tp")),
        P(("dp", "tp")),
        X,
        _by(fwd, {d: B[fwd(*d)] * rev(*d) for d in DEVICES}),
    ),
    "psum": (lambda b: fl.psum(b, ("dp", "tp")), P(("dp", "tp")), P(), X, sum(B)),
    "pmax": (lambda b: fl.pmax(b, ("dp", "tp")), P(("dp", "tp")), P(), X, np.max(B, axis=0)),
    "pmin": (lambda b: fl.pmin(b, ("dp", "tp")), P(("dp", "tp")), P(), X, np.min(B, axis=0)),
    "pmin over tp": (
        lambda b: fl.pmin(b, "tp"),
        P(("dp", "tp")),
        P("dp"),
        X,
        np.concatenate([np.min(B[0:4], axis=0), np.min(B[4:8], axis=0)]),
    ),
    "all_gather tiled": (
        lambda b: fl.all_gather(b, 0, ("dp", "tp")),
        P(("dp", "tp")),
        P(),
        X,
        X,
    ),
    "all_gather tiled, tp outer": (
        lambda b: fl.all_gather(b, 0, ("tp", "dp")),
        P(("dp", "tp")),
        P(),
        X,
        _by(rev, {d: B[fwd(*d)] for d in DEVICES}),
    ),
    "all_gather untiled": (
        lambda b: fl.all_gather(b, 1, ("dp", "tp"), tiled=False),
        P(("dp", "tp")),
        P(),
        X,
        np.stack(B, axis=1),
    ),
    "psum_scatter tiled": (
        lambda b: fl.psum_scatter(b, ("dp", "tp"), 0, tiled=True),
        P(),
        P(("dp", "tp")),
        X8,
        8 * X8,
    ),
    "psum_scatter tiled, tp outer, out dp outer": (
        lambda b: fl.psum_scatter(b, ("tp", "dp"), 0, tiled=True),
        P(),
        P(("dp", "tp")),
        X8,
        _by(fwd, {d: 8 * X8[rev(*d) : rev(*d) + 1] for d in DEVICES}),
    ),
    "psum_scatter untiled": (
        lambda b: fl.psum_scatter(b, ("dp", "tp"), 0),
        P(),
        P(("dp", "tp")),
        X8,
        (8 * X8).reshape(-1),
    ),
    "reduce_scatter over both, untiled": (
        lambda b: fl.reduce_scatter(b, "max", 0, axis=("tp", "dp"), tiled=False),
        P(),
        P(("tp", "dp")),
        X8,
        X8.reshape(-1),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_multi_axis_specs_and_collectives_give_jaxs_values(name: str) -> None:
    body, in_spec, out_spec, x, expected = CASES[name]
    with fl.Fusion() as f:
        t = fl.tensor(list(x.shape), name="x")
        f.add_input(t)
        f.add_output(fl.shard_map(body, MESH, in_spec, out_spec)(t))
    for compute in COMPUTE:
        (got,) = fl.FusionExecutor(f, compute=compute).run([x])
        np.testing.assert_array_equal(got, expected, err_msg=f"{name} ({compute})")
    text = fl.to_fus(f)  # written as a block with its specs, and read back
    assert str(fl.parse(text)) == str(f)


def test_a_multi_axis_spec_is_a_nested_sharding_mesh_axis_first_outermost() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([16, 3], name="x")
        f.add_input(x)
        f.add_output(fl.shard_map(lambda b: b, MESH, P(("tp", "dp")), P(("tp", "dp")))(x))
    assert str(fl.ir.sharding.placement(x)) == "(S0.1,S0.0)"  # tp (DIDx) splits first
    with pytest.raises(fl.FusionError, match="inner mesh axis first"):
        x.placements  # noqa: B018 - DTensor has no spelling for it


def test_psum_over_a_team_is_one_allreduce_over_both_axes() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([2, 8, 3], name="x")
        f.add_input(x)
        y = fl.shard_map(lambda b: fl.psum(b, ("dp", "tp")), MESH, P("dp", "tp"), P())(x)
        f.add_output(y)
    ex = fl.FusionExecutor(f)
    (comm,) = ex.communications
    assert comm.kind.value == "Allreduce" and comm.group_names == ("DIDy", "DIDx")
    (got,) = ex.run([np.ones((2, 8, 3), np.float32)])
    np.testing.assert_array_equal(got, np.full((1, 2, 3), 8.0))


def test_specs_and_team_axes_in_fus_text() -> None:
    text = """mesh m = [[0, 1, 2, 3], [4, 5, 6, 7]] axes (dp, tp)
input x: float32[16, 3] on m
shard_map m (x [[dp, tp], none]) -> (y [])
    s = psum(x, axis=[dp, tp])
    i = axis_index([tp, dp])
    c = cast(i, float32)
    r = mul(s, c)
    m2 = pmin(r, axis=[dp, tp])
    return m2
end
output y
"""
    f = fl.parse(text)
    (got,) = fl.FusionExecutor(f).run([X])
    np.testing.assert_array_equal(got, np.minimum(sum(B) * 0, sum(B) * 7))
    assert str(fl.parse(fl.to_fus(f))) == str(f)
    assert "(T0 [[dp, tp]])" in fl.to_fus(f)  # trailing none entries are left out


@pytest.mark.parametrize(
    "body, in_spec, fragment",
    [
        (lambda b: b, P(("dp", "tp", "dp")), "names a mesh axis twice"),
        (lambda b: b, P(("dp", "tp"), "tp"), "names a mesh axis twice"),
        (lambda b: fl.psum(b, ("dp", "ep")), P(("dp", "tp")), "DIDy (dp), DIDx (tp), got 'ep'"),
        (lambda b: fl.ppermute(b, ("dp", "tp"), [(0, 1)]), P(("dp", "tp")), "one mesh axis"),
        (
            lambda b: fl.psum_scatter(b, ("dp", "tp"), 0, tiled=True),
            P(("dp", "tp")),
            "divisible by the 8 devices of (DIDy, DIDx)",
        ),
    ],
)
def test_multi_axis_mistakes_are_clear_errors(body, in_spec, fragment) -> None:
    with fl.Fusion():
        x = fl.tensor([16, 3], name="x")
        with pytest.raises(fl.FusionError) as info:
            fl.shard_map(body, MESH, in_spec, P())(x)
    assert fragment in str(info.value)


def test_an_uneven_multi_axis_spec_is_refused() -> None:
    with fl.Fusion():
        x = fl.tensor([12, 3], name="x")
        with pytest.raises(fl.FusionError, match=r"not divisible by the 2 devices of DIDy x 4"):
            fl.shard_map(lambda b: b, MESH, P(("dp", "tp")), P(("dp", "tp")))(x)


def test_a_min_reduction_on_every_path_and_its_partials_combine_by_min() -> None:
    with fl.Fusion() as f:
        x = fl.tensor([4, 6], name="x")
        i = fl.tensor([4, 6], "int32", name="i")
        f.add_input(x)
        f.add_input(i)
        fl.distribute(x, fl.DeviceMesh([0, 1, 2]), [fl.Shard(1)])
        fl.distribute(i, fl.DeviceMesh([0, 1, 2]), [fl.Shard(1)])
        f.add_output(fl.min(x, 1))
        f.add_output(fl.min(i, [0, 1]))
    xv = np.array([[0.0, -0.0, 3, 1, 2, 5]] * 4, np.float32)
    xv[2, 4] = np.nan
    iv = np.full((4, 6), 7, np.int32)
    iv[3, 5] = np.iinfo(np.int32).min
    for compute in COMPUTE:
        got_x, got_i = fl.FusionExecutor(f, compute=compute).run([xv, iv])
        np.testing.assert_array_equal(got_x, [0.0, 0.0, np.nan, 0.0])
        assert got_i == np.iinfo(np.int32).min
    assert "Allreduce" in [c.kind.value for c in fl.FusionExecutor(f).communications]
