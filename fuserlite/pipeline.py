"""The pass pipeline: run passes by name, verify after each, dump on request.

lowered = Pipeline.default().run(fusion)   # a lowered copy; `fusion` is untouched

`progress`, if given, is told about each pass before it runs (a display of long
work hangs on it; see Progress).
"""

from __future__ import annotations

import copy
import gc
from collections.abc import Callable, Sequence
from typing import Protocol

import fuserlite.passes  # noqa: F401 - registers every pass
from fuserlite.ir import args
from fuserlite.ir.errors import FuserliteError, VerifyError
from fuserlite.ir.fusion import Fusion
from fuserlite.passes.base import REGISTRY, Pass, make_pass
from fuserlite.verify import verify

DEFAULT_PASSES = (
    "propagate-shardings",
    "insert-reshardings",
    "reorder-sharded-axis",
    "segment",
    "schedule-pointwise",
    "lower-communications",
    "assign-layouts",
)


def default_pass_names(**options: str) -> list[str]:
    """The default pipeline's pass specs; `options` maps a pass name to its
    options text, e.g. default_pass_names(**{"assign-layouts": "pin=none"})."""
    return [f"{n}[{options[n]}]" if n in options else n for n in DEFAULT_PASSES if n in REGISTRY]


class Progress(Protocol):
    """An observer of long work: `progress(phase, done, total, current)` is called
    before each unit of a phase ("passes", "kernels/communications") with the number
    done so far and the name of the one starting, and once at the end with done == total."""

    def __call__(self, phase: str, done: int, total: int, current: str) -> None: ...


class PassFailed(FuserliteError):
    """A pass broke an invariant or raised; names the pass and the passes before it."""


class Pipeline:
    """An ordered list of passes with the validator between them."""

    def __init__(
        self,
        passes: Sequence[Pass | str],
        *,
        verify_each: bool = True,
        print_after: Sequence[str] = (),
        print_after_all: bool = False,
        dump: Callable[[str, Fusion], None] | None = None,
        progress: Progress | None = None,
    ) -> None:
        names = "a list of pass names (or Pass objects)"
        if not isinstance(passes, (list, tuple)) or not all(
            isinstance(p, (Pass, str)) for p in passes
        ):
            raise args.fail("Pipeline", "passes", names, passes, PassFailed)
        if not isinstance(print_after, (list, tuple, set, frozenset)) or not all(
            isinstance(n, str) for n in print_after
        ):
            raise args.fail(
                "Pipeline", "print_after", "a list of pass names", print_after, PassFailed
            )
        self.passes = [p if isinstance(p, Pass) else make_pass(p) for p in passes]
        self.verify_each = args.boolean(verify_each, "Pipeline", "verify_each", PassFailed)
        self.print_after_all = args.boolean(
            print_after_all, "Pipeline", "print_after_all", PassFailed
        )
        unknown = [n for n in print_after if n not in REGISTRY]
        if unknown:
            raise PassFailed(f"--print-after names unknown pass {unknown[0]!r}")
        self.print_after = set(print_after)
        self.dump = dump or (lambda name, f: print(f"// ----- after {name} -----\n{f}"))
        self.progress = progress

    @classmethod
    def default(cls, **kwargs) -> Pipeline:
        """The default lowering pipeline (DESIGN.md §4)."""
        return cls(default_pass_names(), **kwargs)

    def run(self, fusion: Fusion) -> Fusion:
        """Verify the input, then run every pass on a copy; returns the copy."""
        # A compile allocates many small, long-lived objects and frees almost no
        # cycles: the cyclic collector's full scans would make lowering superlinear.
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(fusion)
        finally:
            if enabled:
                gc.enable()

    def _run(self, fusion: Fusion) -> Fusion:
        args.instance(fusion, Fusion, "Pipeline.run", "fusion", "a Fusion", PassFailed)
        verify(fusion)
        lowered, _ = fusion.clone()
        ran: list[str] = []
        for p in self.passes:
            if self.progress is not None:
                self.progress("passes", len(ran), len(self.passes), str(p))
            try:
                p.run(lowered)
                if self.verify_each:
                    verify(lowered, require_mesh=True)
            except VerifyError as exc:
                raise PassFailed(_context(p, ran) + f"left an invalid fusion: {exc}") from exc
            except FuserliteError as exc:  # keep the class (LoweringError, ...), add the pass
                raise _with_context(exc, _context(p, ran)) from exc
            except Exception as exc:  # a bug in a pass: name it, keep the cause
                raise PassFailed(
                    _context(p, ran) + f"crashed: {type(exc).__name__}: {exc}"
                ) from exc
            ran.append(str(p))
            if self.print_after_all or p.name in self.print_after:
                self.dump(str(p), lowered)
        if self.progress is not None:
            self.progress("passes", len(ran), len(self.passes), "")
        return lowered


def _with_context(exc: FuserliteError, context: str) -> FuserliteError:
    """The same kind of error, its message prefixed with the pass that raised it."""
    new = copy.copy(exc)
    new.args = (f"{context}failed: {exc}", *exc.args[1:])
    return new


def _context(p: Pass, ran: list[str]) -> str:
    before = ", ".join(ran) if ran else "none"
    return f"pass {p} (after: {before}) "


def lower(fusion: Fusion, **kwargs) -> Fusion:
    """Run the default pipeline on a copy of `fusion`."""
    return Pipeline.default(**kwargs).run(fusion)
