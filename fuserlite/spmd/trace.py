"""The tracing machinery of fl.shard_map: mesh axes, local values and their replay.

A local value of a shard_map function stands for a global tensor (a `Local`): one
leading axis per mesh axis the value varies over, sharded on it, then the local axes.
A `Trace` holds the local program fn writes and replays each of its ops on the global
tensors, its axes shifted past the leading ones (the op's local rule,
`OpDef.local_rule`, each rule's replay here in REPLAYS).
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from fuserlite import ops
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import shardings
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.ops.registry import LocalRule, OpDef, definition
from fuserlite.schedule.shard import shard_as

_state = threading.local()  # the stack of traces being built (at most one: no nesting)


# -- mesh axes --------------------------------------------------------------------
def mesh_axes(mesh: DeviceMesh) -> tuple[ParallelType, ...]:
    """The mesh's axes as parallel types, outermost first (a 1-D mesh has DIDx)."""
    return mesh.parallel_types


def axis_size(mesh: DeviceMesh, pt: ParallelType) -> int:
    """Devices along mesh axis `pt`."""
    return mesh.axis_size(pt)


def mesh_axis(mesh: DeviceMesh, axis: object, what: str) -> ParallelType:
    """The mesh axis `axis` names (a ParallelType, its name or printed form, DIDx or
    deviceIdx.x, or the user's name of the axis, DeviceMesh.axis_names); None names the
    only axis of a 1-D mesh."""
    if axis is None:
        axes = mesh_axes(mesh)
        if len(axes) == 1:
            return axes[0]
        labels = ", ".join(mesh.axis_label(a) for a in range(mesh.rank))
        raise FusionError(f"{what}: {mesh} has axes {labels}; say which with axis=")
    return mesh.parallel_type_of(axis, what)


def mesh_axes_of(mesh: DeviceMesh, axis: object, what: str) -> tuple[ParallelType, ...]:
    """The mesh axes `axis` names: one (as mesh_axis), or a tuple or list of them (JAX's
    `psum(x, ("dp", "tp"))`: the flattened team, the first outermost)."""
    if not isinstance(axis, (tuple, list)):
        return (mesh_axis(mesh, axis, what),)
    pts = tuple(mesh_axis(mesh, a, what) for a in axis)
    if not pts or len(set(pts)) != len(pts):
        raise FusionError(
            f"{what}: axis={tuple(axis)!r} must name one or more distinct mesh axes of {mesh}"
        )
    return pts


def team_size(mesh: DeviceMesh, pts: Sequence[ParallelType]) -> int:
    """Devices in one team over the mesh axes `pts`."""
    return math.prod(mesh.axis_size(pt) for pt in pts)


# -- local values -----------------------------------------------------------------
@dataclass(frozen=True)
class Local:
    """Where a local value lives in the global fusion: `tensor` has one leading axis per
    mesh axis in `varying` (in mesh-axis order), sharded on it, then the local axes."""

    tensor: TensorView
    varying: tuple[ParallelType, ...]


MeshAxes = ParallelType | tuple[ParallelType, ...]  # one mesh axis, or several outer first


def declare(tv: TensorView, mesh: DeviceMesh, sharded: Mapping[int, MeshAxes]) -> TensorView:
    """Put tv on `mesh`, data axis d split over the mesh axes sharded[d] (one, or a tuple
    of them, outer first), replicated elsewhere: schedule.shard.shard_as's splits."""
    data = tv.data_positions()
    shards: list[tuple[int, ...]] = [()] * len(tv.domain.logical)
    for d, pts in sharded.items():
        pts = (pts,) if isinstance(pts, ParallelType) else pts
        shards[data[d]] = tuple(mesh.axis_of(pt) for pt in pts)
    shard_as(tv, mesh, Placement(mesh.rank, tuple(shards)))
    return tv


def leading(varying: Sequence[ParallelType]) -> dict[int, ParallelType]:
    """The sharding of a Local's leading axes."""
    return dict(enumerate(varying))


def in_order(mesh: DeviceMesh, pts) -> tuple[ParallelType, ...]:
    """`pts` in mesh-axis order."""
    return tuple(pt for pt in mesh_axes(mesh) if pt in pts)


