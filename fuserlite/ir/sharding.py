"""Queries on the sharding of a TensorView (IR semantics, no passes).

A sharding is one placement per mesh axis. Each device parallel type names one
mesh axis (DIDx the last, DeviceMesh.axis_of) and is carried by at most one
loop axis: a logical axis whose extent is that mesh axis's size, the outer part
of an outer split of a logical axis by that size, or the outer part of a split
of the inner part of such a split (nested: one tensor axis split over several
mesh axes, the outermost split first; the nesting order is part of the
sharding). A merge with an extent-1 broadcast axis is looked through: the merged
axis is the other axis, in its layout. An extent n that d devices do not divide
gives torch.chunk's chunks, ceil(n/d) rows, the trailing devices short or empty
(fuserlite.plan.blocks). A device-parallel broadcast axis holds no data, so `b` and
`bDIDx` are the same sharding: it is ignored here. A device-parallel reduction axis
(rDIDy) marks partial results over that mesh axis.

`logical_placement(tv)` is the sharding as an `ir.placement.Placement` on the
logical axes (partial mesh axes as shards of their reduction axes); `placement`
is the planner's view on the data axes, with the partial mesh axes as partial.
`schedule.shard.shard_as` applies a placement to a tensor: the one conversion
each way, used by every pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from fuserlite.ir.domain import Merge, Split, TensorDomain, ceil_div
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.mesh import DeviceMesh, parallel_types_of_rank
from fuserlite.ir.placement import Placement
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DEVICE_PARALLEL_TYPES, ParallelType
from fuserlite.ir.values import fact

MeshPlacement = tuple[DeviceMesh | None, Placement]  # a mesh and a placement on logical axes


@dataclass(frozen=True)
class AxisSharding:
    """Which logical axis a device parallel type splits, over which mesh axis, how deep."""

    parallel_type: ParallelType
    logical_index: int  # position in tv.domain.logical
    data_index: int | None  # position among data (non-reduction) axes; None when partial
    num_devices: int  # the size of its mesh axis
    mesh_axis: int = 0
    depth: int = 0  # 0: the outermost split of its logical axis, 1 the next, ...
    cyclic: bool = False  # the inner part of a split by num_devices: rows r, r + d, ...
    block: int = 1  # of a cyclic sharding: rows (k * d + r) * block + j

    @property
    def is_partial(self) -> bool:
        """True for rDIDx: each device holds a partial result over this axis."""
        return self.data_index is None


def sharding_chain(dom: TensorDomain, p: int) -> tuple[int, int, int] | None:
    """(logical origin, depth, the axis split) of device-parallel axis `p` of a domain, as
    positions, or None.

    The axis split is what `p` is the outer part of (the origin itself, or the inner
    part of an enclosing sharding split, or either merged with an extent-1 broadcast
    axis, which the chain looks through, or the outer part of a (block-)cyclic split:
    its periods); `p` itself when it is a logical axis.
    """
    if p < dom.n_logical:
        return p, 0, p
    d = dom.transform_of(p)
    if not (type(d) is Split and p == d.outer):
        return None
    src, depth = d.input, 0
    while src >= dom.n_logical:
        s = dom.transform_of(src)
        if type(s) is Merge and (other := unit_merge_source(dom, s)) is not None:
            src = other  # the merged axis is the other axis, laid out alike
            continue
        if type(s) is Split and src == s.outer and dom.is_cyclic_split(s):
            src = s.input  # chunks of the periods of a (block-)cyclic shard
            continue
        if not (type(s) is Split and src == s.inner and dom.axes[s.outer].is_device_parallel):
            return None
        src, depth = s.input, depth + 1
    return src, depth, d.input


def cyclic_chain(dom: TensorDomain, p: int) -> tuple[int, Split] | None:
    """(logical origin, the split) where device-parallel axis `p` shards a split of a
    logical axis (or of one merged with an extent-1 broadcast axis) cyclically: `p` its
    inner part, device r holding rows r, r + d, r + 2d, ... (nvFuser's inner split), or
    the outer part of a split of its inner part, device r holding blocks of b rows
    (k * d + r) * b + j (TensorDomain.cyclic_device); else None."""
    t = dom.transform_of(p)
    if type(t) is Split and p == t.outer and t.input >= dom.n_logical:
        t = dom.transform_of(t.input)  # block-cyclic: p splits the inner part of t
    if dom.cyclic_device(t) is None or dom.cyclic_device(t)[0] != p:
        return None
    src = t.input
    while src >= dom.n_logical:
        m = dom.transform_of(src)
        if type(m) is not Merge or (other := unit_merge_source(dom, m)) is None:
            return None
        src = other
    return src, t


def unit_merge_source(dom: TensorDomain, m: Merge) -> int | None:
    """The input of merge `m` that is not an extent-1 broadcast axis, where the other is
    (the merged axis holds that input's elements in its order), else None."""
    outer, inner = dom.axes[m.outer], dom.axes[m.inner]
    if inner.is_broadcast and inner.extent == 1 and not outer.is_broadcast:
        return m.outer
    if outer.is_broadcast and outer.extent == 1 and not inner.is_broadcast:
        return m.inner
    return None


def _inside_stream_split(dom: TensorDomain, p: int) -> bool:
    """True where axis `p` descends from the inner part of a split whose outer part is a
    Stream axis."""
    while p >= dom.n_logical:
        t = dom.transform_of(p)
        if type(t) is Split and p == t.inner and dom.axes[t.outer].parallel_type.is_stream:
            return True
        p = t.inputs[0]
    return False


def mesh_axis_text(mesh: DeviceMesh, pt: ParallelType) -> str:
    """'DIDy (mesh axis 0 of DeviceMesh{{0 1}{2 3}}, 2 devices)', 'DIDy (mesh axis 0, dp,
    of ...)' where the user named it."""
    a = mesh.axis_of(pt)
    name = "" if mesh.axis_names is None else f", {mesh.axis_names[a]},"
    return f"{pt.name} (mesh axis {a}{name} of {mesh}, {mesh.shape[a]} devices)"


def sharding_problem(dom: TensorDomain, mesh: DeviceMesh | None, p: int) -> str | None:
    """Why device-parallel axis `p` of a domain on `mesh` is not a valid sharding (None
    if it is)."""
    why = _sharding_problem(dom, mesh, p)
    if why is None or _WHERE not in why:
        return why
    # Meshes alike but for their axis names are equal (one cached answer for both), so
    # the cached text names the mesh axis by a placeholder, filled in with this mesh's.
    return why.replace(_WHERE, mesh_axis_text(mesh, dom.axes[p].parallel_type))


_WHERE = "\0where\0"


@fact
def _sharding_problem(dom: TensorDomain, mesh: DeviceMesh | None, p: int) -> str | None:
    ax = dom.axes[p]
    pt = ax.parallel_type
    if ax.is_broadcast:
        return None
    if mesh is None:
        return f"{pt.value} is used but the tensor has no device mesh; call set_device_mesh"
    if not mesh.has(pt):
        names = ", ".join(q.name for q in mesh.parallel_types)
        return (
            f"{pt.name} is not an axis of {mesh}, whose mesh axes are {names} (DIDx the "
            f"last); use one of those, or a mesh of rank {DEVICE_PARALLEL_TYPES.index(pt) + 1}"
        )
    d = mesh.axis_size(pt)
    chain = sharding_chain(dom, p)
    cyclic = cyclic_chain(dom, p) if chain is None and ax.extent == d else None
    if cyclic is not None:
        return _cyclic_problem(dom, p, d, *cyclic)
    if chain is None:
        if _inside_stream_split(dom, p):
            return (
                f"{pt.value} is inside a Stream split: a device would hold rows of every "
                "chunk, no block; cut the axis for the devices first (outer_split, "
                f"{pt.name}) and the inner part into chunks, or give the chunks an axis of "
                "their own ([S, D, n/(S D)], as nvFuser's AGMatmulTest)"
            )
        return _unheld_form(dom, p, d) + (
            f"; {pt.value} must be on a logical axis, on the outer part of a split of one, or "
            "on the outer part of a split of the inner part of such a sharding split"
        )
    origin, _, split = chain
    inner = None if p == split else dom.axes[dom.transform_of(p).inner]
    split_extent = dom.axes[split].extent
    periods = dom.transform_of(split) if split >= dom.n_logical else None
    if dom.is_cyclic_split(periods) and split == periods.outer and split_extent % d:
        return (
            f"it shards the {split_extent} periods of a cyclic shard of axis {origin} "
            f"(the outer part of its split), which {d} devices do not divide: give that part "
            f"a multiple of {d} periods, or outer_split the axis itself by {d} and "
            "parallelize the outer part"
        )
    if _fits(ax.extent, split_extent, None if inner is None else inner.extent, d):
        return None
    where = _WHERE
    if ax.extent != d:
        fix = (
            f"outer_split the axis by {d} and parallelize the outer part"
            if split == p
            else f"outer_split by {d}, the size of that mesh axis"
        )
        return f"{pt.value} axis has extent {ax.extent} but {where} has {d} devices; {fix}"
    if inner is not None and inner.extent != ceil_div(split_extent, d):
        # Device i holds torch.chunk's rows [i*c, min((i+1)*c, n)), c = ceil(n/d): an
        # inner split by another factor would give the devices chunks of another size.
        whole = "the sharded axis" if split == origin else "the part of the axis it splits"
        return (
            f"{whole} has extent {split_extent}, split into chunks of {inner.extent} for the "
            f"{d} devices of {where}; chunks are ceil({split_extent}/{d}) = "
            f"{ceil_div(split_extent, d)} rows (torch.chunk): use an outer split by {d}"
        )
    return None


def _cyclic_problem(dom: TensorDomain, p: int, d: int, origin: int, t: Split) -> str | None:
    """Why a device axis `p`, the inner part of split `t` of logical axis `origin`, is not
    a cyclic shard over d devices (None where it is)."""
    if dom.axes[p].extent != d:
        return "it is the inner part of a split, what one device holds; parallelize the outer part"
    _, b = dom.cyclic_device(t)
    if p != t.inner:  # block-cyclic: p is the outer part of split s of t's inner part
        s = dom.transform_of(p)
        i, n = dom.axes[t.inner].extent, dom.axes[t.input].extent
        if b == 1:
            return (
                f"it splits the inner part of a split by {d} into blocks of one row: write "
                f"the cyclic shard as split(axis, {d}) with {dom.axes[p].parallel_type.value} "
                f"on the inner part (device i holds rows i, i + {d}, ...)"
            )
        if not dom.divisible(s):
            return (
                f"it splits a part of extent {i} that {d} devices do not divide into blocks "
                f"of one size: make that part (the inner part of the split of axis {origin}) a "
                f"multiple of {d}, or outer_split the axis by {d} and parallelize the outer part"
            )
        if not dom.divisible(t):
            return (
                f"it shards axis {origin} block-cyclically (device i holds blocks of {b} rows "
                f"spaced {d * b} apart), but its {n} rows are no whole number of blocks per "
                f"device ({n} is not a multiple of {d} x {b}): give the axis a multiple of "
                f"{d * b} rows, or outer_split it by {d} and parallelize the outer part"
            )
    elif not t.inner_split:
        return (
            f"it is the inner part of an outer split by {t.factor}, not of a split by {d}: "
            f"write the cyclic shard as split(axis, {d}) (device i then holds rows i, "
            f"i + {d}, ...), or outer_split the axis by {d} and parallelize the outer part"
        )
    if dom.logical[origin].is_reduction:
        return (
            "it shards a reduction axis cyclically (partial sums of rows i, i + "
            f"{d}, ...), which fuserlite does not hold: outer_split the reduction axis by {d} "
            "and parallelize the outer part"
        )
    others = [
        q
        for q in dom.loop_positions
        if q != p
        and dom.axes[q].is_device_parallel
        and not dom.axes[q].is_broadcast
        and _origin_of(dom, q) == origin
        and (sharding_chain(dom, q) or (None, None, None))[2] != t.outer  # chunks periods
    ]
    if others:
        return (
            f"axis {origin} is sharded cyclically here and by {dom.axes[others[0]].parallel_type.value}"
            " too: a cyclic shard's other mesh axes chunk its periods (the outer part of its "
            "split); shard it over one mesh axis, or outer_split that outer part for the others"
        )
    return None


def _origin_of(dom: TensorDomain, q: int) -> int | None:
    """The logical axis device axis `q` shards (as a sharding or a cyclic shard), or None."""
    chain = sharding_chain(dom, q)
    if chain is not None:
        return chain[0]
    cyclic = cyclic_chain(dom, q)
    return None if cyclic is None else cyclic[0]


def _unheld_form(dom: TensorDomain, p: int, d: int) -> str:
    """What device axis `p` is, where it is none of the shardings fuserlite holds (each
    device a contiguous chunk, torch.chunk's rows), and the schedule that is."""
    t = dom.transform_of(p)
    if type(t) is Split and p == t.inner and dom.axes[p].extent != d:
        return "it is the inner part of a split, what one device holds; parallelize the outer part"
    if type(t) is Split and p == t.inner:
        return (
            "it is the inner part of a split of a part of an axis that a split made, not "
            "of the axis itself: fuserlite holds a cyclic shard (device i: rows i, i + "
            f"{d}, ...) only as the inner part of a split of a logical axis by {d}; split "
            f"the logical axis itself by {d}, or outer_split it by {d} and parallelize the "
            "outer part"
        )
    if type(t) is Split and type(dom.transform_of(t.input)) is not Split:
        src = t.input
        while type(m := dom.transform_of(src)) is Merge and unit_merge_source(dom, m) is not None:
            src = unit_merge_source(dom, m)  # merged with an extent-1 broadcast: looked through
        if type(m) is not Split:
            t = m  # the outer part of a split of a merged axis
    if type(t) is Split:
        return (
            "it splits a part of an axis that a split made, not the axis itself: its "
            "chunks are not torch.chunk's rows of the axis (nvFuser pads the part first); "
            f"outer_split the axis by {d} and parallelize the outer part first, then split "
            "the inner part as you like"
        )
    if t is not None:
        bcast = [a for a in t.inputs if dom.axes[a].is_broadcast]
        why = (
            f"it is a merge with a broadcast axis of extent {dom.axes[bcast[0]].extent}, "
            "which holds no data (b and bDIDx are one sharding): shard the other axis "
            "before the merge, or leave the broadcast out of it"
            if bcast
            else "it is a merge of axes, whose chunks fuserlite does not hold: shard the "
            "outer axis before merging (outer_split it, parallelize the outer part)"
        )
        return why
    return "parallelize before further splits"


def _fits(extent: int, split_extent: int, inner_extent: int | None, d: int) -> bool:
    """True when a device axis of `extent` over d devices is a valid sharding of the
    axis of `split_extent` it splits (its inner part, if any, holding ceil(n/d) rows)."""
    return extent == d and (inner_extent is None or inner_extent == ceil_div(split_extent, d))


# -- the facts of a tensor's layout: a function of its domain and its mesh's shape --
@dataclass(frozen=True, eq=False)
class _Facts:
    """What the sharding queries answer for one (domain, mesh shape) (read only)."""

    shardings: Mapping[ParallelType, AxisSharding]
    logical: Placement  # logical_placement
    placement: Placement
    local_shape: tuple[int, ...]
    uneven: bool
    data: tuple[int, ...]  # the positions of the data (non-reduction) logical axes


@fact
def layout_facts(dom: TensorDomain, mesh_shape: tuple[int, ...] | None) -> _Facts:
    """The sharding of a domain on a mesh of `mesh_shape` (None: no mesh)."""
    logical = dom.logical
    data = dom.data_positions()
    data_pos = {i: k for k, i in enumerate(data)}
    types = parallel_types_of_rank(len(mesh_shape)) if mesh_shape is not None else ()
    out: dict[ParallelType, AxisSharding] = {}
    uneven = False
    for p in dom.loop_positions:
        ax = dom.axes[p]
        pt = ax.parallel_type
        if not ax.is_device_parallel or ax.is_broadcast or pt not in types:
            continue
        chain = sharding_chain(dom, p)
        if chain is None:
            cyclic = cyclic_chain(dom, p)
            d = mesh_shape[types.index(pt)]
            if cyclic is not None and _cyclic_problem(dom, p, d, *cyclic) is None:
                li, t = cyclic
                b = dom.cyclic_device(t)[1]
                mesh_axis = types.index(pt)
                out[pt] = AxisSharding(pt, li, data_pos.get(li), d, mesh_axis, 0, True, b)
                uneven = uneven or dom.axes[t.input].extent % d != 0
            continue  # no logical axis: not a sharding
        li, depth, split = chain
        inner = None if p == split else dom.axes[dom.transform_of(p).inner].extent
        split_extent = dom.axes[split].extent
        mesh_axis = types.index(pt)
        d = mesh_shape[mesh_axis]
        if _fits(ax.extent, split_extent, inner, d):
            out[pt] = AxisSharding(pt, li, data_pos.get(li), d, mesh_axis, depth)
            uneven = uneven or (not ax.is_reduction and split_extent % d != 0)
    shape = [logical[i].extent for i in data]
    nest: dict[int, list[AxisSharding]] = {}
    for a in out.values():
        if a.data_index is not None:  # nested: ceil(ceil(n/a)/b) = ceil(n/(a*b))
            shape[a.data_index] = ceil_div(shape[a.data_index], a.num_devices)
        nest.setdefault(a.logical_index, []).append(a)
    shards: list[tuple[int, ...]] = [()] * len(logical)
    for li, ss in nest.items():
        shards[li] = tuple(a.mesh_axis for a in sorted(ss, key=lambda a: (a.cyclic, a.depth)))
    rank = len(mesh_shape) if mesh_shape is not None else 1
    cyclic = sorted((a.mesh_axis, a.block) for a in out.values() if a.cyclic)
    logical_placed = Placement(
        rank, tuple(shards), (), tuple(a for a, _ in cyclic), tuple(b for _, b in cyclic)
    )
    return _Facts(
        MappingProxyType(out),
        logical_placed,
        planner_view(logical_placed, data),
        tuple(shape),
        uneven,
        tuple(data),
    )


def planner_view(logical: Placement, data: Sequence[int]) -> Placement:
    """A placement on a tensor's logical axes as the planner sees it: the shards of its
    data axes (logical positions `data`), the mesh axes of its reduction axes as partial."""
    data_set = set(data)
    partial = sorted(
        a for li, axes in enumerate(logical.shards) if li not in data_set for a in axes
    )
    return logical.keeping(tuple(logical.shards[li] for li in data), tuple(partial))


def _facts(tv: TensorView) -> _Facts:
    mesh = tv.mesh
    return layout_facts(tv.domain, None if mesh is None else mesh.shape)


def data_positions(tv: TensorView) -> tuple[int, ...]:
    """tv.data_positions() as a tuple (the axis maps of pointwise ops read it for every
    operand)."""
    return tv.domain.data_positions()


def shardings(tv: TensorView) -> Mapping[ParallelType, AxisSharding]:
    """The valid device shardings of a tensor (broadcast DIDs ignored; read-only)."""
    return _facts(tv).shardings


def sharded_data_axis(tv: TensorView, pt: ParallelType = ParallelType.DIDx) -> int | None:
    """Index of the data axis sharded by `pt`, or None if replicated or partial."""
    s = shardings(tv).get(pt)
    return None if s is None else s.data_index


def is_partial(tv: TensorView) -> bool:
    """True if the tensor holds partial results over a device-parallel reduction axis."""
    return any(s.is_partial for s in shardings(tv).values())


def local_shape(tv: TensorView) -> tuple[int, ...]:
    """Shape of the buffer one device allocates for its shard: a sharded extent n over d
    devices is ceil(n/d), the inner extent of its split (as nvFuser allocates it); a
    device's own rows, fewer on trailing devices where d does not divide n, are
    fuserlite.program.shards.device_shape's."""
    return _facts(tv).local_shape


def is_uneven(tv: TensorView) -> bool:
    """True when a mesh axis does not divide the extent it splits (the logical axis, or
    the chunk of an outer sharding): trailing devices hold fewer rows than the
    ceil(n/d) every device allocates."""
    return _facts(tv).uneven


def local_nbytes(tv: TensorView) -> int:
    """Bytes of the buffer one device allocates for its shard (see local_shape)."""
    return math.prod(local_shape(tv)) * tv.dtype.itemsize


def same_sharding(a: TensorView, b: TensorView) -> bool:
    """Same mesh and the same placement on every mesh axis (b == bDIDx)."""
    return a.mesh == b.mesh and placement(a) == placement(b)


def _nestings(tv: TensorView) -> dict[int, tuple[AxisSharding, ...]]:
    """{logical axis: its shardings, outermost first}."""
    by_axis: dict[int, list[AxisSharding]] = {}
    for s in shardings(tv).values():
        by_axis.setdefault(s.logical_index, []).append(s)
    return {li: tuple(sorted(ss, key=lambda s: (s.cyclic, s.depth))) for li, ss in by_axis.items()}


def describe_sharding(tv: TensorView) -> str:
    """`T3 on DeviceMesh{0 1}, sharded on axis 0 (deviceIdx.x)`, `replicated`, or `partial`."""
    where = f"{tv.name} on {tv.mesh}" if tv.mesh is not None else f"{tv.name} (no mesh)"
    parts = []
    for li, nest in sorted(_nestings(tv).items()):
        types = ", then ".join(s.parallel_type.value for s in nest)
        if nest[0].is_partial:
            parts.append(f"partial sums over reduction axis {li} ({types})")
        elif nest[-1].cyclic:  # the innermost: the outer ones chunk its periods
            c = nest[-1]
            d, b = c.num_devices, c.block
            rows = (
                f"rows i, i + {d}, ..."
                if b == 1
                else f"blocks of {b} rows, rows i*{b} to i*{b} + {b - 1}, then those + {d * b}, ..."
            )
            how = "block-cyclically" if b > 1 else "cyclically"
            parts.append(f"sharded {how} on axis {c.data_index} ({types}: device i holds {rows})")
        else:
            parts.append(f"sharded on axis {nest[0].data_index} ({types})")
    text = f"{where}, " + (", ".join(parts) if parts else "replicated")
    if tv.mesh is not None and tv.mesh.rank > 1:
        text += f", placement {placement(tv)}"
    return text


# -- placements: where a tensor's values are ---------------------------------------
def logical_placement(tv: TensorView) -> Placement:
    """The sharding on tv's logical axes: each axis's mesh axes, outer to inner (partial
    mesh axes as shards of their reduction axes)."""
    return _facts(tv).logical


def placement(tv: TensorView) -> Placement:
    """The planner's view: shards on tv's data axes, partial mesh axes as `partial`."""
    return _facts(tv).placement


def mesh_placement(tv: TensorView) -> MeshPlacement:
    """tv's mesh and logical placement."""
    return tv.mesh, logical_placement(tv)


def completed_placement(tv: TensorView) -> MeshPlacement:
    """tv's mesh and logical placement once its partial values are reduced: its data
    shardings only."""
    logical = logical_placement(tv)
    data = set(tv.data_positions())
    shards = tuple(axes if li in data else () for li, axes in enumerate(logical.shards))
    return tv.mesh, logical.keeping(shards)


def on_data_axes(tv: TensorView, wanted: MeshPlacement) -> MeshPlacement:
    """A placement on tv's logical axes as one on its data axes (the logical axes of a
    copy of tv, which has no reduction axes); shards of reduction axes are dropped."""
    mesh, p = wanted
    return mesh, p.keeping(tuple(p.shards[li] for li in tv.data_positions()))


def is_resharding(expr: Expr) -> bool:
    """A Set whose input and output are sharded differently (b == bDIDx)."""
    return isinstance(expr, LoadStoreOp) and not same_sharding(expr.input, expr.output)
