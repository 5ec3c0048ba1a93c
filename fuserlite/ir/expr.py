"""Expressions: the operations that define TensorViews.

Each Expr records its input and output TensorViews and links them (definition
and uses). The IR itself knows two kinds: the base class and Set (LoadStoreOp),
its own copy and resharding node. Every op (add, sum, linear, ...) is defined
once in fuserlite.ops, and communications in fuserlite.program.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuserlite.ir.changes import GraphList, expr_changed, tensor_changed

if TYPE_CHECKING:
    from fuserlite.ir.tensor import TensorView


_set = object.__setattr__


def _slots(cls: type) -> tuple[str, ...]:
    """Every slot of a class and its bases."""
    return tuple(name for c in cls.__mro__ for name in c.__dict__.get("__slots__", ()))


def _slot_member(cls: type, name: str) -> object:
    """The descriptor of slot `name`, from the class of cls's bases that declares it."""
    return next(c.__dict__[name] for c in cls.__mro__ if name in c.__dict__.get("__slots__", ()))


class Expr:
    """Base class: inputs, outputs, and the links between them.

    Every attribute set is an edit the change log hears (fuserlite.ir.changes); a new
    input or output list also drops its fusion's kept orders. Edit the lists by
    assigning new ones (`e.inputs = [...]`), never in place."""

    op_name = "expr"
    # The definition of the expression's op (an OpDef: fuserlite.ops sets it where the
    # expression is made, or on the class for Set; the IR knows no ops), None for a node
    # of no registered op (a communication). Asked of every expression by every pass.
    op_def: object = None
    # Graph nodes of fixed fields: a kind adds its own slots (Set its cache op), or its
    # attributes in a dict where it has many (communications).
    __slots__ = ("inputs", "outputs")
    # The slots a copy shares with its original (all but the graph's lists), a fact of
    # the class: worked out when the class is made, not for every copy.
    _shared_slots: tuple[str, ...] = ()
    _shared_members: tuple = ()  # their descriptors (read and set without a name lookup)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._shared_slots = tuple(n for n in _slots(cls) if n not in ("inputs", "outputs"))
        cls._shared_members = tuple(_slot_member(cls, n) for n in cls._shared_slots)

    def __init__(self, inputs: list[TensorView], outputs: list[TensorView]) -> None:
        inputs, outputs = GraphList(inputs), GraphList(outputs)
        _inputs(self, inputs)
        _outputs(self, outputs)
        expr_changed(self)
        for out in outputs:  # `out.definition = self`, its edit heard once for them all
            _set(out, "definition", self)
            tensor_changed(out)
        if outputs:
            outputs[0].fusion.graph_edited()
        for inp in inputs:
            inp.uses.append(self)

    def __setattr__(self, name: str, value: object) -> None:
        graph = name in ("inputs", "outputs")
        object.__setattr__(self, name, GraphList(value) if graph else value)
        expr_changed(self)
        if graph:
            self._graph_edited()

    def _graph_edited(self) -> None:
        for t in (*self.outputs, *self.inputs):
            t.fusion.graph_edited()
            return

    def copy_between(self, mapping: dict) -> Expr:
        """A copy of this expression between the copies (`mapping`) of its tensors,
        linked to them (their definition and uses); its other attributes shared."""
        e = _new(type(self))
        self._share_fields(e)
        copied = mapping.__getitem__
        inputs = GraphList(map(copied, self.inputs))
        outputs = GraphList(map(copied, self.outputs))
        _inputs(e, inputs)
        _outputs(e, outputs)
        for t in outputs:
            _set(t, "definition", e)  # a new tensor of a new fusion: unheard
        for t in inputs:
            t.uses.append(e)
        return e

    def _share_fields(self, e: Expr) -> None:
        """Give the copy `e` this expression's fields but the graph's lists (a kind of
        fixed fields overrides it: one setter call per field)."""
        for member in type(self)._shared_members:
            try:
                value = member.__get__(self)
            except AttributeError:  # a slot never set stays unset in the copy
                continue
            member.__set__(e, value)
        attrs = getattr(self, "__dict__", None)
        if attrs is not None:
            e.__dict__.update(attrs)

    @property
    def input(self) -> TensorView:
        return self.inputs[0]

    @property
    def output(self) -> TensorView:
        return self.outputs[0]

    def operands(self) -> list[TensorView | int | float]:
        """The operands in order: the inputs, with scalars in place where the op takes them."""
        return list(self.inputs)

    def attributes(self) -> dict:
        """Kind-specific attributes by name (what the printed form and .fus text show)."""
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

    @staticmethod
    def replace_reads(old: TensorView, new: TensorView, reads: list[tuple[Expr, int]]) -> None:
        """Make each (expr, position) of `reads` read `new` at that operand position, where
        it read `old`: replace_uses for single operands (matmul(x, x) may read x
        resharded in one position only), in one pass over old.uses."""
        for e, k in reads:
            e.inputs = [new if i == k else t for i, t in enumerate(e.inputs)]
            new.uses.append(e)
        ids = {id(e) for e, _ in reads}
        old.uses = [u for u in old.uses if id(u) not in ids or any(t is old for t in u.inputs)]

    def __repr__(self) -> str:
        ins = ", ".join(t.name for t in self.inputs)
        outs = ", ".join(t.name for t in self.outputs)
        return f"<{type(self).__name__} {outs} = {self.op_name}({ins})>"


_new = object.__new__
_inputs = Expr.__dict__["inputs"].__set__
_outputs = Expr.__dict__["outputs"].__set__

# nvFuser's CacheOp: the cache hint of a load (printed as `cache_op=Streaming`).
CACHE_OPS = ("Unspecified", "AllLevels", "Streaming", "Global")


class LoadStoreOp(Expr):
    """out = Set(in): a copy, a cache, or (across shardings) a resharding."""

    op_name = "set"
    __slots__ = ("cache_op",)

    def __init__(self, out: TensorView, inp: TensorView, cache_op: str | None = None) -> None:
        super().__init__([inp], [out])
        self.cache_op = cache_op

    def attributes(self) -> dict:
        return {"cache_op": self.cache_op}
