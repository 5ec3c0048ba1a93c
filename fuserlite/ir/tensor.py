"""TensorView: a tensor in a fusion, with its domains, dtype, memory type and mesh."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuserlite.ir.domain import IterDomain, TensorDomain
from fuserlite.ir.errors import FusionError, ScheduleError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.types import DType, MemoryType, ParallelType

if TYPE_CHECKING:
    from fuserlite.ir.expr import Expr
    from fuserlite.ir.fusion import Fusion


class TensorView:
    """A tensor of a fusion. Identity semantics; `name` is T<number>."""

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
        self.number = fusion.register_tensor(self)

    # -- naming and shape ---------------------------------------------------
    @property
    def name(self) -> str:
        return f"T{self.number}"

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
