"""Placements: how a tensor lies on a mesh, one placement per mesh axis.

For each tensor axis, the ORDERED tuple of mesh axes sharding it, outer to
inner: (0, 1) means mesh axis 0 splits the tensor axis into chunks and mesh
axis 1 splits each chunk again (DTensor's (Shard(0), Shard(0))); (1, 0) is the
other nesting, which DTensor cannot name but a sequence of steps can reach.
Mesh axes in `partial` hold addends (sums or maxima) of the value; every other
mesh axis is replicated. A mesh axis in `cyclic` shards its tensor axis cyclically
(strided), not in chunks: device r of d holds elements r, r + d, r + 2d, ... (nvFuser's
DIDx on the inner part of a split by d); it is the innermost mesh axis of that tensor
axis, and the mesh axes outside it chunk the axis's periods of d rows (torch.chunk's
chunks of ceil(n/d) periods; nvFuser's DIDy on the outer part of that split).
Its `block` b (1 unless said) makes it block-cyclic: device r holds blocks of b
consecutive elements spaced d * b apart, elements (k * d + r) * b + j, periods of d * b
(nvFuser's DIDx on the outer part of a split of the inner part of a split); cyclic is
block size 1.

Text form, one entry per mesh axis: `S<t>` (shards tensor axis t), `R`, `P`:
"(S1,S2,R)", "(P,S0)"; a cyclic shard is `C<t>`, "(C0)", a block-cyclic one of blocks
of b elements `C<t>/<b>`, "(C0/3)". A tensor axis nested against the mesh-axis order prints
each of its entries with its depth, 0 outermost: (1, 0) on tensor axis 0 of a
2-D mesh is "(S0.1,S0.0)".

The IR's sharding queries (fuserlite.ir.sharding) read a TensorView's
placement in this form, and the redistribution planner (fuserlite.plan)
plans between two of them: one type for both. Users write the per-mesh-axis
values `Shard(dim)`, `Replicate()` and `Partial("sum" | "max" | "min")` as DTensor spells
them (`fl.distribute`, `tv.placements`: fuserlite.schedule.placements), which
`Placement.from_dtensor` and `of_mesh_axis` convert to and from this form. A
placement's `partial` says which mesh axes hold addends, not how they combine:
that is the reduction's op, which `tv.placements` reads off the tensor.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from fuserlite.ir.errors import RedistributionError


@dataclass(frozen=True)
class Shard:
    """DTensor's Shard(dim): this mesh axis splits tensor axis `dim` (torch.chunk's chunks)."""

    dim: int

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int):
            raise RedistributionError(
                f"Shard(dim): dim is the tensor axis the mesh axis splits, an int; got {self.dim!r}"
            )


@dataclass(frozen=True)
class Replicate:
    """DTensor's Replicate(): every device of this mesh axis holds the same data."""


# How a Partial's addends combine: DTensor's reduce_op names, as the reductions' names
# (ir.types.ReductionOpType) spell them.
PARTIAL_OPS = ("sum", "max", "min")


@dataclass(frozen=True)
class Partial:
    """DTensor's Partial(reduce_op): the devices of this mesh axis hold addends of the
    value, combined by `reduce_op` ("sum", the default, "max" or "min")."""

    reduce_op: str = "sum"

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op})"  # as DTensor prints it

    def __post_init__(self) -> None:
        if self.reduce_op not in PARTIAL_OPS:
            raise RedistributionError(
                f"Partial({self.reduce_op!r}): reduce_op is how the devices' values combine, "
                f"one of {', '.join(map(repr, PARTIAL_OPS))}"
            )


MeshAxisPlacement = Shard | Replicate | Partial


