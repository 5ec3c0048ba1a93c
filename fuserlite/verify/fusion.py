"""The validator: every IR invariant, checked in one place.

`verify(fusion)` raises VerifyError listing each broken invariant with the
tensor and axis at fault. The pipeline runs it after every fusion pass (and
fuserlite.program.verify, which builds on it, after every program pass) on what the
pass touched (its change log, fuserlite.ir.changes), or on everything
(`verify_all`). A tensor's structural checks are a fact of its domain and mesh
(`domain_is_valid`); messages are built only for what fails.
"""

from __future__ import annotations

from collections.abc import Iterable

from fuserlite.ir import args
from fuserlite.ir.changes import ChangeLog
from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.errors import VerifyError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import describe_sharding, sharding_problem, shardings
from fuserlite.ir.streams import stream_problem, swizzle_problems
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import MAX_THREADS, ParallelType, ReductionOpType
from fuserlite.ir.values import fact
from fuserlite.ops.sharding import broadcast_sums, non_local_inputs
from fuserlite.printer import Namer

SERIAL = ParallelType.Serial


def duplicate_parallel_types(tv: TensorView, namer: Namer) -> list[str]:
    """nvFuser's check: one parallel type on two loop axes of one tensor."""
    dom = tv.domain
    by_type: dict[ParallelType, list[int]] = {}
    for p in dom.loop_positions:
        pt = dom.axes[p].parallel_type
        if pt is not SERIAL:
            by_type.setdefault(pt, []).append(p)
    return [
        f"{tv.name}: found multiple loop IterDomains with the same parallel type "
        f"({pt.value}): {namer.ids(tv, positions)}{_ONE_LOOP if pt.is_stream else ''}"
        for pt, positions in by_type.items()
        if len(positions) > 1
    ]


# Why a tensor has at most one Stream axis: each is one host loop over its chunks.
_ONE_LOOP = "; a tensor has at most one Stream axis (one host loop runs over its chunks)"


@fact
def loop_is_consistent(dom: TensorDomain) -> bool:
    """The loop domain is exactly the leaves of the recorded transforms."""
    leaves = set(range(dom.n_logical))
    for t in dom.transforms:
        if not leaves.issuperset(t.inputs):
            return False  # an axis transformed twice, or before it exists
        leaves.difference_update(t.inputs)
        leaves.update(t.outputs)
    loop = dom.loop_positions
    return len(loop) == len(leaves) and leaves == set(loop)


class LazyNamer:
    """Numbers IterDomains only when a message needs them (verify runs after every pass)."""

    def __init__(self, fusion: Fusion) -> None:
        self._fusion = fusion
        self._namer: Namer | None = None

    def __getattr__(self, name: str):
        if self._namer is None:
            self._namer = Namer(self._fusion)
        return getattr(self._namer, name)


def located(tv: TensorView, problem: str) -> str:
    """`model.fus:12: problem` for a tensor parsed from a file (the statement that made it)."""
    return problem if tv.origin is None else f"{tv.origin}: {problem}"


def tensor_problems(tv: TensorView, namer: Namer, mesh_inferable: bool) -> list[str]:
    """Every problem of one tensor's domains and sharding (`mesh_inferable`: a tensor
    without a mesh will inherit one, so its device axes are not checked yet)."""
    inferable = mesh_inferable and tv.mesh is None
    if domain_is_valid(tv.domain, tv.mesh, inferable):
        return []
    return _domain_problems(tv, namer, inferable)


@fact
def domain_is_valid(dom: TensorDomain, mesh: DeviceMesh | None, inferable: bool) -> bool:
    """True when a tensor of this domain on `mesh` has no structural problem (its loop
    is the leaves of its transforms, one parallel type per loop axis, thread extents
    within MAX_THREADS, its device axes a valid sharding on its mesh unless the mesh
    is still to be inherited)."""
    if not loop_is_consistent(dom):
        return False
    if swizzle_problems(dom, None if inferable else mesh):
        return False
    seen = set()
    for p in dom.loop_positions:
        ax = dom.axes[p]
        pt = ax.parallel_type
        if pt is SERIAL:
            continue
        if pt in seen:
            return False
        seen.add(pt)
        if pt.is_thread and ax.extent > MAX_THREADS:
            return False
        if pt.is_stream and stream_problem(dom, p) is not None:
            return False
        if pt.is_device and not inferable and sharding_problem(dom, mesh, p) is not None:
            return False
    return True


