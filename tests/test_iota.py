"""iota, the op with no tensor operands: start + step * i at each element's global
index i, on every compute path, sharded with no communication, in .fus and printed."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from axis_index_cases import positions, positions_expected
from pointwise_cases import run_everywhere, whole_kernel
from test_cli_opt import cli

import fuserlite as fl
from fuserlite.ir.placement import Placement
from fuserlite.kernel.cuda import cuda_source
from fuserlite.schedule.pointwise import schedule_pointwise
from fuserlite.schedule.shard import shard_as, shard_axis

CASES = [  # dtype, start, step: what torch.arange(start, start + n * step, step) gives
    ("int64", 0, 1),
    ("int32", 7, -3),
    ("int64", -(2**40), 2**30),
    ("float32", 0.5, 0.25),
    ("float64", -1.0, 1e-3),
    ("bfloat16", 1.0, 0.5),  # computed in float, rounded to bfloat16 where stored
    ("float16", -2.0, 0.125),
]


def _iota_fusion(n: int, dtype: str, start, step) -> fl.Fusion:
    with fl.Fusion() as fusion:
        fusion.add_output(fl.iota(n, dtype, start, step))
    return fusion


@pytest.mark.parametrize("dtype,start,step", CASES, ids=[c[0] + str(c[2]) for c in CASES])
def test_iota_on_every_compute_path(dtype: str, start, step) -> None:
    """A kernel with no inputs, its values at every index of a 300-element grid."""
    n = 300
    fusion = _iota_fusion(n, dtype, start, step)
    kind = np.float32 if "16" in dtype else fl.DType.parse(dtype).numpy
    want = (np.asarray(start, kind) + np.asarray(step, kind) * np.arange(n).astype(kind)).astype(
        fl.DType.parse(dtype).numpy
    )
    for run in run_everywhere(fusion, []):  # the reference, compiled, interpreted, numpy
        np.testing.assert_array_equal(run[0], want)


def test_a_kernel_with_no_inputs_is_scheduled_and_emitted() -> None:
    kernel = whole_kernel(_iota_fusion(1000, "float32", 0.0, 2.0))
    assert kernel.inputs == [] and len(kernel.outputs) == 1
    schedule_pointwise(kernel)
    source = cuda_source([kernel])
    assert "static_cast<float>(2.0) * static_cast<float>(" in source, source


@pytest.mark.parametrize("n", [16, 13], ids=["even", "uneven"])
def test_sharded_iota_computes_its_shard_locally(n: int) -> None:
    """Each of 4 devices computes its own block's global indices (13: blocks of 4, 4, 4,
    1): positions scale x, a mask keeps x's first 5 columns; nothing moves."""
    from three_way import run_three_ways

    fusion = positions(4, n)
    (x,) = fl.random_inputs(fusion, seed=1)
    runs = run_three_ways(fusion, [x])
    for outs in runs.values():
        for got, want in zip(outs, positions_expected(x)):
            np.testing.assert_array_equal(got, want)
    ex = fl.FusionExecutor(fusion)
    assert ex.communications == []
    per_device = ex.run_per_device([x])
    chunk = -(-n // 4)
    for d, outs in per_device.items():
        block = (0.5 + 0.25 * np.arange(d * chunk, min(n, (d + 1) * chunk))).astype(np.float32)
        np.testing.assert_array_equal(outs[2], block)
    assert "const long long didx" in cuda_source(ex.program)


def _on_2x4(shards: tuple) -> fl.Fusion:
    """5 * iota(19, int32, 3, 2), both tensors sharded as `shards` on a 2x4 mesh."""
    mesh = fl.DeviceMesh.for_shape([2, 4])
    with fl.Fusion() as fusion:
        i = fl.iota(19, "int32", 3, 2)
        fusion.add_output(fl.mul(i, 5))
    for tv in (i, fusion.outputs[0]):
        shard_as(tv, mesh, Placement(2, shards))
    return fusion


@pytest.mark.parametrize("shards", [((0, 1),), ((1,),), ((0,),)], ids=["both axes", "DIDx", "DIDy"])
def test_iota_sharded_on_a_2x4_mesh(shards) -> None:
    """Nested over both mesh axes (8 blocks; schedule-pointwise leaves a nested sharding
    unscheduled, so it runs op by op), or over one (replicated over the other)."""
    from three_way import run_three_ways

    fusion = _on_2x4(shards)
    for outs in run_three_ways(fusion, []).values():
        np.testing.assert_array_equal(outs[0], 5 * (3 + 2 * np.arange(19, dtype=np.int32)))
    assert fl.FusionExecutor(fusion).communications == []


def test_an_unsharded_iota_read_by_a_sharded_op_takes_its_sharding() -> None:
    """Left unsharded, it takes the sharding of the op that reads it (propagate-shardings
    propagates backward): each device computes its own block, nothing moves."""
    with fl.Fusion() as fusion:
        x = fl.tensor([2, 10])
        fusion.add_input(x)
        shard_axis(x, 1, fl.DeviceMesh.for_num_devices(4))
        fusion.add_output(fl.add(x, fl.iota(10, "float32")))
    (a,) = fl.random_inputs(fusion)
    ex = fl.FusionExecutor(fusion)
    np.testing.assert_array_equal(ex.run([a])[0], a + np.arange(10, dtype=np.float32))
    assert ex.communications == []


def test_iota_in_fus_text_round_trips() -> None:
    text = (
        "mesh m = [0, 1]\ni = iota(6)\nf = iota(6, float32, 0.5, step=2)\n"
        "y = mul(i, f)\noutput y\nset_mesh i m\nouter_split i axis 0 by 2\n"
        "parallelize i axis 0 DIDx\n"
    )
    fusion = fl.parse(text)
    assert fl.evaluate(fusion, [])[0].tolist() == [0.0, 2.5, 9.0, 19.5, 34.0, 52.5]
    again = fl.parse(fl.to_fus(fusion))
    assert fl.to_fus(again) == fl.to_fus(fusion)
    assert "iota(6, int64, 0, 1)" in fl.to_fus(fusion)


def test_iota_printed_reads_back_through_opt(capsys, monkeypatch, tmp_path) -> None:
    """`fuserlite print | fuserlite opt -` gives the text back, before and after lowering."""
    path = tmp_path / "positions.fus"
    path.write_text(fl.to_fus(positions(2, 8)))
    for extra in ([], ["--lowered"]):
        code, text, err = cli(capsys, monkeypatch, "print", path, *extra)
        assert code == 0, err
        assert "iota(8, double(0.5), double(0.25), float);" in text
        assert "iota(8, int64_t(0), int64_t(1), int64_t);" in text
        assert cli(capsys, monkeypatch, "opt", "-", stdin=text) == (0, text, "")


def test_iota_without_a_fusion_is_a_clear_error() -> None:
    with pytest.raises(fl.FusionError, match="no active fusion"):
        fl.iota(4)


@pytest.mark.parametrize(
    "call, message",
    [
        ("iota(0)", "n \\(the number of values\\) must be an integer in 1.."),
        ("iota(4, bool)", "dtype bool holds no counts"),
        ("iota(4, int32, 1.5)", "start must be an integer, got 1.5"),
        ("iota(4, float32, x)", "start must be a finite number"),
        ("iota(4, dtype=int8)", "must be a dtype"),
    ],
)
def test_bad_iota_in_fus_names_the_argument(call: str, message: str) -> None:
    with pytest.raises(fl.ParseError, match=message):
        fl.parse(f"input x: float32[4]\ny = {call}\noutput y\n")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_the_sharded_iota_kernels(tmp_path) -> None:
    """The positions program on 4 devices (uneven) and an iota sharded on the rows of a
    2x4 mesh: the device indices (didx, didy) are kernel parameters; CUDA through nvcc
    -ptx."""
    fusions = {"positions": positions(4, 13), "rows": _on_2x4(((0,),))}
    source = "".join(cuda_source(fl.lower(f), prefix=name) for name, f in fusions.items())
    assert "const long long didy" in source
    cu = tmp_path / "iota.cu"
    cu.write_text(source)
    subprocess.run(
        ["nvcc", "-ptx", "-o", str(tmp_path / "iota.ptx"), str(cu)], check=True, timeout=300
    )
