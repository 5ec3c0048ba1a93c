"""nvFuser's stream-parallel cases (tests/cpp/test_multidevice_stream_parallel_type.cpp,
test_multidevice_overlap.cpp), each a fusion whose output has a Stream axis: the
chunks run in a host loop (passes/lower_streams.py)."""

from __future__ import annotations

from collections.abc import Callable

import fuserlite as fl

DIDx, STREAM = fl.ParallelType.DIDx, fl.ParallelType.Stream


def _fusion(inputs: list[tuple[str, list[int], dict[int, str]]], body: Callable, dtype="float32"):
    """A fusion on D devices: each input (name, shape, {axis: 'DIDx'}), body(*inputs)
    -> the output, which the caller's body gives its Stream axis."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(D)
        tvs = []
        for name, shape, shards in inputs:
            t = fl.tensor(shape, dtype, name=name)
            t.set_device_mesh(mesh)
            f.add_input(t)
            for axis in shards:
                t.axis(axis).parallelize(DIDx)
            tvs.append(t)
        y = body(*tvs)
        y.set_device_mesh(mesh)
        f.add_output(y)
    return f


D, S = 2, 4  # devices, chunks


def _stream0(y):
    y.axis(0).parallelize(STREAM)
    return y


def allgather(s: int = S):
    """MultiDeviceStreamParallelTypeTest.Allgather: x [S, DIDx(D), 8], y = set(x)
    replicated, Stream on y's axis 0."""
    return _fusion([("x", [s, D, 8], {1: "DIDx"})], lambda x: _stream0(fl.set(x)))


def allreduce(s: int = S):
    """...Allreduce: x [S, DIDx(D), 8] summed over its device axis, replicated."""
    return _fusion([("x", [s, D, 8], {1: "DIDx"})], lambda x: _stream0(fl.sum(x, [1])))


def allgather_then_sum(s: int = S):
    """x [S, DIDx(D), 8, 6] all-gathered, then y = sum(x * x) over its last axis, Stream on
    y's axis 0: a reduction kernel computed in chunks (the reduction scheduler's)."""
    return _fusion(
        [("x", [s, D, 8, 6], {1: "DIDx"})],
        lambda x: _stream0(fl.sum(fl.mul(fl.set(x), fl.set(x)), [2])),
    )


def reduce_scatter(s: int = S):
    """...ReduceScatter: x [S, DIDx(D), 2D] summed over axis 1 onto y [S, DIDx(D) 2]."""

    def body(x):
        y = fl.sum(x, [1])  # [S, r(D), 2D]: the loop domain keeps the reduced axis
        y.outer_split(2, D)
        y.axis(2).parallelize(DIDx)
        return _stream0(y)

    return _fusion([("x", [s, D, 2 * D], {1: "DIDx"})], body)


def ag_matmul(s: int = S, m: int = 4, k: int = 8, n: int = 6, dtype: str = "float32"):
    """AGMatmulTest.CollectiveBasedPipeline: x [S, DIDx(D), M/(S D), K] all-gathered,
    times w [K, N]; Stream on the product's axis 0."""
    return _fusion(
        [("x", [s, D, m, k], {1: "DIDx"}), ("w", [k, n], {})],
        lambda x, w: _stream0(fl.matmul(x, w)),
        dtype,
    )


def ag_matmul_blocks(s: int = S, m: int = 16, k: int = 8, n: int = 6):
    """The same on x [M, K] (rows sharded): y's rows split by the devices, the inner
    part by the chunks, Stream on it (chunk i: the i-th M/(S D) rows of every device's
    block)."""

    def body(x, w):
        y = fl.matmul(x, w)
        y.outer_split(0, D)
        y.outer_split(1, s)
        y.axis(1).parallelize(STREAM)
        return y

    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(D)
        x = fl.tensor([m, k], "float32", name="x")
        w = fl.tensor([k, n], "float32", name="w")
        for t in (x, w):
            t.set_device_mesh(mesh)
            f.add_input(t)
        x.outer_split(0, D)
        x.axis(0).parallelize(DIDx)
        y = body(x, w)
        y.set_device_mesh(mesh)
        f.add_output(y)
    return f


