"""Normalizations, softmax and backward helpers (composites): reference values against
fuserlite.numerics.nn, their sharding (rows sharded: no communication; the
normalized axis sharded: an Allreduce of [rows] statistics per sum), bad input."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import fuserlite as fl
from fuserlite.numerics import nn
from fuserlite.program.communication import CommKind
from fuserlite.schedule.shard import shard_axis

BF16 = np.dtype(ml_dtypes.bfloat16)

# name -> (builder on x [R, N], w [N], b [N]; numpy reference on arrays)
CASES = {
    "layer_norm": (
        lambda x, w, b: fl.layer_norm(x, [x.shape[-1]], w, b, eps=1e-3),
        lambda x, w, b: nn.layer_norm(x, [x.shape[-1]], w, b, eps=1e-3)[0],
    ),
    "rms_norm": (
        lambda x, w, b: fl.rms_norm(x, [x.shape[-1]], w),
        lambda x, w, b: nn.rms_norm(x, [x.shape[-1]], w)[0],
    ),
    "softmax": (lambda x, w, b: fl.softmax(x, -1), lambda x, w, b: nn.softmax(x, -1)),
    "log_softmax": (lambda x, w, b: fl.log_softmax(x, 1), lambda x, w, b: nn.log_softmax(x, 1)),
    "var": (lambda x, w, b: fl.var_mean(x, [1])[0], lambda x, w, b: nn.var_mean(x, [1])[0]),
    "mean": (
        lambda x, w, b: fl.var_mean(x, 1, keepdim=True)[1],
        lambda x, w, b: nn.var_mean(x, [1], keepdim=True)[1],
    ),
    "var_correction0": (
        lambda x, w, b: fl.var_mean(x, [0, 1], correction=0)[0],
        lambda x, w, b: nn.var_mean(x, [0, 1], correction=0)[0],
    ),
    "gelu_backward": (
        lambda x, w, b: fl.gelu_backward(w, x),
        lambda x, w, b: nn.gelu_backward(w, x),
    ),
    "tanh_backward": (
        lambda x, w, b: fl.tanh_backward(x, w),
        lambda x, w, b: nn.tanh_backward(x, w),
    ),
}


def _fusion(case: str, dtype: str, shape=(8, 16), mesh_axis: int | None = None, devices=4):
    build = CASES[case][0]
    with fl.Fusion() as f:
        x = fl.tensor(shape, dtype, name="x")
        w = fl.tensor(shape[-1:], dtype, name="w")
        b = fl.tensor(shape[-1:], dtype, name="b")
        for t in (x, w, b):
            f.add_input(t)
        if mesh_axis is not None:
            mesh = fl.DeviceMesh.for_num_devices(devices)
            shard_axis(x, mesh_axis, mesh)
            w.set_device_mesh(mesh)
            b.set_device_mesh(mesh)
        f.add_output(build(x, w, b))
    return f


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_reference_matches_numerics(case: str, dtype: str) -> None:
    f = _fusion(case, dtype)
    inputs = fl.random_inputs(f, seed=3)
    (got,) = fl.evaluate(f, inputs)
    want = CASES[case][1](*inputs)
    assert got.dtype == want.dtype == (BF16 if dtype == "bfloat16" else np.float32)
    # both compute in float32 and round once: equal up to float32's summation order
    np.testing.assert_allclose(
        got.astype(np.float32), want.astype(np.float32), rtol=1e-5, atol=1e-5
    )


def _run(f: fl.Fusion) -> list:
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, seed=1)
    fl.validate(f, inputs, ex.run(inputs))
    return ex.communications


@pytest.mark.parametrize("case", ["layer_norm", "rms_norm", "softmax", "log_softmax", "var"])
def test_rows_sharded_need_no_communication(case: str) -> None:
    assert [c for c in _run(_fusion(case, "bfloat16", mesh_axis=0)) if c.kind.is_collective] == []


@pytest.mark.parametrize(
    "case,allreduces", [("layer_norm", 2), ("rms_norm", 1), ("softmax", 2), ("var", 2)]
)
def test_sharded_normalized_axis_completes_statistics_with_allreduces(case, allreduces) -> None:
    comms = [c for c in _run(_fusion(case, "float32", mesh_axis=1)) if c.kind.is_collective]
    # one Allreduce of the [rows] statistics per sum or max, never the [rows, N] rows
    assert [c.kind for c in comms] == [CommKind.Allreduce] * allreduces
    assert all(c.input.shape == (8,) for c in comms)


def test_layer_norm_from_fus_text_prints_its_primitives() -> None:
    f = fl.parse(
        "input x: float32[4, 8]\ninput w: float32[8]\n"
        "y = layer_norm(x, [8], w, eps=0.01)\noutput y\n"
    )
    text = fl.to_fus(f)
    assert "layer_norm" not in text and "sum(" in text and "sqrt(" in text
    x, w = fl.random_inputs(f)
    np.testing.assert_allclose(
        fl.evaluate(f, [x, w])[0], nn.layer_norm(x, [8], w, eps=0.01)[0], rtol=1e-5, atol=1e-6
    )


def test_layer_norm_backward_matches_numerics() -> None:
    with fl.Fusion() as f:
        dy, x = fl.tensor([6, 8], name="dy"), fl.tensor([6, 8], name="x")
        w, b = fl.tensor([8], name="w"), fl.tensor([8], name="b")
        for t in (dy, x, w, b):
            f.add_input(t)
        for out in fl.layer_norm_backward(dy, x, [8], w, b):
            f.add_output(out)
    inputs = fl.random_inputs(f, seed=2)
    dy, x, w, b = inputs
    _, mean, invstd = nn.layer_norm(x, [8], w, b)
    want = nn.layer_norm_backward(dy, x, [8], mean, invstd, w, b)
    for got, ref in zip(fl.evaluate(f, inputs), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_layer_norm_backward_with_rows_sharded_reduces_dweight_once() -> None:
    """Sequence parallel: dx stays sharded; dweight and dbias are partial sums over the
    rows, completed by one Allreduce each."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        dy, x = fl.tensor([6, 8], name="dy"), fl.tensor([6, 8], name="x")
        w, b = fl.tensor([8], name="w"), fl.tensor([8], name="b")
        for t in (dy, x, w, b):
            f.add_input(t)
        shard_axis(dy, 0, mesh)
        shard_axis(x, 0, mesh)
        w.set_device_mesh(mesh)
        b.set_device_mesh(mesh)
        for out in fl.layer_norm_backward(dy, x, [8], w, b):
            f.add_output(out)
    comms = [c for c in _run(f) if c.kind.is_collective]
    assert sorted(c.kind.value for c in comms) == ["Allreduce", "Allreduce"]
    assert all(c.input.shape == (8,) for c in comms)


