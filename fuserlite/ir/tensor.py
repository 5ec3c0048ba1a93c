"""TensorView: a tensor in a fusion, with its domains, dtype, memory type and mesh."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuserlite.ir import args
from fuserlite.ir.domain import IterDomain, TensorDomain
from fuserlite.ir.errors import FusionError, ScheduleError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.types import DType, MemoryType, ParallelType

if TYPE_CHECKING:
    from fuserlite.ir.expr import Expr
    from fuserlite.ir.fusion import Fusion


class TensorView:
    """A tensor of a fusion. Identity semantics.

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
    ) -> None:
        self.fusion = fusion
        self.domain = TensorDomain(logical, contiguity)
        for ax in logical:
            ax.owner = self
        self.dtype = dtype
        self.memory_type = memory_type
        self.mesh: DeviceMesh | None = None
        self.definition: Expr | None = None
        self.uses: list[Expr] = []
        self.compute_at_pos = 0
        self.produce_pos = 0
        self._user_name: str | None = None
        self.origin: str | None = None
        self.number = fusion.register_tensor(self)

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

    # -- scheduling (thin wrappers over fuserlite.schedule.primitives) ------
    def split(self, axis: int, factor: int) -> TensorView:
        """Inner split of loop axis `axis`: inner extent = factor."""
        from fuserlite.schedule.primitives import split

        split(self, axis, factor, inner_split=True)
        return self

    def outer_split(self, axis: int, factor: int) -> TensorView:
        """Outer split of loop axis `axis`: outer extent = factor."""
        from fuserlite.schedule.primitives import split

        split(self, axis, factor, inner_split=False)
        return self

    def merge(self, axis_o: int, axis_i: int | None = None) -> TensorView:
        """Merge loop axes axis_o and axis_i (default axis_o + 1) into one."""
        from fuserlite.schedule.primitives import merge

        if axis_i is None:
            axis_o = args.integer(axis_o, "merge", "axis_o", error=ScheduleError)
            axis_o = axis_o % self.ndim if -self.ndim <= axis_o < 0 else axis_o
            axis_i = axis_o + 1
        merge(self, axis_o, axis_i)
        return self

    def reorder(self, order: dict[int, int]) -> TensorView:
        """Move loop axes: {old position: new position}."""
        from fuserlite.schedule.primitives import reorder

        reorder(self, order)
        return self

    # -- operators ----------------------------------------------------------
    # numpy defers to our reflected operators (`array * tv` would otherwise be an
    # object array of one TensorView per element), which reject arrays clearly.
    __array_ufunc__ = None

    def _binary(self, other, op: str, reverse: bool = False):
        from fuserlite import ops

        fn = getattr(ops, op)
        return fn(other, self) if reverse else fn(self, other)

    def __add__(self, other):
        return self._binary(other, "add")

    def __radd__(self, other):
        return self._binary(other, "add", True)

    def __sub__(self, other):
        return self._binary(other, "sub")

    def __rsub__(self, other):
        return self._binary(other, "sub", True)

    def __mul__(self, other):
        return self._binary(other, "mul")

    def __rmul__(self, other):
        return self._binary(other, "mul", True)

    def __truediv__(self, other):
        return self._binary(other, "div")

    def __rtruediv__(self, other):
        return self._binary(other, "div", True)

    def __neg__(self):
        from fuserlite import ops

        return ops.neg(self)

    def __str__(self) -> str:
        from fuserlite.printer import tensor_text

        return tensor_text(self)

    def __repr__(self) -> str:
        return f"<TensorView {self.name} shape={list(self.shape)} {self.dtype.name}>"

    __hash__ = object.__hash__
