"""Expressions: the operations that define TensorViews.

Each Expr records its input and output TensorViews and links them (definition
and uses). Kinds: Set (LoadStoreOp), unary and binary pointwise ops,
broadcast, reduction, expand, reshape, matmul/linear, and after lowering,
communications (see fuserlite.program.communication).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fuserlite.ir.tensor import TensorView


class Expr:
    """Base class: inputs, outputs, and the links between them."""

    op_name = "expr"

    def __init__(self, inputs: list[TensorView], outputs: list[TensorView]) -> None:
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        for out in self.outputs:
            out.definition = self
        for inp in self.inputs:
            inp.uses.append(self)

    @property
    def input(self) -> TensorView:
        return self.inputs[0]

    @property
    def output(self) -> TensorView:
        return self.outputs[0]

    def attributes(self) -> dict:
        """Kind-specific attributes (used to clone and to write .fus text)."""
        return {}

    def detach(self) -> None:
        """Unlink this expression from its inputs and outputs."""
        for inp in self.inputs:
            inp.uses = [u for u in inp.uses if u is not self]
        for out in self.outputs:
            if out.definition is self:
                out.definition = None

    def replace_input(self, old: TensorView, new: TensorView) -> None:
        """Make this expression read `new` where it read `old`."""
        self.inputs = [new if t is old else t for t in self.inputs]
        old.uses = [u for u in old.uses if u is not self]
        new.uses.append(self)

    @staticmethod
    def replace_uses(old: TensorView, new: TensorView, users: list[Expr]) -> None:
        """Make each of `users` read `new` where it read `old`: replace_input for many
        users in one pass over old.uses (a tensor read by thousands stays linear)."""
        ids = {id(e) for e in users}
        for e in users:
            e.inputs = [new if t is old else t for t in e.inputs]
            new.uses.append(e)
        old.uses = [u for u in old.uses if id(u) not in ids]

    def __repr__(self) -> str:
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"<{type(self).__name__} {outs} = {self.op_name}({ins})>"


# nvFuser's CacheOp: the cache hint of a load (printed as `cache_op=Streaming`).
CACHE_OPS = ("Unspecified", "AllLevels", "Streaming", "Global")


class LoadStoreOp(Expr):
    """out = Set(in): a copy, a cache, or (across shardings) a resharding."""

    op_name = "set"

    def __init__(self, out: TensorView, inp: TensorView, cache_op: str | None = None) -> None:
        super().__init__([inp], [out])
        self.cache_op = cache_op

    def attributes(self) -> dict:
        return {"cache_op": self.cache_op}


class UnaryOpType(Enum):
    neg = "neg"
    exp = "exp"
    tanh = "tanh"
    relu = "relu"
    abs = "abs"
    gelu = "gelu"
    sqrt = "sqrt"
    log = "log"


class UnaryOp(Expr):
    op_name = "unary"

    def __init__(self, op: UnaryOpType, out: TensorView, inp: TensorView) -> None:
        super().__init__([inp], [out])
        self.op = op
        self.op_name = op.value

    def attributes(self) -> dict:
        return {"op": self.op}


class BinaryOpType(Enum):
    add = "add"
    sub = "sub"
    mul = "mul"
    div = "div"
    max = "max"
    min = "min"


class BinaryOp(Expr):
    """out = lhs <op> rhs; scalar operands are stored as Python numbers."""

    op_name = "binary"

    def __init__(
        self,
        op: BinaryOpType,
        out: TensorView,
        lhs: TensorView | float,
        rhs: TensorView | float,
    ) -> None:
        super().__init__([t for t in (lhs, rhs) if not isinstance(t, (int, float))], [out])
        self.op = op
        self.op_name = op.value
        self.lhs_scalar = lhs if isinstance(lhs, (int, float)) else None
        self.rhs_scalar = rhs if isinstance(rhs, (int, float)) else None

    def operands(self) -> list[TensorView | float]:
        """[lhs, rhs] with scalars in place."""
        tensors = iter(self.inputs)
        lhs = self.lhs_scalar if self.lhs_scalar is not None else next(tensors)
        rhs = self.rhs_scalar if self.rhs_scalar is not None else next(tensors)
        return [lhs, rhs]

    def attributes(self) -> dict:
        return {"op": self.op, "lhs_scalar": self.lhs_scalar, "rhs_scalar": self.rhs_scalar}


class BroadcastOp(Expr):
    """Insert broadcast axes where flags are True."""

    op_name = "broadcast"

    def __init__(self, out: TensorView, inp: TensorView, flags: list[bool]) -> None:
        super().__init__([inp], [out])
        self.flags = tuple(bool(f) for f in flags)

    def attributes(self) -> dict:
        return {"flags": self.flags}


class ReductionOpType(Enum):
    sum = "add"
    max = "max"


class ReductionOp(Expr):
    """Reduce the axes listed in `axes`; the output keeps them as reduction axes."""

    op_name = "reduction"

    def __init__(
        self, op: ReductionOpType, out: TensorView, inp: TensorView, axes: list[int], init: float
    ) -> None:
        super().__init__([inp], [out])
        self.op = op
        self.axes = tuple(axes)
        self.init = init

    def attributes(self) -> dict:
        return {"op": self.op, "axes": self.axes, "init": self.init}


class ExpandOp(Expr):
    """Materialize broadcast axes to the given extents (the outputs are iteration axes)."""

    op_name = "expand"

    def __init__(self, out: TensorView, inp: TensorView, shape: list[int]) -> None:
        super().__init__([inp], [out])
        self.shape = tuple(shape)

    def attributes(self) -> dict:
        return {"shape": self.shape}


class ReshapeOp(Expr):
    """View the data with another shape (same number of elements)."""

    op_name = "reshape"

    def __init__(self, out: TensorView, inp: TensorView, shape: list[int]) -> None:
        super().__init__([inp], [out])
        self.shape = tuple(shape)

    def attributes(self) -> dict:
        return {"shape": self.shape}


class MatmulOp(Expr):
    """out[..., m, n, rk] = a[..., m, k] @ b[k, n]; evaluated, not scheduled."""

    op_name = "matmul"


class LinearOp(Expr):
    """out[..., n, rk] = x[..., k] @ w[n, k]^T (+ bias[n]); evaluated, not scheduled."""

    op_name = "linear"
