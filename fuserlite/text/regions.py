"""shard_map blocks of the .fus format: a per-device program, read and written as written.

    shard_map m0 (T0 [DIDx], T1 []) -> (T9 [DIDx])
        l2 = all_gather(T0)
        l3 = mul(l2, T1)
        return l3
    end

Inside a block an argument's name means its local value (each device's block, as
its spec says; `T0 [] as l1` calls it l1, for a tensor given twice under two specs);
the statements are op calls and collectives (fuserlite.spmd.collectives) on local values, each
defining new local names; `return`, last, names the results, which the header's
outputs receive as global tensors. A spec lists one mesh axis or `none` per tensor
axis (`[]`: replicated). The writer writes each traced shard_map call
(spmd.trace.regions) this way, in place of the global ops it built.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

from lark import Token, Tree

from fuserlite.ir.errors import FuserliteError, ParseError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import ParallelType
from fuserlite.spmd.collectives import COLLECTIVES
from fuserlite.spmd.shard_map import PartitionSpec, shard_map
from fuserlite.spmd.trace import Region
from fuserlite.text.calls import Arg
from fuserlite.text.source import Source

# -- reading ------------------------------------------------------------------------


@dataclass
class Block:
    """A shard_map block being read: its header and the statements up to `end`."""

    header: Tree
    mesh: DeviceMesh
    statements: list[Tree] = field(default_factory=list)


def spec_of(arg: Arg) -> tuple:
    """A written spec `[DIDx, none]`, `[[dp, tp], none]` (an axis split over two mesh
    axes, the first outermost) as a shard_map spec."""

    def entry(a: Arg) -> object:
        if a.kind == "list" and a.value and all(b.kind == "name" for b in a.value):
            return tuple(b.value for b in a.value)
        if a.kind != "name":
            raise ParseError(
                "a spec lists a mesh axis (DIDx, DIDy, DIDz or its name), a list of them "
                f"([dp, tp]: split over both) or none per axis, got {a.text}"
            )
        return None if a.value == "none" else a.value

    if arg.kind != "list":
        raise ParseError(
            f"a spec is a list of entries, one per axis ([DIDx, none]), got {arg.text}"
        )
    return PartitionSpec(*map(entry, arg.value))


def python_value(arg: Arg) -> object:
    """A written collective argument: names as strings, lists as lists."""
    return [python_value(a) for a in arg.value] if arg.kind == "list" else arg.value


def takes_tensor(op: str) -> bool:
    """True if collective `op` takes a local tensor first (axis_index takes none)."""
    first = next(iter(inspect.signature(COLLECTIVES[op]).parameters.values()), None)
    return first is not None and first.annotation in (TensorView, "TensorView")


def call_collective(
    source: Source, op: str, written: list[Arg], tensor: Callable[[Arg], TensorView]
) -> TensorView:
    """A collective call: its first argument a local tensor (where it takes one), the
    others values; a mistake in a written argument is a ParseError located at it."""
    positional = [a for a in written if a.keyword is None]
    values = [python_value(a) for a in positional]
    if takes_tensor(op):
        if not positional or positional[0].kind != "name":
            raise ParseError(f"{op}: its first argument is a local tensor")
        values[0] = tensor(positional[0])
    keywords: dict[str, object] = {}
    for a in written:
        if a.keyword in keywords:
            raise source.error(f"{op}: argument {a.keyword!r} given twice", a.line, a.column)
        if a.keyword is not None:
            keywords[a.keyword] = python_value(a)
    try:
        return COLLECTIVES[op](*values, **keywords)
    except TypeError as exc:  # arity and keyword names, as Python says them
        raise ParseError(f"{op}: {exc}") from None


# -- writing ------------------------------------------------------------------------


def _spec_text(spec: dict[int, tuple[ParallelType, ...]], mesh: DeviceMesh) -> str:
    """`[DIDx, none]`, `[[dp, tp], none]`: the mesh axes by the user's names where it has them."""

    def axis(pt: ParallelType) -> str:
        return pt.name if mesh.axis_names is None else mesh.axis_names[mesh.axis_of(pt)]

    def entry(pts: tuple[ParallelType, ...]) -> str:
        return axis(pts[0]) if len(pts) == 1 else "[" + ", ".join(map(axis, pts)) + "]"

    n = max(spec, default=-1) + 1
    return "[" + ", ".join(entry(spec[d]) if d in spec else "none" for d in range(n)) + "]"


def _argument_text(value: object) -> str:
    if isinstance(value, ParallelType):
        return value.name
    if isinstance(value, str):  # a mesh axis by the user's name
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_argument_text, value)) + "]"
    return str(value)


