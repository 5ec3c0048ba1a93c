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

import math

import numpy as np
import pytest
from strided_cases import cyclic_gathered, cyclic_square, shard_cyclically, vector_2d_gathered
from test_cli_opt import cli
from three_way import run_three_ways

import fuserlite as fl
from fuserlite.ir.errors import RedistributionError
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import describe_sharding, is_uneven, placement, sharded_data_axis
from fuserlite.ir.types import ParallelType
from fuserlite.kernel.cuda import cuda_source
from fuserlite.program.parser import parse_printed
from fuserlite.program.shards import device_box, device_slices
from fuserlite.schedule.shard import shard_axis

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


@pytest.mark.parametrize("d, n", [(2, 6), (2, 7), (4, 13)], ids=["3d", "uneven", "13 over 4"])
def test_inner_split(d, n, capsys, monkeypatch, tmp_path):
    """nvFuser's test_inner_split: x[n] split(0, d), DIDx on the inner part: device r holds
    rows r, r + d, ... (t.reshape(3, d)[:, r] where n = 3d; 7 over 2: 0 2 4 6 and 1 3 5),
    computes its own rows in place and the assembled output is the reference's."""
    f = cyclic_square(d, n, cols=None)
    per_device = assert_runs_and_reads_back(f, capsys, monkeypatch, tmp_path)
    (x,) = fl.random_inputs(f, seed=7)
    for r, outs in per_device.items():
        np.testing.assert_array_equal(outs[0], x[r::d] * x[r::d] + np.float32(1))
    if n == 3 * d:
        for r in range(d):
            assert list(np.arange(n)[device_slices(f.inputs[0], r)]) == list(
                np.arange(n).reshape(3, d)[:, r]
            )
    ex = fl.FusionExecutor(f)
    assert ex.communications == []
    (xin,) = f.inputs
    assert str(placement(xin)) == "(C0)" and is_uneven(xin) == (n % d != 0)
    assert "sharded cyclically on axis 0 (deviceIdx.x: device i holds rows i, i + " in (
        describe_sharding(xin)
    )


def test_inner_split_of_a_2d_tensor_and_its_kernels(capsys, monkeypatch, tmp_path):
    """Rows r, r + 2, ... of x[7, 3]: the pointwise kernel indexes its local rows 0, 1, ...
    and predicates row 2 * o + didx < 7 on the short device."""
    f = cyclic_square(2, 7)
    per_device = assert_runs_and_reads_back(f, capsys, monkeypatch, tmp_path)
    assert [outs[0].shape for outs in per_device.values()] == [(4, 3), (3, 3)]
    assert "didx" in cuda_source(fl.FusionExecutor(f).program)


