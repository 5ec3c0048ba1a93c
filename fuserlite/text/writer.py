"""Writer of the .fus text format: Fusion in, text out; `parse(to_fus(f))` prints as `f`.

Tensors are written in creation order under their printed names (T0, T1, ...),
so the re-parsed fusion numbers its tensors and IterDomains the same way. Each
tensor's transforms are replayed in the order they were applied, at the loop
positions they had then; a final `reorder` restores the loop order, and parallel
types are given last (or just before a transform consumes the axis). A tensor
whose schedule is exactly its sharding, as `fl.distribute` writes it, is one
`place T0 on m0 (S0, R)` line instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from fuserlite.ir import args
from fuserlite.ir.domain import Split, Swizzle1D
from fuserlite.ir.errors import FusionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import logical_placement, placement
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import IterType, MemoryType, ParallelType
from fuserlite.ops.common import new_axis
from fuserlite.ops.registry import Param
from fuserlite.schedule.shard import shard_as
from fuserlite.spmd.trace import regions
from fuserlite.text.parser import reserved_words
from fuserlite.text.regions import write_region


def _cannot(tv: TensorView, why: str) -> FusionError:
    return FusionError(f"to_fus: {tv.name} {why}; the .fus format cannot express it")


def _scalar(value: bool | int | float) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int) else repr(float(value))


def _list(values) -> str:
    return "[" + ", ".join(_scalar(v) for v in values) + "]"


def _nested(values: list) -> str:
    """A (nested) list of integers as .fus text: `[0, 1]`, `[[0, 1], [2, 3]]`."""
    if values and isinstance(values[0], list):
        return "[" + ", ".join(_nested(v) for v in values) + "]"
    return _list(values)


def _ir_name(tv: TensorView) -> str:
    return tv.ir_name


def _value(kind: str, value: object, name: Callable[[TensorView], str] = _ir_name) -> str:
    """One argument as .fus text (a tensor by `name`)."""
    if isinstance(value, TensorView):
        return name(value)
    if kind == "tensors":
        return "[" + ", ".join(name(t) for t in value) + "]"
    if kind in ("ints", "bools", "axes"):
        return _list(value)
    if kind == "dtype":
        return value.name
    return str(value) if kind == "ident" else _scalar(value)


def read_argument(param: Param, expr: Expr, values: dict[str, object]) -> object:
    """The value of the builder's parameter `param` that makes `expr` (`values`: the
    OpDef's values of it); None for an optional one left out."""
    return param.read(expr) if param.read is not None else values.get(param.name)


def _args(expr: Expr, name: Callable[[TensorView], str] = _ir_name) -> tuple[str, list[str]]:
    """The builder name and written arguments of one expression: its op's parameters
    in order, each read back from the expression; after a parameter left out, the
    rest are written as keywords."""
    d = expr.op_def
    if d is None:
        raise _cannot(expr.output, f"is defined by a {type(expr).__name__}")
    values = d.values(expr)
    written: list[str] = []
    skipped = False
    for param in d.params:
        value = read_argument(param, expr, values)
        if value is None:
            skipped = True
            continue
        text = _value(param.kind, value, name)
        written.append(f"{param.name}={text}" if param.keyword or skipped else text)
    return d.name, written


def _call(tv: TensorView, written: set[int], name: Callable[[TensorView], str]) -> str | None:
    """`T3 = op(...)`, or `T3, T4 = op(...)` at the first of several outputs (None at
    the others: the call is written)."""
    expr = tv.definition
    if tv is not expr.outputs[0]:
        return None
    late = [t.name for t in expr.inputs if id(t) not in written]
    if late:
        raise _cannot(tv, f"reads {', '.join(late)}, created after it")
    op, args = _args(expr, name)
    return f"{', '.join(name(t) for t in expr.outputs)} = {op}({', '.join(args)})"