def write_region(
    region: Region,
    mesh_name: str,
    body_of: Callable,
    global_name: Callable[[TensorView], str] = lambda t: t.ir_name,
) -> list[str]:
    """The block of one traced shard_map call; body_of(expr, name) writes an op call and
    global_name(tensor) is a global tensor's written name (its T number by default)."""
    trace = region.trace
    names: dict[int, str] = {}
    for t, g in zip(region.local_arguments, region.arguments):
        # A tensor given twice (under two specs) has two local values: the second its own name.
        g_name = global_name(g)
        names[id(t)] = g_name if g_name not in names.values() else f"l{len(names)}"
    for t in trace.local.tensors_created:
        names.setdefault(id(t), f"l{len(names)}")

    def name(t: TensorView) -> str:
        return names[id(t)]

    mesh = trace.mesh
    ins = ", ".join(
        f"{global_name(g)} {_spec_text(s, mesh)}"
        + ("" if name(t) == global_name(g) else f" as {name(t)}")
        for t, g, s in zip(region.local_arguments, region.arguments, region.in_specs)
    )
    outs = ", ".join(
        f"{global_name(g)} {_spec_text(s, mesh)}" for g, s in zip(region.outputs, region.out_specs)
    )
    lines = [f"shard_map {mesh_name} ({ins}) -> ({outs})"]
    for t in trace.local.tensors_created:
        if any(t is a for a in region.local_arguments):
            continue
        if id(t) in trace.calls:
            op, given = trace.calls[id(t)]
            written = [
                name(v) if isinstance(v, TensorView) else f"{k}={_argument_text(v)}"
                for k, v in given.items()
                if v is not None
            ]
            lines.append(f"    {name(t)} = {op}({', '.join(written)})")
        elif t is t.definition.outputs[0]:  # an op with several results: one statement
            op, written = body_of(t.definition, name)
            targets = ", ".join(name(o) for o in t.definition.outputs)
            lines.append(f"    {targets} = {op}({', '.join(written)})")
    lines.append("    return " + ", ".join(name(r) for r in region.results))
    lines.append("end")
    return lines


def run_block(builder, block: Block, end: Tree, to_arg: Callable[[Tree], Arg]) -> None:
    """Trace a read block with fl.shard_map and name its outputs (to_arg: the parser's
    tree -> Arg)."""
    ins, outs = (node.children for node in block.header.children[-2:])
    arguments = [builder._tensor(a.children[0]) for a in ins]

    def spec_at(node: Tree) -> tuple:
        arg = to_arg(node.children[1])
        try:
            return spec_of(arg)
        except ParseError as exc:
            raise builder._fail(str(exc), arg) from None

    in_specs = [spec_at(a) for a in ins]
    out_specs = [spec_at(a) for a in outs]

    # Each argument's local name: the one after `as`, else the tensor's.
    local_names = [a.children[2] if len(a.children) > 2 else a.children[0] for a in ins]
    for k, name in enumerate(local_names):
        if name in local_names[:k]:
            raise builder._fail(
                f"{name!s} names two arguments of this shard_map block; call the second "
                f"by a name of its own: `{ins[k].children[0]!s} [...] as {name!s}_2`",
                name,
            )

    def fn(*local_args: TensorView):
        scope = {str(name): t for name, t in zip(local_names, local_args)}

        def tensor(ref: Token | Arg) -> TensorView:
            key = ref.value if isinstance(ref, Arg) else str(ref)
            if key not in scope:
                raise builder._fail(
                    f"{key!r} is not a local value of this shard_map block: use its arguments "
                    "and what the block computes",
                    ref,
                )
            return scope[key]

        for k, stmt in enumerate(block.statements):
            try:
                if stmt.data == "return_stmt":
                    if k + 1 < len(block.statements):
                        raise builder._at_stmt(
                            block.statements[k + 1],
                            f"the block returns at line {stmt.meta.line}: nothing may follow "
                            "its `return` before `end`",
                        )
                    return tuple(tensor(n) for n in stmt.children)
                targets, op, *written = stmt.children
                out = builder._call(op, written, tensor)
                results = out if isinstance(out, tuple) else (out,)
                names = [t for t in targets.children if isinstance(t, Token)]
                if len(names) != len(results):
                    raise builder._at_stmt(
                        stmt,
                        f"{op!s} returns {len(results)} tensor(s), the statement names {len(names)}",
                    )
                for name in names:  # a local name is defined once, as a global one is
                    if str(name) in scope or names.count(name) > 1:
                        raise builder._fail(
                            f"{name!s} is already a local value of this shard_map block; "
                            "pick a new name",
                            name,
                        )
                for name, t in zip(names, results):  # messages then say `b (T1)`
                    t.user_name = str(name)
                    scope[str(name)] = t
            except ParseError:
                raise
            except FuserliteError as exc:
                raise builder._at_stmt(stmt, str(exc)) from None
        raise builder._at_stmt(end, "a shard_map block needs `return` before `end`")

    try:
        results = shard_map(fn, block.mesh, in_specs, out_specs)(*arguments)
    except ParseError:
        raise
    except FuserliteError as exc:
        raise builder._at_stmt(block.header, str(exc)) from None
    for a, t in zip(outs, results if isinstance(results, tuple) else (results,)):
        key = builder._define(a.children[0])
        t.user_name = key
        builder.tensors[key] = t
