"""The reshardings of a lowered program: which communications lowered which resharding.

lower-communications records them as it lowers (`Program.reshardings`, which
fl.explain reads); a program read back from its printed text gets the same records
from its communications (`derive_reshardings`). The printed form records what the
communications alone do not say: the `latency_bytes` the planner chose every plan at
(`plans_latency`, the `Planner:` header line) and which tensors are the intermediates
between the steps of one plan (`plan_intermediates`, a ` plan intermediate :` line in
their TransformPrinter blocks). So a move between meshes is one resharding, as is a
CollectivePermute, a chain of communications through marked intermediates is one
(which must be the planner's plan between its ends at that latency), and any other
communication on one mesh is one by itself.
"""

from __future__ import annotations

from collections.abc import Callable

from fuserlite.ir.errors import LoweringError, RedistributionError
from fuserlite.ir.sharding import placement
from fuserlite.ir.tensor import TensorView
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES
from fuserlite.plan.search import Plan, Planner
from fuserlite.program.communication import (
    CommKind,
    Communication,
    as_reduced,
    input_placement,
    permuted,
    planned_move,
)
from fuserlite.program.program import Kernel, Program, Resharding


class Planners:
    """One redistribution planner per tensor shape, dtype size and mesh shape, each
    collective costing `latency_bytes` (plan.cost)."""

    def __init__(self, latency_bytes: int = DEFAULT_LATENCY_BYTES) -> None:
        self._planners: dict[tuple, Planner] = {}
        self.latency_bytes = latency_bytes

    def plan(
        self, source: TensorView, target: TensorView, reduces: tuple[int, ...] | None = None
    ) -> Plan:
        """The planner's plan from source's placement to target's (on source's mesh); the
        axes `reduces` of source partial where a collective reduces them itself
        (program.communication.input_placement)."""
        key = (as_reduced(source, reduces, source.shape), source.dtype.itemsize, source.mesh.shape)
        if key not in self._planners:
            self._planners[key] = Planner(*key, self.latency_bytes)
        return self._planners[key].plan(input_placement(source, reduces), placement(target))

    def plan_or_none(
        self, source: TensorView, target: TensorView, reduces: tuple[int, ...] | None = None
    ) -> Plan | None:
        """`plan`, or None where the planner has none (a partial target: a step of text
        written by hand that no plan takes alone)."""
        try:
            return self.plan(source, target, reduces)
        except RedistributionError:
            return None


def needed_by(tv: TensorView, program: Program, as_written: bool = False) -> str:
    """The first kernel expression (in program order) that reads `tv`, else 'the fusion
    output' or 'a later resharding': the same before and after lowering. `as_written`
    (explain, on a lowered program): the expression as the user wrote it, each input a
    Set inserted before it made named by the tensor it was made from (`h1 (T5) =
    linear(x (T0), w1 (T1), b1 (T2))`, not the Set's T10), and its output by the
    tensor a Set after it writes (`a (T46) = linear(...)`, not the partial T84)."""
    # A Set inserted before a reader is numbered after its input; one inserted after a
    # writer (`y = Allreduce(T10)`: the writer's output became the partial T10) before
    # its output, which is the user's tensor. Numbers survive printing where names do
    # not. A CollectivePermute is a take the user wrote (ppermute): never looked through.
    comms = [
        c for c in program.communications if as_written and c.kind is not CommKind.CollectivePermute
    ]
    made_from = {id(c.output): c.input for c in comms if c.input.number < c.output.number}
    made_into = {id(c.input): c.output for c in comms if c.input.number > c.output.number}

    def written(t: TensorView, links: dict[int, TensorView]) -> TensorView:
        while id(t) in links:
            t = links[id(t)]
        return t

    for step in program.runs:
        for e in step.exprs if isinstance(step, Kernel) else []:
            if any(t is tv for t in e.inputs):
                names = ", ".join(written(t, made_from).name for t in e.inputs)
                return f"{written(e.output, made_into).name} = {e.op_name}({names})"
    if any(t is tv for t in program.outputs):
        return f"the fusion output {tv.name}"
    return "a later resharding"


def plans_latency(program: Program) -> int | None:
    """The latency_bytes `program`'s reshardings were planned at, where its printed form
    must say it: where it has a plan, and where a CollectivePermute's rejected gather
    (explain plans it) was planned at another than the default, which a program read
    without a `Planner:` line gets; None elsewhere. A LoweringError if they were planned
    at different ones."""
    found = {
        r.plan.latency_bytes if r.plan is not None else r.latency_bytes
        for r in program.reshardings
        if r.plan is not None or (_permutes(r) and r.latency_bytes != DEFAULT_LATENCY_BYTES)
    }
    if len(found) > 1:
        raise LoweringError(
            f"the program's plans were chosen at different latency_bytes ({sorted(found)}); "
            "one lower-communications run plans them all at one"
        )
    return found.pop() if found else None


