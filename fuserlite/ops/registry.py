"""The op registry: every op defined once, as one OpDef, keyed by its name.

An OpDef holds what the rest of fuserlite needs to know about an op: its name
(the Python builder `fl.<name>`, the `.fus` call and the registry key, which is
also `expr.op_name`), its builder (the shape and dtype rule, with the argument
checks), its `.fus` signature, its printed form (nvFuser's math printer, both
ways: see fuserlite.ops.forms), its scheduler category, its axis map, its
sharding rule and its cost (FLOPs and bytes, fuserlite.ops.cost). Generic code
asks the registry (`definition(expr)`) instead of testing expression classes;
each backend (numpy, CUDA, rounding) keeps one table keyed by op name, and
`tests/test_op_registry.py` checks that every table has a row for every op.

Every op but Set (the IR's own LoadStoreOp) builds the one expression class `Op`:
an op needs a definition, not a class.

    @define(call("exp"), UNARY, POINTWISE)
    def exp(x: TensorView) -> TensorView:  # fl.exp, `.fus` exp(x), printed exp(T0)
        return unary("exp", x)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, ReductionOpType
from fuserlite.ir.values import fact
from fuserlite.ops.cost import DEFAULT_COST, CostRule

if TYPE_CHECKING:
    from fuserlite.ops.forms import Form

Scalar = int | float  # bool is an int
Operand = TensorView | Scalar


def is_scalar(value: object) -> bool:
    """True for an operand that is a Python number (bool, int or float), not a tensor."""
    return isinstance(value, (int, float))


class Category(Enum):
    """Which scheduler takes an op."""

    # The pointwise scheduler: each output element is computed from the operands at
    # the coordinates the axis map gives (kernel runner and CUDA), so one kernel can
    # hold a run of these ops.
    POINTWISE = "pointwise"
    # A kernel of its own, evaluated whole with numpy (reductions, matmul, views).
    EVALUATED = "evaluated"


@dataclass(frozen=True)
class Param:
    """One parameter of an op's builder and `.fus` call."""

    name: str  # the builder keyword
    # "tensor", "operand", "tensors" (a list: the operands left), "ints", "bools",
    # "axes", "bool", "int", "float", "ident" or "dtype"
    kind: str
    required: bool = True
    choices: tuple[str, ...] = ()  # the names an "ident" may be (none: any)
    keyword: bool = False  # `.fus` text writes it as name=value
    # The value an expression holds for it, for writing the call back; by default the
    # operand or attribute of the same name. None: never written (keepdim=true is two
    # expressions, written as two calls).
    read: Callable[[Expr], object] | None = None

    @property
    def is_operand(self) -> bool:
        """True for a tensor (or tensor-or-scalar) operand of the expression."""
        return self.kind in ("tensor", "operand", "tensors")


# (expr, operand position) -> {the operand's logical index: the output's}; by position,
# not by tensor: matmul(x, x) reads x's axes one way as `a`, another as `b`. Read only:
# a map may be shared.
AxisMap = Callable[[Expr, int], Mapping[int, int]]
# An op with several outputs maps each operand onto each: (expr, position, output).
OutputsAxisMap = Callable[[Expr, int, TensorView], Mapping[int, int]]
# Its vector-Jacobian product (reverse mode, fuserlite.autodiff): (expr, its operands and
# outputs as the backward reads them, one cotangent per output, None for zero) -> one
# cotangent per operand (None: zero, and for a scalar operand), built with ordinary ops.
Vjp = Callable[
    [Expr, Sequence[Operand], Sequence[TensorView], Sequence[TensorView | None]],
    Sequence[TensorView | None],
]


def no_gradient(
    expr: Expr,
    operands: Sequence[Operand],
    outputs: Sequence[TensorView],
    grads: Sequence[TensorView | None],
) -> list[None]:
    """The vjp of an op whose values do not vary with its operands' values (a comparison,
    random numbers, iota): every operand's cotangent is zero."""
    return [None] * len(operands)


def positional(expr: Expr, position: int) -> Mapping[int, int]:
    """The operand's data axes onto the output's logical axes, position by position
    (pointwise ops, sets, reductions, expands): one read-only map per (operand domain,
    output domain), shared by every expression alike."""
    return positional_map(expr.inputs[position].domain, expr.output.domain)


@fact
def positional_map(operand: TensorDomain, output: TensorDomain) -> Mapping[int, int]:
    """positional's map between an operand of domain `operand` and an output of `output`."""
    return MappingProxyType(dict(zip(operand.data_positions(), range(output.n_logical))))


