"""The validator: every IR invariant, checked in one place.

`verify(fusion)` raises VerifyError listing each broken invariant with the
tensor and axis at fault. The pipeline runs it after every fusion pass (and
fuserlite.program.verify, which builds on it, after every program pass): a tensor or
expression found valid is checked again only once it has changed (ir.stamps), and an
IR nothing has changed in since it was found valid is not walked at all
(fuserlite.verify.verdicts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fuserlite.ir import args
from fuserlite.ir.domain import Merge, Split
from fuserlite.ir.errors import VerifyError
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.readonly import reading_only
from fuserlite.ir.sharding import (
    describe_sharding,
    sharding_problem,
    shardings,
)
from fuserlite.ir.stamps import checked, mark_checked, version
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DEVICE_PARALLEL_TYPES, MAX_THREADS, ParallelType
from fuserlite.ops.registry import definition
from fuserlite.ops.sharding import broadcast_sums, non_local_inputs, reads_signatures_only
from fuserlite.printer import Namer
from fuserlite.verify.structures import structure

SERIAL = ParallelType.Serial


def duplicate_parallel_types(tv: TensorView, namer: Namer) -> list[str]:
    """nvFuser's check: one parallel type on two loop axes of one tensor."""
    types = [ax.parallel_type for ax in tv.domain.loop if ax.parallel_type is not SERIAL]
    if len({id(pt) for pt in types}) == len(types):
        return []  # the common case, without hashing enums
    by_type: dict[ParallelType, list] = {}
    for ax in tv.domain.loop:
        if ax.parallel_type is not SERIAL:
            by_type.setdefault(ax.parallel_type, []).append(ax)
    return [
        f"{tv.name}: found multiple loop IterDomains with the same parallel type "
        f"({pt.value}): {namer.ids(axes)}"
        for pt, axes in by_type.items()
        if len(axes) > 1
    ]


def _loop_is_consistent(tv: TensorView) -> bool:
    """The loop domain is exactly the leaves of the recorded transforms."""
    if not tv.domain.transforms and tv.domain.loop == tv.domain.logical:
        return True  # the common case, checked without building sets
    leaves = set(map(id, tv.domain.logical))
    for t in tv.domain.transforms:
        leaves.difference_update(map(id, t.inputs))
        leaves.update(map(id, t.outputs))
    loop = tv.domain.loop
    return len(loop) == len(leaves) and leaves == set(map(id, loop))


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


def ownership_problems(tv: TensorView) -> list[str]:
    """Every axis of a domain is its tensor's own: a change to an axis stamps the
    tensor that owns it (ir.stamps), so an axis held by another tensor would change
    that tensor behind the validator's back."""
    dom = tv.domain
    axes = dom.ids_between_logical_and_loop() if dom.transforms else dom.logical
    if all(ax.owner is tv for ax in axes) and all(ax.owner is tv for ax in dom.loop):
        return []  # the loop axes too: a loop list need not match the transforms
    strays = [ax for ax in (*axes, *dom.loop) if ax.owner is not tv]
    owner = strays[0].owner
    whose = "no tensor" if owner is None else owner.name
    return [
        f"{tv.name}: {len(strays)} of its IterDomains belong to {whose}; every tensor owns "
        "its own axes: clone an axis (IterDomain.clone) to use it in another tensor"
    ]


def tensor_problems(tv: TensorView, namer: Namer, mesh_inferable: bool) -> list[str]:
    """Every problem of one tensor's domains and sharding; a tensor found valid is not
    checked again until it changes (ir.stamps)."""
    # mesh_inferable only matters to a tensor without a mesh: the verdict on one with a
    # mesh holds at both levels (a program's validator finds the fusion's marks).
    inferable = mesh_inferable and tv.mesh is None
    question = ("valid tensor", inferable)
    v = version(tv)
    if checked(tv, question, v):
        return []
    alike = structure(tv)  # decided once per structure (fuserlite.verify.structures)
    if alike is not None and inferable in alike.valid:
        problems = []
    elif _plainly_valid(tv, mesh_inferable):
        problems = []
        if alike is not None:
            alike.valid.add(inferable)
    else:  # the checks one by one, for their messages
        problems = ownership_problems(tv) + _domain_problems(tv, namer, mesh_inferable)
    if not problems:
        mark_checked(tv, question, v)
    return problems


_THREAD_TYPES = (ParallelType.TIDx, ParallelType.TIDy, ParallelType.TIDz)


