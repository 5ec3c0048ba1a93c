"""TensorView: a tensor in a fusion, with its domains, dtype, memory type and mesh."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fuserlite.ir import args
from fuserlite.ir.domain import IterDomain, Merge, Split, TensorDomain, adopt
from fuserlite.ir.errors import FusionError, ScheduleError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.stamps import graph_changed, tick
from fuserlite.ir.types import MAX_FACTOR, DType, IterType, MemoryType, ParallelType

if TYPE_CHECKING:
    from fuserlite.ir.expr import Expr
    from fuserlite.ir.fusion import Fusion


class TensorView:
    """A tensor of a fusion. Identity semantics.

    Operators (`x + y`, `-x`) are installed by fuserlite.ops and `str(tv)` by
    fuserlite.printer, the modules that own them: the IR imports neither.

    `ir_name` is T<number>, what the printed IR and the .fus writer use; `name`, what
    every message uses, adds the user's name when the tensor has one: `w1 (T1)`.
    `origin` is where a parsed tensor was made (`model.fus:12`), for messages too.
    """

    def __init__(
        self,
        fusion: Fusion,
        logical: list[IterDomain],
        dtype: DType = DType.float32,
        contiguity: list[bool | None] | None = None,
        memory_type: MemoryType = MemoryType.LOCAL,
        number: int | None = None,
    ) -> None:
        self.__dict__.update(  # a new tensor: nothing to stamp but its first stamp
            fusion=fusion,
            domain=TensorDomain(logical, contiguity),
            dtype=dtype,
            memory_type=memory_type,
            mesh=None,
            definition=None,
            uses=[],
            compute_at_pos=0,
            produce_pos=0,
            _user_name=None,
            origin=None,
            _facts={},
            _stamp=tick(),
        )
        self.mesh: DeviceMesh | None
        self.definition: Expr | None
        self.uses: list[Expr]
        adopt(logical, self)
        self.__dict__["number"] = fusion.register_tensor(self, number)  # stamped just now

    in_graph = False  # a change to its definition changes the graph; the rest does not

    def __setattr__(self, name: str, value: object) -> None:
        # Any change stamps the tensor (ir.stamps): its derived facts and the
        # validator's marks are computed again.
        object.__setattr__(self, name, value)
        t = self.__dict__["_stamp"] = tick()
        if name == "definition":
            graph_changed(t)

    def copy_into(self, fusion: Fusion, mapping: dict) -> TensorView:
        """A copy of this tensor in `fusion` with a copy of its domain (`mapping` is
        given its axes' copies), unlinked: no definition, no uses, nothing derived."""
        tv = TensorView.__new__(TensorView)
        state = tv.__dict__
        state.update(self.__dict__)
        state.update(
            fusion=fusion,
            domain=self.domain.copy_for(tv, mapping),
            definition=None,
            uses=[],
            _facts={},
            _stamp=tick(),
        )
        return tv

    def forget_derived(self) -> None:
        """Forget what was derived from the tensor this one was copied from."""
        self.__dict__.update(_facts={}, _stamp=tick())

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
    def logical(self) -> list[IterDomain]:
        return self.domain.logical

    @property
    def loop(self) -> list[IterDomain]:
        return self.domain.loop

    @property
    def ndim(self) -> int:
        """Number of loop axes (what `axis(i)` indexes)."""
        return len(self.domain.loop)

    @property
    def shape(self) -> tuple[int, ...]:
        """Global shape of the data: logical extents without reduction axes."""
        return tuple(ax.extent for ax in self.data_axes())

    @property
    def nbytes(self) -> int:
        """Bytes of the whole (global) data: the shape's elements times the dtype's size."""
        return math.prod(self.shape) * self.dtype.itemsize

    def data_axes(self) -> list[IterDomain]:
        """The logical axes that hold data: every axis but reductions."""
        return [ax for ax in self.domain.logical if not ax.is_reduction]

    def data_positions(self) -> list[int]:
        """Positions in the logical domain of the data axes."""
        return [i for i, ax in enumerate(self.domain.logical) if not ax.is_reduction]

    def axis(self, i: int) -> IterDomain:
        """Loop axis i (negative counts from the end)."""
        n = len(self.domain.loop)
        i = args.integer(i, f"{self.name}.axis", "i", error=ScheduleError)
        if not -n <= i < n:
            raise ScheduleError(f"{self.name} has {n} loop axes; axis {i} is out of range")
        return self.domain.loop[i % n]

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

    def device_axes(self) -> dict[ParallelType, IterDomain]:
        """The loop axis carrying each device parallel type (the tensor's sharding)."""
        return {ax.parallel_type: ax for ax in self.domain.loop if ax.parallel_type.is_device}

    # -- scheduling: transforms of the loop domain, recorded for the printer and index
    #    lowering; illegal requests raise ScheduleError naming the tensor and the axis.
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
        ax = self.domain.loop[i]
        if ax.is_device_parallel and not ax.is_broadcast:
            raise ScheduleError(
                f"{kind}: {self.name} axis {axis} is device-parallel ({ax.parallel_type.value}); "
                "split the axis before parallelizing it"
            )
        t = Split(ax, factor, inner_split)
        adopt(t.outputs, self)
        self.domain.transforms.append(t)
        self.domain.loop[i : i + 1] = [t.outer, t.inner]
        return self

    def outer_split(self, axis: int, factor: int) -> TensorView:
        """Outer split of loop axis `axis`: outer extent = factor."""
        return self.split(axis, factor, inner_split=False)

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
        outer, inner = self.domain.loop[o], self.domain.loop[i]
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
        t = Merge(outer, inner)
        adopt(t.outputs, self)
        self.domain.transforms.append(t)
        loop = [ax for k, ax in enumerate(self.domain.loop) if k not in (o, i)]
        loop.insert(min(o, i) if o < i else o - 1, t.output)
        self.domain.loop = loop
        return self

    def reorder(self, order: dict[int, int]) -> TensorView:
        """Move loop axes: `order` maps old positions to new ones; the rest keep their order."""
        n = len(self.domain.loop)
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
        new: list[IterDomain | None] = [None] * n
        for old, pos in src.items():
            new[pos] = self.domain.loop[old]
        rest = iter(ax for k, ax in enumerate(self.domain.loop) if k not in src)
        self.domain.loop = [ax if ax is not None else next(rest) for ax in new]
        return self

    def _position(self, axis: int, what: str) -> int:
        """Loop position `axis` (negative counts from the end), or a ScheduleError."""
        n = len(self.domain.loop)
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