class Trace:
    """One shard_map call being traced: the local program and each local value's Local."""

    def __init__(self, mesh: DeviceMesh, fusion: Fusion) -> None:
        self.mesh = mesh
        self.fusion = fusion  # the global fusion
        self.local = Fusion()  # the program fn writes, on local shapes
        self.values: dict[int, Local] = {}  # id(local tensor) -> its Local
        # id(local tensor) -> (collective, its arguments as called), for the .fus writer
        self.calls: dict[int, tuple[str, dict[str, object]]] = {}

    def bind(self, local: TensorView | None, value: Local, name: str | None = None) -> TensorView:
        """A local tensor standing for `value` (a new leaf of the local program if None)."""
        if local is None:
            shape = value.tensor.shape[len(value.varying) :]
            local = ops.tensor(list(shape), value.tensor.dtype, fusion=self.local, name=name)
        self.values[id(local)] = value
        return local

    def value(self, t: TensorView, what: str) -> Local:
        """The Local of local tensor t, replaying the local ops up to it first."""
        if not isinstance(t, TensorView) or t.fusion is not self.local:
            raise FusionError(
                f"{what}: {getattr(t, 'name', repr(t))} is not a local value of this shard_map "
                "function; collectives take the function's arguments and what it computes"
            )
        self.replay()
        return self.values[id(t)]

    def replay(self) -> None:
        """Build the global ops of every local op not replayed yet (creation order is an
        order in which operands come first)."""
        for t in self.local.tensors_created:
            if id(t) in self.values:
                continue
            if t.definition is None:
                raise FusionError(
                    f"shard_map: the function made a new tensor {t.name} with fl.tensor; a "
                    "shard_map function takes its inputs as arguments (give it an in_spec)"
                )
            expr = t.definition  # an op of several outputs gives each its Local
            self.values.update(zip(map(id, expr.outputs), self._replay(expr)))

    def vary(self, v: Local, pt: ParallelType) -> Local:
        """v with a leading axis for `pt` (copies of an invariant value, one per device)."""
        if pt in v.varying:
            return v
        varying = in_order(self.mesh, (*v.varying, pt))
        j = varying.index(pt)
        rank = len(v.tensor.shape)
        kept = {i: p for i, p in enumerate(varying) if p is not pt}
        b = declare(ops.broadcast(v.tensor, [k == j for k in range(rank + 1)]), self.mesh, kept)
        shape = list(b.shape)
        shape[j] = axis_size(self.mesh, pt)
        e = declare(ops.expand(b, shape), self.mesh, leading(varying))
        return Local(e, varying)

    def _replay(self, expr: Expr) -> list[Local]:
        d = definition(expr)
        rule = REPLAYS.get(d.local_rule) if d is not None else None
        if rule is None:
            raise FusionError(f"shard_map: {expr!r} has no local rule; write it in the global view")
        values = d.values(expr)
        r = Replay(self, d, expr, {}, {})
        for p in d.params:
            value = p.read(expr) if p.read is not None else values.get(p.name)
            if isinstance(value, TensorView):
                r.operands[p.name] = self.values[id(value)]
            elif (
                isinstance(value, tuple) and value and all(isinstance(t, TensorView) for t in value)
            ):
                r.operands[p.name] = [self.values[id(t)] for t in value]  # cat's tensors
            elif value is not None:
                r.attrs[p.name] = value
        with self.fusion:  # an op with no tensor operands (iota) is made in the active one
            out = rule(r)
        made = out if isinstance(out, tuple) else (out,)
        return [Local(declare(o, self.mesh, leading(r.varying)), r.varying) for o in made]


@dataclass
class Replay:
    """One local op being replayed: its operands' Locals and its other arguments."""

    trace: Trace
    op: OpDef
    expr: Expr
    operands: dict[str, Local | list[Local]]
    attrs: dict[str, object]

    @property
    def varying(self) -> tuple[ParallelType, ...]:
        """The mesh axes the result varies over: those of any operand."""
        values = [v for x in self.operands.values() for v in (x if isinstance(x, list) else [x])]
        pts = {pt for v in values for pt in v.varying}
        return in_order(self.trace.mesh, pts)

    @property
    def sizes(self) -> list[int]:
        """Extents of the result's leading axes."""
        return [axis_size(self.trace.mesh, pt) for pt in self.varying]

    def aligned(self, name: str) -> TensorView | list[TensorView]:
        """Operand `name` with a broadcast leading axis for each mesh axis it lacks."""
        x = self.operands[name]
        return [self._aligned(v) for v in x] if isinstance(x, list) else self._aligned(x)

    def _aligned(self, v: Local) -> TensorView:
        varying = self.varying
        if v.varying == varying:
            return v.tensor
        flags = [pt not in v.varying for pt in varying]
        flags += [False] * (len(v.tensor.shape) - len(v.varying))
        kept = {i: pt for i, pt in enumerate(varying) if pt in v.varying}
        return declare(ops.broadcast(v.tensor, flags), self.trace.mesh, kept)

    def build(self, **changed: object) -> TensorView:
        """The op on the aligned operands, with some arguments changed."""
        call = {name: self.aligned(name) for name in self.operands} | self.attrs | changed
        return self.op.build(**call)