def _row_parallel_matmul(s: int, rows: int, k: int, n: int, scatter: bool):
    """x [S, rows, DIDx(D) K] @ w [DIDx(D) K, N]: partial sums, each chunk all-reduced
    (y replicated) or reduce-scattered onto y's rows (`scatter`); Stream on y's axis 0."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(D)
        x = fl.tensor([s, rows, D * k], "float32", name="x")
        w = fl.tensor([D * k, n], "float32", name="w")
        for t, axis in ((x, 2), (w, 0)):
            t.set_device_mesh(mesh)
            f.add_input(t)
            t.outer_split(axis, D)
            t.axis(axis).parallelize(DIDx)
        y = fl.matmul(x, w)
        y.set_device_mesh(mesh)
        if scatter:
            y.outer_split(1, D)
            y.axis(1).parallelize(DIDx)
        f.add_output(_stream0(y))
    return f


def matmul_allreduce(s: int = S, m: int = 4, k: int = 4, n: int = 6):
    """matmul_AR: the partial sums of x [S, M, DIDx(D) K] @ w [DIDx(D) K, N],
    all-reduced a chunk at a time."""
    return _row_parallel_matmul(s, m, k, n, scatter=False)


def matmul_reduce_scatter(s: int = S, m: int = 4, k: int = 4, n: int = 6):
    """RSMatmulTest / matmul_RS: the same partial sums reduce-scattered onto y's rows."""
    return _row_parallel_matmul(s, D * m, k, n, scatter=True)


def ag_matmul_ring(d: int | None = None, m: int = 2, k: int = 8, n: int = 6, dtype="float32"):
    """AGMatmulTest's ring-based pipeline (nvFuser's swizzle1d): x [DIDx(D), M/D, K]
    times w [K, N]; the product's axis 0 swizzled by DIDx and Stream-parallel, so step
    i computes chunk (i + device) mod D, its block of x brought by a CollectivePermute."""
    global D
    saved, D = D, d or D
    try:

        def body(x, w):
            y = fl.matmul(x, w)
            y.swizzle1d(0, DIDx)
            return _stream0(y)

        return _fusion([("x", [D, m, k], {0: "DIDx"}), ("w", [k, n], {})], body, dtype)
    finally:
        D = saved


def collective_permute_ring(d: int | None = None, rows: int = 3):
    """test_collective_permute (nvFuser's python multidevice tests): x [D*3] sharded,
    y = set(x) outer_split by D, swizzle1d by DIDx, Stream: an Allgather as D - 1
    CollectivePermutes."""
    global D
    saved, D = D, d or D
    try:

        def body(x):
            y = fl.set(x)
            y.outer_split(0, D)
            y.swizzle1d(0, DIDx)
            return _stream0(y)

        with fl.Fusion() as f:
            mesh = fl.DeviceMesh.for_num_devices(D)
            x = fl.tensor([D * rows], "float32", name="x")
            x.set_device_mesh(mesh)
            f.add_input(x)
            x.outer_split(0, D)
            x.axis(0).parallelize(DIDx)
            y = body(x)
            y.set_device_mesh(mesh)
            f.add_output(y)
        return f
    finally:
        D = saved


CASES = {
    "Allgather": allgather,
    "Allreduce": allreduce,
    "ReduceScatter": reduce_scatter,
    "AGMatmul CollectiveBasedPipeline": ag_matmul,
    "AGMatmul on each device's block": ag_matmul_blocks,
    "matmul + Allreduce": matmul_allreduce,
    "matmul + ReduceScatter": matmul_reduce_scatter,
}


def _rows_sharded(m: int, k: int, weights: dict[str, int]) -> tuple:
    """x [M, K] sharded on its rows over D devices and replicated weights [K, n]."""
    mesh = fl.DeviceMesh.for_num_devices(D)
    x = fl.tensor([m, k], "float32", name="x")
    ws = [fl.tensor([k, n], "float32", name=name) for name, n in weights.items()]
    for t in (x, *ws):
        t.set_device_mesh(mesh)
    x.outer_split(0, D)
    x.axis(0).parallelize(DIDx)
    return mesh, x, ws


def _stream_blocks(y, s: int) -> None:
    """y's rows split by the devices, each device's block in s chunks, Stream on them."""
    y.outer_split(0, D)
    y.outer_split(1, s)
    y.axis(1).parallelize(STREAM)