def _domain_problems(tv: TensorView, namer: Namer, inferable: bool) -> list[str]:
    dom = tv.domain
    problems = duplicate_parallel_types(tv, namer)
    if not loop_is_consistent(dom):
        problems.append(f"{tv.name}: loop domain does not match its recorded transforms")
    for p, why in swizzle_problems(dom, None if inferable else tv.mesh):
        problems.append(f"{tv.name} ({namer.at(tv, p)}): {why}")
    for pos, p in enumerate(dom.loop_positions):
        ax = dom.axes[p]
        pt = ax.parallel_type
        if pt is SERIAL:
            continue
        if pt.is_thread and ax.extent > MAX_THREADS:
            problems.append(
                f"{tv.name} axis {pos} ({namer.at(tv, p)}): {pt.value} extent {ax.extent} "
                f"exceeds {MAX_THREADS}"
            )
        if pt.is_stream and stream_problem(dom, p) is not None:
            problems.append(f"{tv.name} axis {pos} ({namer.at(tv, p)}): {stream_problem(dom, p)}")
        if not pt.is_device or inferable:
            continue  # without a mesh: propagate-shardings gives it the mesh of its neighbours
        why = sharding_problem(dom, tv.mesh, p)
        if why is not None:
            problems.append(f"{tv.name} axis {pos} ({namer.at(tv, p)}): {why}")
    return problems


def verify(fusion: Fusion, *, require_mesh: bool = False) -> None:
    """Raise VerifyError if any invariant is broken.

    Before sharding propagation a device-parallel tensor without a mesh is accepted
    when some tensor of the fusion has one (it will be inherited); with
    `require_mesh` every device-parallel tensor must have its own.
    """
    args.instance(fusion, Fusion, "verify", "fusion", "a Fusion")
    require_mesh = args.boolean(require_mesh, "verify", "require_mesh")
    verify_changes(fusion, None, require_mesh=require_mesh)


def verify_changes(fusion: Fusion, log: ChangeLog | None, *, require_mesh: bool = False) -> None:
    """verify(fusion) of what `log` holds (None: of everything)."""
    problems = fusion_problems(fusion, LazyNamer(fusion), require_mesh, log)
    if problems:
        raise VerifyError(problems_text("invalid fusion", problems))


def problems_text(what: str, problems: list[str]) -> str:
    """`invalid fusion:` and one indented line per distinct problem."""
    return f"{what}:\n  " + "\n  ".join(dict.fromkeys(problems))


def touched_tensors(tensors: list[TensorView], log: ChangeLog | None) -> list[TensorView]:
    """The tensors (of `tensors`) a check of `log` looks at: those it holds and those an
    expression it holds reads or writes (one linked anew); all of them for None."""
    if log is None:
        return tensors
    made = set(log.tensors)
    for e in log.exprs.values():
        made.update(map(id, e.inputs))
        made.update(map(id, e.outputs))
    return [t for t in tensors if id(t) in made]


def touched_outputs(outputs: list[TensorView], log: ChangeLog | None) -> list[TensorView]:
    """The outputs a check of `log` looks at: all of them where it edited a list of the
    graph (the outputs may be others), else those it holds."""
    return outputs if log is None or log.structure else touched_tensors(outputs, log)


def near_changes(log: ChangeLog) -> set[int]:
    """The ids of the expressions `log` holds and of those reading or writing a tensor
    it holds, whose checks read that tensor."""
    near = set(log.exprs)
    for t in log.tensors.values():
        if t.definition is not None:
            near.add(id(t.definition))
        near.update(map(id, t.uses))
    return near


