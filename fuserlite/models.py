"""Ready-made fusions: the two seeds, the tensor-parallel MLPs and the reshardings of §5.

Shared by the examples, the tests and the benchmarks so that each builds the
same program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import fuserlite.ops as fl
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Replicate, Shard
from fuserlite.ir.types import ParallelType
from fuserlite.schedule.placements import distribute
from fuserlite.schedule.shard import shard_axis
from fuserlite.spmd.collectives import all_gather, all_reduce, reduce_scatter
from fuserlite.spmd.shard_map import shard_map


def add_broadcast(num_devices: int, broadcast_is_parallelized: bool) -> Fusion:
    """Seed 004: z = x[D] + y[1]; either y's broadcast axis or x and z are DIDx."""
    with Fusion() as fusion:
        mesh = DeviceMesh.for_num_devices(num_devices)
        x = fl.tensor([num_devices])
        y = fl.tensor([1])
        x.set_device_mesh(mesh)
        y.set_device_mesh(mesh)
        z = fl.add(x, y)
        fusion.add_input(x)
        fusion.add_input(y)
        fusion.add_output(z)
        if broadcast_is_parallelized:
            y.axis(0).parallelize(ParallelType.DIDx)
        else:
            x.axis(0).parallelize(ParallelType.DIDx)
            z.axis(0).parallelize(ParallelType.DIDx)
    return fusion


def many_outputs(n: int, devices: int = 2) -> Fusion:
    """`y_k = x + k` for k < n: n outputs of one input x[8, 16] sharded on axis 0 over
    `devices` (the pipeline benchmark's wide fusion: every output laid out alike)."""
    with Fusion() as fusion:
        x = fl.tensor([8, 16])
        fusion.add_input(x)
        shard_axis(x, 0, DeviceMesh.for_num_devices(devices))
        for k in range(n):
            fusion.add_output(fl.add(x, float(k)))
    return fusion


def all_gather_all_reduce_reduce_scatter(num_devices: int = 8, local: int = 1024) -> Fusion:
    """Seed 000 as torch_xla writes it, per device: t5 = sum(reduce_scatter(all_reduce(
    all_gather(t1)))); t1 is each device's block of the input, t5 one number per device."""
    with Fusion() as fusion:
        mesh = DeviceMesh.for_num_devices(num_devices)
        t1 = fl.tensor([local * num_devices], name="t1")
        fusion.add_input(t1)

        @shard_map(mesh=mesh, in_specs=[(ParallelType.DIDx,)], out_specs=[(ParallelType.DIDx,)])
        def step(t1):
            t2 = all_gather(t1)
            t3 = all_reduce(t2, "sum")
            t4 = reduce_scatter(t3, "sum", scatter_dim=0, shard_count=num_devices)
            t5 = fl.sum(t4)
            return fl.reshape(t5, [1])  # out_specs concatenates each device's [1]

        fusion.add_output(step(t1))
    return fusion


def gather_then_reduce_on_a_2d_mesh(rows: int = 2, cols: int = 4, local: int = 4) -> Fusion:
    """Seed 000's shape on a rows x cols mesh: device (y, i) holds x[y, local*i:local*(i+1)],
    all_gathers it over DIDx, all_reduces over DIDy and sums each row of its own copy."""
    x_axis, y_axis = ParallelType.DIDx, ParallelType.DIDy
    with Fusion() as fusion:
        x = fl.tensor([rows, cols * local], name="x")
        fusion.add_input(x)

        @shard_map(
            mesh=DeviceMesh.for_shape([rows, cols]),
            in_specs=[(y_axis, x_axis)],
            out_specs=[(y_axis,)],
        )
        def step(block):  # [1, local]
            gathered = all_gather(block, axis=x_axis)  # [cols, local]: row i is device i's
            total = all_reduce(gathered, axis=y_axis)  # summed over the rows of the mesh
            return fl.sum(total, [1], keepdim=True)  # [cols, 1]

        fusion.add_output(step(x))  # [rows * cols, 1]: once per mesh row
    return fusion


