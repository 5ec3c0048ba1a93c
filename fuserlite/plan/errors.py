"""The planner's one error: a redistribution or a move that cannot exist."""

from __future__ import annotations

from fuserlite.ir.errors import LoweringError


class RedistributionError(LoweringError):
    """No sequence of steps (or transfers) produces the target; the message says why."""
