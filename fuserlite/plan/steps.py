"""Steps of a redistribution on one mesh, and what each one costs.

A step is one collective over the teams of a group G of mesh axes (one axis,
or several flattened, ordered outer -> inner: a device's rank in its team is
its G coordinates read outer first), or a local slice:

| step | before -> after | bytes sent per device |
|---|---|---|
| LocalSlice(G, t) | G replicated -> G innermost sharding of tensor axis t | 0 |
| Allgather(G, t) | G innermost sharding of t -> G replicated | (D-1) * B_local |
| AllToAll(G, t -> u) | G innermost of t -> G innermost of u | (D-1)/D * B_local |
| Allreduce(G) | partial over G -> replicated | 2(D-1)/D * B_local |
| ReduceScatter(G, t) | partial over G -> G innermost sharding of t | (D-1)/D * B_local |

D is the team size (the product of G's axis sizes) and B_local the bytes a
device holds before the step; these are the ring algorithms' counts. On a 1-D
mesh B_local is B/D for a sharded tensor and B for a partial one, which gives
docs/design.md §5: Allgather (D-1)/D * B, AllToAll (D-1)/D^2 * B, Allreduce
2(D-1)/D * B_out, ReduceScatter (D-1)/D * B_in_local. An Allreduce whose
elements D does not divide sends the ring's padded chunks, 2(D-1) * ceil(n/D)
elements. An extent its mesh axes do not divide is chunked as torch.chunk does
(plan.blocks); B_local is then the largest chunk's, ceil(n/D) rows (`local_shape`):
a plan's bytes are those of padded collectives, at most the padding over the even
bound (lower-communications may run a step variable-size instead).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from fuserlite.ir.errors import RedistributionError
from fuserlite.plan.mesh_axes import (
    Group,
    MeshShape,
    groups,
    integers,
    mesh_shape,
    team_name,
    team_size,
)
from fuserlite.plan.placement import Placement


class StepKind(str, Enum):
    """What a step (or a move between meshes) does; the value is the printed name. The
    program level's CommKind is this enum: a Communication is one planner step."""

    Allgather = "Allgather"
    AllToAll = "AllToAll"
    Allreduce = "Allreduce"
    ReduceScatter = "ReduceScatter"
    Broadcast = "Broadcast"
    Scatter = "Scatter"
    Gather = "Gather"
    Reduce = "Reduce"
    SendRecv = "SendRecv"
    # One block from each device to one other along a sharded axis (XLA's
    # collective-permute): a take of whole chunks, lowered to point-to-point transfers.
    CollectivePermute = "CollectivePermute"
    LocalSlice = "LocalSlice"

    @property
    def is_collective(self) -> bool:
        """False for LocalSlice, which moves no data."""
        return self is not StepKind.LocalSlice

    @property
    def is_allreduce_class(self) -> bool:
        """Collectives a backend implements with an all-reduce (their layouts must agree)."""
        return self in (StepKind.Allreduce, StepKind.ReduceScatter, StepKind.Reduce)

    @property
    def has_root(self) -> bool:
        return self in (StepKind.Broadcast, StepKind.Scatter, StepKind.Gather, StepKind.Reduce)


# The kinds a step on one mesh is (every other kind moves between meshes or permutes).
ONE_MESH_KINDS = (
    StepKind.LocalSlice,
    StepKind.Allgather,
    StepKind.AllToAll,
    StepKind.Allreduce,
    StepKind.ReduceScatter,
)

# The order plans are compared in on ties: a local slice first, then the collectives.
_ORDER = {
    k: i
    for i, k in enumerate(
        [StepKind.LocalSlice, *(k for k in StepKind if k is not StepKind.LocalSlice)]
    )
}


