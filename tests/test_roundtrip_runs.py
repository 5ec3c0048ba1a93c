"""A program read back from its printed form runs exactly as the program printed: for
every example and a sample of the differential generator's fusions, print -> parse ->
print is a fixed point at every stage of the default pipeline, and the read-back
lowered program (and the read-back fusion, lowered) computes the direct run's outputs
bit for bit on the simulated mesh."""

from __future__ import annotations

import numpy as np
import pytest
from random_sharded import build_case
from test_roundtrip import example_fusions, run_pass

import fuserlite as fl
from fuserlite.ir.fusion import Fusion
from fuserlite.pipeline import DEFAULT_PASSES
from fuserlite.program.parser import parse_printed

SEEDS = range(5000, 5040)  # outside the differential suite's 400: other fusions


def bits(a: np.ndarray) -> tuple:
    """An array as its dtype, shape and bytes (NaNs and -0.0 compared exactly)."""
    return a.dtype, a.shape, np.ascontiguousarray(a).tobytes()


def assert_reads_back_and_runs_the_same(fusion: Fusion) -> None:
    stages: list = [fusion]
    for name in DEFAULT_PASSES:
        try:
            stages.append(run_pass(name, stages[-1]))
        except fl.FuserliteError:  # rejected: test_differential's business
            return
    for k, ir in enumerate(stages):
        text = str(ir)
        assert str(parse_printed(text)) == text, f"stage {k} is not a fixed point"
    inputs = fl.random_inputs(fusion, seed=5)
    direct = fl.FusionExecutor(stages[-1], backend="sim", compute="interpret").run(inputs)
    for k in (0, len(stages) - 1):
        back = parse_printed(str(stages[k]))
        outputs = fl.FusionExecutor(back, backend="sim", compute="interpret").run(inputs)
        assert [bits(o) for o in outputs] == [bits(d) for d in direct], f"stage {k} runs otherwise"


EXAMPLES = example_fusions()


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_reads_back_and_runs_the_same(name: str) -> None:
    assert_reads_back_and_runs_the_same(EXAMPLES[name])


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_fusions_read_back_and_run_the_same(seed: int) -> None:
    assert_reads_back_and_runs_the_same(build_case(seed).fusion)