class LocalRule(Enum):
    """How fl.shard_map replays the op written on local values onto the global tensors,
    whose leading axes are the mesh axes a value varies over (fuserlite.spmd.trace)."""

    same = "same"  # the leading axes are more batch axes: the op as written
    flags = "flags"  # broadcast: its flags, none on the leading axes
    dims = "dims"  # permute: the leading axes first, its dims after them
    shape = "shape"  # expand, reshape: its shape after the leading extents
    rows = "rows"  # take: of a value the same on every device only
    squeezed = "squeezed"  # squeeze: its dims past the leading axes
    axis = "axis"  # select, cat: its axis past the leading axes
    ranges = "ranges"  # slice: the leading axes whole
    reduced = "reduced"  # sum, max: the reduced axes past the leading axes
    matmul = "matmul"  # batch axes aligned on the right, the leading ones first
    linear = "linear"  # a weight that differs per device is each device's own
    batch = "batch"  # an evaluated op whose leading axes are batch axes (attention)
    whole = "whole"  # no batch axes to stack device values on (grouped_mm, embedding_backward)
    lookup = "lookup"  # embedding: varying indices lead the result; a varying weight refused


@dataclass(frozen=True)
class Rewrite:
    """An op rewritten into several expressions: `result` takes the place of `replaced`."""

    replaced: TensorView
    result: TensorView
    exprs: list[Expr]  # the new expressions, in order; the last one defines `result`


@dataclass(frozen=True)
class Sharding:
    """An op's sharding rule, beyond what its axis map implies.

    From the axis map alone: an input is needed sharded where it maps to a sharded
    output axis, whole elsewhere; an input axis sharded and mapped onto an output
    reduction axis makes the output partial (rDIDx)."""

    # How partial outputs combine (the reduction's own op; linear and matmul sum).
    # None: the op reduces no axis, a sharded input never makes its output partial.
    partial: ReductionOpType | None = None
    # Operands propagate-shardings copies a sharding from first (by position).
    prefer: tuple[int, ...] = ()
    # What the op becomes where its output would hold partial sums (linear adds its
    # bias once, after the sums are complete); None if nothing changes.
    when_partial: Callable[[Expr], Rewrite | None] | None = None
    # Where the expression moves whole chunks of its input's sharded axis 0 between
    # devices (a take of whole blocks): the source chunk of each chunk of its output.
    # The output keeps the input's sharding (propagate-shardings gives it), and placed
    # alike the expression is a communication of its own (one CollectivePermute), never
    # part of a kernel; None: the op never is one.
    permutes: Callable[[Expr], tuple[int, ...] | None] | None = None