@dataclass(frozen=True, order=True)
class Placement:
    """A tensor's placement on a rank-`mesh_rank` mesh (compared and hashed by value)."""

    mesh_rank: int
    shards: tuple[tuple[int, ...], ...]  # per tensor axis: mesh axes, outer -> inner
    partial: tuple[int, ...] = ()  # sorted mesh axes holding addends
    cyclic: tuple[int, ...] = ()  # sorted mesh axes whose shard is cyclic (strided)
    block: tuple[int, ...] = ()  # per cyclic mesh axis, its block size (() all 1)

    def __post_init__(self) -> None:
        used = [a for axes in self.shards for a in axes] + list(self.partial)
        bad = [a for a in used if not 0 <= a < self.mesh_rank]
        if bad or len(set(used)) != len(used) or list(self.partial) != sorted(self.partial):
            raise RedistributionError(
                f"invalid placement shards={self.shards} partial={self.partial} on a "
                f"rank-{self.mesh_rank} mesh: each mesh axis 0..{self.mesh_rank - 1} shards "
                "at most one tensor axis once, or is partial, or neither (replicated)"
            )
        innermost = {axes[-1] for axes in self.shards if axes}
        outer = {a for axes in self.shards for a in axes[:-1]}
        if (
            list(self.cyclic) != sorted(set(self.cyclic))
            or not set(self.cyclic) <= innermost
            or set(self.cyclic) & outer
        ):
            raise RedistributionError(
                f"invalid placement shards={self.shards} cyclic={self.cyclic}: a cyclic mesh "
                "axis is the innermost mesh axis sharding its tensor axis (the outer ones "
                "chunk its periods)"
            )
        if not self.block:
            object.__setattr__(self, "block", (1,) * len(self.cyclic))
        if len(self.block) != len(self.cyclic) or any(b < 1 for b in self.block):
            raise RedistributionError(
                f"invalid placement cyclic={self.cyclic} block={self.block}: one block size "
                "(at least 1) per cyclic mesh axis"
            )
        # Hashed once: a placement is an argument of facts (fuserlite.ir.values), asked
        # for every tensor a pass places.
        key = (self.mesh_rank, self.shards, self.partial, self.cyclic, self.block)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    def block_of(self, axis: int) -> int:
        """The block size of cyclic mesh axis `axis` (1: cyclic, rows r, r + d, ...)."""
        return self.block[self.cyclic.index(axis)]

    def keeping(
        self, shards: Sequence[tuple[int, ...]], partial: tuple[int, ...] = ()
    ) -> Placement:
        """A placement of `shards` (another tensor's, made from this one's mesh axes) whose
        mesh axes keep this one's cyclic shards and their blocks."""
        cyclic = self.cyclic_among(shards)
        block = tuple(self.block_of(a) for a in cyclic)
        return Placement(self.mesh_rank, tuple(shards), partial, cyclic, block)

    def cyclic_among(self, shards: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
        """The cyclic mesh axes of this placement that shard one of `shards` (a placement
        of another tensor made from this one's mesh axes)."""
        kept = {a for axes in shards for a in axes}
        return tuple(a for a in self.cyclic if a in kept)

    def gathered(self) -> Placement:
        """This placement with its (first) cyclic tensor axis gathered over its cyclic mesh
        axis: that axis keeps the outer mesh axes, whose chunks of its periods are then
        blocks of it (where they divide it evenly)."""
        t = self.cyclic_axis()
        shards = tuple(axes[:-1] if k == t else axes for k, axes in enumerate(self.shards))
        return self.keeping(shards, self.partial)

    def cyclic_axis(self) -> int | None:
        """The first tensor axis sharded cyclically, or None."""
        return next((t for t, axes in enumerate(self.shards) if set(axes) & set(self.cyclic)), None)

    @property
    def ndim(self) -> int:
        return len(self.shards)

    @property
    def is_complete(self) -> bool:
        """True when no mesh axis holds addends."""
        return not self.partial

    @classmethod
    def replicated(cls, ndim: int, mesh_rank: int) -> Placement:
        """Every mesh axis replicated."""
        return cls(mesh_rank, ((),) * ndim)

    @classmethod
    def from_dtensor(cls, ndim: int, placements: Sequence[MeshAxisPlacement]) -> Placement:
        """From DTensor's per-mesh-axis list; a tensor axis split twice nests in mesh-axis order."""
        shards: list[list[int]] = [[] for _ in range(ndim)]
        partial = []
        for axis, p in enumerate(placements):
            if isinstance(p, Shard):
                if not 0 <= p.dim < ndim:
                    raise RedistributionError(
                        f"Shard({p.dim}) on mesh axis {axis} of a rank-{ndim} tensor: "
                        f"the tensor axis must be in 0..{ndim - 1}"
                    )
                shards[p.dim].append(axis)
            elif isinstance(p, Partial):
                partial.append(axis)
            elif not isinstance(p, Replicate):
                raise RedistributionError(
                    f"mesh axis {axis} has placement {p!r}: use Shard(i), Replicate() or Partial()"
                )
        return cls(len(placements), tuple(map(tuple, shards)), tuple(partial))

    @classmethod
    def parse(cls, text: str, ndim: int) -> Placement:
        """From the text form, e.g. "(S1,S2,R)", "(P,S0)" or "(S0.1,S0.0)"."""
        items = [s.strip() for s in text.strip().strip("()").split(",")]
        shards: list[list[tuple[int, int]]] = [[] for _ in range(ndim)]
        partial, cyclic, block = [], [], []
        for axis, item in enumerate(items):
            m = re.fullmatch(r"S(\d+)(?:\.(\d+))?|C(\d+)(?:/([1-9]\d*))?", item)
            if item == "P":
                partial.append(axis)
            elif m and int(m[1] or m[3]) < ndim:
                depth = int(m[2]) if m[2] is not None else axis
                shards[int(m[1] or m[3])].append((depth, axis))
                if m[3] is not None:
                    cyclic.append(axis)
                    block.append(int(m[4] or 1))
            elif item != "R":
                raise RedistributionError(
                    f"cannot read placement {text!r} of a rank-{ndim} tensor at {item!r}: each "
                    f"mesh axis is S<t> (t in 0..{ndim - 1}, optionally S<t>.<depth>), C<t> "
                    "(cyclic), C<t>/<b> (block-cyclic, blocks of b), R or P"
                )
        return cls(
            len(items),
            tuple(tuple(a for _, a in sorted(s)) for s in shards),
            tuple(partial),
            tuple(cyclic),
            tuple(block),
        )

    def of_mesh_axis(self, axis: int) -> MeshAxisPlacement:
        """What mesh axis `axis` does: Shard(t), Partial() or Replicate() (a Partial of
        "sum": how the addends combine is the reduction's, not the placement's)."""
        if axis in self.partial:
            return Partial()
        for t, axes in enumerate(self.shards):
            if axis in axes:
                return Shard(t)
        return Replicate()

    def replicated_axes(self) -> tuple[int, ...]:
        """Mesh axes that neither shard nor hold addends."""
        used = {a for axes in self.shards for a in axes} | set(self.partial)
        return tuple(a for a in range(self.mesh_rank) if a not in used)

    def __str__(self) -> str:
        items = []
        for axis in range(self.mesh_rank):
            p = self.of_mesh_axis(axis)
            if isinstance(p, Shard):
                nesting = self.shards[p.dim]
                item = f"{'C' if axis in self.cyclic else 'S'}{p.dim}"
                if axis in self.cyclic and self.block_of(axis) != 1:
                    item += f"/{self.block_of(axis)}"
                if list(nesting) != sorted(nesting):
                    item += f".{nesting.index(axis)}"
                items.append(item)
            else:
                items.append("P" if isinstance(p, Partial) else "R")
        return "(" + ",".join(items) + ")"