def allgather_read_thrice(s: int = S, m: int = 16, k: int = 8, streams: bool = True):
    """One Allgather of x read by two matmuls (q and k's projections, as in the
    sequence-parallel block) and by a transpose, whose rows are x's columns: the loop
    runs each chunk's Allgather, then both products' chunks; the transpose reads the
    whole x after it. Without `streams` no Stream axis (for `lower-streams[chunks=S]`
    to give them)."""
    with fl.Fusion() as f:
        mesh, x, (wq, wk) = _rows_sharded(m, k, {"wq": 6, "wk": 4})
        for t in (x, wq, wk):
            f.add_input(t)
        q = fl.matmul(x, wq)
        kk = fl.matmul(x, wk)
        xt = fl.permute(x, [1, 0])
        for t in (q, kk, xt):
            t.set_device_mesh(mesh)
            f.add_output(t)
        if streams:
            _stream_blocks(q, s)
            _stream_blocks(kk, s)
    return f


CASES["Allgather read by two matmuls and a transpose"] = allgather_read_thrice


H, T = 2, 6  # nvFuser's python overlap tests: hidden h (the MLP's 4h), t tokens, s = 3 chunks


def column_parallel_linear_forward(s: int = 3, t: int = T, h: int = H):
    """nvFuser's python test_column_parallel_linear_forward, sequence parallel: x [t, h]
    sharded on its tokens, all-gathered, times w [4h, h] sharded on its output features
    (linear: x w^T), out [t, DIDx(4h)]; out's tokens split by the devices, each block in
    s chunks, Stream on them."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(D)
        x = fl.tensor([t, h], "float32", name="x")
        w = fl.tensor([4 * h, h], "float32", name="w")
        for t_ in (x, w):
            t_.set_device_mesh(mesh)
            f.add_input(t_)
            t_.outer_split(0, D)
            t_.axis(0).parallelize(DIDx)
        out = fl.linear(x, w)
        out.set_device_mesh(mesh)
        out.outer_split(1, D)
        out.axis(1).parallelize(DIDx)  # [t, DIDx(D), 4h/D]
        _stream_blocks(out, s)  # [D, S, t/(D S), DIDx(D), 4h/D]
        f.add_output(out)
    return f


def row_parallel_linear_forward(s: int = 3, t: int = T, h: int = H):
    """nvFuser's python test_row_parallel_linear_forward: x [t, 4h] and w [h, 4h] sharded
    on the 4h they contract, linear's partial sums reduce-scattered onto out's tokens
    [DIDx(t), h]; each device's block of tokens in s chunks, Stream on them."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(D)
        x = fl.tensor([t, 4 * h], "float32", name="x")
        w = fl.tensor([h, 4 * h], "float32", name="w")
        for t_ in (x, w):
            t_.set_device_mesh(mesh)
            f.add_input(t_)
            t_.outer_split(1, D)
            t_.axis(1).parallelize(DIDx)
        out = fl.linear(x, w)
        out.set_device_mesh(mesh)
        out.outer_split(0, D)
        out.axis(0).parallelize(DIDx)
        out.outer_split(1, s)
        out.axis(1).parallelize(STREAM)  # [DIDx(D), S, t/(D S), h]
        f.add_output(out)
    return f


CASES["column_parallel_linear_forward"] = column_parallel_linear_forward
CASES["row_parallel_linear_forward"] = row_parallel_linear_forward
CHUNKS = {"column_parallel_linear_forward": 3, "row_parallel_linear_forward": 3}  # else S

# The matmul cases at sizes where numpy's BLAS rounds a row by how many rows its call
# has (a chunk's call is a fraction of the whole's): each differed from the unstreamed
# program in its last bits before numpy_ops.gemm_rows.
ROUNDING = {
    "AGMatmul CollectiveBasedPipeline": lambda: ag_matmul(4, m=1, k=4096, n=64),
    "matmul + Allreduce": lambda: matmul_allreduce(4, m=2, k=2048, n=64),
    "matmul + ReduceScatter": lambda: matmul_reduce_scatter(4, m=2, k=2048, n=64),
    "column_parallel_linear_forward": lambda: column_parallel_linear_forward(3, 48, 32),
    "row_parallel_linear_forward": lambda: row_parallel_linear_forward(3, 48, 32),
}

# The ring-based pipeline: a loop of D steps (one per device), each a CollectivePermute.
RING_CASES = {
    "AGMatmul RingBasedPipeline": ag_matmul_ring,
    "CollectivePermute ring (test_collective_permute)": collective_permute_ring,
}
