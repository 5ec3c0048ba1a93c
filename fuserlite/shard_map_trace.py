"""The tracing machinery of fl.shard_map: mesh axes, local values and their replay.

A local value of a shard_map function stands for a global tensor (a `Local`): one
leading axis per mesh axis the value varies over, sharded on it, then the local axes.
A `Trace` holds the local program fn writes and replays each of its ops on the global
tensors, its axes shifted past the leading ones (the op's local rule, LOCAL_RULES).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from fuserlite import ops
from fuserlite.ir import args
from fuserlite.ir.errors import FusionError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DEVICE_PARALLEL_TYPES, ParallelType
from fuserlite.ops.registry import Category, OpDef, definition

_state = threading.local()  # the stack of traces being built (at most one: no nesting)


# -- mesh axes --------------------------------------------------------------------
def mesh_axes(mesh: DeviceMesh) -> tuple[ParallelType, ...]:
    """The mesh's axes as parallel types, outermost first (a 1-D mesh has DIDx)."""
    return mesh.parallel_types


def axis_size(mesh: DeviceMesh, pt: ParallelType) -> int:
    """Devices along mesh axis `pt`."""
    return mesh.axis_size(pt)


def mesh_axis(mesh: DeviceMesh, axis: object, what: str) -> ParallelType:
    """The mesh axis `axis` names (a ParallelType or its name, DIDx or deviceIdx.x);
    None names the only axis of a 1-D mesh."""
    axes = mesh_axes(mesh)
    names = ", ".join(pt.name for pt in axes)
    if axis is None:
        if len(axes) == 1:
            return axes[0]
        raise FusionError(f"{what}: {mesh} has axes {names}; say which with axis=")
    by_name = {**{pt.name: pt for pt in DEVICE_PARALLEL_TYPES}}
    by_name.update({pt.value: pt for pt in DEVICE_PARALLEL_TYPES})
    pt = (
        axis
        if isinstance(axis, ParallelType)
        else by_name.get(axis)
        if isinstance(axis, str)
        else None
    )
    if pt is None or pt not in axes:
        raise args.fail(what, "axis", f"a mesh axis of {mesh}: {names}", axis)
    return pt


# -- local values -----------------------------------------------------------------
@dataclass(frozen=True)
class Local:
    """Where a local value lives in the global fusion: `tensor` has one leading axis per
    mesh axis in `varying` (in mesh-axis order), sharded on it, then the local axes."""

    tensor: TensorView
    varying: tuple[ParallelType, ...]


