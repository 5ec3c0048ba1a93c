"""Sharding rules of permute and the batched contractions, through the whole pipeline:
which input shardings pass through (no communication), which make the output partial
(one Allreduce), and the numbers against the reference."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from three_way import run_three_ways

import fuserlite as fl
from fuserlite.ir.expr import LoadStoreOp
from fuserlite.ir.sharding import shardings
from fuserlite.program.parser import parse_printed
from fuserlite.schedule.shard import shard_axis

D = 4
DIDx = fl.ParallelType.DIDx


def _lowered(
    shapes: list[list[int]], sharded: list[int | None], body: Callable[..., fl.TensorView]
) -> tuple[fl.Fusion, fl.FusionExecutor]:
    """Inputs of `shapes`, input k sharded on axis sharded[k] (None: replicated) over D
    devices; one output; lowered by the default pipeline and validated on sim."""
    mesh = fl.DeviceMesh.for_num_devices(D)
    with fl.Fusion() as fusion:
        inputs = [fl.tensor(s, name=f"in{k}") for k, s in enumerate(shapes)]
        for t, axis in zip(inputs, sharded):
            fusion.add_input(t)
            t.set_device_mesh(mesh)
            if axis is not None:
                shard_axis(t, axis, mesh)
        fusion.add_output(body(*inputs))
    ex = fl.FusionExecutor(fusion)
    arrays = fl.random_inputs(fusion, seed=2)
    fl.validate(fusion, arrays, ex.run(arrays))
    return fusion, ex


def _kinds(ex: fl.FusionExecutor) -> list[str]:
    return [c.kind.value for c in ex.communications]


def _sharded_axis(ex: fl.FusionExecutor) -> int | None:
    out = ex.program.fusion.outputs[0] if hasattr(ex.program, "fusion") else None
    if out is None:
        return None
    found = list(shardings(out).values())
    return found[0].logical_index if found else None


@pytest.mark.parametrize(("axis", "moved_to"), [(0, 2), (1, 0), (2, 1)])
def test_permute_moves_the_sharded_axis_without_communication(axis: int, moved_to: int) -> None:
    _, ex = _lowered([[8, 4, 12]], [axis], lambda x: fl.permute(fl.exp(x), [1, 2, 0]))
    assert _kinds(ex) == []
    assert _sharded_axis(ex) == moved_to


def test_batched_matmul_sharded_batch_passes_through() -> None:
    _, ex = _lowered([[8, 3, 5], [8, 5, 2]], [0, 0], fl.matmul)
    assert _kinds(ex) == []


def test_broadcast_batch_matmul_sharded_rows() -> None:
    """a[B, M, K] with M sharded times a whole b[K, N] and a batch-broadcast b[1, K, N]."""
    _, ex = _lowered([[2, 8, 5], [1, 5, 3]], [1, None], fl.matmul)
    assert _kinds(ex) == []


def test_batched_matmul_sharded_contraction_is_partial() -> None:
    _, ex = _lowered([[3, 2, 8], [3, 8, 5]], [2, 1], fl.matmul)
    assert _kinds(ex) == ["Allreduce"]


def test_linear_device_batched_weight_passes_through() -> None:
    """nvFuser's column-parallel layout: weight [D, n/D, k] and bias [D, n/D] sharded on
    axis 0, x whole: out [D, b, s, n/D] sharded on axis 0, no communication."""
    _, ex = _lowered([[2, 3, 8], [D, 5, 8], [D, 5]], [None, 0, 0], fl.linear)
    assert _kinds(ex) == []
    assert _sharded_axis(ex) == 0


def test_linear_device_batched_weight_sharded_contraction_adds_the_bias_once() -> None:
    """k sharded on x and on the batched weight: partial sums, one Allreduce, and the
    bias [W, n] added after it, broadcast over x's batch axes (not aligned on the right)."""
    fusion, ex = _lowered([[2, 3, 8], [3, 5, 8], [3, 5]], [2, 2, None], fl.linear)
    assert _kinds(ex) == ["Allreduce"]
    arrays = fl.random_inputs(fusion, seed=2)
    x, w, b = arrays
    (out,) = ex.run(arrays)
    np.testing.assert_allclose(
        out, np.einsum("bsk,wnk->wbsn", x, w) + b[:, None, None, :], rtol=1e-5, atol=1e-5
    )


