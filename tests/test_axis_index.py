"""axis_index inside shard_map: each device's index along a mesh axis, a local int32
scalar (as JAX gives it), in the global view an iota over the axis sharded on it."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from axis_index_cases import (
    DIDx,
    grid_indices,
    grid_indices_expected,
    scaled_by_index,
    scaled_by_index_expected,
)
from three_way import run_three_ways

import fuserlite as fl
from fuserlite.kernel.cuda import cuda_source


@pytest.mark.parametrize("d", [2, 4, 8])
def test_x_times_axis_index_and_its_one_hot(d: int) -> None:
    """JAX's `x * axis_index('i')` and `iota(D) == axis_index`, on every compute path;
    device k holds k, its block times k and row k of the identity; nothing moves."""
    fusion = scaled_by_index(d)
    (x,) = fl.random_inputs(fusion, seed=2)
    for outs in run_three_ways(fusion, [x]).values():
        for got, want in zip(outs, scaled_by_index_expected(x, d)):
            np.testing.assert_array_equal(got, want)
    ex = fl.FusionExecutor(fusion)
    assert ex.communications == []
    for k, (scaled, hot, index) in ex.run_per_device([x]).items():
        assert index.tolist() == [k] and hot.tolist() == [float(j == k) for j in range(d)]
        np.testing.assert_array_equal(scaled, x[3 * k : 3 * k + 3] * k)


def test_on_a_2x4_mesh_each_index_names_one_axis() -> None:
    fusion = grid_indices()
    (x,) = fl.random_inputs(fusion, seed=4)
    for outs in run_three_ways(fusion, [x]).values():
        for got, want in zip(outs, grid_indices_expected(x)):
            np.testing.assert_array_equal(got, want)
    ex = fl.FusionExecutor(fusion)
    assert ex.communications == []
    mesh = fl.DeviceMesh.for_shape([2, 4])
    for device, (block, index) in ex.run_per_device([x]).items():
        row, col = mesh.coordinates(device)
        assert index.tolist() == [col]
        np.testing.assert_array_equal(
            block - x[2 * row : 2 * row + 2, 3 * col : 3 * col + 3], 10 * row + col
        )


def test_the_local_value_is_an_int32_scalar_and_the_global_an_iota() -> None:
    seen = {}
    with fl.Fusion() as fusion:
        x = fl.tensor([8])
        fusion.add_input(x)

        def fn(t):
            i = fl.axis_index()
            seen["local"] = (i.shape, i.dtype)
            return fl.mul(t, i)

        fusion.add_output(fl.shard_map(fn, fl.DeviceMesh.for_num_devices(4), (DIDx,), (DIDx,))(x))
    assert seen["local"] == ((), fl.DType.int32)
    text = fusion.print_math()
    assert (
        "T2_l_int[ ideviceIdx.x3{4} ] (DeviceMesh{0 1 2 3})\n   = iota(4, int64_t(0), int64_t(1), int);"
        in text
    )


def test_axis_index_outside_shard_map_and_bad_axes_are_clear_errors() -> None:
    with pytest.raises(fl.FusionError, match="axis_index is a collective: it runs only inside"):
        fl.axis_index()

    def traced(mesh: fl.DeviceMesh, axis: object) -> None:
        with fl.Fusion():
            x = fl.tensor([8])
            spec = (mesh.parallel_types[-1],)
            fl.shard_map(lambda t: fl.mul(t, fl.axis_index(axis)), mesh, spec, spec)(x)

    with pytest.raises(fl.FusionError, match="axis_index: axis must be a mesh axis of"):
        traced(fl.DeviceMesh.for_num_devices(4), "DIDy")
    with pytest.raises(fl.FusionError, match="axis_index: .* has axes DIDy, DIDx; say which"):
        traced(fl.DeviceMesh.for_shape([2, 4]), None)


FUS = """mesh m = [[0, 1, 2, 3], [4, 5, 6, 7]]
input x: float32[4, 12] on m
shard_map m (x [DIDy, DIDx]) -> (y [DIDy, DIDx], i [DIDx])
    j = axis_index(DIDy)
    k = axis_index(axis=DIDx)
    t = mul(j, 10)
    s = add(t, k)
    y = add(x, s)
    one = reshape(k, [1])
    return y, one
end
output y
output i
"""


def test_axis_index_in_a_fus_shard_map_block() -> None:
    fusion = fl.parse(FUS)
    (x,) = fl.random_inputs(fusion, seed=4)
    for got, want in zip(fl.FusionExecutor(fusion).run([x]), grid_indices_expected(x)):
        np.testing.assert_array_equal(got, want)
    written = fl.to_fus(fusion)
    assert "axis_index(axis=DIDy)" in written and "axis_index(axis=DIDx)" in written
    assert fl.to_fus(fl.parse(written)) == written


def test_iota_inside_shard_map_is_the_same_on_every_device() -> None:
    """A local iota is invariant: made once, replicated; leaving it unreplicated over an
    axis needs no spec."""
    with fl.Fusion() as fusion:
        x = fl.tensor([8])
        fusion.add_input(x)
        mesh = fl.DeviceMesh.for_num_devices(4)
        y, r = fl.shard_map(
            lambda t: (fl.add(t, fl.iota(2, "float32")), fl.iota(3)), mesh, (DIDx,), ((DIDx,), None)
        )(x)
        fusion.add_output(y)
        fusion.add_output(r)
    (a,) = fl.random_inputs(fusion)
    y_out, r_out = fl.FusionExecutor(fusion).run([a])
    np.testing.assert_array_equal(y_out, a + np.tile(np.arange(2, dtype=np.float32), 4))
    assert r_out.tolist() == [0, 1, 2]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_the_axis_index_kernels(tmp_path) -> None:
    """Each device's index computed in its pointwise kernel (the views of the specs are
    kernels of their own): didx and didy are kernel parameters."""
    source = cuda_source(fl.lower(grid_indices())) + cuda_source(fl.lower(scaled_by_index(4)), "d1")
    assert "const long long didy" in source and "const long long didx" in source
    cu = tmp_path / "axis_index.cu"
    cu.write_text(source)
    subprocess.run(
        ["nvcc", "-ptx", "-o", str(tmp_path / "axis_index.ptx"), str(cu)], check=True, timeout=300
    )