@pytest.mark.parametrize(
    "build,match",
    [
        (
            lambda x: fl.layer_norm(x, [4]),
            r"layer_norm: normalized_shape \[4\] must be the trailing",
        ),
        (lambda x: fl.layer_norm(x, [2, 3, 8]), r"trailing axes of x \(T0\)\[3, 8\]"),
        (
            lambda x: fl.rms_norm(x, [8], x),
            r"rms_norm: weight x \(T0\)\[3, 8\] must have the normalized",
        ),
        (
            lambda x: fl.softmax(x, 2),
            r"softmax: x \(T0\)\[3, 8\] has 2 axes; dim 2 is out of range",
        ),
        (lambda x: fl.var_mean(x, [1, -1]), r"var_mean: dims \[1, -1\] must name distinct axes"),
        (lambda x: fl.var_mean(x, [1], correction=-1), "var_mean: correction"),
        (lambda x: fl.layer_norm(x, [8], eps="a"), "layer_norm: eps"),
        (lambda x: fl.log_softmax(fl.tensor([3], "int32", name="i"), 0), r"i \(T1\)\[3\] is int32"),
    ],
)
def test_bad_input_names_the_op_and_shapes(build, match) -> None:
    with fl.Fusion():
        x = fl.tensor([3, 8], name="x")
        with pytest.raises(fl.FusionError, match=match):
            build(x)


def test_var_mean_from_fus_text_names_both_results() -> None:
    f = fl.parse("input x: float32[4, 8]\nv, m = var_mean(x, [1])\noutput v\noutput m\n")
    (x,) = fl.random_inputs(f)
    for got, want in zip(fl.evaluate(f, [x]), nn.var_mean(x, [1])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
