"""nvFuser's shardings that no contiguous chunk holds, translated (issue 24, part 5).

nvFuser's own multi-device tests shard a tensor so that a device holds a strided
or block-cyclic set of rows: DIDx on the inner part of an inner split
(`test_inner_split`: device r holds t.reshape(3, d)[:, r]), on a split of the inner
part of a split whose outer part is serial (`test_nonoutermost_split`: t.reshape(2,
d, 3)[:, r, :]), DIDy and DIDx on splits of the parts of an inner split
(`test_2d_sharded_vector`), and DIDx on a merge with a broadcast axis. A merge with an
extent-1 broadcast axis is the other axis in its layout, a box: it runs, on every
compute path. fuserlite's other layouts are boxes (plan.blocks: each device a
contiguous chunk per axis), so the strided forms are refused before any pass runs,
with a VerifyError naming the tensor, the axis and a schedule that works; these tests
hold the refusals to that, and check the rows the inner-split message says a device
would hold against nvFuser's layout.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_cli_opt import cli
from three_way import run_three_ways

import fuserlite as fl
from fuserlite.ir.sharding import is_uneven, sharded_data_axis
from fuserlite.ir.types import ParallelType

DIDx, DIDy = ParallelType.DIDx, ParallelType.DIDy


def _refusal(shape, mesh, schedule) -> str:
    with fl.Fusion() as f:
        x = fl.tensor(shape, name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        schedule(x)
        f.add_output(fl.exp(x))
    with pytest.raises(fl.VerifyError) as info:
        fl.lower(f)
    return str(info.value)


def test_inner_split():
    d = 2
    says = _refusal(
        [3 * d],
        fl.DeviceMesh.for_num_devices(d),
        lambda x: (x.split(0, d), x.axis(1).parallelize(DIDx)),
    )
    assert "x (T0) axis 1 (ideviceIdx.x3{2}): it is the inner part of a split" in says
    assert "device i would hold rows i, i + 2, i + 4, ... (a strided sharding)" in says
    assert "outer_split the axis by 2" in says
    # the rows the message names are nvFuser's layout: t.reshape(3, d)[:, r]
    t = np.arange(3 * d)
    for r in range(d):
        assert list(t.reshape(3, d)[:, r]) == [r, r + 2, r + 4]


def test_inner_split_uneven_extent_is_refused_alike():
    """7 rows over 2 devices: nvFuser's devices would hold 0 2 4 6 and 1 3 5."""
    says = _refusal(
        [7],
        fl.DeviceMesh.for_num_devices(2),
        lambda x: (x.split(0, 2), x.axis(1).parallelize(DIDx)),
    )
    assert "x (T0) axis 1" in says and "a strided sharding" in says


def test_nonoutermost_split():
    d = 2
    says = _refusal(
        [2 * d * 3],
        fl.DeviceMesh.for_num_devices(d),
        lambda x: (x.outer_split(0, 2), x.outer_split(1, d), x.axis(1).parallelize(DIDx)),
    )
    assert "x (T0) axis 1 (ideviceIdx.x4{2}): it splits a part of an axis that a split made" in (
        says
    )
    assert "outer_split the axis by 2 and parallelize the outer part first" in says


def test_2d_sharded_vector():
    says = _refusal(
        [2 * 2 * 2 * 3],
        fl.DeviceMesh([[0, 1], [2, 3]]),
        lambda x: (
            x.split(0, 2 * 3),
            x.outer_split(0, 2),
            x.axis(0).parallelize(DIDy),
            x.outer_split(2, 2),
            x.axis(2).parallelize(DIDx),
        ),
    )
    assert "x (T0) axis 0 (ideviceIdx.y4{2}): it splits a part of an axis that a split made" in (
        says
    )


