"""The public boundary, continued: coercions that used to pass silently are refused,
and the spellings numpy and torch users write are accepted and mean the canonical one
(the bad-call table is tests/test_api_boundary.py, whose Env both use)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from test_api_boundary import Env

import fuserlite as fl

# -- silent coercions that are refused now ----------------------------------------------------
COERCIONS = {
    "float extent is not truncated": lambda e: fl.tensor([2.5]),
    "a string is not a list of digits": lambda e: fl.tensor("12"),
    "a float device id is not truncated": lambda e: fl.DeviceMesh([1.5]),
    "dtype None is not float64": lambda e: fl.tensor([2], None),
    "1/0 are not flags": lambda e: fl.broadcast(e.b, [1, 0]),
    "True is not axis 1": lambda e: fl.sum(e.x, True),
    "a string is not keepdim": lambda e: fl.max(e.x, 0, keepdim="no"),
    "0 is not contiguous=False": lambda e: fl.tensor([2], contiguous=0),
    "an integral float is not a factor": lambda e: e.x.split(0, 2.0),
    "a bool is not a device id": lambda e: fl.DeviceMesh([True, False]),
    "a string is not a seed": lambda e: fl.random_inputs(e.fusion, "7"),
    "an unknown cache op is not kept": lambda e: fl.set(e.x, cache_op="Bogus"),
}


@pytest.mark.parametrize("name", sorted(COERCIONS))
def test_no_silent_coercion(name: str) -> None:
    env = Env()
    with env.fusion, pytest.raises(fl.FuserliteError):
        COERCIONS[name](env)


# -- what numpy and torch users write ---------------------------------------------------------
def _math(build: Callable[[Env], object]) -> str:
    """The fusion's math after `build` adds an output to a fresh Env."""
    env = Env()
    with env.fusion:
        out = build(env)
    env.fusion.add_output(out)
    return env.fusion.print_math() + repr(out)


# (accepted spelling, canonical spelling): both must build the same fusion.
SPELLINGS = {
    "tuple shape": (lambda e: fl.tensor((3, 2)), lambda e: fl.tensor([3, 2])),
    "array shape": (lambda e: fl.tensor(np.array([3, 2])), lambda e: fl.tensor([3, 2])),
    "numpy int extents": (
        lambda e: fl.tensor([np.int64(3), np.int32(2)]),
        lambda e: fl.tensor([3, 2]),
    ),
    "int shape": (lambda e: fl.tensor(3), lambda e: fl.tensor([3])),
    "numpy dtype": (lambda e: fl.tensor([3], np.float16), lambda e: fl.tensor([3], "float16")),
    "nvFuser dtype name": (lambda e: fl.tensor([3], "double"), lambda e: fl.tensor([3], "float64")),
    "numpy int axis": (lambda e: fl.sum(e.x, np.int64(0)), lambda e: fl.sum(e.x, 0)),
    "tuple axes": (lambda e: fl.sum(e.x, (0, 1)), lambda e: fl.sum(e.x, [0, 1])),
    "array axes": (lambda e: fl.max(e.x, np.array([1])), lambda e: fl.max(e.x, [1])),
    "numpy bool keepdim": (
        lambda e: fl.sum(e.x, 1, keepdim=np.bool_(True)),
        lambda e: fl.sum(e.x, 1, keepdim=True),
    ),
    "tuple flags": (
        lambda e: fl.broadcast(e.b, (True, False)),
        lambda e: fl.broadcast(e.b, [True, False]),
    ),
    "numpy bool flags": (
        lambda e: fl.broadcast(e.b, np.array([True, False])),
        lambda e: fl.broadcast(e.b, [True, False]),
    ),
    "numpy float scalar": (lambda e: fl.add(e.x, np.float32(1.5)), lambda e: fl.add(e.x, 1.5)),
    "numpy int scalar": (lambda e: fl.mul(np.int64(2), e.i), lambda e: fl.mul(2, e.i)),
    "numpy scalar operator": (lambda e: e.x * np.float64(2.0), lambda e: e.x * 2.0),
    "tuple reshape": (lambda e: fl.reshape(e.x, (2, -1)), lambda e: fl.reshape(e.x, [2, 12])),
    "numpy expand": (
        lambda e: fl.expand(fl.tensor([1, 6]), np.array([4, 6])),
        lambda e: fl.expand(fl.tensor([1, 6]), [4, 6]),
    ),
    "numpy split": (
        lambda e: fl.set(e.x.split(np.int64(1), np.int32(3))),
        lambda e: fl.set(e.x.split(1, 3)),
    ),
    "numpy axis": (
        lambda e: fl.set(e.x.merge(np.int64(0))),
        lambda e: fl.set(e.x.merge(0)),
    ),
    "tuple mesh": (
        lambda e: fl.set(e.x.set_device_mesh(fl.DeviceMesh((0, 1)))),
        lambda e: fl.set(e.x.set_device_mesh(fl.DeviceMesh([0, 1]))),
    ),
    "array mesh": (
        lambda e: fl.set(e.x.set_device_mesh(fl.DeviceMesh(np.arange(2)))),
        lambda e: fl.set(e.x.set_device_mesh(fl.DeviceMesh([0, 1]))),
    ),
    "numpy mesh size": (
        lambda e: fl.set(e.x.set_device_mesh(fl.DeviceMesh.for_num_devices(np.int64(2)))),
        lambda e: fl.set(e.x.set_device_mesh(fl.DeviceMesh([0, 1]))),
    ),
    "parallel type name": (
        lambda e: fl.set(e.x.axis(np.int64(1)).parallelize("threadIdx.x").tensor),
        lambda e: fl.set(e.x.axis(1).parallelize(fl.ParallelType.TIDx).tensor),
    ),
    "numpy collective dim": (
        lambda e: e.local(lambda s: fl.all_gather(s, np.int64(0))),
        lambda e: e.local(lambda s: fl.all_gather(s, 0)),
    ),
    "one spec for one argument": (
        lambda e: fl.shard_map(fl.neg, e.mesh, (fl.ParallelType.DIDx,), (fl.ParallelType.DIDx,))(
            e.x
        ),
        lambda e: fl.shard_map(fl.neg, e.mesh, [(fl.ParallelType.DIDx,)], [("DIDx",)])(e.x),
    ),
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_accepted_spelling_means_the_canonical_one(name: str) -> None:
    spelled, canonical = SPELLINGS[name]
    assert _math(spelled) == _math(canonical)


def test_numpy_seed_and_tuple_inputs() -> None:
    env = Env()
    assert [a.tolist() for a in fl.random_inputs(env.fusion, np.int64(3))] == [
        a.tolist() for a in fl.random_inputs(env.fusion, 3)
    ]
    (out,) = fl.evaluate(env.fusion, tuple(env.inputs))
    np.testing.assert_array_equal(out, -np.ones((4, 6), np.float32))
    fl.validate(env.fusion, tuple(env.inputs), (out,))