def _plainly_valid(tv: TensorView, mesh_inferable: bool) -> bool:
    """True only if ownership_problems and _domain_problems find nothing: the checks of
    a changed tensor in one walk, building no message (every tensor is new or changed
    after schedule-pointwise). False: ask them."""
    dom = tv.domain
    logical, loop = dom.logical, dom.loop
    for ax in logical:
        if ax.owner is not tv:
            return False
    if dom.transforms:
        leaves = set(logical)  # axes hash by identity, in C (no id() per axis)
        for t in dom.transforms:
            if type(t) is Split:
                leaves.discard(t.input)
                outer, inner = t.outer, t.inner
                if outer.owner is not tv or inner.owner is not tv:
                    return False
                leaves.add(outer)
                leaves.add(inner)
            elif type(t) is Merge:
                leaves.discard(t.outer)
                leaves.discard(t.inner)
                if t.output.owner is not tv:
                    return False
                leaves.add(t.output)
            else:
                return False
        # the loop is the transforms' leaves, so its axes are owned too
        if len(loop) != len(leaves) or set(loop) != leaves:
            return False
    elif loop != logical:
        return False
    seen = []  # parallel types: compared by identity (tuple and list lookups do, in C)
    for ax in loop:
        pt = ax.parallel_type
        if pt is SERIAL:
            continue
        if pt in seen:
            return False
        seen.append(pt)
        if pt in _THREAD_TYPES and ax.extent > MAX_THREADS:
            return False
        device = pt in DEVICE_PARALLEL_TYPES and not (tv.mesh is None and mesh_inferable)
        if device and sharding_problem(tv, ax) is not None:
            return False
    return True


def _domain_problems(tv: TensorView, namer: Namer, mesh_inferable: bool) -> list[str]:
    dom = tv.domain
    if (
        not dom.transforms
        and dom.loop == dom.logical
        and all(ax.parallel_type is SERIAL for ax in dom.loop)
    ):
        return []  # untransformed and unparallelized: nothing can be wrong
    problems = duplicate_parallel_types(tv, namer)
    if not _loop_is_consistent(tv):
        problems.append(f"{tv.name}: loop domain does not match its recorded transforms")
    for pos, ax in enumerate(tv.domain.loop):
        pt = ax.parallel_type
        if pt is SERIAL:
            continue
        if pt.is_thread and ax.extent > MAX_THREADS:
            problems.append(
                f"{tv.name} axis {pos} ({namer.id(ax)}): {pt.value} extent {ax.extent} "
                f"exceeds {MAX_THREADS}"
            )
        if not pt.is_device:
            continue
        if tv.mesh is None and mesh_inferable:
            continue  # propagate-shardings gives it the mesh of its neighbours
        why = sharding_problem(tv, ax)
        if why is not None:
            problems.append(f"{tv.name} axis {pos} ({namer.id(ax)}): {why}")
    return problems


def verify(fusion: Fusion, *, require_mesh: bool = False) -> None:
    """Raise VerifyError if any invariant is broken.

    Before sharding propagation a device-parallel tensor without a mesh is accepted
    when some tensor of the fusion has one (it will be inherited); with
    `require_mesh` every device-parallel tensor must have its own.
    """
    args.instance(fusion, Fusion, "verify", "fusion", "a Fusion")
    require_mesh = args.boolean(require_mesh, "verify", "require_mesh")
    with reading_only():
        _verify(fusion, require_mesh)


def _verify(fusion: Fusion, require_mesh: bool) -> None:
    problems = fusion_problems(fusion, LazyNamer(fusion), require_mesh)
    if problems:
        raise VerifyError(problems_text("invalid fusion", problems))


def problems_text(what: str, problems: list[str]) -> str:
    """`invalid fusion:` and one indented line per distinct problem."""
    return f"{what}:\n  " + "\n  ".join(dict.fromkeys(problems))


def fusion_problems(fusion: Fusion, namer: Namer, require_mesh: bool) -> list[str]:
    """Every broken invariant of the fusion's tensors, inputs and outputs."""
    exprs = fusion.exprs()
    tensors = fusion.tensors(exprs)
    mesh_inferable = not require_mesh and any(tv.mesh is not None for tv in tensors)
    problems: list[str] = []
    for tv in tensors:
        found = tensor_problems(tv, namer, mesh_inferable)
        if found:  # rare: no generator per tensor
            problems.extend(located(tv, p) for p in found)
    if not fusion.outputs:
        problems.append("the fusion has no outputs; mark one with fusion.add_output")
    inputs = {id(t) for t in fusion.inputs}
    for out in fusion.outputs:
        if out.definition is None and id(out) not in inputs:
            problems.append(located(out, f"output {out.name} is neither computed nor an input"))
    for expr in exprs:
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
        for tv in expr.inputs:
            if tv.definition is None and id(tv) not in inputs:
                problems.append(
                    located(
                        tv,
                        f"{tv.name} is read by {expr.output.name} = {expr.op_name}(...) but is "
                        "not a fusion input; add it with fusion.add_input",
                    )
                )
    return problems


