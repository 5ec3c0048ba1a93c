"""The pass pipeline: run passes by name, verify after each, dump on request.

program = Pipeline.default().run(fusion)   # a lowered copy; `fusion` is untouched

`progress`, if given, is told about each pass before it runs (a display of long
work hangs on it; see Progress). Each pass runs inside a change log
(fuserlite.ir.changes): the validator after it checks what the pass touched, or,
with `verify_all`, the whole IR.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import fuserlite.passes  # noqa: F401 - registers every pass
from fuserlite.ir import args
from fuserlite.ir.changes import ChangeLog, recording
from fuserlite.ir.errors import FuserliteError, PassFailed, PassOptionError, VerifyError
from fuserlite.ir.fusion import Fusion
from fuserlite.passes.base import IR_CLASSES, REGISTRY, Level, Pass, make_pass
from fuserlite.program.program import Program
from fuserlite.program.verify import verify_program, verify_program_changes
from fuserlite.verify.fusion import verify, verify_changes

__all__ = ["DEFAULT_PASSES", "Level", "PassFailed", "Pipeline", "Progress", "lower"]

DEFAULT_PASSES = (
    "propagate-shardings",
    "insert-reshardings",
    "reorder-sharded-axis",
    "segment",
    "schedule-pointwise",
    "schedule-reduction",
    "lower-communications",
    "assign-layouts",
    "lower-streams",
)


def default_pass_names(**options: str) -> list[str]:
    """The default pipeline's pass specs; `options` maps a pass name to its
    options text, e.g. default_pass_names(**{"assign-layouts": "pin=none"})."""
    return [f"{n}[{options[n]}]" if n in options else n for n in DEFAULT_PASSES if n in REGISTRY]


def latency_options(latency_bytes: int | None) -> dict[str, str]:
    """default_pass_names' options that make lower-communications plan with a collective
    costing `latency_bytes` (plan.cost); none for None (its default)."""
    if latency_bytes is None:
        return {}
    return {"lower-communications": f"latency_bytes={latency_bytes}"}


class Progress(Protocol):
    """An observer of long work: `progress(phase, done, total, current)` is called
    before each unit of a phase ("passes", "kernels/communications") with the number
    done so far and the name of the one starting, and once at the end with done == total."""

    def __call__(self, phase: str, done: int, total: int, current: str) -> None: ...


@dataclass(frozen=True)
class _LevelChecks:
    """How the pipeline treats the IR of one level."""

    check_input: Callable  # the IR handed to run()
    # between passes: every invariant of the level, of what a change log holds (None: all)
    check_after_pass: Callable[[Fusion | Program, ChangeLog | None], None]
    copy: Callable  # run() works on a copy


LEVELS = {
    # Between fusion passes meshes may still be inferable: propagate-shardings ensures them.
    Level.fusion: _LevelChecks(verify, verify_changes, lambda f: f.clone()[0]),
    Level.program: _LevelChecks(verify_program, verify_program_changes, Program.clone),
}


class Pipeline:
    """An ordered list of passes with the validator between them.

    The passes' levels must chain: from `input_level` (a Fusion by default), each pass
    takes the level the one before it leaves (segment turns a fusion into a program),
    or the pipeline is a PassOptionError before anything runs."""

    def __init__(
        self,
        passes: Sequence[Pass | str],
        *,
        input_level: Level | str = Level.fusion,
        verify_each: bool = True,
        verify_all: bool = False,
        print_after: Sequence[str] = (),
        print_after_all: bool = False,
        dump: Callable[[str, Fusion | Program], None] | None = None,
        progress: Progress | None = None,
    ) -> None:
        names = "a list of pass names (or Pass objects)"
        if not isinstance(passes, (list, tuple)) or not all(
            isinstance(p, (Pass, str)) for p in passes
        ):
            raise args.fail("Pipeline", "passes", names, passes, PassOptionError)
        if not isinstance(print_after, (list, tuple, set, frozenset)) or not all(
            isinstance(n, str) for n in print_after
        ):
            raise args.fail(
                "Pipeline", "print_after", "a list of pass names", print_after, PassOptionError
            )
        self.passes = [p if isinstance(p, Pass) else make_pass(p) for p in passes]
        levels = "one of " + ", ".join(repr(lv.value) for lv in Level)
        args.instance(input_level, (Level, str), "Pipeline", "input_level", levels, PassOptionError)
        if input_level not in {lv.value for lv in Level}:
            raise args.fail("Pipeline", "input_level", levels, input_level, PassOptionError)
        self.input_level = Level(input_level)
        self.output_level = chain_levels(self.passes, self.input_level)
        self.verify_each = args.boolean(verify_each, "Pipeline", "verify_each", PassOptionError)
        # Between passes the validator checks what each pass touched (its change log);
        # verify_all checks the whole IR, so an edit that escaped the log is caught too.
        self.verify_all = args.boolean(verify_all, "Pipeline", "verify_all", PassOptionError)
        self.print_after_all = args.boolean(
            print_after_all, "Pipeline", "print_after_all", PassOptionError
        )
        unknown = [n for n in print_after if n not in REGISTRY]
        if unknown:
            raise PassOptionError(
                f"--print-after names unknown pass {unknown[0]!r}"
                + args.did_you_mean(unknown[0], REGISTRY)
            )
        self.print_after = set(print_after)
        self.dump = dump or (lambda name, ir: print(f"// ----- after {name} -----\n{ir}"))
        self.progress = progress

    @classmethod
    def default(cls, latency_bytes: int | None = None, **kwargs) -> Pipeline:
        """The default lowering pipeline (docs/design.md §4), its planner's collectives
        costing `latency_bytes` each where given (plan.cost)."""
        args.keywords(kwargs, [*PIPELINE_KEYWORDS, "latency_bytes"], "Pipeline", PassOptionError)
        return cls(default_pass_names(**latency_options(latency_bytes)), **kwargs)

    def run(self, ir: Fusion | Program) -> Fusion | Program:
        """Verify the input, then run every pass on a copy; returns what the last pass
        produced (the copy, or the Program that segment made of it)."""
        cls = IR_CLASSES[self.input_level]
        what = self.input_level.value
        args.instance(ir, cls, "Pipeline.run", what, f"a {cls.__name__}", PassOptionError)
        checks = LEVELS[self.input_level]
        checks.check_input(ir)
        current = checks.copy(ir)
        ran: list[str] = []
        for p in self.passes:
            if self.progress is not None:
                self.progress("passes", len(ran), len(self.passes), str(p))
            level = p.output_level()
            if self.verify_each:
                _check_requires(p, ran, current)
            broken: list[str] = []
            try:
                with recording() as log:
                    result = p.run(current)
                if p.produces is not None:
                    current = _produced(p, result)
                    log = None  # a new level: everything is new
                if self.verify_each:
                    LEVELS[level].check_after_pass(current, None if self.verify_all else log)
                    broken = p.ensures(current)
            except VerifyError as exc:
                raise PassFailed(
                    _context(p, ran) + f"left an invalid {level.value}: {exc}"
                ) from exc
            except FuserliteError as exc:  # keep the class (LoweringError, ...), add the pass
                raise _with_context(exc, _context(p, ran)) from exc
            except Exception as exc:  # a bug in a pass: name it, keep the cause
                raise PassFailed(
                    _context(p, ran) + f"crashed: {type(exc).__name__}: {exc}"
                ) from exc
            _contract_problems(p, ran, "broke its contract: its result", broken)
            ran.append(str(p))
            if self.print_after_all or p.name in self.print_after:
                self.dump(str(p), current)
        if self.progress is not None:
            self.progress("passes", len(ran), len(self.passes), "")
        return current


MAX_PROBLEMS = 10  # a contract's problems shown; the rest are counted


def _check_requires(p: Pass, ran: list[str], ir: Fusion | Program) -> None:
    """Raise PassFailed if `ir` breaks what `p` requires of its input."""
    problems = p.requires(ir)
    _contract_problems(p, ran, "cannot run: its input", problems)


def _contract_problems(p: Pass, ran: list[str], what: str, problems: list[str]) -> None:
    """Raise PassFailed naming the pass, the passes before it and the problems found."""
    problems = list(dict.fromkeys(problems))
    if not problems:
        return
    shown = problems[:MAX_PROBLEMS]
    if len(problems) > MAX_PROBLEMS:
        shown.append(f"... and {len(problems) - MAX_PROBLEMS} more")
    raise PassFailed(_context(p, ran) + f"{what}:\n  " + "\n  ".join(shown))


def chain_levels(passes: list[Pass], level: Level) -> Level:
    """The level after `passes` run on IR of `level`; PassOptionError if one of them
    works on another level than the passes before it leave."""
    for k, p in enumerate(passes):
        if p.level is not level:
            raise PassOptionError(_level_problem(p, level, passes[:k]))
        level = p.output_level()
    return level


def _level_problem(p: Pass, level: Level, before: list[Pass]) -> str:
    where = f"after {', '.join(str(b) for b in before)}" if before else "at the start"
    have, need = level.value, p.level.value
    bridges = sorted(n for n, c in REGISTRY.items() if c.level is level and c.produces is p.level)
    if bridges:
        fix = f"run {' or '.join(bridges)} before it"
    else:
        made = [str(b) for b in before if b.produces is level]
        fix = f"put it before {made[-1]}" if made else f"give the pipeline a {need}"
    return f"pass {p} works on a {need}, but {where} the pipeline holds a {have}: {fix}"


def _produced(p: Pass, result: object) -> Fusion | Program:
    cls = IR_CLASSES[p.output_level()]
    if not isinstance(result, cls):
        raise PassFailed(f"returned {result!r}, not a {cls.__name__}")
    return result


def _with_context(exc: FuserliteError, context: str) -> FuserliteError:
    """The same kind of error, its message prefixed with the pass that raised it."""
    new = copy.copy(exc)
    new.args = (f"{context}failed: {exc}", *exc.args[1:])
    return new


def _context(p: Pass, ran: list[str]) -> str:
    before = ", ".join(ran) if ran else "none"
    return f"pass {p} (after: {before}) "


# Pipeline's keyword arguments (Pipeline.default and fl.lower take them too).
PIPELINE_KEYWORDS = tuple(
    p.name for p in inspect.signature(Pipeline).parameters.values() if p.kind is p.KEYWORD_ONLY
)


def lower(fusion: Fusion, **kwargs) -> Program:
    """The Program of the default pipeline, run on a copy of `fusion` (`kwargs`:
    latency_bytes and Pipeline's keyword arguments)."""
    args.keywords(kwargs, [*PIPELINE_KEYWORDS, "latency_bytes"], "lower", PassOptionError)
    return Pipeline.default(**kwargs).run(fusion)
