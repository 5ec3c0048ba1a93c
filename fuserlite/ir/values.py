"""Values: IR objects that are frozen and interned, and the facts computed from them.

An IterDomain and a TensorDomain are values: made once per distinct content, so two
alike are the same object (`a.domain is b.domain`), compared and hashed by identity
(in C), usable as dict keys. A DeviceMesh is interned too (by its ids, shape and axis
names), so meshes made alike are one object, though it keeps its content's hash and
equality (two meshes differing only in names are equal). The table that interns them
holds them weakly: a value nobody holds is dropped, and one made again later is made
anew (nothing can tell).

A fact about values (a domain's sharding, its local shape on a mesh, a schedule
replayed onto it, its structural checks) is a function of them, cached with `fact`:
it can never go stale, because its arguments can never change. `fact` is the one
memo mechanism of the compiler (benchmarks/README.md says what it buys).

    @fact
    def local_shape(domain: TensorDomain, mesh_shape: tuple[int, ...]) -> tuple[int, ...]:
        ...
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

# Each fact keeps at most this many answers (least recently used first out), so memory
# stays bounded however many distinct values a long process sees.
FACT_SIZE = 1 << 16


def fact(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, a pure function of values (IR values, meshes, placements, ints, tuples),
    computed once per distinct arguments (functools.lru_cache, bounded)."""
    return functools.lru_cache(maxsize=FACT_SIZE)(fn)


# content -> weak reference to the one value made of it
_INTERNED: dict[Hashable, weakref.ref] = {}


def _forget(key: Hashable, ref: weakref.ref) -> None:
    if _INTERNED.get(key) is ref:
        del _INTERNED[key]


def interned(key: Hashable, make: Callable[..., T], *args: object) -> T:
    """The value whose content is `key` (its class first): the one made before while it
    lives, else make(*args)."""
    ref = _INTERNED.get(key)
    if ref is not None:
        value = ref()
        if value is not None:
            return value
    value = make(*args)
    new = weakref.ref(value, functools.partial(_forget, key))
    ref = _INTERNED.setdefault(key, new)  # one step: a thread making it too finds ours
    if ref is not new:
        other = ref()
        if other is not None:
            return other
        _INTERNED[key] = new  # the value made before is gone
    return value


def interned_count() -> int:
    """How many values are interned now (for tests and benchmarks)."""
    return len(_INTERNED)