def _square_fusion(shape, mesh, schedule) -> fl.Fusion:
    """x * x + 1, x of `shape` on `mesh` scheduled by `schedule` (the output propagated):
    exactly rounded, so every path's values are numpy's bit for bit."""
    with fl.Fusion() as f:
        x = fl.tensor(shape, name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        schedule(x)
        f.add_output(fl.add(fl.mul(x, x), 1.0))
    return f


def assert_runs_and_reads_back(f: fl.Fusion, capsys, monkeypatch, tmp_path) -> dict:
    """f's values equal the numpy reference on every compute path (numpy, interpret,
    compiled where a compiler is); its .fus and `fuserlite print` text read back to
    themselves, and the read-back fusion computes the same values. The per-device
    outputs of the interpreted run."""
    inputs = fl.random_inputs(f, seed=7)
    runs = run_three_ways(f, inputs)
    for outs in runs.values():
        np.testing.assert_array_equal(outs[0], inputs[0] * inputs[0] + np.float32(1))
    fus = fl.to_fus(f)
    again = fl.parse(fus)
    assert fl.to_fus(again) == fus and again.print_transforms() == f.print_transforms()
    np.testing.assert_array_equal(fl.FusionExecutor(again).run(inputs)[0], runs["interpret"][0])
    path = tmp_path / "strided.fus"
    path.write_text(fus)
    for extra in ([], ["--lowered"]):
        code, text, err = cli(capsys, monkeypatch, "print", path, *extra)
        assert code == 0, err
        assert cli(capsys, monkeypatch, "opt", "-", stdin=text) == (0, text, "")
    return fl.FusionExecutor(f, compute="interpret").run_per_device(inputs)


@pytest.mark.parametrize("n", [8, 7], ids=["even", "uneven"])
@pytest.mark.parametrize("broadcast_outer", [False, True], ids=["[n, 1]", "[1, n]"])
def test_merge_with_broadcast(n, broadcast_outer, capsys, monkeypatch, tmp_path):
    """DIDx on the outer split of merge(x{n}, b{1}): the merged axis is x's axis laid out
    alike, so device i holds torch.chunk's rows of it, as an outer split of the axis
    itself gives (nvFuser's merge of a broadcast); nothing moves."""
    shape = [1, n] if broadcast_outer else [n, 1]
    f = _square_fusion(
        shape,
        fl.DeviceMesh.for_num_devices(2),
        lambda x: (x.merge(0, 1), x.outer_split(0, 2), x.axis(0).parallelize(DIDx)),
    )
    per_device = assert_runs_and_reads_back(f, capsys, monkeypatch, tmp_path)
    rows = [4, 4] if n == 8 else [4, 3]
    want = [(1, r) if broadcast_outer else (r, 1) for r in rows]
    assert [outs[0].shape for outs in per_device.values()] == want
    assert fl.FusionExecutor(f).communications == []
    (x,) = f.inputs
    assert sharded_data_axis(x) == int(broadcast_outer)
    assert is_uneven(x) == (n == 7)


def test_merge_with_broadcast_of_an_indexed_op_finds_its_global_rows():
    """rand_like's numbers are a function of each element's global index: a device of a
    merge-with-broadcast sharding draws its own rows' numbers (its shard start is that
    of the merged axis's chunk)."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as f:
        x = fl.tensor([7, 1], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        r = fl.rand_like(x, seed=3)
        r.set_device_mesh(mesh)
        r.merge(0, 1)
        r.outer_split(0, 2)
        r.axis(0).parallelize(DIDx)
        f.add_output(fl.add(r, x))
    inputs = fl.random_inputs(f, seed=1)
    for outs in run_three_ways(f, inputs).values():
        np.testing.assert_array_equal(outs[0], fl.evaluate(f, inputs)[0])


@pytest.mark.parametrize(
    "shape, says",
    [
        ([8, 2], "it is a merge of axes, whose chunks fuserlite does not hold"),
        ([8, 3], "it is a merge of axes, whose chunks fuserlite does not hold"),
    ],
)
def test_a_merge_of_data_axes_stays_refused(shape, says):
    """Only an extent-1 broadcast axis merges away: a merge of two data axes is not
    either axis's chunks."""
    text = _refusal(
        shape,
        fl.DeviceMesh.for_num_devices(2),
        lambda x: (x.merge(0, 1), x.outer_split(0, 2), x.axis(0).parallelize(DIDx)),
    )
    assert "x (T0) axis 0" in text and says in text