@dataclass(frozen=True, eq=False)
class OpDef:
    """Everything about one op."""

    name: str
    build: Callable[..., Any]  # the builder: argument checks, shape and dtype rule
    form: Form  # its printed form, both ways (fuserlite.ops.forms)
    params: tuple[Param, ...]  # `.fus` signature (= the builder's keywords)
    category: Category = Category.EVALUATED
    attrs: tuple[str, ...] = ()  # the expression's attributes, by name
    axis_map: AxisMap = positional
    sharding: Sharding = field(default_factory=Sharding)
    expr_class: type[Expr] | None = None  # None: the generic Op
    # A conversion between dtypes (cast): its pointwise rows take each operand in its
    # own compute type and the expression (to know the target), instead of operands
    # already converted to the output's compute type (which would round twice). An
    # evaluated op's row then takes its operands in their own dtypes (embedding's
    # integer indices, which a float32 would hold exactly only up to 2**24).
    converts: bool = False
    # An op with several outputs: its axis map onto each of them (replaces axis_map).
    outputs_axis_map: OutputsAxisMap | None = None
    # The dtype its operands are computed in; None: the output's compute dtype (a
    # comparison computes in its operands' promoted dtype and makes a bool).
    compute: Callable[[Expr], DType] | None = None
    # Its values depend on where its elements lie in the global tensor (random numbers,
    # drawn at global indices). A pointwise one's value at an element is a function of
    # the element's global linear index: every compute path gives it that index (a
    # kernel computes it from the loop indices and the device's shard offset), so any
    # device computes any element (`is_indexed`). An evaluated one's numpy row computes
    # a block of its outputs from its operands, given the block's global start
    # (attention's dropout mask: rows of the probabilities, drawn at global indices).
    indexed: bool = False
    # Its output is computed row by row along every iteration axis, each row from the
    # operands' rows its axis map names (no attribute depends on that axis's extent), so
    # a host loop may compute it one chunk at a time (lower-streams); None: true for a
    # pointwise op that is not indexed, false for the other ops.
    rowwise: bool | None = None
    # Its vector-Jacobian product (Vjp); None: the op cannot be differentiated, and
    # fl.grad of a fusion that needs it says so.
    vjp: Vjp | None = None
    # What one expression computes and moves on a device (fuserlite.ops.cost), for the
    # step-time model's roofline; by default one operation per element.
    cost: CostRule = DEFAULT_COST
    # How fl.shard_map replays it on local values; None: `same` for a pointwise op of no
    # attributes, no rule for any other (shard_map refuses it).
    local: LocalRule | None = None

    def __post_init__(self) -> None:
        # Facts of the definition (a value), read for every expression of the op: worked
        # out once here. `reads_layouts_only`: its expressions' sharding questions
        # (fuserlite.ops.sharding) read only their tensors' layouts (a positional op, one
        # axis map for all its outputs, that never permutes blocks); `indexed_pointwise`:
        # is_indexed of each of them.
        layouts_only = (
            self.axis_map is positional
            and self.outputs_axis_map is None
            and self.sharding.permutes is None
        )
        object.__setattr__(self, "reads_layouts_only", layouts_only)
        indexed = self.indexed and self.category is Category.POINTWISE
        object.__setattr__(self, "indexed_pointwise", indexed)

    @property
    def local_rule(self) -> LocalRule | None:
        """How fl.shard_map replays the op (`local`, or its default)."""
        if self.local is None and self.category is Category.POINTWISE and not self.attrs:
            return LocalRule.same
        return self.local

    @property
    def doc(self) -> str:
        """The first line of the builder's docstring."""
        return (self.build.__doc__ or "").strip().splitlines()[0]

    @property
    def operands(self) -> tuple[str, ...]:
        """The operand names, in order."""
        return tuple(p.name for p in self.params if p.is_operand)

    def values(self, expr: Expr) -> dict[str, object]:
        """{operand or attribute name: value} of one of its expressions (absent
        optional operands are left out; a `tensors` parameter, the last operand, holds
        the tuple of the operands left)."""
        operands = expr.operands()
        params = [p for p in self.params if p.is_operand]
        if params and params[-1].kind == "tensors":
            values = dict(zip(self.operands[:-1], operands))
            values[params[-1].name] = tuple(operands[len(params) - 1 :])
            return {**values, **expr.attributes()}
        return {**dict(zip(self.operands, operands)), **expr.attributes()}

    def make(
        self, outputs: list[TensorView], operands: Sequence[Operand], attrs: dict[str, object]
    ) -> Expr:
        """An expression of this op between existing tensors (parsers rebuild with it)."""
        if self.expr_class is None:
            return Op(self.name, outputs, operands, **attrs)
        return self.expr_class(*outputs, *operands, **attrs)


_NOTHING: Mapping = MappingProxyType({})  # no scalars, no attributes: one shared


class Op(Expr):
    """An expression of a registered op: `op_name` names its OpDef; operands are
    tensors or, where the op takes them, Python scalars; attributes are read-only."""

    __slots__ = ("op_name", "scalars", "attrs", "op_def")

    def __init__(
        self, op_name: str, outputs: list[TensorView], operands: Sequence[Operand], **attrs
    ) -> None:
        # A new expression: its attributes are set before Expr.__init__ records it.
        # Read-only: Fusion.clone copies expressions shallowly, so clones share these.
        tensors, scalars = [], {}
        for k, x in enumerate(operands):  # a builder makes an expression per op: one pass
            if isinstance(x, (int, float)):  # is_scalar
                scalars[k] = x
            else:
                tensors.append(x)
        _op_name(self, op_name)
        d = _DEFS.get(op_name)  # its definition, read once: every pass asks for it
        _op_def(self, d if d is not None and d.expr_class is None else None)
        _scalars(self, MappingProxyType(scalars) if scalars else _NOTHING)
        _attrs(self, MappingProxyType(attrs) if attrs else _NOTHING)
        super().__init__(tensors, outputs)

    def _share_fields(self, e: Expr) -> None:
        _op_name(e, self.op_name)
        _scalars(e, self.scalars)
        _attrs(e, self.attrs)
        _op_def(e, self.op_def)

    def operands(self) -> list[Operand]:
        tensors = iter(self.inputs)
        n = len(self.inputs) + len(self.scalars)
        return [self.scalars[k] if k in self.scalars else next(tensors) for k in range(n)]

    def attributes(self) -> dict:
        return dict(self.attrs)


# Op's slots' setters: what a copy shares (Fusion.clone copies every expression).
_op_name, _scalars, _attrs, _op_def = (Op.__dict__[n].__set__ for n in Op.__slots__)

_DEFS: dict[str, OpDef] = {}


def register(d: OpDef) -> OpDef:
    """Add a definition; its printed form must show every operand and attribute."""
    if d.name in _DEFS or d.name in _COMPOSITES:
        raise FusionError(f"op {d.name!r} is defined twice")
    missing = [n for n in (*d.operands, *d.attrs) if n not in d.form.fields]
    if missing:
        raise FusionError(f"op {d.name!r}: its printed form does not show {', '.join(missing)}")
    _DEFS[d.name] = d
    if d.expr_class is not None:  # an expression kind of its own (Set): its definition
        d.expr_class.op_def = d
    return d


