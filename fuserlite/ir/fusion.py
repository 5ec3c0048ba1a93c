"""Fusion: a graph of TensorViews and expressions with inputs and outputs."""

from __future__ import annotations

import operator
import threading
from typing import TYPE_CHECKING

from fuserlite.ir import args
from fuserlite.ir.changes import GraphList, structure_changed
from fuserlite.ir.errors import FusionError
from fuserlite.ir.types import MemoryType

if TYPE_CHECKING:
    from fuserlite.ir.expr import Expr
    from fuserlite.ir.tensor import TensorView

_state = threading.local()


def active_fusion() -> Fusion:
    """The fusion of the innermost `with Fusion():` block."""
    stack = getattr(_state, "stack", [])
    if not stack:
        raise FusionError("no active fusion: create tensors inside `with fl.Fusion() as fusion:`")
    return stack[-1]


class Fusion:
    """A fusion: tensors in creation order, inputs, outputs, and the expressions between.

    `str(fusion)`, `fusion.print_math()` and `fusion.print_transforms()` are installed by
    fuserlite.printer, which owns the printed form: the IR does not import it.
    """

    def __init__(self) -> None:
        # exprs() and tensors(), kept until an edit of the graph (graph_edited)
        self._order: list[Expr] | None = None
        self._shown: list[TensorView] | None = None
        self.tensors_created: list[TensorView] = []
        self.inputs = []
        self.outputs = []
        self._next_number = 0

    # Inputs and outputs are lists; a set of their ids beside each keeps add_input /
    # add_output's duplicate check O(1) (a fusion may have very many outputs).
    @property
    def inputs(self) -> list[TensorView]:
        return self._inputs

    @inputs.setter
    def inputs(self, tensors: list[TensorView]) -> None:
        old, self._inputs = getattr(self, "_inputs", None), GraphList(tensors)
        self._input_ids = {id(t) for t in self._inputs}
        if not _same_tensors(old, self._inputs):
            self.graph_edited()

    @property
    def outputs(self) -> list[TensorView]:
        return self._outputs

    @outputs.setter
    def outputs(self, tensors: list[TensorView]) -> None:
        old, self._outputs = getattr(self, "_outputs", None), GraphList(tensors)
        self._output_ids = {id(t) for t in self._outputs}
        if not _same_tensors(old, self._outputs):
            self.graph_edited()

    def graph_edited(self) -> None:
        """The graph changed (an expression's inputs or outputs, a tensor's definition,
        the inputs or outputs): the kept orders are worked out again when asked."""
        if self._order is not None or self._shown is not None:
            self._order = self._shown = None
        structure_changed()

    @staticmethod
    def _listed(tv: TensorView, tensors: list[TensorView], ids: set[int]) -> bool:
        if len(ids) != len(tensors):  # the list was edited in place: recount
            ids.clear()
            ids.update(id(t) for t in tensors)
        return id(tv) in ids

    # -- context manager ----------------------------------------------------
    def __enter__(self) -> Fusion:
        if not hasattr(_state, "stack"):
            _state.stack = []
        _state.stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _state.stack.pop()

    # -- building -----------------------------------------------------------
    def register_tensor(self, tv: TensorView, number: int | None = None) -> int:
        """Record a new TensorView and give it the next number, or `number` (a parser
        rebuilding printed tensors gives theirs, in increasing order)."""
        if number is None:
            number = self._next_number
        elif number < self._next_number:
            raise FusionError(
                f"T{number} cannot be made: tensors T0..T{self._next_number - 1} are numbered "
                "already; give numbers in increasing order"
            )
        self.tensors_created.append(tv)
        self._next_number = number + 1
        return number

    def _check_owned(self, tv: TensorView, what: str) -> None:
        from fuserlite.ir.tensor import TensorView

        args.instance(tv, TensorView, what, "tv", "a TensorView of this fusion")
        if tv.fusion is not self:
            raise FusionError(f"{what}: {tv!r} belongs to another fusion")

    def add_input(self, tv: TensorView) -> None:
        """Mark a tensor as a fusion input (it must have no definition)."""
        self._check_owned(tv, "add_input")
        if tv.definition is not None:
            raise FusionError(f"add_input: {tv.name} is computed by {tv.definition.op_name}")
        if self._listed(tv, self._inputs, self._input_ids):
            raise FusionError(f"add_input: {tv.name} is already an input")
        list.append(self._inputs, tv)
        self._input_ids.add(id(tv))
        self.graph_edited()
        tv.memory_type = MemoryType.GLOBAL

    def add_output(self, tv: TensorView) -> None:
        """Mark a tensor as a fusion output."""
        self._check_owned(tv, "add_output")
        if self._listed(tv, self._outputs, self._output_ids):
            raise FusionError(f"add_output: {tv.name} is already an output")
        list.append(self._outputs, tv)
        self._output_ids.add(id(tv))
        self.graph_edited()
        tv.memory_type = MemoryType.GLOBAL

    def replace_output(self, old: TensorView, new: TensorView) -> None:
        """Make `new` the output in the place of `old`."""
        self.replace_outputs({old: new})

    def replace_outputs(self, new_of: dict[TensorView, TensorView]) -> None:
        """Make each `new_of[old]` the output in the place of `old` (one pass over the
        outputs); it takes old's user name and origin too (see `takes_place_of`)."""
        inputs = {id(t) for t in self.inputs}
        outputs = []
        for t in self.outputs:
            new = new_of.get(t)
            if new is not None:
                takes_place_of(new, t)
                new.memory_type = MemoryType.GLOBAL
                if id(t) not in inputs:
                    t.memory_type = MemoryType.LOCAL
            outputs.append(t if new is None else new)
        self.outputs = outputs

    # -- traversal ----------------------------------------------------------
    def exprs(self) -> list[Expr]:
        """Expressions reachable from the outputs, in a deterministic topological order."""
        return list(self._kept_order())

    def _kept_order(self) -> list[Expr]:
        """The order itself (not a copy), worked out again only after an edit of the
        graph: passes and the validator ask in turn, and most passes change none."""
        if self._order is None:
            self._order = self._exprs()
        return self._order

    def _exprs(self) -> list[Expr]:
        order: list[Expr] = []
        seen: set[int] = set()
        for out in self.outputs:
            if out.definition is None or id(out.definition) in seen:
                continue
            # Iterative post-order DFS: long chains must not hit the recursion limit.
            stack: list[tuple[Expr, int]] = [(out.definition, 0)]
            seen.add(id(out.definition))
            while stack:
                expr, i = stack[-1]
                if i < len(expr.inputs):
                    stack[-1] = (expr, i + 1)
                    d = expr.inputs[i].definition
                    if d is not None and id(d) not in seen:
                        seen.add(id(d))
                        stack.append((d, 0))
                else:
                    stack.pop()
                    order.append(expr)
        return order

    def tensors(self, exprs: list[Expr] | None = None) -> list[TensorView]:
        """Tensors in printing order: the inputs no expression reads, then per expression
        its unseen inputs and outputs, then the outputs not seen yet (`exprs`: a
        precomputed `self.exprs()`). Only the expressions the outputs need count, so
        the order depends on nothing a print leaves out. Kept, as the expression order
        is, until an edit of the graph."""
        order = self._kept_order()
        if exprs is not None and exprs != order:  # another list than the fusion's own
            return self._tensors(exprs)
        if self._shown is None:
            self._shown = self._tensors(order)
        return list(self._shown)

    def _tensors(self, exprs: list[Expr]) -> list[TensorView]:
        seen: set[int] = set()
        out: list[TensorView] = []
        read = {id(tv) for expr in exprs for tv in expr.inputs}
        # Each tensor once, in order of first sight (the visits inline: one per operand).
        firsts = [tv for tv in self.inputs if id(tv) not in read]
        for group in (firsts, *(t for e in exprs for t in (e.inputs, e.outputs)), self.outputs):
            for tv in group:
                if id(tv) not in seen:
                    seen.add(id(tv))
                    out.append(tv)
        return out

    def drop_dead_uses(self) -> None:
        """Forget the readers no output needs: afterwards every tensor's `uses` are live
        expressions only, as in a parsed print, which shows nothing else."""
        live = {id(e) for e in self.exprs()}
        for tv in self.tensors_created:
            if any(id(u) not in live for u in tv.uses):
                tv.uses = [u for u in tv.uses if id(u) in live]

    def __repr__(self) -> str:
        return f"<Fusion inputs={[t.name for t in self.inputs]} outputs={[t.name for t in self.outputs]}>"

    # -- copying ------------------------------------------------------------
    def clone(self) -> tuple[Fusion, dict]:
        """A deep copy with the same numbering; returns (copy, {old node: new node}).
        Domains are values: the copies share them."""
        new = Fusion()
        mapping: dict = {}
        for old in self.tensors_created:
            tv = mapping[old] = old.copy_into(new)
            new.tensors_created.append(tv)
        new._next_number = self._next_number
        order = self._kept_order()
        for expr in self._all_exprs(order):
            mapping[expr] = expr.copy_between(mapping)
        new.inputs = [mapping[t] for t in self.inputs]
        new.outputs = [mapping[t] for t in self.outputs]
        # The copy's graph is the original's, so are its orders (not walked again for
        # its first pass).
        new._order = [mapping[e] for e in order]
        if self._shown is not None:
            new._shown = [mapping[t] for t in self._shown]
        return new, mapping

    def _all_exprs(self, exprs: list[Expr]) -> list[Expr]:
        """Every expression defining a created tensor, in topological order (`exprs`:
        the fusion's expression order)."""
        seen = {id(e) for e in exprs}
        extra = []
        for tv in self.tensors_created:
            d = tv.definition
            if d is not None and id(d) not in seen:
                seen.add(id(d))
                extra.append(d)
        return exprs + extra


def _same_tensors(old: list[TensorView] | None, new: list[TensorView]) -> bool:
    """True when a list of the graph is given the tensors it holds again, in order
    (replace_outputs with nothing to replace): nothing of the graph changed, so the
    kept orders stay and the change log hears no edit of its structure."""
    return old is not None and len(old) == len(new) and all(map(operator.is_, old, new))


def takes_place_of(new: TensorView, old: TensorView) -> None:
    """A compiler-made tensor that stands for the user's `old` from now on (the completed
    value of a partial output, a linear plus its bias) keeps the user's name for it and
    where it was made, so messages and reports still say `y (T7)`, `model.fus:3`."""
    if new.user_name is None:
        new.user_name = old.user_name
    if new.origin is None:
        new.origin = old.origin
