"""A seeded, randomized differential test of the whole compiler.

Each case is a small random fusion built with the Python API (1-3 inputs of
rank 1-3, float32 or bfloat16, a chain/DAG of 2-10 ops drawn from every op of the
registry, meshes of 1, 2 or 4 devices and, one case in five, N-D meshes with nested
and uneven shardings over DIDx and DIDy, random shardings). It is lowered by `fl.FusionExecutor` (the default pipeline, sim
backend), run on every compute path (compiled kernels, the interpreted kernel
runner, numpy op by op) and compared with the reference evaluator through
`fl.validate`, compiled and interpreted also bit for bit (tests/three_way.py). A clear `LoweringError`,
`VerifyError` or `ScheduleError` (one that names a tensor) is a legitimate
outcome, except the rejections NOT_THE_USERS_FAULT matches (the generator
schedules nothing but shardings, and every tensor is promised a mesh). Any
other exception, an unclear message, a wrong result or a broken invariant of
the lowered program is a bug, and the failure message prints the case as a
runnable script.

Everything is derived from the seed with numpy's Generator, so a failing seed
reproduces exactly: `python -m pytest tests/test_differential.py -k "batch3"`
or `run_case(seed)` from a shell.

The generator is tests/random_sharded.py (its KNOWN_BUGS steer it around known
bugs); here, a case whose message KNOWN_BUG_MESSAGES matches (while its flag is in
KNOWN_BUGS) counts as "known" instead of failing. Remove a flag once the bug is fixed.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from random_fusion import ACCEPTED_ERRORS, duplicate_parallel_types, rejection_bug
from random_ops import DRAWN
from random_sharded import KNOWN_BUGS, Case, Generator, build_case
from three_way import precompile, run_three_ways

import fuserlite as fl
from fuserlite.ops.registry import all_composites, all_ops
from fuserlite.program.communication import Communication

NUM_CASES = 400
BATCH = 25
# Known bugs recognised by their message rather than avoided by the generator.
KNOWN_BUG_MESSAGES: dict[str, re.Pattern] = {}


# -- checks -----------------------------------------------------------------
def lowered_problems(case: Case, ex: fl.FusionExecutor) -> list[str]:
    """Invariants of the lowered program."""
    problems = duplicate_parallel_types(ex.program)
    for comm in ex.communications:
        assert isinstance(comm, Communication)
        if comm.bytes_per_device < 0:
            problems.append(f"{comm.kind.value} sends {comm.bytes_per_device} bytes per device")
    if not case.sharded and len(case.meshes) <= 1 and ex.communications:
        kinds = [c.kind.value for c in ex.communications]
        problems.append(f"an unsharded fusion on one mesh lowered to communications {kinds}")
    return problems


def run_case(seed: int) -> tuple[str, str]:
    """('ok' | 'rejected' | 'known' | 'bug', detail)."""
    return check_case(*lower_case(seed))


def lower_case(seed: int) -> tuple[Case, fl.FusionExecutor | tuple[str, str]]:
    """The case, and its executor or the outcome of a lowering that failed."""
    case = build_case(seed)
    try:
        return case, fl.FusionExecutor(case.fusion)
    except ACCEPTED_ERRORS as exc:
        for flag, pattern in KNOWN_BUG_MESSAGES.items():
            if flag in KNOWN_BUGS and pattern.search(str(exc)):
                return case, ("known", f"{flag}: {exc}")
        why = rejection_bug(exc)
        if why is not None:
            return case, ("bug", f"{why}\n{case.script()}")
        return case, ("rejected", f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        return case, ("bug", f"lowering raised {type(exc).__name__}: {exc}\n{case.script()}")


def check_case(case: Case, ex: fl.FusionExecutor | tuple[str, str]) -> tuple[str, str]:
    """Run a lowered case on every compute path (three_way.run_three_ways)."""
    if isinstance(ex, tuple):
        return ex
    problems = lowered_problems(case, ex)
    if problems:
        return "bug", "lowered program: " + "; ".join(problems) + "\n" + case.script()
    inputs = fl.random_inputs(case.fusion, case.seed)
    try:
        run_three_ways(case.fusion, inputs, ex)
    except Exception as exc:
        return "bug", f"{type(exc).__name__}: {exc}\n{case.script()}"
    return "ok", ""


def run_batch(seeds) -> tuple[Counter, list[str]]:
    counts: Counter = Counter()
    bugs = []
    lowered = [lower_case(seed) for seed in seeds]
    precompile(ex for _, ex in lowered if not isinstance(ex, tuple))  # one compiler launch
    for case, ex in lowered:
        outcome, detail = check_case(case, ex)
        counts[outcome] += 1
        if outcome == "bug":
            bugs.append(f"--- seed {case.seed}: {detail}")
    return counts, bugs


@pytest.mark.parametrize("batch", range(NUM_CASES // BATCH), ids=lambda b: f"batch{b}")
def test_random_fusions_match_the_reference(batch):
    counts, bugs = run_batch(range(batch * BATCH, (batch + 1) * BATCH))
    assert not bugs, f"{len(bugs)} of {BATCH} cases failed:\n" + "\n".join(bugs)
    # The generator must mostly produce lowerable fusions, or the test tests little.
    assert counts["ok"] >= BATCH // 2, dict(counts)


def test_the_generator_draws_every_op():
    """Registry-driven: every op and composite has a generator kind (random_ops.DRAWN),
    and the cases of the test use every op at least once."""
    names = {d.name for d in all_ops()} | {c.name for c in all_composites()}
    assert set(DRAWN) == names, f"not drawn: {sorted(names - set(DRAWN))}"
    assert all(hasattr(Generator, f"op_{kind}") for kind in DRAWN.values())
    used = {e.op_name for s in range(NUM_CASES) for e in build_case(s).fusion.exprs()}
    composites = {c.name for c in all_composites()}  # their parts are what a fusion holds
    assert names - composites <= used, f"never drawn: {sorted(names - composites - used)}"


def test_generator_is_deterministic():
    assert build_case(7).script() == build_case(7).script()


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_repro_script_rebuilds_the_same_fusion(seed):
    case = build_case(seed)
    namespace: dict = {}
    exec(case.build_script(), namespace)
    assert fl.to_fus(namespace["f"]) == fl.to_fus(case.fusion)