def expr_state(e: Expr) -> int:
    """The state of what a check of `e` reads: the latest stamp of `e`, its tensors and
    their domains. A change to any of them takes a tick later than every stamp before
    it (a tensor put in another's place stamps `e`), so the state moves whenever one
    changes; one number, as every expression is asked at every changed boundary."""
    state = e._stamp
    for tensors in (e.inputs, e.outputs):
        for t in tensors:
            a, b = t._stamp, t.domain._stamp  # version(t), inlined
            if a > state:
                state = a
            if b > state:
                state = b
    return state


def marked_problems(
    e: Expr, question: str, state: int, problems_of: Callable[[Expr, str], list[str]], fix: str
) -> list[str]:
    """problems_of(e, fix), or none without asking when `e` was found valid for
    `question` in `state` (its expr_state): an unchanged expression is not checked again."""
    if checked(e, question, state):
        return []
    found = problems_of(e, fix)
    if not found:
        mark_checked(e, question, state)
    return found


def non_local_text(e: Expr, fix: str) -> list[str]:
    """A line per input `e` (not a Set) cannot compute its output from locally."""
    return [
        f"{e.output.name} = {e.op_name}(...) reads {describe_sharding(p)} but computes "
        f"{describe_sharding(e.output)}: not local; {fix}"
        for p in non_local_inputs(e)
    ]


def non_local_problems(exprs: Iterable[Expr], fix: str) -> list[str]:
    """Each expression but a Set computes from the shards it holds (`fix`: how to get
    there): decided once per locality_key, else checked again only once it or one of
    its tensors has changed."""
    problems = []
    for e in exprs:
        key = locality_key(e)
        if decided(key, "local"):
            continue
        found = marked_problems(e, "local", expr_state(e), non_local_text, fix)
        decide(key, "local", found)
        problems += found
    return problems


def locality_key(e: Expr) -> tuple | None:
    """What the locality checks of `e` (non_local_text; in a kernel, movement_problems
    too) read, where that is only e's kind and its tensors' structures: each tensor of a
    structure that is `sharded` as one, and `e` a Set (it moves data iff its input and
    output are sharded differently) or an op that reads_signatures_only; else None."""
    alike = []
    for tensors in (e.inputs, e.outputs):
        for t in tensors:
            s = structure(t)
            if s is None or not s.valid:  # not s.sharded, without a property call
                return None
            alike.append(s)
    op = definition(e)
    if isinstance(e, LoadStoreOp):
        if op is not None and op.sharding.permutes is not None:
            return None
    elif not reads_signatures_only(op):
        return None
    return (type(e), op, len(e.inputs), *alike)


# locality_key -> the questions ("local", "moves no data") expressions of it passed
_DECIDED: dict[tuple, set[str]] = {}
_DECIDED_SIZE = 4096


def decided(key: tuple | None, question: str) -> bool:
    """True where an expression of locality_key `key` was found fine for `question`."""
    return key is not None and question in _DECIDED.get(key, ())


def decide(key: tuple | None, question: str, problems: list[str]) -> None:
    """Remember that expressions of `key` are fine for `question`, where `problems`
    (of one of them) is empty."""
    if key is None or problems:
        return
    if len(_DECIDED) >= _DECIDED_SIZE:
        _DECIDED.clear()  # bounded: a long process sees many structures
    _DECIDED.setdefault(key, set()).add(question)


def partial_output_problems(outputs: list[TensorView], namer: Namer) -> list[str]:
    """A fusion output is a complete value, never partial sums."""
    problems = []
    for out in outputs:
        alike = structure(out)
        if alike is not None and alike.complete:
            continue  # fuserlite.verify.structures: 20 000 outputs alike, one answer
        partial = [s for s in shardings(out).values() if s.is_partial]
        if not partial and alike is not None and alike.sharded:
            alike.complete = True
        for s in partial:
            ax = out.device_axes()[s.parallel_type]
            problems.append(
                f"output {out.name} reduction axis {s.logical_index} ({namer.id(ax)}) holds "
                "partial results, one per device; a fusion output must be complete: "
                "run insert-reshardings, which completes it with a communication"
            )
    return problems
