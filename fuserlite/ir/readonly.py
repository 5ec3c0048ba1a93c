"""While the IR is only read, facts derived from its nodes are computed once.

The validator runs after every pass and the executor runs a kernel once per
device; both only read the IR, and both ask the same questions (a tensor's
shardings, its local shape, its schedule signature) many times. Inside
`reading_only()` the answers are remembered by node identity; outside it (while
passes rewrite the IR) every call computes afresh.

    with reading_only():
        verify(fusion)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

# {(question, id(node)): answer} while reading only; None otherwise.
_answers: ContextVar[dict[tuple[Hashable, int], object] | None] = ContextVar(
    "fuserlite_ir_answers", default=None
)


@contextmanager
def reading_only() -> Iterator[None]:
    """Within the block nothing changes the IR, so derived facts may be remembered."""
    token = _answers.set({} if _answers.get() is None else _answers.get())
    try:
        yield
    finally:
        _answers.reset(token)


def remembered(question: Hashable, node: object, compute: Callable[[], T]) -> T:
    """compute(), the answer to `question` about `node`, remembered while reading only
    (the node, and any node the question names by id, must stay alive)."""
    answers = _answers.get()
    if answers is None:
        return compute()
    key = (question, id(node))
    if key in answers:
        return answers[key]  # type: ignore[return-value]
    value = answers[key] = compute()
    return value
