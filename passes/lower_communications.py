"""lower-communications: every resharding Set becomes one Communication (docs/design.md §5).

Before: a Program (segment ran); resharding Sets sit between kernels.
After: each of them is a Communication with its kind, team, root, reduction
op and bytes sent per device; a Set that needs no data movement (replicated to
sharded on one mesh) is a LocalSlice. A reduction of partial sums whose only
use is to be sliced again is one ReduceScatter, not an Allreduce and a slice. A resharding no row of the table covers
raises LoweringError naming the expression and both shardings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.errors import LoweringError
from fuserlite.ir.expr import LoadStoreOp
from fuserlite.ir.sharding import (
    describe_sharding,
    is_partial,
    is_resharding,
    sharded_data_axis,
)
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.sharding import partial_op
from fuserlite.passes.base import Level, Pass, register
from fuserlite.program.communication import CommKind, Communication
from fuserlite.program.program import Kernel, Program, Step


@dataclass(frozen=True)
class Plan:
    kind: CommKind
    team: tuple[int, ...]
    root: int | None
    bytes_per_device: int


def plan_communication(inp: TensorView, out: TensorView) -> Plan:
    """Choose the communication for a resharding Set (the table of docs/design.md §5)."""
    mi, mo = inp.mesh, out.mesh
    if mi is None or mo is None:
        raise LoweringError(
            f"cannot lower a Set between {inp.name} and {out.name}: both need a mesh"
        )
    if mi.rank > 1 or mo.rank > 1:
        raise LoweringError(
            f"cannot lower {out.name} = Set({inp.name}) yet: from {describe_sharding(inp)} to "
            f"{describe_sharding(out)}; N-D meshes lower through the redistribution planner, "
            "which lower-communications does not use yet: use 1-D meshes"
        )
    a_in, a_out = sharded_data_axis(inp), sharded_data_axis(out)
    partial = is_partial(inp)
    b_in, b_out = inp.nbytes, out.nbytes
    if mi == mo:
        d = mi.size
        team = mi.devices
        if partial and a_out is None and not is_partial(out):
            return Plan(CommKind.Allreduce, team, None, 2 * (d - 1) * b_out // d)
        if partial and a_out is not None:
            return Plan(CommKind.ReduceScatter, team, None, (d - 1) * b_out // d)
        if not partial and a_in is None and a_out is not None:
            return Plan(CommKind.LocalSlice, team, None, 0)
        if not partial and a_in is not None and a_out is None:
            return Plan(CommKind.Allgather, team, None, (d - 1) * b_in // d)
        if not partial and a_in is not None and a_out is not None and a_in != a_out:
            return Plan(CommKind.AllToAll, team, None, (d - 1) * b_in // (d * d))
    elif mi.size == 1 and not partial:
        root = mi.devices[0]
        team = mo.devices if root in mo else (root, *mo.devices)
        if a_out is None:
            return Plan(CommKind.Broadcast, team, root, b_in)
        d = mo.size
        kept = b_in // d if root in mo else 0  # a root inside the mesh keeps its chunk
        return Plan(CommKind.Scatter, team, root, b_in - kept)
    elif mo.size == 1 and a_out is None:
        root = mo.devices[0]
        team = mi.devices if root in mi else (*mi.devices, root)
        d = mi.size
        # Every sender but a root inside the source mesh sends its part.
        if partial:
            return Plan(CommKind.Reduce, team, root, b_out)
        if a_in is not None:
            return Plan(CommKind.Gather, team, root, b_in // d)
    if mi != mo and mi.size == mo.size and not partial and a_in == a_out:
        team = tuple(dict.fromkeys(mi.devices + mo.devices))
        per = b_in // mi.size if a_in is not None else b_in
        return Plan(CommKind.SendRecv, team, None, per)
    raise LoweringError(
        f"cannot lower {out.name} = Set({inp.name}): from {describe_sharding(inp)} to "
        f"{describe_sharding(out)}. Lowerable: on one mesh, any change of the sharded axis or "
        "a reduction of partial sums; between meshes, one device to many (Broadcast/Scatter), "
        "many to one device (Gather/Reduce), or equal-size meshes with the same sharding "
        "(SendRecv). Reshard in two steps (e.g. gather on the source mesh first)."
    )


def lower_set(expr: LoadStoreOp) -> Communication:
    """Replace one resharding Set by its Communication in the graph."""
    inp, out = expr.input, expr.output
    plan = plan_communication(inp, out)
    expr.detach()
    reducing = plan.kind.is_allreduce_class
    return Communication(
        plan.kind,
        out,
        inp,
        plan.team,
        root=plan.root,
        op=partial_op(inp) if reducing else None,
        in_axis=sharded_data_axis(inp),
        out_axis=sharded_data_axis(out),
        bytes_per_device=plan.bytes_per_device,
    )


@register
@dataclass(frozen=True)
class LowerCommunications(Pass):
    """Lower every resharding Set to one Communication (or a local slice)."""

    name: ClassVar[str] = "lower-communications"
    level: ClassVar[Level] = Level.program

    def ensures(self, program: Program) -> list[str]:
        return unlowered_steps(program)

    def run(self, program: Program) -> None:
        steps = fuse_reduce_then_slice(program)
        program.steps = [lower_set(s) if is_resharding(s) else s for s in steps]


def fuse_reduce_then_slice(program: Program) -> list[Step]:
    """partial -> replicated (Allreduce) whose only use slices it (LocalSlice) is one
    ReduceScatter: half the bytes, and the replicated tensor is never built."""
    dropped: set[int] = set()
    outputs = {id(t) for t in program.outputs}
    for s in program.steps:
        if not (is_resharding(s) and is_partial(s.input)):
            continue
        whole = s.output
        uses = whole.uses
        if id(whole) in outputs or len(uses) != 1 or not is_resharding(uses[0]):
            continue
        (slice_,) = uses
        same_mesh = slice_.output.mesh == whole.mesh == s.input.mesh
        if not (
            same_mesh
            and sharded_data_axis(whole) is None
            and sharded_data_axis(slice_.output) is not None
        ):
            continue
        slice_.replace_input(whole, s.input)
        s.detach()
        dropped.add(id(s))
    return [s for s in program.steps if id(s) not in dropped]


def unlowered_steps(program: Program) -> list[str]:
    """Each step that is neither a kernel nor a Communication (a resharding Set)."""
    return [
        f"step {k}, {s.output.name} = {s.op_name}({s.input.name}), is not lowered to a "
        "Communication"
        for k, s in enumerate(program.steps)
        if not isinstance(s, (Kernel, Communication))
    ]