def allgather_matmul(
    num_devices: int = 8,
    m: int = 8192,
    k: int = 4096,
    n: int = 8192,
    chunks: int = 1,
    dtype: str = "bfloat16",
) -> Fusion:
    """nvFuser's Allgather + GEMM (AGMatmulTest): x [m, k] sharded on its rows over the
    devices, all-gathered, times a replicated w [k, n], the product replicated. With
    `chunks` > 1, x is `chunks` tensors x0.. of m / chunks rows, each all-gathered and
    multiplied on its own: the chunks of collective-based pipelining, as separate
    tensors (fuserlite.program.streams puts each on its stream)."""
    with Fusion() as fusion:
        mesh = DeviceMesh.for_num_devices(num_devices)
        w = fl.tensor([k, n], dtype, name="w")
        w.set_device_mesh(mesh)
        names = ["x"] if chunks == 1 else [f"x{i}" for i in range(chunks)]
        xs = [fl.tensor([m // chunks, k], dtype, name=name) for name in names]
        for x in xs:
            x.set_device_mesh(mesh)
            fusion.add_input(x)
            shard_axis(x, 0, mesh)
        fusion.add_input(w)
        for x in xs:
            y = fl.matmul(x, w)
            y.set_device_mesh(mesh)  # replicated: every device computes all of its rows
            fusion.add_output(y)
    return fusion


def tensor_parallel_mlp(
    num_devices: int,
    batch: int = 2,
    seq: int = 8,
    hidden: int = 16,
    sequence_parallel: bool = False,
) -> Fusion:
    """Megatron MLP: column-parallel linear, gelu, row-parallel linear.

    Weights stay in place: w1/b1 sharded on the output features, w2 on the
    input features. Plain tensor parallelism lowers to one Allreduce; the
    sequence-parallel variant (x and y sharded on the sequence axis) to one
    Allgather before and one ReduceScatter after.
    """
    with Fusion() as fusion:
        mesh = DeviceMesh.for_num_devices(num_devices)
        x = fl.tensor([batch, seq, hidden])
        w1 = fl.tensor([4 * hidden, hidden])
        b1 = fl.tensor([4 * hidden])
        w2 = fl.tensor([hidden, 4 * hidden])
        b2 = fl.tensor([hidden])
        for t in (x, w1, b1, w2, b2):
            fusion.add_input(t)
        distribute(x, mesh, [Shard(1) if sequence_parallel else Replicate()])
        distribute(w1, mesh, [Shard(0)])  # column-parallel
        distribute(b1, mesh, [Shard(0)])
        distribute(w2, mesh, [Shard(1)])  # row-parallel
        distribute(b2, mesh, [Replicate()])
        h = fl.gelu(fl.linear(x, w1, b1))
        y = fl.linear(h, w2)
        if sequence_parallel:  # its partial sums reduce-scattered over the sequence
            distribute(y, mesh, [Shard(1)])
        fusion.add_output(fl.add(y, b2))
    return fusion


@dataclass(frozen=True)
class BlockShape:
    """The sizes of a transformer block: batch, sequence, hidden, heads (head dim = hidden / heads)."""

    batch: int = 2
    seq: int = 16
    hidden: int = 64
    heads: int = 8


def transformer_block(
    num_devices: int = 8,
    dtype: str = "bfloat16",
    shape: BlockShape = BlockShape(),  # noqa: B008 - a frozen dataclass
    dropout_p: float = 0.1,
    seed: int = 0,
) -> Fusion:
    """A GPT block, tensor-parallel with sequence parallelism (Megatron-SP).

    x [B, S, H] is sharded on the sequence: layer_norm, attention over heads sharded
    across devices (q, k, v column-parallel, the output projection row-parallel),
    dropout and the residual; layer_norm, the MLP (column-parallel, gelu, row-parallel),
    dropout and the residual. Weights stay in place; what moves is exactly Megatron-SP's:
    an Allgather of the normalized activations before the QKV projections and before
    the MLP, a ReduceScatter of the partial sums after the output projection and after
    the MLP. Dropout (attention probabilities and both residual branches) draws Philox
    at global indices, so every device keeps the unsharded mask.
    """
    b, s, h, heads = shape.batch, shape.seq, shape.hidden, shape.heads
    head_dim = h // heads
    with Fusion() as fusion:
        mesh = DeviceMesh.for_num_devices(num_devices)
        names = ["x", "ln1_w", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo"]
        names += ["ln2_w", "ln2_b", "w1", "b1", "w2", "b2"]
        shapes = {"x": [b, s, h], "wq": [h, h], "wk": [h, h], "wv": [h, h], "wo": [h, h]}
        shapes |= {"bq": [h], "bk": [h], "bv": [h], "w1": [4 * h, h], "b1": [4 * h]}
        shapes |= {"w2": [h, 4 * h]}
        t = {n: fl.tensor(shapes.get(n, [h]), dtype, name=n) for n in names}
        placements = {"x": [Shard(1)]}  # sequence parallel
        placements |= {n: [Shard(0)] for n in ("wq", "bq", "wk", "bk", "wv", "bv", "w1", "b1")}
        placements |= {"wo": [Shard(1)], "w2": [Shard(1)]}  # row-parallel
        for n, tv in t.items():  # column-parallel (output features) above, the rest whole
            fusion.add_input(tv)
            distribute(tv, mesh, placements.get(n, [Replicate()]))

        def heads_first(y):  # [B, S, H] -> [B, heads, S, head_dim]
            return fl.permute(fl.reshape(y, [b, s, heads, head_dim]), [0, 2, 1, 3])

        def row_parallel(y, w, bias):  # partial sums reduce-scattered over the sequence
            out = distribute(fl.linear(y, w), mesh, [Shard(1)])
            return fl.add(out, bias)

        x = t["x"]
        ln1 = fl.layer_norm(x, [h], t["ln1_w"], t["ln1_b"])
        q, k, v = (heads_first(fl.linear(ln1, t[f"w{n}"], t[f"b{n}"])) for n in "qkv")
        o, _ = fl.sdpa(q, k, v, dropout_p=dropout_p, is_causal=True, seed=seed, offset=0)
        o = fl.reshape(fl.permute(o, [0, 2, 1, 3]), [b, s, h])
        attn = row_parallel(o, t["wo"], t["bo"])
        r1 = fl.add(x, fl.dropout(attn, dropout_p, seed=seed, offset=1))
        ln2 = fl.layer_norm(r1, [h], t["ln2_w"], t["ln2_b"])
        mlp = row_parallel(fl.gelu(fl.linear(ln2, t["w1"], t["b1"])), t["w2"], t["b2"])
        fusion.add_output(fl.add(r1, fl.dropout(mlp, dropout_p, seed=seed, offset=2)))
    return fusion


def resharding(
    in_mesh: DeviceMesh,
    in_axis: int | None,
    out_mesh: DeviceMesh,
    out_axis: int | None,
    reduce_axis: int | None = None,
    rows: int = 8,
    cols: int = 12,
    dtype: str = "float32",
) -> Fusion:
    """x[rows, cols] of `dtype` on in_mesh, sharded on in_axis -> y = set(x), or
    sum(x, reduce_axis), on out_mesh, sharded on out_axis (an axis of y's data; None:
    replicated)."""
    with Fusion() as fusion:
        x = fl.tensor([rows, cols], dtype)
        fusion.add_input(x)
        x.set_device_mesh(in_mesh)
        if in_axis is not None:
            shard_axis(x, in_axis, in_mesh)
        y = fl.set(x) if reduce_axis is None else fl.sum(x, reduce_axis)
        y.set_device_mesh(out_mesh)
        if out_axis is not None:
            # A reduction keeps its reduced axis in the logical domain, ahead of the data axis.
            shard_axis(y, out_axis if reduce_axis is None else out_axis + 1, out_mesh)
        fusion.add_output(y)
    return fusion


@dataclass(frozen=True)
class ReshardingCase:
    """One row of docs/design.md §5: a fusion, the communication it needs and its bytes."""

    name: str
    build: Callable[[], Fusion]
    kind: str | None  # None: no data moves (same sharding, an alias)
    bytes_per_device: int  # the table's formula for this case


def resharding_cases(num_devices: int = 4, rows: int = 8, cols: int = 12) -> list[ReshardingCase]:
    """Every row of docs/design.md §5 on `num_devices` devices for x[rows, cols] float32."""
    d, item = num_devices, 4
    whole, row = rows * cols * item, cols * item
    mesh = DeviceMesh(range(d))
    one = DeviceMesh([0])
    other = DeviceMesh(range(d, 2 * d))

    def case(name, kind, nbytes, *args) -> ReshardingCase:
        return ReshardingCase(name, lambda: resharding(*args, rows=rows, cols=cols), kind, nbytes)

    return [
        case("same-sharding", None, 0, mesh, 0, mesh, 0),
        case("replicated-to-sharded", "LocalSlice", 0, mesh, None, mesh, 1),
        case("allgather", "Allgather", (d - 1) * whole // d, mesh, 0, mesh, None),
        case("alltoall", "AllToAll", (d - 1) * whole // (d * d), mesh, 0, mesh, 1),
        case("allreduce", "Allreduce", 2 * (d - 1) * row // d, mesh, 0, mesh, None, 0),
        case("reduce-scatter", "ReduceScatter", (d - 1) * row // d, mesh, 0, mesh, 0, 0),
        case("broadcast", "Broadcast", whole, one, None, mesh, None),
        case("scatter", "Scatter", (d - 1) * whole // d, one, None, mesh, 0),
        case("gather", "Gather", whole // d, mesh, 0, one, None),
        case("reduce", "Reduce", row, mesh, 0, one, None, 0),
        case("sendrecv", "SendRecv", whole // d, mesh, 1, other, 1),
    ]