def _cyclic_then(then, n: int = 6):
    """exp(x), x[n, 4] cyclic over 2 devices, then `then`(fusion, mesh, exp(x))."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as f:
        x = fl.tensor([n, 4], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        x.split(0, 2)
        x.axis(1).parallelize(DIDx)
        f.add_output(then(f, mesh, fl.exp(x)))
    return f


@pytest.mark.parametrize("d, n", [(2, 6), (2, 7), (4, 13), (4, 3)])
def test_a_cyclic_shard_gathered_whole_is_a_strided_allgather(d, n, capsys, monkeypatch, tmp_path):
    """exp on each device's rows r, r + d, ..., then one Allgather of every device's
    ceil(n/d) rows (padded where d does not divide n; 3 over 4: device 3 holds none),
    interleaved back into row order: the reference's values on every path, the printed
    program read back runs the same."""
    f = cyclic_gathered(d, n)
    inputs = fl.random_inputs(f, seed=2)
    runs = run_three_ways(f, inputs)
    ex = fl.FusionExecutor(f, compute="interpret")
    rows = -(-n // d)
    sizing = "even" if n % d == 0 else "padded"
    assert [(c.kind.value, c.bytes_per_device, c.sizing.value) for c in ex.communications] == [
        ("Allgather", (d - 1) * rows * 3 * 4, sizing)
    ]
    text = str(ex.program)
    back = parse_printed(text)
    assert str(back) == text
    again = fl.FusionExecutor(back, compute="interpret").run(inputs)[0]
    np.testing.assert_array_equal(again, runs["interpret"][0])
    for outs in ex.run_per_device(inputs).values():  # every device holds the whole
        np.testing.assert_array_equal(outs[0], runs["interpret"][0])
    if d == 2:
        path = tmp_path / "gathered.fus"
        path.write_text(fl.to_fus(f))
        for extra in ([], ["--lowered"]):
            code, printed, err = cli(capsys, monkeypatch, "print", path, *extra)
            assert code == 0, err
            assert cli(capsys, monkeypatch, "opt", "-", stdin=printed) == (0, printed, "")


def _cyclic_input(f, name, shape, mesh, block: int = 1) -> fl.TensorView:
    """An input of `shape` on `mesh` whose axis 0 is split by the DIDx size, DIDx inner
    (in blocks of `block` > 1: 12 rows, strided_cases.shard_cyclically)."""
    x = fl.tensor(shape if block == 1 else [12, *shape[1:]], name=name)
    f.add_input(x)
    x.set_device_mesh(mesh)
    shard_cyclically(x, mesh.axis_size(DIDx), block)
    return x


def _row_sums(f, mesh, block=1):
    f.add_output(fl.sum(fl.exp(_cyclic_input(f, "x", [7, 5], mesh, block)), [1]))


def _minus_row_max(f, mesh, block=1):
    x = _cyclic_input(f, "x", [7, 5], mesh, block)
    f.add_output(fl.sub(x, fl.broadcast(fl.max(x, [1]), [False, True])))


def _two_inputs_and_a_bias(f, mesh, block=1):
    x, y = (_cyclic_input(f, n, [7, 5], mesh, block) for n in "xy")
    b = fl.tensor([1, 5], name="b")
    f.add_input(b)
    b.set_device_mesh(mesh)
    f.add_output(fl.add(fl.mul(x, y), b))


def _matmul(f, mesh, block=1):
    """A GEMM of the cyclic rows of x by a replicated w: the output's rows alike."""
    w = fl.tensor([4, 5], name="w")
    f.add_input(w)
    w.set_device_mesh(mesh)
    f.add_output(fl.matmul(fl.exp(_cyclic_input(f, "x", [7, 4], mesh, block)), w))


def _transposed(f, mesh, block=1):
    f.add_output(fl.permute(fl.exp(_cyclic_input(f, "x", [6, 5], mesh, block)), [1, 0]))


def _on_2x2(f, mesh, block=1):
    """Rows cyclic over DIDx, columns in blocks over DIDy; gathered over DIDx only."""
    m = fl.DeviceMesh([[0, 1], [2, 3]])
    x = _cyclic_input(f, "x", [7, 5], m, block)
    shard_axis(x, 1, m, DIDy)
    y = fl.mul(x, 3.0)
    y.set_device_mesh(m)
    shard_axis(y, 1, m, DIDy)
    f.add_output(y)


@pytest.mark.parametrize(
    "build, moved",
    [
        (_row_sums, []),
        (_minus_row_max, []),
        (_two_inputs_and_a_bias, []),
        (_transposed, []),
        (_matmul, []),
        (_on_2x2, ["Allgather"]),
    ],
    ids=["row sums", "minus row max", "two inputs and a bias", "transposed", "matmul", "2x2 mesh"],
)
@pytest.mark.parametrize("block", [1, 3], ids=["cyclic", "blocks of 3"])
def test_a_cyclic_shard_through_other_ops(build, moved, block):
    """Row-wise reductions, a broadcast operand, a transpose and a second mesh axis over a
    cyclic shard, in blocks too: each device computes its own rows; the reference's
    values on every path."""
    with fl.Fusion() as f:
        build(f, fl.DeviceMesh.for_num_devices(2), block)
    run_three_ways(f, fl.random_inputs(f, seed=3))
    assert [c.kind.value for c in fl.FusionExecutor(f).communications] == moved


