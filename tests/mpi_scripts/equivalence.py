"""Run under `mpiexec -n 2` or `-n 4`: the mpi backend against the sim backend.

For every case that fits the world size (the examples, each row of docs/design.md
§5, the seed-000 program, the tensor-parallel MLP, iota and axis_index, and every
dtype x reduction op
x reduction collective on NaN, inf, -0.0 and ties), each rank compares its
own device's outputs with the sim backend's outputs for that device, and rank 0
also validates the assembled global outputs against the reference. Rank 0
prints one JSON object: case name -> "identical", "close" (within tolerance,
not bit-identical) or an error message.
"""

from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from axis_index_cases import positions, scaled_by_index  # noqa: E402
from multi_output_cases import cases as multi_output_cases  # noqa: E402
from strided_cases import cyclic_gathered, cyclic_square, vector_2d_gathered  # noqa: E402

import fuserlite as fl  # noqa: E402
from fuserlite import models  # noqa: E402
from fuserlite.models import resharding as build  # noqa: E402
from fuserlite.pipeline import default_pass_names  # noqa: E402
from fuserlite.schedule.shard import shard_axis  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
M = fl.DeviceMesh


def section5_cases(size: int, dtype: str = "float32") -> dict[str, object]:
    """Each §5 row on `size` devices (roots inside and, on 4 ranks, outside the mesh),
    on x of `dtype`; names other than float32's end in -dtype."""
    every = M(range(size))
    suffix = "" if dtype == "float32" else f"-{dtype}"

    def row(*args):
        return lambda: build(*args, dtype=dtype)

    cases = {
        "LocalSlice": row(every, None, every, 1),
        "Allgather": row(every, 0, every, None),
        "AllToAll": row(every, 0, every, 1),
        "Allreduce": row(every, 0, every, None, 0),
        "ReduceScatter": row(every, 0, every, 0, 0),
        "Broadcast": row(M([0]), None, every, None),
        "Scatter": row(M([0]), None, every, 0),
        "Gather": row(every, 0, M([0]), None),
        "Reduce": row(every, 0, M([0]), None, 0),
    }
    if size == 4:
        cases["SendRecv"] = row(M([0, 1]), 1, M([2, 3]), 1)
    cases = {f"{name}{suffix}": make for name, make in cases.items()}
    if size == 4 and dtype == "float32":
        three = M([0, 1, 2])  # COLS = 12 splits three ways
        cases |= {
            "Broadcast-root-outside": lambda: build(M([3]), None, three, None),
            "Scatter-root-outside": lambda: build(M([3]), None, three, 1),
            "Gather-root-outside": lambda: build(three, 1, M([3]), None),
            "Reduce-root-outside": lambda: build(three, 1, M([3]), None, 1),
            "SendRecv-then-Allgather-on-a-subteam": _subteam,
        }
    return cases


DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "bool")


