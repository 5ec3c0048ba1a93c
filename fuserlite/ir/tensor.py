"""TensorView: a tensor in a fusion, with its domain (a value), dtype, memory type and mesh.

A TensorView is a graph node (identity semantics); its domain is a TensorDomain value,
and every schedule primitive gives it a new one. `tv.axis(i)` is an `Axis`, a handle
naming axis `position` of the tensor's domain, which no primitive moves: nvFuser's
`tv.axis(0).parallelize(DIDx)` reads and writes the tensor's current domain.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fuserlite.ir import args
from fuserlite.ir.changes import LISTENING, tensor_changed
from fuserlite.ir.domain import IterDomain, TensorDomain, Transform
from fuserlite.ir.errors import FuserliteError, FusionError, ScheduleError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.types import MAX_FACTOR, MAX_THREADS, DType, IterType, MemoryType, ParallelType
from fuserlite.ir.values import fact

if TYPE_CHECKING:
    from fuserlite.ir.expr import Expr
    from fuserlite.ir.fusion import Fusion


def parallel_type_of(value: object) -> ParallelType:
    """A ParallelType or its name, or a ScheduleError saying what was given."""
    if type(value) is ParallelType:
        return value
    if isinstance(value, str):
        try:
            return ParallelType.parse(value)
        except FuserliteError as exc:
            raise ScheduleError(f"parallelize: parallel_type: {exc}") from None
    return args.instance(
        value,
        ParallelType,
        "parallelize",
        "parallel_type",
        "a ParallelType or its name (DIDx, deviceIdx.x, TIDx, ...)",
        ScheduleError,
    )


def parallelize_problem(dom: TensorDomain, position: int, pt: ParallelType) -> str | None:
    """Why axis `position` of a domain cannot be given `pt`, as the message goes on after
    `parallelize: <tensor>` (None if it can): it is not a loop axis, another loop axis
    has the type, or a thread axis would exceed MAX_THREADS."""
    where = dom.loop_index(position)
    if where is None:
        return f": {pt.value} is given to an axis that is not in the loop domain"
    if pt is not ParallelType.Serial:
        for k, other in enumerate(dom.loop):
            if k != where and other.parallel_type is pt:
                mesh_axis = (
                    f"; {pt.name} names one mesh axis, which shards at most one "
                    "tensor axis: use another DID type for another mesh axis"
                    if pt.is_device
                    else "; one host loop runs over a tensor's chunks: at most one Stream axis"
                    if pt.is_stream
                    else ""
                )
                return (
                    f" axis {where}: loop axis {k} already has parallel type {pt.value}; a "
                    f"tensor carries each parallel type on at most one loop axis{mesh_axis}"
                )
    extent = dom.axes[position].extent
    if pt.is_thread and extent > MAX_THREADS:
        return f" axis {where}: {pt.value} extent {extent} exceeds {MAX_THREADS}"
    return None


def _reduce_scatter_clash(dom: TensorDomain, position: int, pt: ParallelType) -> int | None:
    """The position of the loop axis that has device type `pt` where axis `position` is
    given it too and one of the two is a reduction axis, the other a data axis (nvFuser's
    rDIDx + DIDx: a reduce-scatter); else None."""
    if not pt.is_device or dom.loop_index(position) is None:
        return None
    mine = dom.axes[position]
    for p in dom.loop_positions:
        other = dom.axes[p]
        if p != position and other.parallel_type is pt and other.is_reduction != mine.is_reduction:
            return p if not mine.is_broadcast and not other.is_broadcast else None
    return None


class Axis:
    """Axis `position` of `tensor`'s domain (its logical axes first, then each
    transform's outputs): what `tv.axis(i)`, `tv.logical` and `tv.loop` hold. It reads
    the tensor's current domain, so it names the same axis after later primitives.
    Two handles are equal when they name one axis of one tensor."""

    __slots__ = ("tensor", "position")

    def __init__(self, tensor: TensorView, position: int) -> None:
        self.tensor = tensor
        self.position = position

    @property
    def value(self) -> IterDomain:
        """The axis itself, as the tensor's domain holds it now."""
        return self.tensor.domain.axes[self.position]

    @property
    def extent(self) -> int:
        return self.value.extent

    @property
    def iter_type(self) -> IterType:
        return self.value.iter_type

    @property
    def parallel_type(self) -> ParallelType:
        return self.value.parallel_type

    @parallel_type.setter
    def parallel_type(self, pt: ParallelType) -> None:
        """Set the type unchecked (the validator finds what it breaks); parallelize checks."""
        tv = self.tensor
        tv.domain = tv.domain.parallelize(self.position, parallel_type_of(pt))

    @property
    def is_broadcast(self) -> bool:
        return self.value.is_broadcast

    @property
    def is_reduction(self) -> bool:
        return self.value.is_reduction

    @property
    def is_iteration(self) -> bool:
        return self.value.is_iteration

    @property
    def is_device_parallel(self) -> bool:
        return self.value.is_device_parallel

    @property
    def definition(self) -> Transform | None:
        """The transform that made this axis (None for a logical axis)."""
        return self.tensor.domain.transform_of(self.position)

    def parallelize(self, parallel_type: ParallelType | str) -> Axis:
        """Bind this loop axis to a parallel type; no tensor may carry one type on two
        loop axes, and a thread axis holds at most MAX_THREADS."""
        pt = parallel_type_of(parallel_type)
        tv = self.tensor
        clash = _reduce_scatter_clash(tv.domain, self.position, pt)
        if clash is not None:
            # nvFuser's user-annotated reduce-scatter: rDIDx on the reduction axis and
            # DIDx on a data axis of one tensor. The values it asks for are the data
            # axis's sharding, complete: the reduction over the devices is what makes
            # them (partial sums, then a ReduceScatter), so the data axis keeps the type
            # and the reduction axis stays serial, one loop axis per type.
            if tv.domain.axes[self.position].is_reduction:
                return self
            tv.domain = tv.domain.parallelize(clash, ParallelType.Serial)
        problem = parallelize_problem(tv.domain, self.position, pt)
        if problem is not None:
            raise ScheduleError(f"parallelize: {tv.name}{problem}")
        tv.domain = tv.domain.parallelize(self.position, pt)
        return self

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is Axis and other.tensor is self.tensor and other.position == self.position
        )

    def __hash__(self) -> int:
        return hash((id(self.tensor), self.position))

    def __repr__(self) -> str:
        ax = self.value
        return (
            f"<Axis {self.position} of {self.tensor.name}: "
            f"{ax.iter_type.value}{ax.parallel_type.value}{{{ax.extent}}}>"
        )