def test_a_block_shard_is_not_made_cyclic():
    """x cyclic + y in blocks: no collective makes y's blocks cyclic; the error says so."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as f:
        x = _cyclic_input(f, "x", [7, 5], mesh)
        y = fl.tensor([7, 5], name="y")
        f.add_input(y)
        shard_axis(y, 0, mesh)
        f.add_output(fl.add(x, y))
    with pytest.raises(fl.LoweringError, match=r"from \(S0\) to \(C0\): the target shards"):
        fl.FusionExecutor(f)


def _blocks(f, mesh, y):
    shard_axis(y, 0, mesh)
    return y


def _attention(f, mesh, y):
    """sdpa with the query rows cyclic: its causal diagonal reads where its rows start."""
    q, k, v = (fl.tensor([2, 2, 6, 4], name=n) for n in "qkv")
    for t in (q, k, v):
        f.add_input(t)
        t.set_device_mesh(mesh)
    q.split(2, 2)
    q.axis(3).parallelize(DIDx)
    return fl.sdpa(q, k, v, is_causal=True)[0]


@pytest.mark.parametrize(
    "then, error, says",
    [
        (_blocks, fl.LoweringError, "from (C0) to (S0): the source shards tensor axis 0"),
        (
            lambda f, mesh, y: fl.sum(y, [0]),
            fl.LoweringError,
            "from (C0) to (S0): the source shards tensor axis 0 cyclically",
        ),
        (
            lambda f, mesh, y: fl.add(fl.rand_like(y), y),
            fl.LoweringError,
            "rand_like(...) computes values from their global index, but its axis iS",
        ),
        (_attention, fl.ExecutionError, "sdpa, which reads where its rows start, cannot read"),
    ],
    ids=["to blocks", "reduced", "rand_like", "sdpa"],
)
def test_what_a_cyclic_shard_cannot_feed_is_a_clear_error(then, error, says):
    """A cyclic shard is no box: a resharding of it (the collectives move blocks), an op of
    global indices and sdpa (which reads where its rows start) refuse it, naming the tensors,
    the axis and the fix (a block shard: outer_split), rather than compute wrong values."""
    f = _cyclic_then(then)
    with pytest.raises(error) as info:
        fl.FusionExecutor(f, compute="interpret").run(fl.random_inputs(f, seed=1))
    assert says in str(info.value)
    assert "outer_split the axis" in str(info.value) or "outer_split it" in str(info.value)


def test_a_cyclic_shard_has_no_dtensor_placement():
    f = cyclic_square(2, 6)
    with pytest.raises(fl.FusionError, match=r"x \(T0\): axis 0 is sharded cyclically"):
        _ = f.inputs[0].placements


@pytest.mark.parametrize(
    "schedule, says",
    [
        (
            lambda x: (x.split(0, 4), x.axis(1).parallelize(DIDx)),
            "it is the inner part of a split, what one device holds; parallelize the outer part",
        ),
        (
            lambda x: (x.outer_split(0, 2), x.axis(1).parallelize(DIDx)),
            "it is the inner part of a split, what one device holds; parallelize the outer part",
        ),
        (
            lambda x: (x.outer_split(0, 4), x.axis(1).parallelize(DIDx)),
            "it is the inner part of an outer split by 4, not of a split by 2: write the "
            "cyclic shard as split(axis, 2)",
        ),
    ],
    ids=["split by 4", "outer split by 2", "outer split by 4"],
)
def test_an_inner_part_of_another_extent_is_refused(schedule, says):
    """x[8] on 2 devices: the inner part must be of extent d, of a split by d."""
    text = _refusal([8], fl.DeviceMesh.for_num_devices(2), schedule)
    assert "x (T0) axis 1" in text and says in text


@pytest.mark.parametrize("d", [2, 4])
def test_nonoutermost_split(d, capsys, monkeypatch, tmp_path):
    """nvFuser's test_nonoutermost_split: x[2 * d * 3] outer_split(0, 2), outer_split(1, d),
    DIDx on axis 1: device r holds t.reshape(2, d, 3)[:, r, :], blocks of 3 rows spaced
    3d apart (block-cyclic, C0/3), computes them in place, and the assembled output is
    the reference's on every path; the .fus and printed text read back."""
    n = 2 * d * 3
    f = _square_fusion(
        [n],
        fl.DeviceMesh.for_num_devices(d),
        lambda x: (x.outer_split(0, 2), x.outer_split(1, d), x.axis(1).parallelize(DIDx)),
    )
    per_device = assert_runs_and_reads_back(f, capsys, monkeypatch, tmp_path)
    (x,) = f.inputs
    values = fl.random_inputs(f, seed=7)[0]
    for r, outs in per_device.items():
        rows = np.arange(n).reshape(2, d, 3)[:, r, :].flatten()
        assert list(np.arange(n)[device_slices(x, r)]) == list(rows)
        np.testing.assert_array_equal(outs[0], values[rows] * values[rows] + np.float32(1))
    assert fl.FusionExecutor(f).communications == []
    assert str(placement(x)) == "(C0/3)" and not is_uneven(x)
    assert "sharded block-cyclically on axis 0 (deviceIdx.x: device i holds blocks of 3 rows" in (
        describe_sharding(x)
    )