# -- local rules: how each kind of op acts on the global tensors of local values ------
Replayer = Callable[[Replay], TensorView]


def _same(r: Replay) -> TensorView:
    """Pointwise: the leading axes are more batch axes."""
    return r.build()


def _leading_batch(r: Replay) -> TensorView | tuple[TensorView, ...]:
    """An evaluated op whose leading axes are batch axes: attention's N, H, ...; rand_like
    draws at the stacked tensor's global indices (its attributes are no axes)."""
    return r.build()


def _shifted_axes(r: Replay) -> TensorView:
    axes = r.attrs.get("axes")
    k = len(r.varying)
    return r.build(axes=[a + k for a in ([axes] if isinstance(axes, int) else axes)])


def _flags(r: Replay) -> TensorView:
    return r.build(flags=[False] * len(r.varying) + list(r.attrs["flags"]))


def _shape(r: Replay) -> TensorView:
    return r.build(shape=[*r.sizes, *r.attrs["shape"]])


def _dims(r: Replay) -> TensorView:
    k = len(r.varying)
    return r.build(dims=[*range(k), *(a + k for a in r.attrs["dims"])])


def _rows(r: Replay) -> TensorView:
    if r.varying:
        raise FusionError(
            f"shard_map: take of {r.expr.inputs[0].name}, which differs between devices, is "
            "not supported inside shard_map; take the rows in the global view"
        )
    return r.build()


def _lookup(r: Replay) -> TensorView:
    """embedding: indices that differ between devices are more index axes (their
    leading axes lead the result); a weight that differs has no local form."""
    if r.operands["weight"].varying:
        raise FusionError(
            f"shard_map: embedding of {r.expr.inputs[0].name}, which differs between devices, "
            "is not supported inside shard_map; look the rows up in the global view"
        )
    return r.build(indices=r.aligned("indices") if r.varying else r.operands["indices"].tensor)


def placed_leading(t: TensorView, k: int) -> dict[int, ParallelType]:
    """The shardings of t's first k axes (a broadcast leading axis has none)."""
    found = {}
    for pt, s in shardings(t).items():
        if s.data_index is not None and s.data_index < k:
            found[s.data_index] = pt
    return found


def _padded(trace: Trace, t: TensorView, k: int, n: int) -> TensorView:
    """t with n broadcast axes after its k leading ones."""
    if n <= 0:
        return t
    flags = [False] * k + [True] * n + [False] * (len(t.shape) - k)
    return declare(ops.broadcast(t, flags), trace.mesh, placed_leading(t, k))


def _batched_matmul(r: Replay, a: TensorView, b: TensorView) -> TensorView:
    """a @ b, each with the result's leading axes: numpy aligns batch axes on the right,
    so the one with fewer local batch axes gets broadcast axes after its leading ones."""
    k = len(r.varying)
    ra, rb = len(a.shape) - k, len(b.shape) - k
    if k and (ra < 2 or rb < 2):
        raise FusionError(
            f"shard_map: {r.op.name} of a 1-D local value that differs between devices; "
            "reshape it to 2-D first"
        )
    return ops.matmul(_padded(r.trace, a, k, rb - ra), _padded(r.trace, b, k, ra - rb))


def _matmul(r: Replay) -> TensorView:
    return _batched_matmul(r, r.aligned("a"), r.aligned("b"))