@dataclass(frozen=True)
class Step:
    """One collective over the teams of `group` (or a local slice) on a placement."""

    kind: StepKind
    group: Group
    axis: int | None = None  # tensor axis sliced, gathered, reduce-scattered onto, or moved from
    to_axis: int | None = None  # AllToAll only: the tensor axis the group moves to

    def sort_key(self) -> tuple[int, Group, int, int]:
        """A total order on steps, for deterministic tie-breaking."""
        return (_ORDER[self.kind], self.group, _or(self.axis), _or(self.to_axis))

    def apply(self, p: Placement) -> Placement | None:
        """The placement after this step, or None where it does not apply to `p`."""
        g, shards = self.group, [list(axes) for axes in p.shards]
        k, t = self.kind, self.axis
        if k is StepKind.LocalSlice:
            if not set(g) <= set(p.replicated_axes()):
                return None
            shards[t] += g
            return Placement(p.mesh_rank, tuple(map(tuple, shards)), p.partial)
        if k in (StepKind.Allgather, StepKind.AllToAll):
            if not _innermost(shards[t], g) or t == self.to_axis:
                return None
            del shards[t][len(shards[t]) - len(g) :]
            if k is StepKind.AllToAll:
                shards[self.to_axis] += g
            return Placement(p.mesh_rank, tuple(map(tuple, shards)), p.partial)
        if not set(g) <= set(p.partial):
            return None
        rest = tuple(a for a in p.partial if a not in g)
        if k is StepKind.Allreduce:
            # one collective, whatever the order of its axes: only the sorted group is a step
            return Placement(p.mesh_rank, p.shards, rest) if list(g) == sorted(g) else None
        shards[t] += g
        return Placement(p.mesh_rank, tuple(map(tuple, shards)), rest)

    def describe(self, mesh_rank: int, labels: Sequence[str] | None = None) -> str:
        """'AllToAll S1->S2 on DIDx teams', 'Allreduce on (DIDy, DIDx) teams' (the mesh axes
        called by `labels` where given, plan.mesh_axes.team_name)."""
        what = {
            StepKind.LocalSlice: f" R->S{self.axis}",
            StepKind.Allgather: f" S{self.axis}->R",
            StepKind.AllToAll: f" S{self.axis}->S{self.to_axis}",
            StepKind.ReduceScatter: f" P->S{self.axis}",
        }.get(self.kind, "")
        return f"{self.kind.value}{what} on {team_name(mesh_rank, self.group, labels)}"


def _innermost(axes: Sequence[int], g: Group) -> bool:
    """True when `g` is the innermost part of the nesting `axes`."""
    return len(g) <= len(axes) and tuple(axes[len(axes) - len(g) :]) == g


def _or(axis: int | None) -> int:
    return -1 if axis is None else axis


def moves(p: Placement) -> Iterator[Step]:
    """Every step that applies to `p` (the planner's neighbours of a state)."""
    ndim, free = p.ndim, p.replicated_axes()
    for n in range(1, len(free) + 1):
        for g in itertools.permutations(free, n):
            for t in range(ndim):
                yield Step(StepKind.LocalSlice, g, t)
    for t, axes in enumerate(p.shards):
        for n in range(1, len(axes) + 1):
            g = axes[len(axes) - n :]
            yield Step(StepKind.Allgather, g, t)
            for u in range(ndim):
                if u != t:
                    yield Step(StepKind.AllToAll, g, t, u)
    for n in range(1, len(p.partial) + 1):
        for subset in itertools.combinations(p.partial, n):
            yield Step(StepKind.Allreduce, subset)
            for g in itertools.permutations(subset):
                for t in range(ndim):
                    yield Step(StepKind.ReduceScatter, g, t)


def catalog(ndim: int, mesh_rank: int) -> list[Step]:
    """Every step of every kind on every group and tensor axis, applicable or not."""
    out = []
    for g in groups(mesh_rank):
        out.append(Step(StepKind.Allreduce, g))
        for t in range(ndim):
            out += [Step(k, g, t) for k in _ONE_AXIS]
            out += [Step(StepKind.AllToAll, g, t, u) for u in range(ndim) if u != t]
    return out


