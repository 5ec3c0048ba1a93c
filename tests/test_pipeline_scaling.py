"""The pipeline's work grows linearly with the fusion (issue 8, item 10).

Timing belongs to benchmarks/pipeline_scaling.py; this counts Python function
calls instead, which does not depend on the machine or its load: lowering a
fusion 4x larger must make at most ~4x the calls. Each of the three shapes
below was quadratic somewhere before (a scan of every expression per output, a
set rebuilt per output, the propagation graph rebuilt per reference, a tensor's
uses filtered once per reader).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

import fuserlite as fl
from fuserlite.models import many_outputs
from fuserlite.schedule.shard import shard_axis

MESH = fl.DeviceMesh.for_num_devices(2)


def many_parts(n: int) -> fl.Fusion:
    """n unconnected `x_k + 1`: one reference per part."""
    with fl.Fusion() as f:
        for _ in range(n):
            x = fl.tensor([8, 16])
            f.add_input(x)
            shard_axis(x, 0, MESH)
            f.add_output(x + 1.0)
    return f


def chain(n: int) -> fl.Fusion:
    """n pointwise ops in a row."""
    with fl.Fusion() as f:
        x = fl.tensor([8, 16])
        f.add_input(x)
        shard_axis(x, 0, MESH)
        t = x
        for k in range(n):
            t = fl.tanh(t) if k % 2 else t * 0.5
        f.add_output(t)
    return f


def calls(fn: Callable[[], object]) -> int:
    """Python function calls made by fn()."""
    count = 0

    def profile(frame, event, arg) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("build", [many_outputs, many_parts, chain], ids=lambda b: b.__name__)
def test_lowering_work_grows_linearly(build):
    small, large = (calls(lambda f=fusion: fl.lower(f)) for fusion in (build(100), build(400)))
    assert large / small <= 4.4, f"{large} calls for 400 vs {small} for 100"
