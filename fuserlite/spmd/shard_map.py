"""fl.shard_map: a program written per device (JAX's shard_map, torch_xla's SPMD), built
as ordinary global-view IR.

`fn` runs once, on *local* tensors: a local program with each device's shapes, in a
fusion of its own, where every op is an ordinary op. Each local value stands for a
global tensor of the enclosing fusion (a `Local`): its leading axes, one per mesh axis
the value *varies* over (devices on that axis hold different values), are sharded on
those axes, one row per device; the local axes follow. A value *invariant* over a mesh
axis (every device of it holds the same) has no leading axis for it and is replicated
there. Each local op is replayed on the global tensors with its axes shifted past the
leading ones, so it acts on each device's own value; the only cross-device ops are the
collectives of fuserlite.spmd.collectives, which build the sets and reductions that the usual
passes lower to communications. in_specs and out_specs (one entry per tensor axis: the
mesh axis sharding it, a tuple of mesh axes splitting it in turn, the first outermost,
or None) say how global arguments become local values and back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from fuserlite import ops
from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.fusion import active_fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ops.common import fusion_of
from fuserlite.spmd.trace import (
    Local,
    Region,
    Trace,
    add_region,
    axis_size,
    declare,
    in_order,
    leading,
    mesh_axis,
    team_size,
    tracing,
)


# -- specs ------------------------------------------------------------------------
class PartitionSpec(tuple):
    """JAX's PartitionSpec: one entry per tensor axis, the mesh axis that splits it, a
    tuple of mesh axes splitting it in turn (the first outermost), or None. A plain tuple
    is a spec too; a PartitionSpec is one even where a tuple would read as a list of
    specs (`in_specs=PartitionSpec(("dp", "tp"))` for a single argument)."""

    def __new__(cls, *entries: object) -> PartitionSpec:
        return super().__new__(cls, entries)

    def __repr__(self) -> str:
        return "PartitionSpec" + spec_text(self)


Spec = (
    tuple  # one entry per tensor axis: a mesh axis (ParallelType or name), a tuple of them, or None
)
Sharded = dict[
    int, tuple[ParallelType, ...]
]  # tensor axis -> the mesh axes splitting it, outer first


def _entry(mesh: DeviceMesh, e: object, what: str) -> tuple[ParallelType, ...]:
    """The mesh axes of one spec entry (a tuple or list: several, outer first)."""
    if isinstance(e, (tuple, list)):
        return tuple(mesh_axis(mesh, a, what) for a in e)
    return (mesh_axis(mesh, e, what),)


def _spec(spec: object, mesh: DeviceMesh, rank: int, what: str) -> Sharded:
    """{tensor axis: its mesh axes} of one spec; trailing axes it leaves out are replicated."""
    if spec is None:
        return {}
    if not isinstance(spec, (tuple, list)):
        raise args.fail(what, "spec", "None or a tuple with one entry per tensor axis", spec)
    if len(spec) > rank:
        raise FusionError(
            f"{what}: the spec {spec_text(spec)} has {len(spec)} entries but the tensor has "
            f"{rank} axes; give at most one entry per axis"
        )
    out = {d: _entry(mesh, e, what) for d, e in enumerate(spec) if e is not None}
    out = {d: pts for d, pts in out.items() if pts}
    used = [pt for pts in out.values() for pt in pts]
    if len(set(used)) != len(used):
        raise FusionError(f"{what}: the spec {spec_text(spec)} names a mesh axis twice")
    return out


def _entry_text(e: object) -> str:
    if isinstance(e, ParallelType):
        return e.name
    if isinstance(e, (tuple, list)):
        return "(" + ", ".join(map(_entry_text, e)) + ("," if len(e) == 1 else "") + ")"
    return repr(e) if isinstance(e, str) else str(e)


def spec_text(spec: Sequence) -> str:
    """A spec as written: (DIDx, None), (('dp', 'tp'), None)."""
    names = [_entry_text(e) for e in spec]
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _specs(specs: object, n: int, what: str) -> list:
    """One spec per value: a list of specs, or one spec for a single value."""
    if n == 1 and (specs is None or _is_spec(specs)):
        return [specs]
    if n == 0 and specs is None:  # a function of no arguments needs no in_specs
        return []
    if not isinstance(specs, (list, tuple)) or len(specs) != n:
        raise FusionError(
            f"shard_map: {what} must give one spec per {'argument' if 'in' in what else 'output'} "
            f"({n}), got {specs!r}"
        )
    return list(specs)


def _is_spec(value: object) -> bool:
    """A PartitionSpec, or a tuple of plain entries (a tuple holding tuples is a list of
    specs, as before multi-axis entries: write PartitionSpec for those)."""
    if isinstance(value, PartitionSpec):
        return True
    return isinstance(value, tuple) and all(
        e is None or isinstance(e, (ParallelType, str)) for e in value
    )


def _blocks(mesh: DeviceMesh, pts: tuple[ParallelType, ...]) -> str:
    return " x ".join(f"{axis_size(mesh, pt)} devices of {pt.name}" for pt in pts)


def _entering(trace: Trace, x: TensorView, spec: Sharded, what: str) -> Local:
    """The Local of a global argument: device blocks per spec, stacked in front."""
    mesh = trace.mesh
    for d, pts in spec.items():
        if x.shape[d] % team_size(mesh, pts):
            raise FusionError(
                f"{what}: axis {d} of {x.name}{list(x.shape)} is not divisible by the "
                f"{_blocks(mesh, pts)}; shard_map needs even blocks"
            )
    if x.mesh is None:  # a new input arrives already distributed as its spec says
        declare(x, mesh, spec)
    varying = in_order(mesh, [pt for pts in spec.values() for pt in pts])
    if not varying:
        return Local(x, ())
    # Axis d split over (a, b) is [|a|, |b|, n / (|a| |b|)]: block (i, j) is device
    # (i, j)'s, as the nested sharding lays it out (the first mesh axis outermost).
    shape, where = [], {}
    for d, n in enumerate(x.shape):
        for pt in spec.get(d, ()):
            where[pt] = len(shape)
            shape.append(axis_size(mesh, pt))
        shape.append(n // team_size(mesh, spec[d]) if d in spec else n)
    r = declare(ops.reshape(x, shape), mesh, {where[pt]: pt for pt in varying})
    front = [where[pt] for pt in varying]
    dims = front + [k for k in range(len(shape)) if k not in front]
    if dims != list(range(len(shape))):
        r = declare(ops.permute(r, dims), mesh, leading(varying))
    return Local(r, varying)


def _leaving(trace: Trace, v: Local, spec: Sharded, what: str) -> TensorView:
    """The global output of a local value: device blocks concatenated per spec."""
    mesh = trace.mesh
    named = [pt for pts in spec.values() for pt in pts]
    stray = [pt for pt in v.varying if pt not in named]
    if stray:
        names = ", ".join(pt.name for pt in stray)
        raise FusionError(
            f"{what}: the spec replicates the value over {names}, but it differs between the "
            f"devices of {names}; name {names} in the spec to concatenate the blocks, or "
            "combine them first (all_gather, psum)"
        )
    for pt in named:
        v = trace.vary(v, pt)  # an invariant value repeats its block once per device
    if not v.varying:
        return v.tensor
    k = len(v.varying)
    local = v.tensor.shape[k:]
    # The leading axes of a local axis's mesh axes go just before it, in the spec's order
    # (outer first), then the reshape merges them.
    order: list[int] = []
    for d in range(len(local)):
        order += [v.varying.index(pt) for pt in spec.get(d, ())]
        order.append(k + d)
    t = v.tensor
    if order != list(range(len(order))):
        moved = {order.index(i): pt for i, pt in enumerate(v.varying)}
        t = declare(ops.permute(t, order), mesh, moved)
    shape = [n * team_size(mesh, spec[d]) if d in spec else n for d, n in enumerate(local)]
    return declare(ops.reshape(t, shape), mesh, spec)


# -- the entry point ---------------------------------------------------------------
def shard_map(
    fn: Callable | None = None,
    mesh: DeviceMesh | None = None,
    in_specs: object = None,
    out_specs: object = None,
) -> Callable:
    """fn on each device's local values, as global-view IR: JAX's shard_map (also a
    decorator: @shard_map(mesh=..., in_specs=..., out_specs=...))."""
    if fn is None:
        return lambda f: shard_map(f, mesh, in_specs, out_specs)
    if not callable(fn):
        raise args.fail("shard_map", "fn", "a function of local tensors", fn)
    args.instance(mesh, DeviceMesh, "shard_map", "mesh", "a DeviceMesh")

    @functools.wraps(fn)
    def mapped(*xs: TensorView):
        for k, x in enumerate(xs):
            args.instance(x, TensorView, "shard_map", f"argument {k}", "a TensorView")
        # No arguments (JAX allows them: lambda: axis_index(...)): the active fusion's.
        trace = Trace(mesh, fusion_of(*xs) if xs else active_fusion())
        made = len(trace.fusion.tensors_created)
        specs = _specs(in_specs, len(xs), "in_specs")
        local_args, ins = [], []
        for k, (x, s) in enumerate(zip(xs, specs)):
            what = f"shard_map: in_specs[{k}] of {x.name}"
            ins.append(_spec(s, mesh, len(x.shape), what))
            v = _entering(trace, x, ins[-1], what)
            local_args.append(trace.bind(None, v, name=x.user_name))
        with tracing(trace):
            with trace.local:
                result = fn(*local_args)
            single = isinstance(result, TensorView)
            results = (
                [result] if single else list(result) if isinstance(result, (list, tuple)) else None
            )
            if not results or not all(isinstance(r, TensorView) for r in results):
                raise FusionError(
                    f"shard_map: the function must return a local tensor or a tuple of them, "
                    f"got {result!r}"
                )
            out_list = _specs(out_specs, len(results), "out_specs")
            outs, out_dicts = [], []
            for k, (r, s) in enumerate(zip(results, out_list)):
                what = f"shard_map: out_specs[{k}] of {r.name}"
                v = trace.value(r, what)
                out_dicts.append(_spec(s, mesh, len(r.shape), what))
                outs.append(_leaving(trace, v, out_dicts[-1], what))
        created = frozenset(id(t) for t in trace.fusion.tensors_created[made:])
        add_region(
            Region(
                trace,
                xs,
                tuple(local_args),
                tuple(ins),
                tuple(results),
                tuple(out_dicts),
                tuple(outs),
                created,
            )
        )
        return outs[0] if single else tuple(outs)

    return mapped


__all__ = ["PartitionSpec", "shard_map"]