def touched_exprs(
    exprs: list[Expr], log: ChangeLog | None, near: set[int] | None = None
) -> list[Expr]:
    """The expressions (of `exprs`, in order) a check of `log` looks at (all for None);
    `near`: near_changes(log), where known."""
    if log is None:
        return exprs
    near = near_changes(log) if near is None else near
    # One scan in order: cheaper than indexing the list to sort the few near it.
    return [e for e in exprs if id(e) in near] if near else []


def fusion_problems(
    fusion: Fusion,
    namer: Namer,
    require_mesh: bool,
    log: ChangeLog | None = None,
    filled: frozenset[int] = frozenset(),
    near: set[int] | None = None,
) -> list[str]:
    """Every broken invariant of the fusion's tensors, inputs and outputs (of the
    tensors and expressions `log` holds and next to them; None: of all). `filled`: the
    ids of outputs a program's loop writes chunk by chunk through views (computed,
    with no expression of their own where the program was read back); `near`:
    near_changes(log), where the caller has it (the program's checks read it too)."""
    exprs = fusion.exprs()
    tensors = fusion.tensors()  # the order of those expressions, kept by the fusion
    mesh_inferable = not require_mesh and any(tv.mesh is not None for tv in tensors)
    problems: list[str] = []
    for tv in touched_tensors(tensors, log):
        # tensor_problems, its common answer inlined (a tensor without problems)
        inferable = mesh_inferable and tv.mesh is None
        if not domain_is_valid(tv.domain, tv.mesh, inferable):
            problems.extend(located(tv, p) for p in _domain_problems(tv, namer, inferable))
    if not fusion.outputs:
        problems.append("the fusion has no outputs; mark one with fusion.add_output")
    inputs = {id(t) for t in fusion.inputs}
    for out in touched_outputs(fusion.outputs, log):
        if out.definition is None and id(out) not in inputs and id(out) not in filled:
            problems.append(located(out, f"output {out.name} is neither computed nor an input"))
    touched = touched_exprs(exprs, log, near)
    for expr in touched:
        d = expr.op_def
        if d is None or d.sharding.partial is not ReductionOpType.sum:
            continue  # broadcast_sums' first question, asked here of every expression
        for out, axis, p, pi in broadcast_sums(expr):
            problems.append(
                located(
                    out,
                    f"{out.name} reduction axis {axis} is sharded, but {out.name} = "
                    f"{expr.op_name}(...) sums broadcast axis {pi} of {p.name}, which every "
                    "device holds whole: each device would add it once; leave that "
                    "reduction axis unsharded",
                )
            )
    # Which tensors are inputs reads the inputs list too: all of them after a list edit.
    for expr in exprs if log is not None and log.structure else touched:
        for tv in expr.inputs:
            if tv.definition is None and id(tv) not in inputs and id(tv) not in filled:
                problems.append(
                    located(
                        tv,
                        f"{tv.name} is read by {expr.output.name} = {expr.op_name}(...) but is "
                        "not a fusion input; add it with fusion.add_input",
                    )
                )
    return problems


def non_local_text(e: Expr, fix: str) -> list[str]:
    """A line per input `e` (not a Set) cannot compute its output from locally."""
    return [
        f"{e.output.name} = {e.op_name}(...) reads {describe_sharding(p)} but computes "
        f"{describe_sharding(e.output)}: not local; {fix}"
        for p in non_local_inputs(e)
    ]


def non_local_problems(exprs: Iterable[Expr], fix: str) -> list[str]:
    """Each expression but a Set computes from the shards it holds (`fix`: how to get
    there)."""
    problems = []
    for e in exprs:
        if non_local_inputs(e):  # the messages made only for what fails
            problems += non_local_text(e, fix)
    return problems


def partial_output_problems(outputs: list[TensorView], namer: Namer) -> list[str]:
    """A fusion output is a complete value, never partial sums."""
    problems = []
    for out in outputs:
        partial = [s for s in shardings(out).values() if s.is_partial]
        for s in partial:
            ax = out.device_axes()[s.parallel_type]
            problems.append(
                f"output {out.name} reduction axis {s.logical_index} ({namer.id(ax)}) holds "
                "partial results, one per device; a fusion output must be complete: "
                "run insert-reshardings, which completes it with a communication"
            )
    return problems
