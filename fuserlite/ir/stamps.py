"""Change stamps: every change to a tensor, its domain, one of its axes or an
expression moves a stamp, so what is derived from them is kept exactly as long as
nothing it read has changed.

A TensorView, its TensorDomain and an Expr each hold `_stamp`, the clock's time of
their last change: any attribute they are given (a mesh, a domain, a loop list,
an input list), any in-place change of their lists (`TrackedList`: `loop[i:j] =`,
`transforms.append`) and any change to an IterDomain (which stamps the domain of the
tensor that owns it) takes the next tick of one process-wide clock. `version(tv)` is
the later of the tensor's and its domain's stamps, so it moves whenever either
changes and a version is never reused.

Three kinds of users:
- `derived(question, tv, compute)`: facts about one tensor (its shardings, its
  placement, its local shape) computed once per version, by passes, the validator
  and the executor alike.
- `domain_derived(question, tv, compute)`: facts that read only the tensor's domain
  (its lists and its axes: a schedule's structure), kept per stamp of the domain, so
  they outlive a change to the tensor's own attributes (an inline position, a mesh,
  a name), which the scheduler makes to 40 000 tensors after their domains are done.
- the validator's "this node was checked and valid at this version"
  (`checked`, `mark_checked`): between passes only what a pass changed is
  checked again. An axis is stamped on its owner, so an axis that sits in the
  domain of a tensor that does not own it would escape its tensor's version: the
  validator rejects that (every axis of a domain is owned by its tensor).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

_clock = itertools.count(1)
tick: Callable[[], int] = _clock.__next__  # the next time of the clock


# The time of the last change to the graph anywhere: an expression changed (its inputs
# or outputs, in place or assigned, or any attribute) or a tensor given a definition.
# A fusion's expression order (Fusion.exprs) reads nothing else but its outputs, so it
# is kept while this time stands still.
_graph = [0]


def graph_changed(time: int) -> None:
    """Record that the graph changed at `time` (a tick of the clock)."""
    _graph[0] = time


def graph_time() -> int:
    """The time of the last change to any expression or any tensor's definition."""
    return _graph[0]


def stamp(node: Any) -> None:
    """Record a change to `node` (a TensorView, a TensorDomain or an Expr)."""
    t = tick()
    object.__setattr__(node, "_stamp", t)
    if node.in_graph:  # an expression: its inputs or outputs may have changed
        _graph[0] = t


_fill = list.__init__


class TrackedList(list):
    """A list that stamps its holder (a domain or an expression) when changed in place."""

    __slots__ = ("_holder",)

    def __init__(self, holder: Any, items: object = ()) -> None:
        _fill(self, items)  # list.__init__ itself: six lists per tensor and expression made
        self._holder = holder

    def _changed(self) -> None:
        holder = getattr(self, "_holder", None)  # unset while copy.copy rebuilds a list
        if holder is not None:
            stamp(holder)


def _tracking(name: str) -> Callable:
    method = getattr(list, name)

    def changed(self: TrackedList, *args: object) -> object:
        result = method(self, *args)
        self._changed()
        return result

    changed.__name__ = name
    changed.__doc__ = method.__doc__
    return changed


for _name in (
    "__setitem__",
    "__delitem__",
    "__iadd__",
    "__imul__",
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "clear",
    "sort",
    "reverse",
):
    setattr(TrackedList, _name, _tracking(_name))


def tracked(holder: Any, value: object) -> object:
    """`value` as a TrackedList of `holder` when it is a list (None stays None)."""
    if isinstance(value, list):
        return TrackedList(holder, value)
    return value


def version(tv: Any) -> int:
    """A TensorView's version: it moves whenever the tensor, its domain or one of its
    axes changes."""
    a, b = tv._stamp, tv.domain._stamp
    return a if a > b else b


def derived(question: Hashable, tv: Any, compute: Callable[..., T], *args: Any) -> T:
    """compute(*args), a fact about TensorView `tv` that reads only `tv` (its mesh,
    domain and axes), computed once per version of `tv` (a module-level `compute` and
    its `args` spare the caller a lambda per question: asked millions of times)."""
    facts = tv._facts
    v, d = tv._stamp, tv.domain._stamp  # version(tv), inlined: asked millions of times
    if d > v:
        v = d
    hit = facts.get(question)
    if hit is not None and hit[0] == v:
        return hit[1]
    value = compute(*args)
    facts[question] = (v, value)
    return value


def domain_derived(question: Hashable, tv: Any, compute: Callable[..., T], *args: Any) -> T:
    """compute(*args), a fact that reads only `tv.domain` (its lists and its axes, never
    the tensor's own attributes), computed once per stamp of the domain: a new domain
    has a new stamp (ticks are never reused) and every change to one of its lists or
    axes stamps it."""
    facts = tv._facts
    d = tv.domain._stamp
    hit = facts.get(question)
    if hit is not None and hit[0] == d:
        return hit[1]
    value = compute(*args)
    facts[question] = (d, value)
    return value


def domain_known(question: Hashable, tv: Any) -> Any:
    """The fact domain_derived keeps for `question` while tv's domain is unchanged, or
    None where none is kept: never computed, for a caller that has a cheaper way than
    working it out."""
    hit = tv._facts.get(question)
    return hit[1] if hit is not None and hit[0] == tv.domain._stamp else None


def checked(node: Any, question: Hashable, key: Hashable) -> bool:
    """True if `node` was found valid for `question` when its state was `key` (a
    version, or the versions of every node the check reads)."""
    return node._facts.get(question, (None,))[0] == key


def mark_checked(node: Any, question: Hashable, key: Hashable) -> None:
    """Remember that `node` is valid for `question` while its state is `key`."""
    node._facts[question] = (key, True)
