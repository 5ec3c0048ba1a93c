"""Examples the executor cannot run yet: a strict xfail each, dropped when they run."""

from __future__ import annotations

from pathlib import Path

import pytest

# Strict: an example that starts to run fails here until its name is removed. (The N-D
# examples, dp_tp_mlp.fus and fsdp_tp.py, run since issue 12: none waits today.)
NOT_EXECUTABLE_YET: set[str] = set()
REASON = "the executor cannot run this example yet"


def runnable(paths: list[Path]) -> list:
    """`paths` as pytest parameters, the examples not executable yet as strict xfails."""
    return [
        pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=REASON))
        if p.name in NOT_EXECUTABLE_YET
        else p
        for p in paths
    ]