def special_values(dtype: str, rows: int) -> np.ndarray:
    """x[rows, 12]: each column a case for a reduction over the rows (sharded over ranks).

    NaN on the first or the last rank, inf against -inf, NaN against inf, all -0.0,
    -0.0 before and after 0.0, ties, integer extremes; every finite float is a small
    integer, so a sum is exact in any order and the backends must agree bit for bit.
    """
    r = np.arange(rows)
    nan, inf = np.nan, np.inf
    if dtype == "bool":
        cols = [r % 2, r % 3 == 0, r == 0, r == rows - 1, r * 0, r * 0 + 1]
    elif dtype.startswith("int"):
        top = np.iinfo(dtype).max
        cols = [r - 3, 3 - r, r * 0 + 7, np.where(r == 0, top, 1), np.where(r == 1, -top - 1, -1)]
        cols += [(r * 5) % 7, np.where(r % 2, top, -top)]
    else:
        cols = [
            np.where(r == rows - 1, nan, r),
            np.where(r == 0, nan, r),
            np.where(r == 0, inf, np.where(r == rows - 1, -inf, 1)),
            np.where(r == 0, nan, np.where(r == rows - 1, inf, 1)),
            r * 0 - 0.0,
            np.where(r < rows // 2, -0.0, 0.0),
            np.where(r < rows // 2, 0.0, -0.0),
            np.where(r % 2, 5, -3),  # ties: 5 on every other row
            -r - 0.0,  # the max is row 0's -0.0
            r * 0 - inf,
        ]
    cols += [r * 0] * (12 - len(cols))
    return np.stack([np.asarray(c).astype(dtype) for c in cols], axis=1)


def _reduction(
    dtype: str, op: str, in_mesh, out_mesh, out_sharded: bool, per_device: int = 2
) -> tuple:
    """y = op(x, [0]) of x[per_device * |in_mesh|, 12] row-sharded, on out_mesh (cols
    sharded or not); one row a device lowers to the collective alone, no kernel."""
    rows = per_device * in_mesh.size
    with fl.Fusion() as f:
        x = fl.tensor([rows, 12], dtype)
        f.add_input(x)
        shard_axis(x, 0, in_mesh)
        y = (fl.sum if op == "sum" else fl.max)(x, [0])
        y.set_device_mesh(out_mesh)
        if out_sharded:
            shard_axis(y, 1, out_mesh)  # the reduced axis stays ahead of the data axis
        f.add_output(y)
    return f, [special_values(dtype, rows)]


def _matmul_partials(dtype: str, mesh) -> tuple:
    """a @ b with k sharded: partial sums of the operands' own dtype (bool, int32, ...)."""
    with fl.Fusion() as f:
        a, b = fl.tensor([4, 2 * mesh.size], dtype), fl.tensor([2 * mesh.size, 6], dtype)
        f.add_input(a)
        f.add_input(b)
        shard_axis(a, 1, mesh)
        shard_axis(b, 0, mesh)
        y = fl.matmul(a, b)
        y.set_device_mesh(mesh)
        f.add_output(y)
    return f, None


def _half_partials(size: int, dtype: str) -> tuple:
    """sum(x, [0]) of x[2 * size, 12] row-sharded: rows of 40000 then of -40000, so a
    device's partial sum (80000) overflows float16; float32 partials give the reference's 0."""
    f, _ = _reduction(dtype, "sum", M(range(size)), M(range(size)), False)
    rows = np.repeat(np.array([40000.0, -40000.0]), size)
    return f, [np.repeat(rows[:, None], 12, axis=1).astype(dtype)]


def reduction_cases(size: int) -> dict[str, object]:
    """Every dtype x sum/max x Allreduce/ReduceScatter/Reduce on special values."""
    every = M(range(size))
    kinds = {
        "Allreduce": (every, every, False),
        "ReduceScatter": (every, every, True),
        "Reduce": (every, M([0]), False),
    }
    if size == 4:
        kinds["Reduce-root-outside"] = (M([0, 1, 2]), M([3]), False)
    cases = {}
    for kind, (src, dst, sharded) in kinds.items():
        for dtype in DTYPES:
            for op in ("sum", "max"):
                cases[f"{kind}-{op}-{dtype}"] = lambda a=(dtype, op, src, dst, sharded): _reduction(
                    *a
                )
    # one row a device: the collective reduces x itself (no partial kernel), except for
    # sums of bfloat16, which keep their kernel's float32 partial sums
    for kind, (src, dst, sharded) in kinds.items():
        for dtype in ("float32", "bfloat16", "int64"):
            for op in ("sum", "max"):
                args = (dtype, op, src, dst, sharded, 1)
                cases[f"local-{kind}-{op}-{dtype}"] = lambda a=args: _reduction(*a)
    for dtype in DTYPES:
        cases[f"Allreduce-matmul-{dtype}"] = lambda d=dtype: _matmul_partials(d, every)
    for dtype in ("float16", "bfloat16"):
        cases[f"half-partials-{dtype}"] = lambda d=dtype: _half_partials(size, d)
    return cases


def _subteam() -> fl.Fusion:
    """x on {0 1} -> SendRecv to {2 3} -> Allgather among {2 3}; ranks 0 and 1 sit it out."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 12])
        f.add_input(x)
        shard_axis(x, 1, M([0, 1]))
        y = fl.set(x)
        shard_axis(y, 1, M([2, 3]))
        z = fl.set(y)
        z.set_device_mesh(M([2, 3]))
        f.add_output(z)
    return f


def _partial_output(size: int) -> fl.Fusion:
    """A fusion output the user made partial (rDIDx): the pipeline must complete it."""
    with fl.Fusion() as f:
        mesh = M(range(size))
        x = fl.tensor([4, 4 * size])
        x.set_device_mesh(mesh)
        f.add_input(x)
        y = fl.sum(x, [1])
        f.add_output(y)
        shard_axis(y, 1, mesh)
    return f


def uneven_cases(size: int) -> dict[str, object]:
    """Every §5 row on x[n, n + 2] with n the mesh does not divide (on 4 ranks also an
    empty device, n = 5, and more devices than rows, n = 3), each collective's chunks
    padded and variable-size: `Allgather-uneven13-padded`."""
    extents = (13, 5, 3) if size == 4 else (13,)
    cases = {}
    for n in extents:
        # SendRecv needs two disjoint meshes: 2 + 2 of 4 ranks
        rows = [
            c for c in models.resharding_cases(size, n, n + 2) if c.kind not in (None, "SendRecv")
        ]
        if size == 4:
            rows += [c for c in models.resharding_cases(2, n, n + 2) if c.kind == "SendRecv"]
        for case in rows:
            for chunks in ("padded", "variable"):
                spec = default_pass_names(**{"lower-communications": f"chunks={chunks}"})
                cases[f"{case.kind}-uneven{n}-{chunks}"] = lambda c=case, s=spec: (
                    c.build(),
                    None,
                    fl.Pipeline(s),
                )
    return cases


def _dropout(size: int, axis: int, dtype: str) -> fl.Fusion:
    """dropout(gelu(x)) with x sharded on `axis`: each rank draws its shard's numbers."""
    with fl.Fusion() as f:
        x = fl.tensor([4 * size, 6 * size], dtype)
        f.add_input(x)
        shard_axis(x, axis, M(range(size)))
        f.add_output(fl.dropout(fl.gelu(x), 0.25, seed=11, offset=3))
    return f


def _attention(size: int, axis: int) -> fl.Fusion:
    """Causal sdpa with dropout and its backward, q (and dout) sharded on `axis`: the
    batch (nothing moves) or the query rows (grad_key, grad_value: Allreduces)."""
    flags = {"dropout_p": 0.2, "is_causal": True, "seed": 9, "offset": 1}
    with fl.Fusion() as f:
        mesh = M(range(size))
        dout, q, k, v = (fl.tensor([size, 2, 4 * size, 8]) for _ in range(4))
        for t in (dout, q, k, v):
            f.add_input(t)
            t.set_device_mesh(mesh)
        for t in (dout, q) if axis == 2 else (dout, q, k, v):
            shard_axis(t, axis, mesh)
        out, lse = fl.sdpa(q, k, v, **flags)
        for t in (out, lse, *fl.sdpa_bwd(dout, q, k, v, out, lse, **flags)):
            f.add_output(t)
    return f


def all_cases(size: int) -> dict[str, object]:
    cases = {}
    root = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
    for path in sorted(glob.glob(os.path.join(root, "*.fus"))):
        meshes = {tv.mesh for tv in fl.load(path).tensors() if tv.mesh is not None}
        if meshes and max(d for m in meshes for d in m.devices) == size - 1:
            cases["example:" + os.path.basename(path)] = lambda p=path: fl.load(p)
    cases |= section5_cases(size)
    cases |= section5_cases(size, "bfloat16")  # moved as uint16 bits, reduced as bfloat16
    cases |= reduction_cases(size)
    cases["seed000"] = lambda: models.all_gather_all_reduce_reduce_scatter(size, local=64)
    # torch_xla's own input: ones; t5 = 1024 * size**2 on every rank (65536 on 8).
    cases["seed000-ones"] = lambda: (
        models.all_gather_all_reduce_reduce_scatter(size),
        [np.ones(size * 1024, np.float32)],
    )
    cases["tp-mlp"] = lambda: models.tensor_parallel_mlp(size)
    cases["sp-mlp"] = lambda: models.tensor_parallel_mlp(size, sequence_parallel=True)
    cases["partial-output-completed"] = lambda: _partial_output(size)
    cases |= uneven_cases(size)
    cases["sdpa-batch"] = lambda: _attention(size, 0)
    cases["sdpa-rows"] = lambda: _attention(size, 2)
    # outputs of one op sharded differently: computed once, the others resharded after
    for name, make in multi_output_cases(size).items():
        cases[name] = lambda m=make: m(size)
    for axis in (0, 1):
        for dtype in ("float32", "bfloat16"):
            cases[f"dropout-axis{axis}-{dtype}"] = lambda a=axis, d=dtype: _dropout(size, a, d)
    # each rank computes its own block of iota and its own axis_index: nothing moves
    cases["iota-positions"] = lambda: positions(size, 4 * size)
    cases["iota-positions-uneven"] = lambda: positions(size, 4 * size + 1)
    cases["axis_index"] = lambda: scaled_by_index(size)
    # DIDx on the outer split of merge(x, b{1}): x's torch.chunk rows, uneven
    cases["merge-with-broadcast"] = lambda: _merge_with_broadcast(size, 2 * size + 1)
    # DIDx on the inner part of split(0, size): rows r, r + size, ..., uneven
    cases["cyclic"] = lambda: cyclic_square(size, 2 * size + 1)
    cases["cyclic-gathered"] = lambda: cyclic_gathered(size, 2 * size + 1)  # strided Allgather
    # blocks of 3 rows: device r holds rows (k * size + r) * 3 + j (nvFuser's nonoutermost)
    cases["block-cyclic"] = lambda: cyclic_square(size, 2 * size * 3, block=3)
    cases["block-cyclic-gathered"] = lambda: cyclic_gathered(size, 2 * size * 3, block=3)
    if size == 4:  # nvFuser's 2-D sharded vector, gathered over DIDx in each DIDy team
        cases["2d-sharded-vector-gathered"] = vector_2d_gathered
    return cases


def _merge_with_broadcast(size: int, n: int) -> fl.Fusion:
    """exp(x) + 1, x[1, n] scheduled merge(0, 1), outer_split by size, DIDx."""
    with fl.Fusion() as f:
        x = fl.tensor([1, n], name="x")
        f.add_input(x)
        x.set_device_mesh(M(range(size)))
        x.merge(0, 1)
        x.outer_split(0, size)
        x.axis(0).parallelize(fl.ParallelType.DIDx)
        f.add_output(fl.add(fl.exp(x), 1.0))
    return f


def compare(mine, theirs) -> str:
    """identical (bit for bit) / close (float32's rounding apart) / a message."""
    verdict = "identical"
    for a, b in zip(mine, theirs):
        if (a is None) != (b is None):
            return "held by one backend only"
        if a is None:
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
        if a.tobytes() == b.tobytes():
            continue
        x, y = a.astype(np.float64), b.astype(np.float64)
        if not np.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
            k = int(np.argmax(np.abs(x - y)))
            return f"differs at flat index {k}: {x.flat[k]} vs {y.flat[k]}"
        verdict = "close"
    return verdict


def main() -> None:
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    results = {}
    for name, make in all_cases(size).items():
        made = make()
        fusion, inputs, pipeline = (
            (*made, None)[:3] if isinstance(made, tuple) else (made, None, None)
        )
        inputs = inputs or fl.random_inputs(fusion, 5)
        chunks, mine, kernels = [], None, None
        try:
            mpi = fl.FusionExecutor(fusion, backend="mpi", pipeline=pipeline)
            mine = mpi.run_per_device(inputs)[rank]
            kinds = [c.kind.value for c in mpi.communications]
            chunks = [c.sizing.value for c in mpi.communications]
            kernels = len(mpi.program.kernels)
            sim = fl.FusionExecutor(fusion, pipeline=pipeline).run_per_device(inputs)[rank]
            verdict = compare(mine, sim)
            outs = mpi.run(inputs)
            if rank == 0:
                fl.validate(fusion, inputs, outs)
            elif outs is not None:
                verdict = "run() returned outputs on a rank other than 0"
        except fl.FuserliteError as exc:
            verdict, kinds = f"error: {exc}", []
        verdicts = world.gather(verdict, root=0)
        held = verdict == "identical" and mine and mine[0] is not None and mine[0].size
        first = world.gather(float(mine[0].flat[0]) if held else None, root=0)
        if rank == 0:
            worst = next((v for v in verdicts if v not in ("identical", "close")), None)
            summary = worst or ("close" if "close" in verdicts else "identical")
            results[name] = {
                "verdict": summary,
                "kinds": kinds,
                "first": first,
                "chunks": chunks,
                "kernels": kernels,
            }
    if rank == 0:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