# -- views: a kept axis passes through, a cut one reshards --------------------------------
def test_slice_of_an_unsharded_axis_stays_local() -> None:
    _, ex = _lowered([[8, 6]], [0], lambda x: fl.slice(x, [0, 1], [8, 5]))
    assert _kinds(ex) == []
    assert _sharded_axis(ex) == 0


def test_slice_of_the_sharded_axis_reshards() -> None:
    """Rows 1..7 of x sharded by rows: no device holds its output rows alone."""
    _, ex = _lowered([[8, 6]], [0], lambda x: fl.slice(x, [1, 0], [7, 6]))
    assert _kinds(ex) != []


@pytest.mark.parametrize(("axis", "local"), [(1, True), (0, False)])
def test_select_and_cat(axis: int, local: bool) -> None:
    """select and cat along axis 1 of tensors sharded on axis 0 stay local; along the
    sharded axis 0 they reshard."""
    _, ex = _lowered([[8, 4], [8, 4]], [0, 0], lambda a, b: fl.cat([a, b], axis))
    assert (_kinds(ex) == []) is local
    _, ex = _lowered([[8, 4]], [0], lambda a: fl.select(a, axis, 2))
    assert (_kinds(ex) == []) is local


def test_flatten_and_chunk_of_sharded_rows() -> None:
    """flatten merges the sharded outer axis (reshape's rule, local); chunk slices the
    unsharded axis 1: local too."""
    _, ex = _lowered([[8, 3, 2]], [0], lambda x: fl.flatten(x, 0, 1))
    assert _kinds(ex) == []
    _, ex = _lowered([[8, 6]], [0], lambda x: fl.add(*fl.chunk(x, 2, 1)))
    assert _kinds(ex) == []


def test_where_passes_shardings_through() -> None:
    """where(cond, a, b) with the three sharded alike, cond broadcast on the other axis."""

    def body(c: fl.TensorView, a: fl.TensorView, b: fl.TensorView) -> fl.TensorView:
        return fl.where(fl.cast(c, "bool"), fl.silu(a), b)

    _, ex = _lowered([[8, 1], [8, 6], [8, 6]], [0, 0, 0], body)
    assert _kinds(ex) == []


def test_the_views_inside_shard_map() -> None:
    """Each device's block through cast, permute, squeeze, select, slice, cat, where and
    a batched matmul, as a per-device program (the local rules shift their axes past
    the leading device axis), checked by the reference."""

    def local(x: fl.TensorView, w: fl.TensorView) -> fl.TensorView:
        y = fl.cast(fl.permute(x, [1, 0, 2]), "bfloat16")  # [3, 1, 4]
        y = fl.squeeze(fl.slice(y, [0, 0, 1], [3, 1, 4]), [1])  # [3, 3]
        y = fl.cat([y, fl.select(fl.unsqueeze(y, 0), 0, 0)], 0)  # [6, 3]
        y = fl.where(fl.cast(fl.abs(y), "bool"), y, 0.0)
        return fl.matmul(y, w)  # [6, 2]

    mesh = fl.DeviceMesh.for_num_devices(D)
    with fl.Fusion() as fusion:
        x, w = fl.tensor([D, 3, 4]), fl.tensor([3, 2])
        fusion.add_input(x)
        fusion.add_input(w)
        fusion.add_output(fl.shard_map(local, mesh, [(DIDx,), None], [(DIDx,)])(x, w))
    ex = fl.FusionExecutor(fusion)
    arrays = fl.random_inputs(fusion, seed=4)
    fl.validate(fusion, arrays, ex.run(arrays))
    assert ex.communications == []  # no collective named: every device computes its own


@pytest.mark.parametrize(
    ("body", "axis"),
    [
        (lambda x: fl.matmul(x, x), 1),  # x's axis 1 is a's contraction and b's columns
        (lambda x: fl.matmul(x, x), 0),
        (lambda x: fl.linear(x, x, fl.sum(x, 1)), 0),
        (lambda x: fl.linear(x, x), 1),
    ],
)
def test_a_contraction_reading_one_tensor_twice(body: Callable, axis: int) -> None:
    """matmul(x, x) on a sharded x: the two operands need x's axes in two ways; each
    is resharded as its own position needs (was: one placement for both, and a raw
    numpy ValueError on the local shards)."""
    mesh = fl.DeviceMesh.for_num_devices(D)
    with fl.Fusion() as fusion:
        x = fl.tensor([8, 8], name="x")
        fusion.add_input(x)
        x.set_device_mesh(mesh)
        shard_axis(x, axis, mesh)
        fusion.add_output(body(x))
    run_three_ways(fusion, fl.random_inputs(fusion, seed=2))


