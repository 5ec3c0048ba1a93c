"""Seeded random checks aimed at the pointwise scheduler, the kernel runner and codegen.

tests/test_differential.py covers sharding and lowering broadly; this file
stresses `schedule-pointwise` itself on the random pointwise fusions of
tests/random_pointwise.py (random extents, broadcasts, dtypes, meshes and
`block_size` values of the pass). Each case runs

- through the compiled kernels (`fl.FusionExecutor(f)` with a random block size),
- through the kernel runner (`compute="interpret"`), bit-identical to the compiled
  kernels wherever the arithmetic is the same (tests/three_way.py),
- through plain numpy per expression (`compute="numpy"`),
- against `fl.evaluate` (`fl.validate`: exact for integers, tolerance for floats),

and checks the scheduled program's invariants (one loop axis per parallel type;
device axes in front, made by no split but the sharding split; threadIdx.x
extent == block_size; `fl.verify_program`). A sample of the kernels is compiled with
one `nvcc -ptx` call when nvcc is on the PATH.

Everything derives from the seed: `run_case(seed)` reproduces a case, and a
failure prints it as a runnable script.

KNOWN_BUGS lists compiler bugs this file steers around (or tolerates) so the
suite stays green; remove a flag once its bug is fixed and the test will check
the pattern again.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from random_fusion import ACCEPTED_ERRORS, duplicate_parallel_types, rejection_bug
from random_pointwise import Case, build_case, pipeline_for
from three_way import precompile, run_three_ways

import fuserlite as fl
from fuserlite.ir.types import ParallelType
from fuserlite.kernel.cuda import cuda_source
from fuserlite.pipeline import PassFailed
from fuserlite.program.program import Kernel, Program
from fuserlite.schedule.shard import has_schedule, shard_axis

# Known compiler bugs (flag -> what goes wrong); see the module docstring.
KNOWN_BUGS: dict[str, str] = {}  # all four bugs this file found are fixed
KNOWN_BUG_MESSAGES: dict[str, re.Pattern] = {
    "vectorize-mixed-grid-depth": re.compile(r"scheduled loop axes but the kernel has"),
}

NUM_CASES = 800
BATCH = 100
NVCC_SAMPLE = 30


# -- invariants -------------------------------------------------------------------
def scheduled_kernels(lowered: Program) -> list[Kernel]:
    return [s for s in lowered.kernels if s.scheduled]


def schedule_problems(lowered: Program, block_size: int) -> list[str]:
    problems = duplicate_parallel_types(lowered)
    for kernel in scheduled_kernels(lowered):
        for tv in kernel.tensors:
            if not has_schedule(tv):  # made by another segment or left alone: sharding only
                continue
            loop, logical = tv.loop, tv.logical
            devs = [k for k, ax in enumerate(loop) if ax.is_device_parallel]
            if devs != list(range(len(devs))):
                problems.append(f"{tv.name}: device axes at loop positions {devs}, not in front")
            for k in devs:
                ax, d = loop[k], loop[k].definition
                if d is None:
                    ok = ax in logical
                else:  # the sharding split: an outer split of a logical axis by the mesh size
                    ok = (
                        d.__class__.__name__ == "Split"
                        and d.outer == ax.position
                        and not d.inner_split
                        and d.input < tv.domain.n_logical
                        and tv.mesh is not None
                        and d.factor == tv.mesh.size
                    )
                if not ok:
                    problems.append(f"{tv.name}: device loop axis {k} comes from {d!r}")
            for ax in loop:  # a reduction's threads are schedule-reduction's (a power of 2)
                if (
                    ax.parallel_type is ParallelType.TIDx
                    and not ax.is_reduction
                    and ax.extent != block_size
                ):
                    problems.append(
                        f"{tv.name}: threadIdx.x extent {ax.extent} != block_size {block_size}"
                    )
    try:
        fl.verify_program(lowered)
    except fl.VerifyError as exc:
        problems.append(f"verify: {exc}")
    return problems


def outputs_differ(a: list[np.ndarray], b: list[np.ndarray]) -> str | None:
    """Bit-level comparison of two runs (NaN == NaN)."""
    for k, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"output {k}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}"
        if not np.array_equal(x, y, equal_nan=fl.DType.from_numpy(x.dtype).is_float):
            return f"output {k}: values differ"
    return None


# -- one case ---------------------------------------------------------------------
@dataclass
class Outcome:
    kind: str  # ok | rejected | bug
    detail: str = ""
    lowered: Program | None = None
    unscheduled: int = 0
    scheduled: int = 0


def run_case(seed: int) -> Outcome:
    return check_case(*lower_case(seed))


def _bug(case: Case, what: str) -> Outcome:
    return Outcome("bug", f"{case.options}: {what}\n{case.script()}")


def lower_case(seed: int) -> tuple[Case, fl.FusionExecutor | Outcome]:
    """The case, and its executor or the outcome of a lowering that failed."""
    case = build_case(seed)
    try:
        pipeline = pipeline_for(case.block_size, case.vectorize)
        return case, fl.FusionExecutor(case.fusion, pipeline=pipeline)
    except ACCEPTED_ERRORS as exc:
        why = rejection_bug(exc)
        if why is not None:
            return case, _bug(case, why)
        return case, Outcome("rejected", f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        return case, _bug(case, f"lowering raised {type(exc).__name__}: {exc}")


def check_case(case: Case, ex: fl.FusionExecutor | Outcome) -> Outcome:
    """Run a lowered case on every compute path (three_way.run_three_ways)."""
    if isinstance(ex, Outcome):
        return ex
    problems = schedule_problems(ex.program, case.block_size)
    if problems:
        return _bug(case, "lowered program: " + "; ".join(problems))
    inputs = fl.random_inputs(case.fusion, case.seed)
    try:
        pipeline = pipeline_for(case.block_size, case.vectorize)
        runs = run_three_ways(case.fusion, inputs, ex, pipeline)
    except Exception as exc:
        for flag, pattern in KNOWN_BUG_MESSAGES.items():
            if flag in KNOWN_BUGS and case.vectorize and pattern.search(str(exc)):
                return Outcome("known", f"{flag}: {exc}")
        return _bug(case, f"{type(exc).__name__}: {exc}")
    # Integers must agree bit for bit. Floats only within tolerance: a float16 reduction
    # kernel (numpy in both paths) sums in an order that depends on its input's memory
    # layout, which differs between runner-written and numpy-written arrays.
    exact = [k for k, t in enumerate(case.fusion.outputs) if not t.dtype.is_float]
    diff = outputs_differ([runs["interpret"][k] for k in exact], [runs["numpy"][k] for k in exact])
    if diff is not None:
        return _bug(case, f"kernel runner vs numpy op by op: {diff}")
    kernels = ex.program.kernels
    n_sched = sum(k.scheduled for k in kernels)
    return Outcome("ok", "", ex.program, len(kernels) - n_sched, n_sched)


def run_batch(seeds) -> tuple[Counter, list[str], list[Outcome]]:
    counts: Counter = Counter()
    bugs, oks = [], []
    lowered = [lower_case(seed) for seed in seeds]
    precompile(ex for _, ex in lowered if not isinstance(ex, Outcome))  # one compiler launch
    for case, ex in lowered:
        o = check_case(case, ex)
        counts[o.kind] += 1
        counts["kernels_scheduled"] += o.scheduled
        counts["kernels_unscheduled"] += o.unscheduled
        if o.kind == "bug":
            bugs.append(f"--- seed {case.seed}: {o.detail}")
        elif o.kind == "ok":
            oks.append(o)
    return counts, bugs, oks


@pytest.mark.parametrize("batch", range(NUM_CASES // BATCH), ids=lambda b: f"batch{b}")
def test_random_pointwise_fusions(batch: int) -> None:
    counts, bugs, _ = run_batch(range(1000 + batch * BATCH, 1000 + (batch + 1) * BATCH))
    assert not bugs, f"{len(bugs)} of {BATCH} cases failed:\n" + "\n".join(bugs)
    assert counts["ok"] >= BATCH * 3 // 4, dict(counts)
    # Most pointwise kernels must actually be scheduled, or this tests little.
    assert counts["kernels_scheduled"] >= 2 * counts["kernels_unscheduled"], dict(counts)


def test_generator_is_deterministic() -> None:
    assert build_case(5).script() == build_case(5).script()
    assert fl.to_fus(build_case(5).fusion) == fl.to_fus(build_case(5).fusion)


def test_generator_covers_the_space() -> None:
    """The generator reaches every dtype, rank, device count and odd block sizes."""
    dtypes, ranks, meshes, blocks = set(), set(), set(), set()
    for seed in range(1000, 1000 + NUM_CASES):
        case = build_case(seed)
        dtypes |= case.dtypes
        ranks |= {len(t.shape) for t in case.fusion.outputs}
        meshes |= {t.mesh.size for t in case.fusion.inputs if t.mesh is not None}
        blocks.add(case.block_size)
    assert {"float32", "float16", "bfloat16", "float64", "int32"} <= dtypes
    assert {1, 2, 3, 4} <= ranks
    assert {1, 2, 4} <= meshes
    assert any(b & (b - 1) for b in blocks) and {1, 1024} <= blocks


# -- block sizes --------------------------------------------------------------------
def _small_fusion() -> fl.Fusion:
    with fl.Fusion() as f:
        a = fl.tensor([5, 7])
        b = fl.tensor([1, 7])
        f.add_input(a)
        f.add_input(b)
        f.add_output(fl.exp(a) + b)
    return f


@pytest.mark.parametrize("block_size", [0, 1025])
def test_out_of_range_block_size_is_an_error(block_size: int) -> None:
    f = _small_fusion()
    if "invalid-block-size-silently-ignored" in KNOWN_BUGS:
        ex = fl.FusionExecutor(f, pipeline=pipeline_for(block_size))
        (kernel,) = ex.program.kernels
        assert not kernel.scheduled and "1..1024" in kernel.notes[0]
        return
    with pytest.raises((fl.ScheduleError, PassFailed), match=r"block_size.*1\.\.1024"):
        fl.FusionExecutor(f, pipeline=pipeline_for(block_size))


def test_every_block_size_of_a_prime_extent() -> None:
    """An extent of 257 against 1..1024 threads: tails, one thread, one block."""
    with fl.Fusion() as f:
        a = fl.tensor([257], dtype="int32")
        b = fl.tensor([1], dtype="int32")
        f.add_input(a)
        f.add_input(b)
        f.add_output(a * b + 3)
    inputs = fl.random_inputs(f, 0)
    want = fl.evaluate(f, inputs)
    for block_size in (1, 2, 3, 128, 255, 256, 257, 258, 511, 1023, 1024):
        ex = fl.FusionExecutor(f, pipeline=pipeline_for(block_size))
        assert scheduled_kernels(ex.program), block_size
        assert not schedule_problems(ex.program, block_size)
        (got,) = ex.run(inputs)
        np.testing.assert_array_equal(got, want[0], err_msg=f"block_size={block_size}")


def test_vectorize_with_unrelated_outputs_of_different_extents() -> None:
    """Two unrelated outputs, one kernel: [8] can be vectorized, [7] cannot."""
    with fl.Fusion() as f:
        a = fl.tensor([8])
        b = fl.tensor([7])
        f.add_input(a)
        f.add_input(b)
        f.add_output(fl.neg(a))
        f.add_output(fl.neg(b))
    ex = fl.FusionExecutor(f, pipeline=pipeline_for(128, vectorize=True))
    inputs = fl.random_inputs(f, 0)
    if "vectorize-mixed-grid-depth" in KNOWN_BUGS:
        with pytest.raises(fl.ScheduleError, match="scheduled loop axes but the kernel has"):
            ex.run(inputs)
        return
    fl.validate(f, inputs, ex.run(inputs))


def test_outer_split_remainder_merged_into_a_broadcast_is_computed_everywhere() -> None:
    """An extent-D axis outer-split by D leaves an inner axis of extent 1; the scheduler
    merges it with a broadcast axis into an iteration axis that its consumer, sharded on
    the whole axis, sees as broadcast. The producer was predicated to the first thread
    while the consumer read it on all of them: NaN interpreted, half the sum compiled."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x = fl.tensor([4], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        shard_axis(x, 0, mesh)
        b = fl.broadcast(x, [True, False])
        b.outer_split(1, 4).axis(1).parallelize(ParallelType.DIDx)
        f.add_output(b)
        f.add_output(fl.add(b, x))
    run_three_ways(f, fl.random_inputs(f, 263))