def test_block_cyclic_rows_of_a_2d_tensor_and_its_kernels(capsys, monkeypatch, tmp_path):
    """Blocks of 2 rows of x[12, 3] over 2 devices (rows 0 1 4 5 8 9 and 2 3 6 7 10 11):
    the kernel indexes its local rows k * 2 + j, device 1's as device 0's."""
    f = cyclic_square(2, 12, block=2)
    per_device = assert_runs_and_reads_back(f, capsys, monkeypatch, tmp_path)
    (x,) = fl.random_inputs(f, seed=7)
    for r, rows in enumerate([[0, 1, 4, 5, 8, 9], [2, 3, 6, 7, 10, 11]]):
        np.testing.assert_array_equal(per_device[r][0], x[rows] * x[rows] + np.float32(1))
    assert "didx" not in cuda_source(fl.FusionExecutor(f).program)  # local rows only


@pytest.mark.parametrize("d, n, block", [(2, 12, 3), (4, 24, 3), (2, 8, 2)])
def test_a_block_cyclic_shard_gathered_whole_is_one_allgather(d, n, block):
    """exp on each device's blocks, then one Allgather of its n/d rows, interleaved block
    by block back into row order: the reference's values on every path and every
    device; the printed program reads back and runs the same."""
    f = cyclic_gathered(d, n, block=block)
    inputs = fl.random_inputs(f, seed=2)
    runs = run_three_ways(f, inputs)
    ex = fl.FusionExecutor(f, compute="interpret")
    assert [(c.kind.value, c.bytes_per_device, c.sizing.value) for c in ex.communications] == [
        ("Allgather", (d - 1) * (n // d) * 3 * 4, "even")
    ]
    text = str(ex.program)
    back = parse_printed(text)
    assert str(back) == text
    np.testing.assert_array_equal(
        fl.FusionExecutor(back, compute="interpret").run(inputs)[0], runs["interpret"][0]
    )
    for outs in ex.run_per_device(inputs).values():
        np.testing.assert_array_equal(outs[0], runs["interpret"][0])


@pytest.mark.parametrize(
    "n, schedule, says",
    [
        (
            14,
            lambda x: (x.split(0, 6), x.outer_split(1, 2), x.axis(1).parallelize(DIDx)),
            "its 14 rows are no whole number of blocks per device (14 is not a multiple of "
            "2 x 3): give the axis a multiple of 6 rows, or outer_split it by 2",
        ),
        (
            14,
            lambda x: (x.outer_split(0, 2), x.outer_split(1, 2), x.axis(1).parallelize(DIDx)),
            "it splits a part of extent 7 that 2 devices do not divide into blocks of one "
            "size: make that part (the inner part of the split of axis 0) a multiple of 2",
        ),
        (
            8,
            lambda x: (x.split(0, 2), x.outer_split(1, 2), x.axis(1).parallelize(DIDx)),
            "it splits the inner part of a split by 2 into blocks of one row: write the cyclic "
            "shard as split(axis, 2) with deviceIdx.x on the inner part",
        ),
    ],
    ids=["not whole blocks", "odd part", "blocks of one row"],
)
def test_an_uneven_block_cyclic_shard_is_refused(n, schedule, says):
    """Blocks that do not tile the axis evenly (a short last block or period) are
    refused before any pass runs, naming the tensor, the axis and the fix."""
    text = _refusal([n], fl.DeviceMesh.for_num_devices(2), schedule)
    assert "x (T0) axis 1 (ideviceIdx.x4{2})" in text and says in text


def _block_cyclic_then(then):
    """exp(x), x[12, 4] cyclic in blocks of 3 over 2 devices, then `then`."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as f:
        x = fl.tensor([12, 4], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        x.outer_split(0, 2)
        x.outer_split(1, 2)
        x.axis(1).parallelize(DIDx)
        f.add_output(then(f, mesh, fl.exp(x)))
    return f


@pytest.mark.parametrize(
    "then, error, says",
    [
        (_blocks, fl.LoweringError, "from (C0/3) to (S0): the source shards tensor axis 0"),
        (
            lambda f, mesh, y: fl.add(fl.rand_like(y), y),
            fl.LoweringError,
            "rand_like(...) computes values from their global index, but its axis iS",
        ),
    ],
    ids=["to blocks", "rand_like"],
)
def test_what_a_block_cyclic_shard_cannot_feed_is_a_clear_error(then, error, says):
    """As a cyclic shard: a resharding to blocks and an op of global indices refuse it."""
    f = _block_cyclic_then(then)
    with pytest.raises(error) as info:
        fl.FusionExecutor(f, compute="interpret").run(fl.random_inputs(f, seed=1))
    assert says in str(info.value)
    assert "outer_split the axis" in str(info.value) or "outer_split it" in str(info.value)


def test_a_block_cyclic_shard_refuses_box_readers():
    """device_box and DTensor's placements name the tensor and its blocks."""
    (x,) = cyclic_square(2, 12, block=3).inputs
    with pytest.raises(fl.ExecutionError) as info:
        device_box(x, 0)
    assert "cannot read x (T0): its data axis 0 is sharded cyclically (in blocks of 3: " in (
        str(info.value)
    )
    with pytest.raises(fl.FusionError, match=r"x \(T0\): axis 0 is sharded cyclically"):
        _ = x.placements


def _vector_2d(x, cols: int = 3, tp: int = 2, dp: int = 2) -> None:
    """nvFuser's test_2d_sharded_vector schedule: split(0, tp * cols), DIDy on the outer
    part of outer_split(0, dp), DIDx on the outer part of outer_split(2, tp); cols 1:
    DIDx on the inner part of split(0, tp) (blocks of 1 row written so are refused)."""
    x.split(0, tp * cols)
    x.outer_split(0, dp)
    x.axis(0).parallelize(DIDy)
    if cols == 1:
        x.axis(2).parallelize(DIDx)
        return
    x.outer_split(2, tp)
    x.axis(2).parallelize(DIDx)


@pytest.mark.parametrize("cols", [3, 1], ids=["blocks of 3", "cyclic"])
def test_2d_sharded_vector(cols, capsys, monkeypatch, tmp_path):
    """nvFuser's test_2d_sharded_vector: x[dp * 2 * tp * cols] on a 2x2 mesh, device (y, x)
    holds t.reshape(dp, 2, tp, cols)[y, :, x, :]: DIDx cyclic in blocks of cols within
    DIDy's chunk of the periods ((S0,C0/3); cols 1: rows (k * 2 + x) for DIDy's k,
    (S0,C0)); computed in place on every path, the .fus and printed text read back."""
    mesh = fl.DeviceMesh([[0, 1], [2, 3]])
    n = 2 * 2 * 2 * cols
    f = _square_fusion([n], mesh, lambda x: _vector_2d(x, cols))
    per_device = assert_runs_and_reads_back(f, capsys, monkeypatch, tmp_path)
    (x,) = f.inputs
    values = fl.random_inputs(f, seed=7)[0]
    for dev, outs in per_device.items():
        rows = np.arange(n).reshape(2, 2, 2, cols)[dev // 2, :, dev % 2, :].flatten()
        assert list(np.arange(n)[device_slices(x, dev)]) == list(rows)
        np.testing.assert_array_equal(outs[0], values[rows] * values[rows] + np.float32(1))
    assert fl.FusionExecutor(f).communications == []
    assert str(placement(x)) == ("(S0,C0/3)" if cols == 3 else "(S0,C0)")
    assert "(deviceIdx.y, then deviceIdx.x: device i holds " in describe_sharding(x)


@pytest.mark.parametrize("n", [7, 3], ids=["7", "3: device 3 holds none"])
def test_an_uneven_cyclic_shard_under_didy(n):
    """Rows k * 2 + x of DIDy's periods k (torch.chunk's of the ceil(n/2)), n not a
    multiple of 2: the last period short (7: device 3 holds row 5 only; 3: none), the
    kernel's predicate reads the global period (DIDy's chunk's), on every path."""
    mesh = fl.DeviceMesh([[0, 1], [2, 3]])
    f = _square_fusion([n, 2], mesh, lambda x: _vector_2d(x, cols=1))
    inputs = fl.random_inputs(f, seed=5)
    for outs in run_three_ways(f, inputs).values():
        np.testing.assert_array_equal(outs[0], inputs[0] * inputs[0] + np.float32(1))
    per_device = fl.FusionExecutor(f, compute="interpret").run_per_device(inputs)
    c = math.ceil(math.ceil(n / 2) / 2)  # periods per DIDy chunk
    for dev, outs in per_device.items():
        periods = range(c * (dev // 2), c * (dev // 2 + 1))
        rows = [r for k in periods if (r := 2 * k + dev % 2) < n]
        np.testing.assert_array_equal(outs[0], inputs[0][rows] ** 2 + np.float32(1))
    assert is_uneven(f.inputs[0])


def test_2d_sharded_vector_gathered_over_didx_is_one_allgather_per_row_of_the_mesh():
    """(S0,C0/3) gathered over DIDx to (S0,R): each DIDy team's Allgather of its chunk's
    blocks, interleaved, leaves DIDy's torch.chunk block of the axis on every path."""
    f = vector_2d_gathered()
    inputs = fl.random_inputs(f, seed=4)
    runs = run_three_ways(f, inputs)
    ex = fl.FusionExecutor(f, compute="interpret")
    assert [(c.kind.value, c.group, c.bytes_per_device) for c in ex.communications] == [
        ("Allgather", (1,), 6 * 2 * 4)
    ]
    for dev, outs in ex.run_per_device(inputs).items():
        top = 12 * (dev // 2)
        np.testing.assert_array_equal(outs[0], runs["interpret"][0][top : top + 12])
    text = str(ex.program)
    assert str(parse_printed(text)) == text


@pytest.mark.parametrize(
    "n, output, error, says",
    [
        (
            24,
            lambda mesh, y: y,
            fl.LoweringError,
            "from (S0,C0/3) to (R,R): the source shards tensor axis 0 cyclically (C0/3: device "
            "i holds blocks of 3 rows spaced d*3 apart)",
        ),
        (
            18,
            None,
            fl.VerifyError,
            "x (T0) axis 0 (ideviceIdx.y4{2}): it shards the 3 periods of a cyclic shard of "
            "axis 0 (the outer part of its split), which 2 devices do not divide",
        ),
    ],
    ids=["gathered over both mesh axes", "periods DIDy does not divide"],
)
def test_what_a_2d_sharded_vector_still_refuses(n, output, error, says):
    """Gathering DIDy's chunks of periods back together is no Allgather of blocks (the
    planner's error), and DIDy over a number of periods it does not divide is no layout
    fuserlite holds: both refused, naming the tensor, axis and fix."""
    mesh = fl.DeviceMesh([[0, 1], [2, 3]])
    with fl.Fusion() as f:
        x = fl.tensor([n], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        _vector_2d(x)
        y = fl.exp(x)
        if output is not None:
            y.set_device_mesh(mesh)
        f.add_output(y)
    with pytest.raises(error) as info:
        fl.FusionExecutor(f, compute="interpret")
    assert says in str(info.value)
    assert "outer_split" in str(info.value)


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


def test_a_cyclic_placement_reads_and_prints_as_c():
    """`C<t>` is a cyclic shard of tensor axis t: not S<t>'s blocks, so not equal to it;
    the only mesh axis of its tensor axis."""
    p = Placement.parse("(R,C1)", 2)
    assert (p.shards, p.cyclic, str(p)) == (((), (1,)), (1,), "(R,C1)")
    assert p != Placement.parse("(R,S1)", 2) and p.cyclic_axis() == 1
    b = Placement.parse("(C1/3,R)", 2)  # block-cyclic: blocks of 3
    assert (b.cyclic, b.block, b.block_of(0), str(b)) == ((0,), (3,), 3, "(C1/3,R)")
    assert b != Placement.parse("(C1,R)", 2) and Placement.parse("(C1/1,R)", 2) == (
        Placement.parse("(C1,R)", 2)
    )
    with pytest.raises(RedistributionError, match="C<t>/<b> \\(block-cyclic"):
        Placement.parse("(C0/0)", 1)
    with pytest.raises(RedistributionError, match="a cyclic mesh axis is the innermost mesh"):
        Placement(2, ((1, 0),), (), (1,))
    with pytest.raises(RedistributionError, match="C<t> \\(cyclic\\)"):
        Placement.parse("(C0.1,S0.0)", 1)
