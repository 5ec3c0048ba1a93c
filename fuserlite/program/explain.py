"""Why each communication of a program is there, and what it costs against the alternative.

For every resharding lower-communications lowered (`program.reshardings`): the
expression that needed it, the source and target placement per mesh axis, the
chosen steps with the bytes each device sends, their cost (plan.cost: launches x
latency_bytes + bytes), and the cheapest rejected alternative with its cost and
why it lost (the plan of fewest bytes where the latency term chose another, the
classic plan through replicated, or the next best plan), e.g.

    y = Set(T10), needed by T14 = set(y), on DeviceMesh{{0 1 2 3}{4 5 6 7}}
      DIDy: Replicate -> Replicate; DIDx: Partial -> Replicate
      (R,P) -> (R,R): Allreduce on DIDx teams, 1536 B/device in 1 launch
      cost: 1 launch x 131072 B + 1536 B = 132608 B
      rejected: fewest bytes: LocalSlice + Allreduce + Allgather, 1280 B/device in 2 launches
      its cost: 2 launches x 131072 B + 1280 B = 263424 B: 256 B fewer do not pay for 1 launch
      more at 131072 B each
"""

from __future__ import annotations

from collections.abc import Callable

from fuserlite.ir import args
from fuserlite.ir.errors import LoweringError
from fuserlite.ir.placement import Partial, Placement, Shard
from fuserlite.plan.mesh_axes import team_name
from fuserlite.plan.search import Planner
from fuserlite.program.communication import CommKind, Communication, Sizing
from fuserlite.program.program import Program, Resharding
from fuserlite.program.reshardings import needed_by

SIZING_TEXT = {
    Sizing.even: "even chunks",
    Sizing.padded: "every chunk padded to the largest",
    Sizing.variable: "each chunk its own size",
}


def _axis_text(p: Placement, axis: int) -> str:
    what = p.of_mesh_axis(axis)
    if isinstance(what, Shard):
        return f"Shard({what.dim})"
    return "Partial" if isinstance(what, Partial) else type(what).__name__


def per_mesh_axis(source: Placement, target: Placement, names: tuple[str, ...]) -> str:
    """'DIDy: Shard(0) -> Shard(0); DIDx: Partial -> Replicate' (`names`: the mesh axes'
    labels, 'DIDx (tp)' where the user named them)."""
    return "; ".join(
        f"{name}: {_axis_text(source, a)} -> {_axis_text(target, a)}"
        for a, name in enumerate(names)
    )


def explain_resharding(r: Resharding, needed: str | None = None) -> str:
    """The lines that explain one resharding (`needed`: the expression that needs it, as
    the user wrote it; default the one lowering recorded)."""
    src, dst = r.source, r.target
    needed = r.needed_by if needed is None else needed
    if r.communications[0].kind is CommKind.CollectivePermute:
        return _explain_permute(r, r.communications[0], needed)
    first = r.communications[0]
    made = f"{first.op.name}({src.name})" if first.reduces else f"Set({src.name})"
    head = f"{dst.name} = {made}, needed by {needed}"
    if r.plan is not None:
        mesh = src.mesh
        names = _labels(mesh)
        plan = r.plan
        lines = [
            f"{head}, on {mesh}",
            *_reduced_line(first),
            "  " + per_mesh_axis(plan.source, plan.target, names),
            f"  {plan.source} -> {plan.target}: "
            + plan.describe_steps(names if mesh.axis_names else None),
        ]
        uneven = [c for c in r.communications if c.sizing is not Sizing.even]
        if uneven:  # the planner counts even chunks; what the program sends differs
            lines.append(
                "  sent: "
                + " + ".join(
                    f"{c.kind.value} ({c.sizing.value}: {SIZING_TEXT[c.sizing]}) "
                    f"{c.bytes_per_device} B/device"
                    for c in r.communications
                )
                + f"; the plan above counts even chunks, {plan.bytes} B/device"
            )
        if plan.steps:
            lines.append(f"  cost: {plan.cost.describe()}")
        alt = plan.alternative
        if alt is None:
            lines.append("  rejected: nothing cheaper")
        else:
            lines.append(f"  rejected: {alt.describe()}")
            lines.append(f"  its cost: {alt.cost.describe()}: {plan.cost.why_not(alt.cost)}")
        return "\n".join(lines)
    if r.move is None:  # read from text: no plan of the planner (program.reshardings)
        kinds = " + ".join(c.kind.value for c in r.communications)
        return f"{head}, on {src.mesh}\n  {kinds}: as written, not a plan of the planner"
    move = r.move
    (comm,) = r.communications
    return "\n".join(
        [
            f"{head}, from {src.mesh} to {dst.mesh}",
            *_reduced_line(comm),
            f"  {comm.before} on {src.mesh} -> {comm.after} on {dst.mesh}: {move.describe()} "
            f"moved in all, {comm.bytes_per_device} B from the busiest sender",
            "  each destination device receives exactly the part of its box it lacks",
        ]
    )