def _declaration(
    tv: TensorView, keyword: str, meshes: dict[DeviceMesh, str], name: str | None = None
) -> str:
    logical = tv.domain.logical
    if any(
        ax.iter_type is not (IterType.BROADCAST if ax.extent == 1 else IterType.ITERATION)
        for ax in logical
    ):
        raise _cannot(tv, "has no definition but axes that `input` would not create")
    contiguous = all(c is not False for c in tv.domain.contiguity)
    wanted = [None if ax.is_broadcast else contiguous for ax in logical]
    if list(tv.domain.contiguity) != wanted:
        raise _cannot(tv, f"has contiguity {list(tv.domain.contiguity)}")
    shape = ", ".join(str(ax.extent) for ax in logical)
    text = f"{keyword} {name or tv.ir_name}: {tv.dtype.name}[{shape}]"
    text += "" if contiguous else " noncontiguous"
    return text + (f" on {meshes[tv.mesh]}" if tv.mesh is not None else "")


def _check(tv: TensorView) -> None:
    """Reject what parse could not rebuild: lowering and scheduling state beyond the format."""
    fusion = tv.fusion
    io = tv in fusion.inputs or tv in fusion.outputs
    if tv.memory_type is not (MemoryType.GLOBAL if io else MemoryType.LOCAL):
        raise _cannot(tv, f"has memory type {tv.memory_type.name}")
    if tv.domain.allocation is not None:
        raise _cannot(tv, "has an allocation domain")
    if tv.compute_at_pos or tv.produce_pos:
        raise _cannot(tv, "has a compute-at or produce position")
    if tv.definition is not None:
        default = [True if ax.is_iteration else None for ax in tv.domain.logical]
        if list(tv.domain.contiguity) != default:
            raise _cannot(tv, f"has contiguity {list(tv.domain.contiguity)}")


def _parallelize(tv: TensorView, name: str, pos: int, p: int) -> list[str]:
    pt = tv.domain.axes[p].parallel_type
    if pt is ParallelType.Serial:
        return []
    return [f"parallelize {name} axis {pos} {pt.name}"]


def _placed(tv: TensorView, mesh_name: str, name: str) -> str | None:
    """`place T0 on m0 (S0, R)` where that line (fl.distribute) rebuilds tv's transforms
    and parallel types exactly, else None: tv is sharded, and sharding an unscheduled
    copy of it by its placement writes the directives tv's own schedule needs."""
    p, logical = placement(tv), logical_placement(tv)
    reductions = sum(ax.is_reduction for ax in tv.domain.logical)
    if not any(logical.shards) or (p.partial and reductions != 1) or p.cyclic:
        return None  # a cyclic shard is no DTensor placement: its directives say it
    probe = TensorView(Fusion(), [new_axis(ax.extent, ax.iter_type) for ax in tv.domain.logical])
    shard_as(probe, tv.mesh, logical)
    if _schedule(probe, tv.ir_name) != _schedule(tv):
        return None
    return f"place {name} on {mesh_name} ({str(p)[1:-1].replace(',', ', ')})"


def _schedule(tv: TensorView, name: str | None = None) -> list[str]:
    """Directives that rebuild tv's transforms, loop order and parallel types (written for
    the tensor called `name`, tv's own by default; an axis is its position in tv's
    domain, `loop` the loop domain as the directives build it)."""
    name = tv.ir_name if name is None else name
    dom = tv.domain
    loop = list(range(dom.n_logical))

    def pos(p: int) -> int:
        if p not in loop:
            raise _cannot(tv, "has transforms that do not start from its logical domain")
        return loop.index(p)

    lines: list[str] = []
    for t in dom.transforms:
        for p in t.inputs:  # give the type while the axis is still in the loop domain
            lines += _parallelize(tv, name, pos(p), p)
        if type(t) is Split:
            k = pos(t.input)
            verb = "split" if t.inner_split else "outer_split"
            lines.append(f"{verb} {name} axis {k} by {t.factor}")
            loop[k : k + 1] = [t.outer, t.inner]
        elif type(t) is Swizzle1D:
            k = pos(t.input)
            lines.append(f"swizzle1d {name} axis {k} {t.parallel_type.name}")
            loop[k] = t.output
        else:
            lines.append(f"merge {name} axes {pos(t.outer)} {pos(t.inner)}")
            del loop[pos(t.inner)]  # the merged axis takes the outer axis's place
            loop[pos(t.outer)] = t.output
    if len(loop) != len(dom.loop_positions):
        raise _cannot(tv, "has a loop domain that is not the result of its transforms")
    order = {pos(p): k for k, p in enumerate(dom.loop_positions) if pos(p) != k}
    if order:
        pairs = ", ".join(f"{old}: {new}" for old, new in order.items())
        lines.append(f"reorder {name} {{{pairs}}}")
    # A cyclic shard's device axis first: the mesh axes that chunk its periods are
    # shardings only once it is (the parser checks each directive as it reads it).
    cyclic = {dom.cyclic_device(t)[0] for t in dom.transforms if dom.is_cyclic_split(t)}
    for k, p in sorted(enumerate(dom.loop_positions), key=lambda kp: kp[1] not in cyclic):
        lines += _parallelize(tv, name, k, p)
    return lines