def define(
    form: Form, params: tuple[Param, ...], category: Category = Category.EVALUATED, **more
) -> Callable[[Callable], Callable]:
    """Decorator: register the builder it decorates as the op of the builder's name."""

    def register_builder(build: Callable) -> Callable:
        register(OpDef(build.__name__, build, form, params, category, **more))
        return build

    return register_builder


def lookup(name: str) -> OpDef | None:
    """The definition of the op called `name`, or None."""
    return _DEFS.get(name)


@dataclass(frozen=True, eq=False)
class Composite:
    """A builder made of other ops (transpose, chunk, flatten): callable from Python and
    `.fus` like an op, but it adds the expressions of its parts, so nothing else
    (printer, passes, backends) needs to know it; `to_fus` writes the parts."""

    name: str
    build: Callable[..., Any]  # returns a tensor or a tuple of tensors
    params: tuple[Param, ...]

    @property
    def doc(self) -> str:
        """The first line of the builder's docstring."""
        return (self.build.__doc__ or "").strip().splitlines()[0]


_COMPOSITES: dict[str, Composite] = {}


def composite(params: tuple[Param, ...]) -> Callable[[Callable], Callable]:
    """Decorator: register the builder it decorates as a composite of the builder's name."""

    def register_builder(build: Callable) -> Callable:
        name = build.__name__
        if name in _DEFS or name in _COMPOSITES:
            raise FusionError(f"op {name!r} is defined twice")
        _COMPOSITES[name] = Composite(name, build, params)
        return build

    return register_builder


def all_composites() -> list[Composite]:
    """Every composite, in the order they were registered."""
    return list(_COMPOSITES.values())


def callable_def(name: str) -> OpDef | Composite | None:
    """What a `.fus` call of `name` runs: an op or a composite, or None."""
    return _DEFS.get(name) or _COMPOSITES.get(name)


def all_ops() -> list[OpDef]:
    """Every definition, in the order they were registered."""
    return list(_DEFS.values())


def definition(expr: Expr) -> OpDef | None:
    """The definition of an expression's op; None for other nodes (communications).
    Set where the expression is made (`expr.op_def`, which hot paths read directly)."""
    return expr.op_def


def definition_of(expr: Expr) -> OpDef:
    """definition(expr), which must exist."""
    d = expr.op_def
    if d is None:
        raise FusionError(f"{expr!r} is not an expression of a registered op")
    return d


def is_indexed(expr: Expr) -> bool:
    """True if each of the expression's values is a function of its element's global
    index (an indexed pointwise op, OpDef.indexed): computed where the element lies."""
    d = expr.op_def
    return d is not None and d.indexed_pointwise


def is_rowwise(expr: Expr) -> bool:
    """True if the expression's op computes its output rows from its operands' mapped
    rows alone (OpDef.rowwise): its chunks along an iteration axis come from chunks."""
    d = expr.op_def
    if d is None:
        return False
    if d.rowwise is not None:
        return d.rowwise
    return d.category is Category.POINTWISE and not d.indexed


def is_pointwise(expr: Expr) -> bool:
    """True if the pointwise scheduler takes the expression's op."""
    d = expr.op_def
    return d is not None and d.category is Category.POINTWISE


def compute_dtype(expr: Expr) -> DType:
    """The dtype an expression's operands are computed in (numpy, the kernel runner and
    the CUDA alike): the output's compute dtype unless its op says otherwise."""
    d = expr.op_def
    if d is not None and d.compute is not None:
        return d.compute(expr).compute
    return expr.output.dtype.compute


def operand_to_output(
    expr: Expr, position: int, output: TensorView | None = None
) -> Mapping[int, int]:
    """{logical index of operand `position` (of expr.inputs): logical index of `output`}
    for the axes the op maps; `output` is one of the expression's outputs (None: the
    first).

    The one axis map of fuserlite: sharding propagation, insert-reshardings'
    locality test, the pointwise scheduler's transform replay, the kernel runner
    and the CUDA emitter all read an op through it. It is keyed by the operand's
    position, so a tensor read twice (matmul(x, x)) is mapped once per role.
    Pointwise ops, sets, reductions and expands map data axes position by position;
    each op with another map names it in its definition. Read only: a map may be
    shared (positional's are, by domains)."""
    d = definition_of(expr)
    if d.outputs_axis_map is not None:
        return d.outputs_axis_map(expr, position, expr.output if output is None else output)
    if output is not None and output is not expr.output:
        raise FusionError(f"{output.name} is not the output of {expr!r}")
    return d.axis_map(expr, position)
