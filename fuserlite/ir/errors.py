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
