"""Domain signatures: a tensor's domain up to identity.

Many decisions about a tensor read its domain's structure only: the extents and
iteration / parallel types of its axes, how its transforms connect them, and its loop
order (the scheduler's replays and inline positions, the validator's structural
checks, index lowering). Two tensors whose domains have one structure (the 20 000
`x + k` outputs of one kernel) have one signature, and such a decision is made once
per signature:

    domain_signature(T5) == domain_signature(T7)   # [ideviceIdx.x{2}, iS{4}, iS{16}]

A domain signature is a fact of the domain (ir.stamps.domain_derived): it outlives
changes to the tensor's own attributes (an inline position, a mesh). It is not the
layout signature of ir.sharding, which adds the mesh and where each device axis sits.
"""

from __future__ import annotations

from fuserlite.ir.domain import Split
from fuserlite.ir.stamps import domain_derived, domain_known
from fuserlite.ir.tensor import TensorView


class Signature:
    """A domain signature: a tuple of plain values, hashed once (it keys many lookups)."""

    __slots__ = ("key", "_hash")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, Signature) and self._hash == other._hash and self.key == other.key
        )

    def __repr__(self) -> str:
        return f"Signature{self.key!r}"


def domain_signature(tv: TensorView) -> Signature:
    """tv's domain up to identity: per axis (logical ones, then each transform's outputs)
    its extent, iteration and parallel type; each transform by the positions of its
    axes; the loop domain as positions."""
    return domain_derived("domain_signature", tv, _signature, tv)


def known_domain_signature(tv: TensorView) -> Signature | None:
    """domain_signature(tv) where it was worked out (or a replay gave it) for the domain
    as it is now, else None (nothing is worked out)."""
    return domain_known("domain_signature", tv)


def _signature(tv: TensorView) -> Signature:
    sig = Signature(_domain_key(tv))
    # Equal signatures as one object: a lookup keyed by one (the 20 000 `x + k` outputs'
    # alike) then compares identities, not key tuples.
    interned = _INTERNED.setdefault(sig, sig)
    if len(_INTERNED) > _INTERNED_SIZE:
        _INTERNED.clear()  # bounded: equal signatures made later still compare equal
    return interned


_INTERNED: dict[Signature, Signature] = {}
_INTERNED_SIZE = 1 << 14


def _domain_key(tv: TensorView) -> tuple:
    dom = tv.domain
    ids = dom.ids_between_logical_and_loop()
    pos = {id(ax): k for k, ax in enumerate(ids)}
    loop = tuple([pos.get(id(ax), -1) for ax in dom.loop])
    if -1 in loop:  # an axis of another domain (the validator rejects it): share nothing
        return ("foreign loop axis", id(tv))
    # an enum member hashes (and gives its value) in Python; its id, constant, in C
    axes = tuple([(ax.extent, id(ax.iter_type), id(ax.parallel_type)) for ax in ids])
    transforms = tuple(
        [
            (t.factor, t.inner_split, pos[id(t.input)])
            if type(t) is Split
            else (pos[id(t.outer)], pos[id(t.inner)])
            for t in dom.transforms
        ]
    )
    return axes, transforms, loop


def remember_signature(tv: TensorView, sig: Signature) -> None:
    """Record `sig`, known to be tv's domain signature now, as that derived fact."""
    domain_derived("domain_signature", tv, _given, sig)


def _given(value: Signature) -> Signature:
    return value