_ONE_AXIS = (StepKind.LocalSlice, StepKind.Allgather, StepKind.ReduceScatter)


def local_shape(shape: Sequence[int], mesh: MeshShape, p: Placement) -> tuple[int, ...]:
    """The local extents every device allocates under `p`: ceil(n/d) of an axis split d
    ways (torch.chunk's chunk size, plan.blocks; trailing devices hold fewer rows)."""
    return tuple(-(-n // math.prod(mesh[a] for a in axes)) for n, axes in zip(shape, p.shards))


def step_bytes(
    step: Step, local_elements: int, itemsize: int, mesh: MeshShape, part: int | None = None
) -> int:
    """Bytes each device sends in `step`, holding `local_elements` before it (ring counts);
    `part`: the elements of the part each member receives in an AllToAll or ReduceScatter
    (n/D where D divides; the largest, padded part where it does not)."""
    d, n = team_size(mesh, step.group), local_elements
    part = n // d if part is None else part
    sent = {
        StepKind.LocalSlice: 0,
        StepKind.Allgather: (d - 1) * n,
        StepKind.AllToAll: (d - 1) * part,
        StepKind.Allreduce: 2 * (d - 1) * -(-n // d),
        StepKind.ReduceScatter: (d - 1) * part,
    }[step.kind]
    return sent * itemsize


@dataclass(frozen=True)
class Geometry:
    """What a redistribution is about: the global shape, the element size and the mesh."""

    shape: tuple[int, ...]
    itemsize: int
    mesh: MeshShape

    @classmethod
    def checked(cls, shape: Sequence[int], itemsize: int, mesh: Sequence[int]) -> Geometry:
        """The geometry of a planning question (the planner's and the brute force's), or a
        RedistributionError saying which argument is wrong: the extents non-negative
        integers (numpy's too), the element size a positive one, the mesh a mesh shape."""
        extents, size = integers(shape), integers([itemsize])
        if extents is None or size is None or any(n < 0 for n in extents) or size[0] < 1:
            raise RedistributionError(
                f"a redistribution needs non-negative extents and a positive element size, "
                f"got shape {shape!r} and itemsize {itemsize!r}"
            )
        return cls(extents, size[0], mesh_shape(mesh))

    def local_elements(self, p: Placement) -> int:
        """Elements the largest chunk under `p` holds (what every device allocates)."""
        return math.prod(local_shape(self.shape, self.mesh, p))

    def cost(self, step: Step, before: Placement) -> int:
        """Bytes each device sends in `step` from `before`."""
        part = None
        if step.kind in (StepKind.AllToAll, StepKind.ReduceScatter):
            after = local_shape(self.shape, self.mesh, step.apply(before))
            local = list(local_shape(self.shape, self.mesh, before))
            cut = step.to_axis if step.kind is StepKind.AllToAll else step.axis
            local[cut] = after[cut]  # one member's part: the largest chunk of the cut axis
            part = math.prod(local)
        return step_bytes(step, self.local_elements(before), self.itemsize, self.mesh, part)

    def transition(self, step: Step, before: Placement) -> tuple[Placement, int] | None:
        """The placement after `step` and its bytes, or None where it does not apply here."""
        after = step.apply(before)
        if after is None:
            return None
        return after, self.cost(step, before)

    def what(self) -> str:
        """'a [8, 8, 16] tensor of 4-byte elements on a 2x4 mesh'."""
        mesh = "x".join(map(str, self.mesh))
        return f"a {list(self.shape)} tensor of {self.itemsize}-byte elements on a {mesh} mesh"

    def check(self, p: Placement, role: str, pair: str) -> None:
        """Raise a RedistributionError naming `pair` unless `p` fits this tensor and mesh."""
        if p.ndim != len(self.shape) or p.mesh_rank != len(self.mesh):
            raise RedistributionError(
                f"cannot redistribute {self.what()} {pair}: the {role} {p} is for a rank-"
                f"{p.ndim} tensor on a rank-{p.mesh_rank} mesh"
            )