_set = object.__setattr__
_FIELDS = (
    "fusion",
    "domain",
    "dtype",
    "memory_type",
    "mesh",
    "definition",
    "uses",
    "compute_at_pos",
    "produce_pos",
    "_user_name",
    "origin",
    "number",
)


class TensorView:
    """A tensor of a fusion. Identity semantics.

    Operators (`x + y`, `-x`) are installed by fuserlite.ops and `str(tv)` by
    fuserlite.printer, the modules that own them: the IR imports neither.

    `ir_name` is T<number>, what the printed IR and the .fus writer use; `name`, what
    every message uses, adds the user's name when the tensor has one: `w1 (T1)`.
    `origin` is where a parsed tensor was made (`model.fus:12`), for messages too.
    Every attribute set is an edit the change log hears (fuserlite.ir.changes).
    """

    # A graph node of fixed fields: no per-tensor dict (fewer, smaller objects for the
    # collector to scan and the caches to hold).
    __slots__ = _FIELDS

    def __init__(
        self,
        fusion: Fusion,
        logical: list[IterDomain] | TensorDomain,
        dtype: DType = DType.float32,
        contiguity: list[bool | None] | None = None,
        memory_type: MemoryType = MemoryType.LOCAL,
        number: int | None = None,
    ) -> None:
        domain = logical if type(logical) is TensorDomain else TensorDomain(logical, contiguity)
        # Each field by its slot's own setter, named once below the class (no name looked
        # up, no loop): a fusion's builder makes a tensor per op, a lowering copies each.
        _fusion(self, fusion)
        _domain(self, domain)
        _dtype(self, dtype)
        _memory_type(self, memory_type)
        _mesh(self, None)
        _definition(self, None)
        _uses(self, [])
        _compute_at_pos(self, 0)
        _produce_pos(self, 0)
        _user_name(self, None)
        _origin(self, None)
        self.domain: TensorDomain
        self.mesh: DeviceMesh | None
        self.definition: Expr | None
        self.uses: list[Expr]
        _number(self, fusion.register_tensor(self, number))
        tensor_changed(self)

    def __setattr__(self, name: str, value: object) -> None:
        _set(self, name, value)
        log = LISTENING.log  # tensor_changed(self), inlined: the most frequent edit
        if log is not None:
            log.tensors[id(self)] = self
        if name == "definition":
            self.fusion.graph_edited()

    def copy_into(self, fusion: Fusion) -> TensorView:
        """A copy of this tensor in `fusion` (its domain is a value: shared), unlinked:
        no definition, no uses."""
        tv = _new(TensorView)
        _fusion(tv, fusion)
        _domain(tv, self.domain)
        _dtype(tv, self.dtype)
        _memory_type(tv, self.memory_type)
        _mesh(tv, self.mesh)
        _definition(tv, None)
        _uses(tv, [])
        _compute_at_pos(tv, self.compute_at_pos)
        _produce_pos(tv, self.produce_pos)
        _user_name(tv, self._user_name)
        _origin(tv, self.origin)
        _number(tv, self.number)
        return tv

    # -- naming and shape ---------------------------------------------------
    @property
    def ir_name(self) -> str:
        """`T3`: the name in printed IR, .fus text and generated code."""
        return f"T{self.number}"

    @property
    def name(self) -> str:
        """`w1 (T1)` for a tensor the user named w1, else `T1`: the name in messages."""
        ir_name = self.ir_name
        user = self._user_name
        return ir_name if user is None or user == ir_name else f"{user} ({ir_name})"

    @property
    def user_name(self) -> str | None:
        """The name the user gave this tensor (in .fus or `fl.tensor(..., name=)`)."""
        return self._user_name

    @user_name.setter
    def user_name(self, value: str | None) -> None:
        if value is not None:
            args.identifier(value, "TensorView", "name")
        self._user_name = value

    @property
    def logical(self) -> list[Axis]:
        """The logical axes, as handles."""
        return [Axis(self, p) for p in range(self.domain.n_logical)]

    @property
    def loop(self) -> list[Axis]:
        """The loop axes, as handles."""
        return [Axis(self, p) for p in self.domain.loop_positions]

    @property
    def ndim(self) -> int:
        """Number of loop axes (what `axis(i)` indexes)."""
        return len(self.domain.loop_positions)

    @property
    def shape(self) -> tuple[int, ...]:
        """Global shape of the data: logical extents without reduction axes."""
        return _shape(self.domain)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole (global) data: the shape's elements times the dtype's size."""
        return math.prod(self.shape) * self.dtype.itemsize

    def data_axes(self) -> list[IterDomain]:
        """The logical axes that hold data: every axis but reductions."""
        return [ax for ax in self.domain.logical if not ax.is_reduction]

    def data_positions(self) -> list[int]:
        """Positions in the logical domain of the data axes."""
        return list(self.domain.data_positions())

    def axis(self, i: int) -> Axis:
        """Loop axis i (negative counts from the end), as a handle."""
        loop = self.domain.loop_positions
        n = len(loop)
        i = args.integer(i, f"{self.name}.axis", "i", error=ScheduleError)
        if not -n <= i < n:
            raise ScheduleError(f"{self.name} has {n} loop axes; axis {i} is out of range")
        return Axis(self, loop[i % n])

    @property
    def is_fusion_input(self) -> bool:
        return self in self.fusion.inputs

    @property
    def is_fusion_output(self) -> bool:
        return self in self.fusion.outputs

    # -- sharding -----------------------------------------------------------
    def set_device_mesh(self, mesh: DeviceMesh) -> TensorView:
        """Place this tensor on a mesh."""
        if not isinstance(mesh, DeviceMesh):
            raise FusionError(f"set_device_mesh({self.name}) expects a DeviceMesh, got {mesh!r}")
        self.mesh = mesh
        return self

    def device_axes(self) -> dict[ParallelType, Axis]:
        """The loop axis carrying each device parallel type (the tensor's sharding)."""
        dom = self.domain
        return {
            dom.axes[p].parallel_type: Axis(self, p)
            for p in dom.loop_positions
            if dom.axes[p].is_device_parallel
        }

    # -- scheduling: each gives the tensor a new domain; illegal requests raise
    #    ScheduleError naming the tensor and the axis.
    #      split(0, 128)         [iS0{1000}]       -> [iS1{8}, iS2{128}]
    #      outer_split(0, 2)     [iS0{8}]          -> [iS1{2}, iS2{4}]
    #      merge(0, 1)           [iS0{2}, iS1{3}]  -> [iS2{6}]
    #      reorder({0: 1})       [iS0{2}, iS1{3}]  -> [iS1{3}, iS0{2}]
    def split(self, axis: int, factor: int, inner_split: bool = True) -> TensorView:
        """Split loop axis `axis` by `factor`: inner extent = factor (outer extent =
        factor when `inner_split` is False, see outer_split)."""
        kind = "split" if inner_split else "outer_split"
        i = self._position(axis, kind)
        if type(factor) is not int or not 1 <= factor <= MAX_FACTOR:  # else: the message
            factor = args.integer(
                factor,
                f"{kind}: {self.name} axis {axis}",
                "factor",
                minimum=1,
                maximum=MAX_FACTOR,
                error=ScheduleError,
            )
        dom = self.domain
        ax = dom.loop[i]
        if ax.is_device_parallel and not ax.is_broadcast:
            raise ScheduleError(
                f"{kind}: {self.name} axis {axis} is device-parallel ({ax.parallel_type.value}); "
                "split the axis before parallelizing it"
            )
        self.domain = dom.split(i, factor, bool(inner_split))
        return self

    def outer_split(self, axis: int, factor: int) -> TensorView:
        """Outer split of loop axis `axis`: outer extent = factor."""
        return self.split(axis, factor, inner_split=False)

    def swizzle1d(self, axis: int, parallel_type: ParallelType) -> TensorView:
        """Swizzle loop axis `axis` by the device index along `parallel_type` (nvFuser's
        swizzle1d): index k of the new axis is index (k + deviceIdx) mod extent of the
        old. On the axis a Stream parallelizes next, the chunk a device computes at step
        i is (i + its index) mod D: the ring pipeline, each step a CollectivePermute
        (passes/ring_streams.py)."""
        i = self._position(axis, "swizzle1d")
        if not isinstance(parallel_type, ParallelType) or not parallel_type.is_device:
            raise ScheduleError(
                f"swizzle1d: {self.name} axis {axis}: swizzle by a device parallel type "
                f"(DIDx, DIDy, DIDz), not {getattr(parallel_type, 'name', parallel_type)}: the "
                "swizzle is the device's index"
            )
        ax = self.domain.loop[i]
        if not ax.is_iteration or ax.parallel_type is not ParallelType.Serial:
            what = ax.parallel_type.value if ax.is_iteration else ax.iter_type.name.lower()
            raise ScheduleError(
                f"swizzle1d: {self.name} axis {axis} is {what}; swizzle a serial iteration "
                "axis, then parallelize it Stream"
            )
        self.domain = self.domain.swizzle1d(i, parallel_type)
        return self

    def merge(self, axis_o: int, axis_i: int | None = None) -> TensorView:
        """Merge loop axes axis_o and axis_i (default axis_o + 1) into one axis at
        axis_o's position."""
        if axis_i is None:
            axis_o = args.integer(axis_o, "merge", "axis_o", error=ScheduleError)
            axis_o = axis_o % self.ndim if -self.ndim <= axis_o < 0 else axis_o
            axis_i = axis_o + 1
        o, i = self._position(axis_o, "merge"), self._position(axis_i, "merge")
        if o == i:
            raise ScheduleError(f"merge: {self.name}: cannot merge axis {axis_o} with itself")
        dom = self.domain
        outer, inner = dom.loop[o], dom.loop[i]
        kinds = {outer.iter_type, inner.iter_type}
        if IterType.REDUCTION in kinds and IterType.ITERATION in kinds:
            raise ScheduleError(
                f"merge: {self.name}: axis {axis_o} and axis {axis_i} mix a reduction and an "
                "iteration axis; reorder so that reductions are merged with reductions"
            )
        for pos, ax in ((axis_o, outer), (axis_i, inner)):
            if ax.is_device_parallel and not ax.is_broadcast:
                raise ScheduleError(
                    f"merge: {self.name} axis {pos} is device-parallel "
                    f"({ax.parallel_type.value}); device axes are never merged"
                )
        self.domain = dom.merge(o, i)
        return self

    def reorder(self, order: dict[int, int]) -> TensorView:
        """Move loop axes: `order` maps old positions to new ones; the rest keep their order."""
        loop = self.domain.loop_positions
        n = len(loop)
        if not isinstance(order, dict):
            raise args.fail(
                f"reorder: {self.name}", "order", "a dict {old: new}", order, ScheduleError
            )
        pairs = [
            (self._position(k, "reorder"), self._position(v, "reorder")) for k, v in order.items()
        ]
        src = dict(pairs)
        if len(src) != len(pairs):
            raise ScheduleError(f"reorder: {self.name}: one axis is listed twice in {order}")
        if len(set(src.values())) != len(src):
            raise ScheduleError(
                f"reorder: {self.name}: two axes moved to the same position in {order}"
            )
        new: list[int | None] = [None] * n
        for old, pos in src.items():
            new[pos] = loop[old]
        rest = iter(p for k, p in enumerate(loop) if k not in src)
        self.domain = self.domain.with_loop(tuple(p if p is not None else next(rest) for p in new))
        return self

    def _position(self, axis: int, what: str) -> int:
        """Loop position `axis` (negative counts from the end), or a ScheduleError."""
        n = len(self.domain.loop_positions)
        if type(axis) is not int:  # a plain int needs no conversion (passes call this a lot)
            axis = args.integer(axis, what, "axis", error=ScheduleError)
        if not -n <= axis < n:
            raise ScheduleError(
                f"{what}: {self.name} has {n} loop axes; axis {axis} is out of range"
            )
        return axis % n

    # numpy defers to the reflected operators fuserlite.ops installs (`array * tv` would
    # otherwise be an object array of one TensorView per element); they reject arrays.
    __array_ufunc__ = None

    def __repr__(self) -> str:
        return f"<TensorView {self.name} shape={list(self.shape)} {self.dtype.name}>"

    __hash__ = object.__hash__


@fact
def _shape(dom: TensorDomain) -> tuple[int, ...]:
    return tuple(ax.extent for ax in dom.logical if not ax.is_reduction)


# The setter of each slot (a C call, no name looked up): what __init__ and copy_into set.
(
    _fusion,
    _domain,
    _dtype,
    _memory_type,
    _mesh,
    _definition,
    _uses,
    _compute_at_pos,
    _produce_pos,
    _user_name,
    _origin,
    _number,
) = (TensorView.__dict__[name].__set__ for name in _FIELDS)
_new = object.__new__