def _permutes(r: Resharding) -> bool:
    """Whether `r` is one CollectivePermute."""
    return r.communications[0].kind is CommKind.CollectivePermute


def plan_intermediates(program: Program) -> dict[int, Resharding]:
    """id of each tensor between two steps of one plan -> the resharding it is part of."""
    return {
        id(c.output): r
        for r in program.reshardings
        if r.plan is not None
        for c in r.communications[:-1]
    }


# `fail(tensor, message)`: the error to raise where a marked intermediate contradicts the
# communications around it (the parser locates it at the tensor's marker line).
Contradiction = Callable[[TensorView, str], Exception]


def derive_reshardings(
    program: Program,
    latency_bytes: int = DEFAULT_LATENCY_BYTES,
    marked: dict[int, tuple[str, str]] | None = None,
    fail: Contradiction | None = None,
) -> list[Resharding]:
    """The records lower-communications made for `program`'s communications (module doc),
    planning at `latency_bytes`. `marked` maps the id of each marked intermediate to the
    names of the resharding's ends it claims; a communication on one mesh that is no
    plan of the planner (text written by hand) is a record with neither plan nor move."""
    marked = marked or {}
    fail = fail or (lambda tv, message: LoweringError(message))
    comms = program.communications
    planners = Planners(latency_bytes)
    outputs = {id(t) for t in program.outputs}
    out: list[Resharding] = []
    i = 0
    while i < len(comms):
        first = comms[i]
        chain = [first]
        while id(chain[-1].output) in marked:
            mid = chain[-1].output
            nxt = comms[i + len(chain)] if i + len(chain) < len(comms) else None
            if nxt is None or not _continues(chain[-1], nxt, outputs):
                raise fail(
                    mid,
                    f"{mid.name} is marked an intermediate of a plan, but {_why_not_step(mid, nxt, outputs)}",
                )
            chain.append(nxt)
        i += len(chain)
        if len(chain) > 1:
            out.append(_marked_plan(program, chain, planners, marked, fail))
        elif first.kind is CommKind.CollectivePermute:
            # A ring step's (shift=i) is recorded as one step of it: one block a device.
            step = first.at_shift(1) if first.shift is not None else first
            move = permuted(first.input, first.in_axis, step.sources)[0]
            out.append(_record(program, planners, [first], move=move))
        elif first.input.mesh != first.output.mesh:
            out.append(
                _record(
                    program,
                    planners,
                    [first],
                    move=planned_move(first.input, first.output, first.reduces),
                )
            )
        else:
            plan = planners.plan_or_none(first.input, first.output, first.reduces)
            how = {"plan": plan} if plan is not None and _is_plan(plan, [first]) else {}
            out.append(_record(program, planners, [first], **how))
    return out


def _why_not_step(mid: TensorView, nxt: Communication | None, outputs: set[int]) -> str:
    """Why the communication after the one computing `mid` is not the plan's next step."""
    if id(mid) in outputs:
        return "it is an output of the fusion"
    if nxt is None or nxt.input is not mid:
        return "the next communication does not read it"
    if len(mid.uses) != 1:
        return f"{len(mid.uses)} steps read it (the next step of its plan alone does)"
    return "the next communication moves it to another mesh"


def _marked_plan(
    program: Program,
    chain: list[Communication],
    planners: Planners,
    marked: dict[int, tuple[str, str]],
    fail: Contradiction,
) -> Resharding:
    """The resharding of a chain through marked intermediates: the planner's plan between
    its ends, which the marks name."""
    src, dst = chain[0].input, chain[-1].output
    for c in chain[:-1]:
        claimed = marked[id(c.output)]
        if claimed != (src.ir_name, dst.ir_name):
            raise fail(
                c.output,
                f"{c.output.name} is marked an intermediate of {claimed[0]} -> {claimed[1]}, "
                f"but the communications through it go from {src.name} to {dst.name}",
            )
    if src.mesh is None or any(
        c.input.mesh != src.mesh or c.output.mesh != src.mesh for c in chain
    ):
        raise fail(chain[0].output, "a plan's steps are on one mesh; these move between meshes")
    plan = planners.plan_or_none(src, dst, chain[0].reduces)
    if plan is None or not _is_plan(plan, chain):
        steps = " + ".join(c.kind.value for c in chain)
        planned = (
            "the planner plans no move between them"
            if plan is None
            else f"the planner's plan from {plan.source} to {plan.target} at latency_bytes="
            f"{planners.latency_bytes} is {plan.describe_steps()} (the `Planner:` line gives "
            "the latency)"
        )
        raise fail(
            chain[0].output,
            f"{steps} from {src.name} to {dst.name} is marked one plan, but {planned}",
        )
    return _record(program, planners, chain, plan=plan)


def _record(program: Program, planners: Planners, comms: list[Communication], **how) -> Resharding:
    target, latency = comms[-1].output, planners.latency_bytes
    reads = needed_by(target, program)
    return Resharding(comms[0].input, target, reads, comms, **how, latency_bytes=latency)


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
