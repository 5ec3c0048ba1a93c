"""Structures: a tensor's structural checks, decided once per domain signature and mesh.

After schedule-pointwise every tensor of a wide fusion is new or changed, but the
20 000 outputs `x + k` are laid out alike. A tensor's structural checks (its loop is
the leaves of its transforms, one parallel type per loop axis, thread extents, its
sharding on its mesh) read only its domain's structure and its mesh, so they are
decided once per `Structure`: (domain signature, mesh). What also reads identity, that
every axis of the domain is the tensor's own and made by the transform that lists it,
is checked per tensor (`structure` is None where it fails), in one cheap walk.

The signature is the one the scheduler worked out or a replay gave the copy
(ir.signature.known_domain_signature); where none is known it is worked out
here (and kept for the scheduler), unless a transform reads an axis outside the
domain, which has no signature: such a tensor is checked axis by axis.
"""

from __future__ import annotations

from fuserlite.ir.domain import Merge, Split
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.signature import Signature, domain_signature, known_domain_signature
from fuserlite.ir.stamps import derived
from fuserlite.ir.tensor import TensorView


class Structure:
    """One (domain signature, mesh), interned: tensors laid out alike share the object,
    so keys made of structures hash by identity. `valid` holds each `inferable` flag
    (fuserlite.verify.tensor_problems) for which a tensor of this structure was found
    valid: every tensor of it is then valid too and sharded alike (`sharded`), so what
    follows from its shardings holds for all of them (`complete`: no partial values)."""

    __slots__ = ("signature", "mesh", "valid", "complete")

    def __init__(self, signature: Signature, mesh: DeviceMesh | None) -> None:
        self.signature = signature
        self.mesh = mesh
        self.valid: set[bool] = set()
        self.complete = False  # until a tensor of it is found to hold no partial values

    @property
    def sharded(self) -> bool:
        """True when tensors of this structure are sharded as one (found valid)."""
        return bool(self.valid)

    def __repr__(self) -> str:
        return f"<Structure of {len(self.signature.key[0])} axes on {self.mesh}>"


_STRUCTURES: dict[tuple, Structure] = {}
_STRUCTURES_SIZE = 4096  # bounded: a long process sees many structures


def structure(tv: TensorView) -> Structure | None:
    """tv's Structure where every axis of its domain is its own, made by the transform
    that lists it (the signature's positions then say what following the axes would
    find), and the domain has a signature; else None. Kept per version of tv."""
    return derived("validator structure", tv, _structure, tv)


def _structure(tv: TensorView) -> Structure | None:
    if not _owns_its_axes(tv):
        return None
    signature = known_domain_signature(tv)
    if signature is None:
        if not _reads_its_own_axes(tv):
            return None  # a transform of an axis outside the domain: no signature to work out
        # Worked out once per domain, and kept for the scheduler: after propagate-shardings
        # only the few tensors no replay made (a fusion's inputs) are not known.
        signature = domain_signature(tv)
    # The mesh by identity (its hash is a Python call): held by the entry, an id is
    # never another mesh's; an equal mesh of another object merely shares nothing.
    key = (signature, id(tv.mesh))
    found = _STRUCTURES.get(key)
    if found is None:
        if len(_STRUCTURES) >= _STRUCTURES_SIZE:
            _STRUCTURES.clear()  # a structure still held stays right: it is a fact of its key
        found = _STRUCTURES[key] = Structure(signature, tv.mesh)
    return found


def _reads_its_own_axes(tv: TensorView) -> bool:
    """Every transform's inputs are axes of the domain made before it (logical ones or
    earlier outputs), the positions domain_signature gives them."""
    dom = tv.domain
    made = set(dom.logical)  # axes hash by identity, in C
    for t in dom.transforms:
        if not made.issuperset(t.inputs):
            return False
        made.update(t.outputs)
    return True


def _owns_its_axes(tv: TensorView) -> bool:
    """Every logical axis and transform output is tv's, each output defined by the
    transform that lists it (sharding_chain follows definitions), and every transform
    a Split or a Merge."""
    dom = tv.domain
    for ax in dom.logical:
        if ax.owner is not tv:
            return False
    for t in dom.transforms:
        if type(t) is Split:
            outer, inner = t.outer, t.inner
            if outer.owner is not tv or inner.owner is not tv:
                return False
            if outer.definition is not t or inner.definition is not t:
                return False
        elif type(t) is Merge:
            out = t.output
            if out.owner is not tv or out.definition is not t:
                return False
        else:
            return False
    return True