def declare(tv: TensorView, mesh: DeviceMesh, sharded: dict[int, ParallelType]) -> TensorView:
    """Put tv on `mesh`, data axis d sharded on mesh axis sharded[d] (replicated elsewhere)."""
    tv.set_device_mesh(mesh)
    data = tv.data_positions()
    for d, pt in sharded.items():
        ax = tv.domain.logical[data[d]]
        if ax.extent == axis_size(mesh, pt):
            ax.parallelize(pt)
        else:
            pos = tv.domain.loop.index(ax)
            tv.outer_split(pos, axis_size(mesh, pt)).axis(pos).parallelize(pt)
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
            self.values[id(t)] = self._replay(t.definition)

    def vary(self, v: Local, pt: ParallelType) -> Local:
        """v with a leading axis for `pt` (copies of an invariant value, one per device)."""
        if pt in v.varying:
            return v
        varying = in_order(self.mesh, (*v.varying, pt))
        j = varying.index(pt)
        rank = len(v.tensor.shape)
        b = declare(ops.broadcast(v.tensor, [k == j for k in range(rank + 1)]), self.mesh, {})
        shape = list(b.shape)
        shape[j] = axis_size(self.mesh, pt)
        e = declare(ops.expand(b, shape), self.mesh, leading(varying))
        return Local(e, varying)

    def _aligned(self, v: Local, varying: tuple[ParallelType, ...]) -> TensorView:
        """v.tensor with a broadcast axis for each mesh axis of `varying` it lacks."""
        if v.varying == varying:
            return v.tensor
        flags = [pt not in v.varying for pt in varying] + [False] * (
            len(v.tensor.shape) - len(v.varying)
        )
        return declare(ops.broadcast(v.tensor, flags), self.mesh, {})

    def _replay(self, expr) -> Local:
        d = definition(expr)
        if d is None:
            raise FusionError(f"shard_map: {expr!r} is not an op a local program can hold")
        values = d.values(expr)
        operands = [x for x in expr.operands() if isinstance(x, TensorView)]
        locals_ = [self.values[id(x)] for x in operands]
        if LOCAL_RULES.get(d.name) is _first_operand_varies:
            locals_ = locals_[:1]
        varying = in_order(self.mesh, {pt for v in locals_ for pt in v.varying})
        rule = LOCAL_RULES.get(d.name, _pointwise if d.category is Category.POINTWISE else None)
        if rule is None:
            raise FusionError(f"shard_map: {d.name} has no local rule")
        first_only = rule is _first_operand_varies
        call = {}
        for p in d.params:
            value = p.read(expr) if p.read is not None else values.get(p.name)
            if value is None:
                continue
            if isinstance(value, tuple) and all(isinstance(t, TensorView) for t in value):
                value = [self._aligned(self.values[id(t)], varying) for t in value]  # cat
            elif isinstance(value, TensorView):
                v = self.values[id(value)]
                if first_only and p is not d.params[0]:
                    if v.varying:
                        raise FusionError(
                            f"shard_map: {d.name}'s {p.name} {value.name} differs between the "
                            f"devices of {', '.join(pt.name for pt in v.varying)}; inside "
                            f"shard_map only its first operand may (give {p.name} the spec "
                            "None, or write this op in the global view)"
                        )
                    value = v.tensor
                else:
                    value = self._aligned(v, varying)
            call[p.name] = value
        sizes = [axis_size(self.mesh, pt) for pt in varying]
        call = rule(d, call, sizes, expr)
        out = d.build(**call)
        return Local(declare(out, self.mesh, leading(varying)), varying)


# -- local rules: a local op's arguments on the global tensors -----------------------
# (op, arguments, sizes of the leading axes, the local expression) -> arguments.
LocalRule = Callable[[OpDef, dict, list[int], object], dict]


def _pointwise(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    return call


def _first_operand_varies(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    # matmul and linear batch their first operand's leading axes; the rest is checked above.
    return call


def _shifted_axes(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    axes = call.get("axes")
    if axes is not None:
        k = len(sizes)
        call["axes"] = [a + k for a in ([axes] if isinstance(axes, int) else axes)]
    return call


def _flags(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    call["flags"] = [False] * len(sizes) + list(call["flags"])
    return call


def _shape(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    call["shape"] = [*sizes, *call["shape"]]
    return call


def _dims(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    k = len(sizes)
    call["dims"] = [*range(k), *(a + k for a in call["dims"])]
    return call


def _rows(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    if sizes:
        raise FusionError(
            f"shard_map: take of {expr.inputs[0].name}, which differs between devices, is "
            "not supported inside shard_map; take the rows in the global view"
        )
    return call


def _axis(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    k, axis = len(sizes), call["axis"]
    call["axis"] = axis + k if axis >= 0 else axis  # select and cat
    return call


def _squeezed(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    call["dims"] = [a + len(sizes) for a in call["dims"]]
    return call


def _ranges(d: OpDef, call: dict, sizes: list[int], expr) -> dict:
    """slice: the leading (device) axes whole."""
    call["starts"] = [0] * len(sizes) + list(call["starts"])
    call["stops"] = [*sizes, *call["stops"]]
    call["steps"] = [1] * len(sizes) + list(call["steps"])
    return call


LOCAL_RULES: dict[str, LocalRule] = {
    "broadcast": _flags,
    "cast": _pointwise,  # its attribute is a dtype, not an axis
    "expand": _shape,
    "reshape": _shape,
    "permute": _dims,
    "take": _rows,
    "squeeze": _squeezed,
    "select": _axis,
    "slice": _ranges,
    "cat": _axis,
    "sum": _shifted_axes,
    "max": _shifted_axes,
    "matmul": _first_operand_varies,
    "linear": _first_operand_varies,
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
