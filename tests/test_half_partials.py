"""Partial sums of half tensors are float32: in the kernel that makes them, in the
collective that combines them, rounded once where the complete value is stored.

x = [40000, 40000, -40000, -40000] float16 summed over 2 devices: each device's
partial, 80000, is beyond float16's 65504; stored as half it was inf, and the
Allreduce made inf + -inf = NaN where the reference gives 0.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from three_way import PATHS

import fuserlite as fl
from fuserlite.ir.types import ReductionOpType
from fuserlite.runtime.communicator import fold
from fuserlite.schedule.shard import shard_axis

M2 = fl.DeviceMesh.for_num_devices(2)
BIG = [40000, 40000, -40000, -40000]  # each device's partial sum overflows float16


def summed(dtype: str, out_mesh: fl.DeviceMesh = M2, scatter: bool = False) -> fl.Fusion:
    """sum(x, [0]) of x[4, 2] row-sharded on 2 devices: an Allreduce, a ReduceScatter
    (the result sharded on its columns) or a Reduce (the result on one device)."""
    with fl.Fusion() as f:
        x = fl.tensor([4, 2], dtype, name="x")
        f.add_input(x)
        shard_axis(x, 0, M2)
        y = fl.sum(x, [0])
        y.set_device_mesh(out_mesh)
        if scatter:
            shard_axis(y, 1, out_mesh)
        f.add_output(y)
    return f


def row_parallel(dtype: str, op: str) -> fl.Fusion:
    """x @ w (matmul) or linear(x, w) with the contraction axis k sharded: partial sums."""
    with fl.Fusion() as f:
        x = fl.tensor([2, 4], dtype, name="x")
        w = fl.tensor([4, 2] if op == "matmul" else [2, 4], dtype, name="w")
        f.add_input(x)
        f.add_input(w)
        shard_axis(x, 1, M2)
        shard_axis(w, 0 if op == "matmul" else 1, M2)
        y = fl.matmul(x, w) if op == "matmul" else fl.linear(x, w)
        y.set_device_mesh(M2)
        f.add_output(y)
    return f


def normalized(dtype: str) -> fl.Fusion:
    """layer_norm over a sharded axis: its statistics are completed by Allreduces."""
    with fl.Fusion() as f:
        x = fl.tensor([2, 8], dtype, name="x")
        f.add_input(x)
        shard_axis(x, 1, M2)
        f.add_output(fl.layer_norm(x, [8]))
    return f


def cases(dtype: str) -> dict[str, tuple[fl.Fusion, list[np.ndarray]]]:
    d = fl.DType.parse(dtype).numpy
    x = np.array([[v, v] for v in BIG], d)
    ones = np.ones((2, 4), d)
    # The complete sum of squares of half values overflows wherever a partial sum of
    # them does (and is stored in the statistics' dtype): these only show the dtype.
    wide = np.array([[50, -50] * 4, [-20, 20] * 4], d)
    return {
        "Allreduce": (summed(dtype), [x]),
        "ReduceScatter": (summed(dtype, scatter=True), [x]),
        "Reduce": (summed(dtype, fl.DeviceMesh([0])), [x]),
        "matmul": (row_parallel(dtype, "matmul"), [np.array([BIG, BIG], d), ones.T.copy()]),
        "linear": (row_parallel(dtype, "linear"), [np.array([BIG, BIG], d), ones]),
        "layer_norm": (normalized(dtype), [wide]),
    }


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("compute", PATHS)
def test_half_partial_sums_do_not_overflow(dtype: str, compute: str) -> None:
    for name, (fusion, inputs) in cases(dtype).items():
        ex = fl.FusionExecutor(fusion, compute=compute)
        reductions = [c for c in ex.communications if c.op is ReductionOpType.sum]
        assert reductions, name
        for c in reductions:
            assert c.input.dtype is fl.DType.float32, name  # the partials travel as float
            assert c.output.dtype is fl.DType.parse(dtype), name  # ... rounded once there
        (got,) = ex.run(inputs)
        (want,) = fl.evaluate(fusion, inputs)
        assert got.dtype == want.dtype and np.isfinite(got.astype(np.float32)).all(), name
        if name != "layer_norm":  # exact: every sum is 0 or a small integer times 40000
            np.testing.assert_array_equal(got, want, err_msg=f"{name} ({compute})")
        fl.validate(fusion, inputs, [got])


def test_the_partials_of_a_half_sum_cost_float32_bytes() -> None:
    """The partials move as float32: twice the bytes of the half result."""
    for mesh in (M2, fl.DeviceMesh([0])):  # an Allreduce, a Reduce to one device
        (comm,) = fl.FusionExecutor(summed("float16", mesh), compute="numpy").communications
        (float32,) = fl.FusionExecutor(summed("float32", mesh), compute="numpy").communications
        assert comm.kind == float32.kind
        assert comm.bytes_per_device == float32.bytes_per_device, comm.kind


def test_a_partial_max_stays_in_its_dtype() -> None:
    """A maximum is exact in any dtype: its partials are not widened."""
    with fl.Fusion() as f:
        x = fl.tensor([4, 2], "float16")
        f.add_input(x)
        shard_axis(x, 0, M2)
        y = fl.max(x, [0])
        y.set_device_mesh(M2)
        f.add_output(y)
    (comm,) = fl.FusionExecutor(f, compute="numpy").communications
    assert comm.input.dtype is fl.DType.float16


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_fold_sums_halves_in_float32_and_rounds_once(dtype) -> None:
    """A user's own half partials (shard_map's psum, a tensor marked rDIDx) are combined
    in float32 too: 40000 + 40000 - 40000 - 40000 is 0, not NaN, and 1 plus four
    quarters of its ulp is 1 + ulp (each quarter alone would round away in half)."""
    parts = [np.array([v], dtype) for v in BIG]
    assert fold(parts, ReductionOpType.sum).tolist() == [0.0]
    assert fold(parts, ReductionOpType.sum).dtype == dtype
    ulp = float(ml_dtypes.finfo(dtype).eps)
    tiny = [np.array([1.0], dtype)] + [np.array([ulp / 4], dtype)] * 4
    assert float(fold(tiny, ReductionOpType.sum)[0]) == 1 + ulp
    assert fold(parts, ReductionOpType.max).dtype == dtype


@pytest.mark.parametrize("compute", PATHS)
def test_a_half_tensor_the_user_made_partial_is_written_as_float32(compute: str) -> None:
    """y = sum(x) marked partial (rDIDx) by the user: its kernel writes float32."""
    with fl.Fusion() as f:
        x = fl.tensor([2, 4], "float16", name="x")
        x.set_device_mesh(M2)
        f.add_input(x)
        y = fl.sum(x, [1])
        f.add_output(y)
        shard_axis(y, 1, M2)  # the reduction axis: y holds partial sums
    ex = fl.FusionExecutor(f, compute=compute)
    *_, comm = ex.communications  # a LocalSlice of x, then the Allreduce
    assert (comm.input.dtype, comm.output.dtype) == (fl.DType.float32, fl.DType.float16)
    x = np.array([BIG, BIG[::-1]], np.float16)
    np.testing.assert_array_equal(ex.run([x])[0], np.zeros(2, np.float16))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.int32])
def test_folds_sum_in_place_is_combines_chain_bit_for_bit(dtype) -> None:
    """fold's sum accumulates into one array in place and makes its NaNs the quiet NaN once
    at the end: the bits of combine (a new array, canonical) step by step, NaN payloads,
    infinities of both signs, their NaN, signed zeros and 0-d arrays included."""
    from fuserlite.runtime.communicator import canonical, combine

    rng = np.random.default_rng(11)
    specials = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 65504.0]
    for shape in [(), (7,), (3, 40)]:
        parts = []
        for _ in range(5):
            a = rng.standard_normal(shape) * 100
            if np.issubdtype(dtype, np.integer):
                parts.append(np.asarray(a, dtype))
                continue
            a = np.asarray(a, np.float32)
            if a.ndim:
                at = rng.integers(0, a.size, 6)
                a.reshape(-1)[at] = rng.choice(np.array(specials, np.float32), 6)
            with np.errstate(over="ignore"):  # beyond float16's range: inf
                b = np.asarray(a.astype(dtype))
            if a.ndim and dtype == np.float32:  # a NaN with another payload
                b.view(np.uint32).reshape(-1)[at[0]] = 0x7FA00001
            parts.append(b)
        wide = np.float32 if dtype in (np.float16, ml_dtypes.bfloat16) else dtype
        want = canonical(np.array(parts[0], wide))
        for a in parts[1:]:
            want = combine(ReductionOpType.sum, want, np.asarray(a, wide))
        with np.errstate(over="ignore"):
            want = want.astype(dtype)
        got = fold(parts, ReductionOpType.sum)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes(), (dtype, shape)