def _reduced_line(comm: Communication) -> list[str]:
    """Where a collective reduces axes of its input itself (one row of each per device):
    the line that says so, that no partial-reduction kernel runs before it."""
    if not comm.reduces:
        return []
    axes = " and ".join(str(a) for a in comm.reduces)
    return [
        f"  the {comm.op.name} is the {comm.kind.value} alone: each device holds one row of "
        f"{comm.input.name} axis {axes}, so no partial-reduction kernel runs before it"
    ]


def _labels(mesh) -> tuple[str, ...]:
    """The mesh's axes as messages name them: ('DIDy', 'DIDx'), ('DIDy (dp)', 'DIDx (tp)')."""
    return tuple(mesh.axis_label(a) for a in range(mesh.rank))


def _explain_permute(r: Resharding, comm: Communication, needed: str) -> str:
    """A take of whole blocks: its CollectivePermute against gathering the blocks, taking
    them locally and keeping one's own (the lowering it replaces)."""
    src, mesh, before = r.source, r.source.mesh, comm.before
    names = _labels(mesh)
    gathered = Placement(before.mesh_rank, ((), *before.shards[1:]), before.partial)
    via = Planner(src.shape, src.dtype.itemsize, mesh.shape, r.latency_bytes).plan(before, gathered)
    kinds = " + ".join([*(s.step.kind.value for s in via.steps), "take", "LocalSlice"])
    moved = len(r.move.transfers) if r.move is not None else len(comm.transfers or ())
    return "\n".join(
        [
            f"{r.target.name} = take({src.name}), needed by {needed}, on {mesh}",
            "  " + per_mesh_axis(before, comm.after, names),
            f"  {before} -> {comm.after}: CollectivePermute on {team_name(mesh.rank, comm.group, names)}"
            f", {comm.permutation}: {moved} transfers, "
            f"{comm.bytes_per_device} B/device (one block)",
            f"  rejected: via replicate: {kinds}, {via.bytes} B/device",
        ]
    )


def explain(program: Program, times: Callable[[Communication], str | None] | None = None) -> str:
    """Every resharding of `program` explained (see the module doc), in program order;
    `times(c)`, where given, is a line on how long communication c takes and what hides
    it (fuserlite.timing's explain), shown after its resharding's lines."""
    args.instance(
        program,
        Program,
        "explain",
        "program",
        "a lowered Program: fl.explain(fl.lower(fusion))",
        LoweringError,
    )
    if not program.reshardings:
        return "no communications: every expression computes on local shards\n"
    out = []
    for r in program.reshardings:
        lines = [explain_resharding(r, needed_by(r.target, program, as_written=True))]
        if times is not None:
            lines += [f"  time: {line}" for c in r.communications if (line := times(c))]
        out.append("\n".join(lines) + "\n")
    return "".join(out)