def _linear(r: Replay) -> TensorView:
    """A weight the same on every device is the usual linear (x's leading axes are batch
    axes); a weight that differs is each device's own: x @ weight^T + bias, batched."""
    weight, bias = r.operands["weight"], r.operands.get("bias")
    if not weight.varying and (bias is None or not bias.varying):
        return ops.linear(r.aligned("x"), weight.tensor, None if bias is None else bias.tensor)
    w = r.aligned("weight")
    k = len(w.shape)
    wt = declare(
        ops.permute(w, [*range(k - 2), k - 1, k - 2]),
        r.trace.mesh,
        placed_leading(w, len(r.varying)),
    )
    out = _batched_matmul(r, r.aligned("x"), wt)
    if bias is None:
        return out
    b = _padded(r.trace, r.aligned("bias"), len(r.varying), len(out.shape) - len(w.shape) + 1)
    return ops.add(declare(out, r.trace.mesh, leading(r.varying)), b)


def _whole(r: Replay) -> TensorView:
    """An op with no batch axes to stack device values on (grouped_mm; embedding_backward,
    whose rows and indices are one axis each): only of values the same on every device."""
    if r.varying:
        raise FusionError(
            f"shard_map: {r.op.name} of values that differ between devices is not supported "
            "inside shard_map (it has no batch axis for them); call it in the global view, "
            "its operands distributed (fl.distribute)"
        )
    return r.build()


def _axis(r: Replay) -> TensorView:
    axis = r.attrs["axis"]  # select and cat
    return r.build(axis=axis + len(r.varying) if axis >= 0 else axis)


def _squeezed(r: Replay) -> TensorView:
    return r.build(dims=[a + len(r.varying) for a in r.attrs["dims"]])


def _ranges(r: Replay) -> TensorView:
    """slice: the leading (device) axes whole."""
    k = len(r.varying)
    return r.build(
        starts=[0] * k + list(r.attrs["starts"]),
        stops=[*r.sizes, *r.attrs["stops"]],
        steps=[1] * k + list(r.attrs["steps"]),
    )


REPLAYS: dict[LocalRule, Replayer] = {  # an op's rule is in its OpDef (`local`)
    LocalRule.same: _same,
    LocalRule.flags: _flags,
    LocalRule.dims: _dims,
    LocalRule.shape: _shape,
    LocalRule.rows: _rows,
    LocalRule.squeezed: _squeezed,
    LocalRule.axis: _axis,
    LocalRule.ranges: _ranges,
    LocalRule.reduced: _shifted_axes,
    LocalRule.matmul: _matmul,
    LocalRule.linear: _linear,
    LocalRule.batch: _leading_batch,
    LocalRule.whole: _whole,
    LocalRule.lookup: _lookup,
}


def active_trace(what: str) -> Trace:
    """The innermost shard_map being traced, or the error of a collective outside one."""
    stack = getattr(_state, "stack", [])
    if not stack:
        raise FusionError(
            f"{what} is a collective: it runs only inside a function given to fl.shard_map, "
            "on local values (each device's own); outside, write the global program and "
            "let the passes place the communications"
        )
    return stack[-1]


@dataclass(frozen=True)
class Region:
    """A traced shard_map call, kept so the .fus writer can write it as written."""

    trace: Trace
    arguments: tuple[TensorView, ...]  # global
    local_arguments: tuple[TensorView, ...]
    in_specs: tuple[dict[int, tuple[ParallelType, ...]], ...]  # tensor axis -> mesh axes
    results: tuple[TensorView, ...]  # local
    out_specs: tuple[dict[int, tuple[ParallelType, ...]], ...]
    outputs: tuple[TensorView, ...]  # global
    made: frozenset[int]  # ids of the global tensors the call made, outputs included


_REGIONS: weakref.WeakKeyDictionary[Fusion, list[Region]] = weakref.WeakKeyDictionary()


def regions(fusion: Fusion) -> list[Region]:
    """The shard_map calls traced into `fusion`, in order (a clone has none: it is written
    in the global view)."""
    return _REGIONS.get(fusion, [])


def add_region(region: Region) -> None:
    """Remember a traced call."""
    _REGIONS.setdefault(region.trace.fusion, []).append(region)


@contextmanager
def tracing(trace: Trace) -> Iterator[Trace]:
    """Make `trace` the active one while its function runs (shard_maps do not nest)."""
    if getattr(_state, "stack", []):
        raise FusionError("shard_map: a shard_map function cannot call another shard_map")
    _state.stack = [trace]
    try:
        yield trace
    finally:
        _state.stack = []
