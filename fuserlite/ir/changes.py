"""The change log: what a pass touched, recorded where the IR is edited.

Every edit of the IR goes through its nodes' edit points: a TensorView's or an
Expr's attribute set (a new domain, mesh, definition, inputs, outputs), a new
tensor or expression, a fusion's inputs or outputs, a program's steps or a kernel's
lists. Each edit point tells the listener of the innermost `recording()` block, a
ChangeLog (xDSL's PatternRewriterListener, torch.fx's PassResult(modified)), so the
pipeline re-checks what a pass touched, not the whole IR:

    with recording() as log:
        p.run(program)
    log.tensors, log.exprs, log.structure   # made or changed; a list of the graph edited

Outside a recording block nothing is recorded (building IR in user code costs nothing
extra). The lists that hold the graph together are GraphLists, which refuse to be
edited in place: a new list is assigned, through an edit point (a list of a fusion,
a program or a kernel given the nodes it holds again, in order, is no edit). What still
bypasses the edit points (`object.__setattr__(tv, ...)`) escapes the log;
`Pipeline(verify_all=True)` (`--verify-all`) checks everything after every pass.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fuserlite.ir.errors import FusionError


class ChangeLog:
    """The tensors and expressions made or changed while it listened, and whether a
    list that holds the graph together (a fusion's inputs or outputs, a program's
    steps, a kernel's expressions, inputs or outputs) was edited."""

    __slots__ = ("tensors", "exprs", "structure")

    def __init__(self) -> None:
        self.tensors: dict[int, Any] = {}
        self.exprs: dict[int, Any] = {}
        self.structure = False

    def __repr__(self) -> str:
        return (
            f"<ChangeLog {len(self.tensors)} tensors, {len(self.exprs)} exprs"
            f"{', structure' if self.structure else ''}>"
        )


class _Listening(threading.local):
    """The listening log of this thread (its innermost recording() block's), or None:
    pipelines in two threads each hear their own edits."""

    log: ChangeLog | None = None


# The hottest edit points (a tensor's attribute set) read it directly.
LISTENING = _Listening()


@contextmanager
def recording(log: ChangeLog | None = None) -> Iterator[ChangeLog]:
    """Record every edit of the IR made inside the block into `log` (a new one if None)."""
    log = ChangeLog() if log is None else log
    before = LISTENING.log
    LISTENING.log = log
    try:
        yield log
    finally:
        LISTENING.log = before


def tensor_changed(tv: Any) -> None:
    """A TensorView was made or given an attribute."""
    log = LISTENING.log
    if log is not None:
        log.tensors[id(tv)] = tv


def expr_changed(expr: Any) -> None:
    """An Expr was made or given an attribute."""
    log = LISTENING.log
    if log is not None:
        log.exprs[id(expr)] = expr


def structure_changed() -> None:
    """A list that holds the graph together was edited."""
    log = LISTENING.log
    if log is not None:
        log.structure = True


class GraphList(list):
    """A list that holds the graph together (an expression's inputs and outputs, a
    fusion's, a kernel's, a program's steps): read like a list, never edited in place,
    so that every edit is an assignment the change log hears."""

    __slots__ = ()

    def _refuse(self, *args: object) -> None:
        raise FusionError(
            "a list of the IR graph (inputs, outputs, a kernel's expressions, a program's "
            "steps) is not edited in place: assign a new list (e.inputs = [...]) or use "
            "fusion.add_input / add_output / replace_outputs"
        )

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __reduce__(self) -> tuple:
        return GraphList, (list(self),)