def _mesh_names(fusion: Fusion) -> dict[DeviceMesh, str]:
    meshes: dict[DeviceMesh, str] = {}
    for tv in fusion.tensors_created:
        if tv.mesh is not None and tv.mesh not in meshes:
            meshes[tv.mesh] = f"m{len(meshes)}"
    return meshes


def _axes(mesh: DeviceMesh) -> str:
    """` axes (dp, tp)`: the user's names of the mesh's axes, where it has them."""
    return "" if mesh.axis_names is None else f" axes ({', '.join(mesh.axis_names)})"


def _section(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


_GENERATED = re.compile(r"[Tlm][0-9]+")  # the writer's own names: T3, a local l1, a mesh m0


def _written_names(fusion: Fusion, user_names: bool) -> Callable[[TensorView], str]:
    """Each tensor's name in the text: its T number, or with `user_names` the name its
    user gave it where that name is its alone (not another's, not reserved, not of the
    writer's own forms T3, l1, m0)."""
    if not user_names:
        return _ir_name
    counts: dict[str, int] = {}
    for tv in fusion.tensors_created:
        if tv.user_name is not None:
            counts[tv.user_name] = counts.get(tv.user_name, 0) + 1
    chosen = {
        id(tv): tv.user_name
        for tv in fusion.tensors_created
        if tv.user_name is not None
        and counts[tv.user_name] == 1
        and tv.user_name not in reserved_words()
        and not _GENERATED.fullmatch(tv.user_name)
    }
    return lambda tv: chosen.get(id(tv), tv.ir_name)


def to_fus(fusion: Fusion, *, user_names: bool = False) -> str:
    """The fusion as .fus text that parses back to a fusion printing identically; with
    `user_names`, tensors the user named are written by those names (fc1.weight), so
    the text read back names them so too, else by their T numbers."""
    args.instance(fusion, Fusion, "to_fus", "fusion", "a Fusion")
    user_names = args.boolean(user_names, "to_fus", "user_names")
    name = _written_names(fusion, user_names)
    meshes = _mesh_names(fusion)
    declared = [tv for tv in fusion.tensors_created if tv.definition is None]
    inline = [tv for tv in declared if tv in fusion.inputs] == fusion.inputs
    written: set[int] = set()
    body: list[str] = []
    directives: list[str] = []
    owner = {i: r for r in regions(fusion) for i in r.made}
    for tv in fusion.tensors_created:
        region = owner.pop(id(tv), None)
        if region is not None:  # the shard_map call writes all it made, once
            body += write_region(region, meshes[region.trace.mesh], _args, name)
            written |= region.made
            for i in region.made:
                owner.pop(i, None)
            continue
        if id(tv) in written:
            continue
        _check(tv)
        if tv.definition is None:
            keyword = "input" if inline and tv in fusion.inputs else "tensor"
            body.append(_declaration(tv, keyword, meshes, name(tv)))
        else:
            call = _call(tv, written, name)
            body += [call] if call is not None else []
        written.add(id(tv))
        place = None if tv.mesh is None else _placed(tv, meshes[tv.mesh], name(tv))
        if place is not None:
            directives.append(place)
            continue
        if tv.mesh is not None and tv.definition is not None:
            directives.append(f"set_mesh {name(tv)} {meshes[tv.mesh]}")
        directives += _schedule(tv, name(tv))
    marks = [] if inline else [f"input {name(tv)}" for tv in fusion.inputs]
    marks += [f"output {name(tv)}" for tv in fusion.outputs]
    header = ["# written by fuserlite.to_fus"]
    header += [f"mesh {name} = {_nested(m.tolist())}{_axes(m)}" for m, name in meshes.items()]
    parts = [_section(header), _section(body + marks)]
    if directives:
        parts.append(_section(directives))
    return "\n".join(parts)