@pytest.mark.parametrize(
    "body",
    [lambda x: fl.matmul(x, x), lambda x: fl.linear(x, x, fl.sum(x, 1))],
    ids=["matmul", "linear"],
)
def test_a_contraction_reading_one_tensor_twice_writes_back_as_fus(body: Callable) -> None:
    """The contraction reads x in both positions, no copy made (the axis map is per
    operand position), and to_fus writes it back (a copy once made after the output
    was: a FusionError, "T2 reads T3, created after it; the .fus format cannot express
    it")."""
    with fl.Fusion() as fusion:
        x = fl.tensor([8, 8], name="x")
        fusion.add_input(x)
        fusion.add_output(body(x))
    contraction = fusion.outputs[0].definition
    assert contraction.inputs[:2] == [x, x]
    assert not any(isinstance(e, LoadStoreOp) for e in fusion.exprs())
    back = fl.parse(fl.to_fus(fusion))
    arrays = fl.random_inputs(fusion, seed=2)
    assert [a.tobytes() for a in fl.evaluate(back, arrays)] == [
        a.tobytes() for a in fl.evaluate(fusion, arrays)
    ]


PRINTED_MATMUL_OF_ONE_TENSOR = """%kernel {
T2_g_float[ iS4{8}, iS5{8}, rS6{8} ]
   = matmul(T0_g_float[ iS0{8}, iS1{8} ],
          T0_g_float[ iS0{8}, iS1{8} ])

TransformPrinter :
T0_g_float[ iS0{8}, iS1{8} ]
 logical domain : (iS0{8}, iS1{8})
 contiguity: t t
 loop domain : (iS0{8}, iS1{8})
T2_g_float[ iS4{8}, iS5{8}, rS6{8} ]
 logical domain : (iS4{8}, iS5{8}, rS6{8})
 contiguity: t t n
 loop domain : (iS4{8}, iS5{8}, rS6{8})
} // %kernel
"""


@pytest.mark.parametrize("axis", [0, 1])
def test_printed_matmul_of_one_tensor_reads_it_in_both_roles(axis: int) -> None:
    """`matmul(T0, T0)` read back from the printed dialect and sharded: each position is
    mapped and resharded as its role needs (was: both mapped as `a`, and a raw numpy
    ValueError on the local shards)."""
    fusion = parse_printed(PRINTED_MATMUL_OF_ONE_TENSOR)
    mesh = fl.DeviceMesh.for_num_devices(D)
    x = fusion.inputs[0]
    x.set_device_mesh(mesh)
    shard_axis(x, axis, mesh)
    run_three_ways(fusion, fl.random_inputs(fusion, seed=2))


@pytest.mark.parametrize(("shard_x", "shard_w"), [(True, False), (False, True), (True, True)])
def test_a_linear_whose_bias_is_its_input(shard_x: bool, shard_w: bool) -> None:
    """linear(x, w, x): where the sums are partial the bias is split off, and x, still
    the linear's input, keeps it among its uses."""
    mesh = fl.DeviceMesh.for_num_devices(2)
    with fl.Fusion() as fusion:
        x, w = fl.tensor([8], name="x"), fl.tensor([8, 8], name="w")
        for t, sharded, axis in ((x, shard_x, 0), (w, shard_w, 1)):
            fusion.add_input(t)
            t.set_device_mesh(mesh)
            if sharded:
                shard_axis(t, axis, mesh)
        fusion.add_output(fl.linear(x, w, x))
    ex = fl.FusionExecutor(fusion)
    arrays = fl.random_inputs(fusion, seed=2)
    fl.validate(fusion, arrays, ex.run(arrays))
    lowered = ex.program.fusion
    for e in lowered.exprs():
        assert all(any(u is e for u in t.uses) for t in e.inputs), e
