"""A replay done once per domain signature (fuserlite.ir.signature).

The scheduler's decisions about a tensor (how a reference schedule replays onto it,
which of its loop axes are on the grid, whether it inlines into a consumer) read its
domain's structure only. Two tensors whose domains have one structure (the 20 000
`x + k` outputs of one kernel) get one answer, decided once:

    domain_signature(T5) == domain_signature(T7)   # [ideviceIdx.x{2}, iS{4}, iS{16}]
    replayed = Replayed.taken(T5, before)          # after replay(ref, T5, ...)
    replayed.apply(T7)                             # T7 gets its own new axes, alike

Each tensor still gets its own IterDomains and transforms (the IR is per tensor).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fuserlite.ir.domain import IterDomain, Split, Step
from fuserlite.ir.signature import Signature, domain_signature, remember_signature
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType


@dataclass(frozen=True)
class Before:
    """A tensor's domain before a replay: how many transforms and axes, their types."""

    transforms: int
    parallel_types: tuple[ParallelType, ...]

    @staticmethod
    def of(tv: TensorView) -> Before:
        """The state of `tv` that Replayed.taken compares against."""
        ids = tv.domain.ids_between_logical_and_loop()
        return Before(len(tv.domain.transforms), tuple(ax.parallel_type for ax in ids))


@dataclass(frozen=True)
class Replayed:
    """What a replay did to one tensor, by positions (its new transforms and their axes,
    its loop order, the parallel types it gave axes it had), to do to another tensor of
    the same signature."""

    steps: tuple[Step, ...]
    parallel: tuple[tuple[int, ParallelType], ...]  # (axis position, type) that changed
    loop: tuple[int, ...]
    signature: Signature  # the domain_signature the replay left

    @staticmethod
    def taken(tv: TensorView, before: Before) -> Replayed:
        """What was done to `tv` since `before` was taken of it."""
        ids = tv.domain.ids_between_logical_and_loop()
        pos = {id(ax): k for k, ax in enumerate(ids)}

        def made(axes: tuple[IterDomain, ...]) -> tuple:
            return tuple((ax.extent, ax.iter_type, ax.parallel_type) for ax in axes)

        steps = tuple(
            ("split", pos[id(t.input)], t.factor, t.inner_split, made(t.outputs))
            if isinstance(t, Split)
            else ("merge", pos[id(t.outer)], pos[id(t.inner)], None, made(t.outputs))
            for t in tv.domain.transforms[before.transforms :]
        )
        old = before.parallel_types
        parallel = tuple(
            (k, ax.parallel_type)
            for k, ax in enumerate(ids[: len(old)])
            if ax.parallel_type is not old[k]
        )
        loop = tuple(pos[id(ax)] for ax in tv.domain.loop)
        return Replayed(steps, parallel, loop, domain_signature(tv))

    def apply(self, tv: TensorView) -> None:
        """Do the replay to `tv`, a tensor with the signature the replay started from.

        The checks of split, merge and parallelize passed on a domain of that structure,
        so they hold here: the transforms are built directly."""
        if self.parallel:
            ids = tv.domain.ids_between_logical_and_loop()
            for k, pt in self.parallel:
                ids[k].parallel_type = pt
        tv.domain.extend_for(tv, self.steps, self.loop)
        # The structure built is the one the replay left: its signature is known.
        remember_signature(tv, self.signature)


def one_per_signature(tensors: Iterable[TensorView]) -> list[TensorView]:
    """The first tensor of each (domain signature, mesh), in order: all that a check
    reading only the tensors' domains and meshes needs to see (it names the same
    tensor: the first that fails)."""
    seen: set[tuple] = set()
    out = []
    for tv in tensors:
        key = (domain_signature(tv), tv.mesh)
        if key not in seen:
            seen.add(key)
            out.append(tv)
    return out
