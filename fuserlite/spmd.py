"""SPMD collectives with torch_xla / JAX shard_map semantics, built in the global view.

An SPMD value is a tensor of the fusion: its *local* value on a device is that
device's shard. `spmd_input(local_shape, mesh)` is a tensor whose device d holds
one block of `local_shape` (the global tensor concatenates them along axis 0).
The collectives below build ordinary IR (sets, broadcasts, expands, reductions,
reshapes) that the normal passes lower to Allgather, Allreduce, ReduceScatter
and AllToAll; there is no second code path.
"""

from __future__ import annotations

from collections.abc import Sequence

from fuserlite import ops
from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import sharded_data_axis
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.ops.common import check_rank
from fuserlite.schedule.shard import shard_axis

_OPS = {"sum": ops.sum, "max": ops.max}


def _mesh(t: TensorView, what: str) -> DeviceMesh:
    args.instance(t, TensorView, what, "t", "a TensorView")
    if t.mesh is None:
        raise FusionError(f"{what}: {t.name} has no device mesh; call set_device_mesh first")
    return t.mesh


def _reduce_fn(op: str, what: str):
    if not isinstance(op, str) or op not in _OPS:
        raise args.fail(what, "op", f"one of {', '.join(map(repr, _OPS))}", op)
    return _OPS[op]


def _dim(t: TensorView, dim: object, what: str, arg: str) -> int:
    """An axis of t's data (negative counts from the end)."""
    n = len(t.shape)
    return args.integer(dim, f"{what}: {t.name}{list(t.shape)}", arg, minimum=-n, maximum=n - 1) % n


def spmd_input(
    local_shape: Sequence[int],
    mesh: DeviceMesh,
    dtype: DType | str = DType.float32,
    fusion: Fusion | None = None,
    name: str | None = None,
) -> TensorView:
    """A fusion input whose device d holds a block of `local_shape` (concatenated on axis 0);
    `name` as for fl.tensor."""
    check_rank(local_shape, "spmd_input", "local_shape")
    local_shape = args.integers(local_shape, "spmd_input", "local_shape", minimum=1, scalar_ok=True)
    args.instance(mesh, DeviceMesh, "spmd_input", "mesh", "a DeviceMesh")
    if not local_shape:
        raise FusionError("spmd_input: local_shape needs at least one axis, got []")
    t = ops.tensor([local_shape[0] * mesh.size, *local_shape[1:]], dtype, fusion=fusion, name=name)
    shard_axis(t, 0, mesh)
    return t


def all_gather(t: TensorView, dim: int = 0) -> TensorView:
    """Every device gets the concatenation along `dim` of all local values."""
    mesh = _mesh(t, "all_gather")
    dim = _dim(t, dim, "all_gather", "dim")
    if sharded_data_axis(t) != dim:
        raise FusionError(
            f"all_gather: {t.name} must be sharded on axis {dim} (each device's block of it); "
            f"it is {'replicated' if sharded_data_axis(t) is None else f'sharded on axis {sharded_data_axis(t)}'}"
        )
    out = ops.set(t)
    out.set_device_mesh(mesh)
    return out


def _stack_over_devices(t: TensorView, mesh: DeviceMesh) -> TensorView:
    """[D, *shape] whose row d is device d's local value of a replicated `t`."""
    rank = len(t.shape)
    b = ops.broadcast(t, [True] + [False] * rank)
    e = ops.expand(b, [mesh.size, *t.shape])
    shard_axis(e, 0, mesh)
    return e


def _stack_sharded(t: TensorView, mesh: DeviceMesh) -> TensorView:
    """[D, *local_shape]: the blocks of a tensor sharded on axis 0, one row per device."""
    axis = sharded_data_axis(t)
    if axis != 0:
        raise FusionError(
            f"{t.name} is sharded on axis {axis}; the SPMD collectives take values sharded on axis 0 or replicated"
        )
    shape = list(t.shape)
    r = ops.reshape(t, [mesh.size, shape[0] // mesh.size, *shape[1:]])
    r.set_device_mesh(mesh)
    shard_axis(r, 0, mesh)
    return r


def _stacked(t: TensorView, mesh: DeviceMesh) -> TensorView:
    return _stack_over_devices(t, mesh) if sharded_data_axis(t) is None else _stack_sharded(t, mesh)


def all_reduce(t: TensorView, op: str = "sum") -> TensorView:
    """Every device gets the reduction over devices of the local values."""
    fn = _reduce_fn(op, "all_reduce")
    mesh = _mesh(t, "all_reduce")
    out = fn(_stacked(t, mesh), 0)
    out.set_device_mesh(mesh)
    return out


def reduce_scatter(
    t: TensorView, op: str = "sum", scatter_dim: int = 0, shard_count: int | None = None
) -> TensorView:
    """Reduce the local values over devices, then device d keeps block d along `scatter_dim`."""
    fn = _reduce_fn(op, "reduce_scatter")
    mesh = _mesh(t, "reduce_scatter")
    scatter_dim = args.integer(scatter_dim, "reduce_scatter", "scatter_dim")
    if (
        shard_count is not None
        and args.integer(shard_count, "reduce_scatter", "shard_count") != mesh.size
    ):
        raise FusionError(
            f"reduce_scatter: shard_count {shard_count} must equal the mesh size {mesh.size}"
        )
    stacked = _stacked(t, mesh)
    local = stacked.shape[1:]
    if not 0 <= scatter_dim < len(local) or local[scatter_dim] % mesh.size:
        raise FusionError(
            f"reduce_scatter: scatter_dim {scatter_dim} of local shape {list(local)} must exist and be "
            f"divisible by {mesh.size} devices"
        )
    out = fn(stacked, 0)
    shard_axis(out, scatter_dim + 1, mesh)
    return out


def all_to_all(t: TensorView, split_dim: int, concat_dim: int) -> TensorView:
    """Split each local value along `split_dim`, send block j to device j, concatenate
    the received blocks along `concat_dim`."""
    mesh = _mesh(t, "all_to_all")
    split_dim = _dim(t, split_dim, "all_to_all", "split_dim")
    concat_dim = _dim(t, concat_dim, "all_to_all", "concat_dim")
    if sharded_data_axis(t) != concat_dim:
        raise FusionError(f"all_to_all: {t.name} must be sharded on concat_dim {concat_dim}")
    if split_dim == concat_dim or t.shape[split_dim] % mesh.size:
        raise FusionError(
            f"all_to_all: split_dim {split_dim} must differ from concat_dim and be divisible by {mesh.size}"
        )
    out = ops.set(t)
    shard_axis(out, split_dim, mesh)
    return out


def local_sum(t: TensorView) -> TensorView:
    """Each device sums its own local value (the result is one number per device)."""
    mesh = _mesh(t, "local_sum")
    stacked = _stacked(t, mesh)
    out = ops.sum(stacked, list(range(1, len(stacked.shape))))
    out.set_device_mesh(mesh)
    shard_axis(out, 0, mesh)
    return out