def test_cuda_source_of_a_sharded_reduction_program() -> None:
    """A reduction kernel with a sharded output is a scheduled reduction, emitted with
    its block reduction (schedule-reduction)."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        a = fl.tensor([4, 8])
        f.add_input(a)
        shard_axis(a, 0, mesh)
        s = fl.sum(a, 1)
        shard_axis(s, 0, mesh)
        f.add_output(s)
    ex = fl.FusionExecutor(f)
    inputs = fl.random_inputs(f, 0)
    fl.validate(f, inputs, ex.run(inputs))
    if "codegen-emits-unscheduled-sharded-kernel" in KNOWN_BUGS:
        with pytest.raises(fl.ExecutionError, match="neither device-parallel nor bound"):
            cuda_source(ex.program)
        return
    src = cuda_source(ex.program)
    assert "__global__" in src and "__syncthreads();" in src and "not scheduled" not in src


# -- nvcc -----------------------------------------------------------------------------
def _compilable(lowered: Program) -> bool:
    if "codegen-half-does-not-compile" not in KNOWN_BUGS:
        return True
    return not any(t.dtype.name == "float16" for k in scheduled_kernels(lowered) for t in k.tensors)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_a_sample_of_random_kernels(tmp_path: Path) -> None:
    sources, entries = [], 0
    seed = 5000
    while len(sources) < NVCC_SAMPLE and seed < 5000 + 4 * NVCC_SAMPLE:
        o = run_case(seed)
        if o.kind == "ok" and o.scheduled and _compilable(o.lowered):
            target = o.lowered
            if "codegen-emits-unscheduled-sharded-kernel" in KNOWN_BUGS:
                target = scheduled_kernels(o.lowered)
            sources.append(cuda_source(target, prefix=f"adv{seed}"))
            entries += o.scheduled
        seed += 1
    assert len(sources) >= NVCC_SAMPLE * 2 // 3
    cu = tmp_path / "adversarial.cu"
    cu.write_text("\n".join(sources))
    proc = subprocess.run(
        ["nvcc", "-ptx", "-o", str(tmp_path / "adversarial.ptx"), str(cu)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[:4000]
    assert (tmp_path / "adversarial.ptx").read_text().count(".entry") == entries
