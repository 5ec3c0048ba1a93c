"""The reshardings of a lowered program: which communications lowered which resharding.

lower-communications records them as it lowers (`Program.reshardings`, which
fl.explain reads); a program read back from its printed text gets the same records
from its communications (`derive_reshardings`): a move between meshes is one
resharding, as is a CollectivePermute, and on one mesh a chain of communications (each intermediate tensor
read by the next one only) is one resharding where its steps are the planner's
plan between the chain's ends, the longest such chain first. The printed form does
not record lower-communications' latency_bytes, so a program read back is explained
at the default latency: a plan chosen at another may read as two shorter plans.
"""

from __future__ import annotations

from fuserlite.ir.sharding import placement
from fuserlite.ir.tensor import TensorView
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES
from fuserlite.plan.search import Plan, Planner
from fuserlite.program.communication import CommKind, Communication, permuted, planned_move
from fuserlite.program.program import Kernel, Program, Resharding


class Planners:
    """One redistribution planner per tensor shape, dtype size and mesh shape, each
    collective costing `latency_bytes` (plan.cost)."""

    def __init__(self, latency_bytes: int = DEFAULT_LATENCY_BYTES) -> None:
        self._planners: dict[tuple, Planner] = {}
        self.latency_bytes = latency_bytes

    def plan(self, source: TensorView, target: TensorView) -> Plan:
        """The planner's plan from source's placement to target's (on source's mesh)."""
        key = (source.shape, source.dtype.itemsize, source.mesh.shape)
        if key not in self._planners:
            self._planners[key] = Planner(*key, self.latency_bytes)
        return self._planners[key].plan(placement(source), placement(target))


def needed_by(tv: TensorView, program: Program) -> str:
    """The first kernel expression (in program order) that reads `tv`, else 'the fusion
    output' or 'a later resharding': the same before and after lowering."""
    for step in program.steps:
        for e in step.exprs if isinstance(step, Kernel) else []:
            if any(t is tv for t in e.inputs):
                return f"{e.output.name} = {e.op_name}({', '.join(t.name for t in e.inputs)})"
    if any(t is tv for t in program.outputs):
        return f"the fusion output {tv.name}"
    return "a later resharding"


def derive_reshardings(program: Program) -> list[Resharding]:
    """The records lower-communications made for `program`'s communications (module doc);
    a chain that is no plan of the planner (text written by hand) is one record per
    communication with neither plan nor move."""
    comms = program.communications
    planners = Planners()
    outputs = {id(t) for t in program.outputs}
    out: list[Resharding] = []
    i = 0
    while i < len(comms):
        first = comms[i]
        src = first.input
        if first.kind is CommKind.CollectivePermute:
            move = permuted(src, first.in_axis or 0, first.sources)[0]
            out.append(_record(program, [first], move=move))
            i += 1
            continue
        if src.mesh != first.output.mesh:
            move = planned_move(src, first.output)
            out.append(_record(program, [first], move=move))
            i += 1
            continue
        chain = [first]
        while i + len(chain) < len(comms) and _continues(chain[-1], comms[i + len(chain)], outputs):
            chain.append(comms[i + len(chain)])
        for k in range(len(chain), 0, -1):
            plan = planners.plan(src, chain[k - 1].output)
            if _is_plan(plan, chain[:k]):
                out.append(_record(program, chain[:k], plan=plan))
                break
        else:
            k = 1
            out.append(_record(program, [first]))
        i += k
    return out


def _record(program: Program, comms: list[Communication], **how) -> Resharding:
    target = comms[-1].output
    return Resharding(comms[0].input, target, needed_by(target, program), comms, **how)


def _continues(prev: Communication, nxt: Communication, outputs: set[int]) -> bool:
    """`nxt` may be the next step of `prev`'s plan: it alone reads prev's output."""
    mid = prev.output
    return (
        nxt.input is mid
        and nxt.output.mesh == mid.mesh
        and len(mid.uses) == 1
        and id(mid) not in outputs
    )


def _is_plan(plan: Plan, comms: list[Communication]) -> bool:
    """The communications are the plan's steps, in order (their bytes may differ from the
    plan's: uneven chunks are sized after planning)."""
    if len(plan.steps) != len(comms):
        return False
    for planned, comm in zip(plan.steps, comms):
        step = planned.step
        moved = tuple(a for a in (step.axis, step.to_axis) if a is not None)
        if (step.kind.value, step.group, moved, planned.after) != (
            comm.kind.value,
            comm.group,
            comm.axes,
            comm.after,
        ):
            return False
    return True
