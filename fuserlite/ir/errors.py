"""The one error hierarchy of fuserlite; every user-reachable failure is one of these."""

from __future__ import annotations


class FuserliteError(Exception):
    """Base class of every error fuserlite raises on purpose."""


class ParseError(FuserliteError):
    """A .fus text could not be parsed; the message shows file:line:col and a caret."""

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None):
        super().__init__(message)
        self.line = line
        self.column = column


class FusionError(FuserliteError):
    """An op or fusion was built wrongly (bad shapes, unknown tensor, wrong arity)."""


class ScheduleError(FuserliteError):
    """A schedule primitive (split, merge, reorder, parallelize, propagation) was misused."""


class VerifyError(FuserliteError):
    """The validator found a broken IR invariant."""


class LoweringError(FuserliteError):
    """A resharding or expression cannot be lowered to communications and kernels."""


class ExecutionError(FuserliteError):
    """Running a fusion failed: bad inputs, mismatched buffers, a failing rank."""


class RedistributionError(LoweringError):
    """No sequence of steps (or transfers) produces the target; the message says why."""


class PassOptionError(FuserliteError):
    """A pass or a pipeline was given wrongly: an unknown or malformed pass name or
    option, passes in an impossible order (a program pass before segment, a fusion pass
    after it), or an argument of the wrong kind."""


class PassFailed(FuserliteError):
    """A pass broke an invariant or raised; names the pass and the passes before it."""


class ValidationError(ExecutionError):
    """Executed outputs differ from the reference."""


class MachineError(FuserliteError):
    """A machine model of the step-time model (fuserlite.timing) is unknown, malformed,
    or has fewer devices than the program uses."""
