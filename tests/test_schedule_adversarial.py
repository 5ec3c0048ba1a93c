"""Seeded random checks aimed at the pointwise scheduler, the kernel runner and codegen.

tests/test_differential.py covers sharding and lowering broadly; this file
stresses `schedule-pointwise` itself: random pointwise fusions of rank 1-4 with
extents 1..300 (primes, 1, powers of two and their neighbours), broadcasts on
every axis position, outputs of different ranks, several outputs, a tensor used
twice, scalar operands, int32 / float16 / bfloat16 / float32 / float64, sharded or not on
1, 2 or 4 devices, and random `block_size` values of the pass. Each case runs

- through the kernel runner (`fl.FusionExecutor(f)` with a random block size),
- through plain numpy per expression (`schedule=False`),
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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.ir.types import ParallelType
from fuserlite.kernel.cuda import cuda_source
from fuserlite.pipeline import PassFailed, default_pass_names
from fuserlite.program.program import Kernel
from fuserlite.schedule.shard import has_schedule, shard_axis

# Known compiler bugs (flag -> what goes wrong); see the module docstring.
KNOWN_BUGS: dict[str, str] = {}  # all four bugs this file found are fixed
KNOWN_BUG_MESSAGES: dict[str, re.Pattern] = {
    "vectorize-mixed-grid-depth": re.compile(r"scheduled loop axes but the kernel has"),
}

NUM_CASES = 800
BATCH = 100
MAX_RANK = 4
MAX_ELEMENTS = 4096  # per tensor: keeps a case a few milliseconds
MAX_BOUND = 60.0  # |values| stay small so float16 neither overflows nor loses its tolerance
NVCC_SAMPLE = 30
EXTENTS = (1, 1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 31, 32, 64, 97, 127, 128, 129, 251, 256, 257, 300)
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32")
FLOAT_UNARY = ("neg", "abs", "relu", "exp", "tanh", "gelu")
INT_UNARY = ("neg", "abs", "relu")
BINARY = ("add", "sub", "mul", "maximum", "minimum")
ACCEPTED_ERRORS = (fl.LoweringError, fl.VerifyError, fl.ScheduleError)
NAMES_A_TENSOR = re.compile(r"\bT\d+\b")
NOT_THE_USERS_FAULT = re.compile(r"cannot propagate the schedule|both need a mesh")


def block_size_for(rng: np.random.Generator) -> int:
    """Mostly the default, often a random 1..1024 (non powers of two included)."""
    r = rng.random()
    if r < 0.3:
        return 128
    if r < 0.5:
        return int(rng.choice([1, 2, 3, 31, 32, 33, 127, 129, 255, 257, 1000, 1023, 1024]))
    return int(rng.integers(1, 1025))


@dataclass
class Case:
    seed: int
    fusion: fl.Fusion
    lines: list[str]
    block_size: int
    vectorize: bool = False
    dtypes: set = field(default_factory=set)

    @property
    def options(self) -> str:
        return f"block_size={self.block_size}" + (",vectorize=true" if self.vectorize else "")

    def script(self) -> str:
        body = "\n".join("    " + line for line in self.lines)
        return (
            "import fuserlite as fl\n"
            "from fuserlite.schedule.shard import shard_axis\n\n"
            f"with fl.Fusion() as f:\n{body}\n"
            "names = fl.pipeline.default_pass_names("
            f'**{{"schedule-pointwise": "{self.options}"}})\n'
            "ex = fl.FusionExecutor(f, pipeline=fl.Pipeline(names))\n"
            f"inputs = fl.random_inputs(f, {self.seed})\n"
            "fl.validate(f, inputs, ex.run(inputs))\n"
        )


class Generator:
    """One random pointwise fusion inside an active `fl.Fusion()`."""

    def __init__(self, seed: int, fusion: fl.Fusion) -> None:
        self.rng = np.random.default_rng(seed)
        self.fusion = fusion
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.bound: dict[int, float] = {}
        self.live: list[fl.TensorView] = []
        self.inputs: list[fl.TensorView] = []
        self.mesh: fl.DeviceMesh | None = None
        self.dtypes: set[str] = set()

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def name(self, tv: fl.TensorView) -> str:
        return self.names[id(tv)]

    def register(self, tv: fl.TensorView, expr: str, bound: float) -> fl.TensorView:
        self.names[id(tv)] = f"t{len(self.names)}"
        self.lines.append(f"{self.name(tv)} = {expr}")
        self.bound[id(tv)] = bound
        self.live.append(tv)
        self.dtypes.add(tv.dtype.name)
        return tv

    # -- shapes and shardings -------------------------------------------------
    def base_shape(self, rank: int, d: int) -> list[int]:
        shape: list[int] = []
        for _ in range(rank):
            room = MAX_ELEMENTS // max(1, int(np.prod(shape)))
            options = [e for e in EXTENTS if e <= room]
            e = int(self.pick(options))
            if d > 1 and e > 1 and self.chance(0.5) and max(d, e - e % d) <= room:
                e = max(d, e - e % d)  # make it shardable
            shape.append(e)
        return shape

    def maybe_shard(self, tv: fl.TensorView, p_shard: float, p_bcast: float) -> None:
        mesh = self.mesh
        if mesh is None:
            return
        tv.set_device_mesh(mesh)
        self.lines.append(f"{self.name(tv)}.set_device_mesh(mesh)")
        if mesh.size == 1:
            return
        logical = tv.domain.logical
        shardable = [
            i for i, ax in enumerate(logical) if ax.is_iteration and ax.extent % mesh.size == 0
        ]
        bcast = [i for i, ax in enumerate(logical) if ax.is_broadcast]
        if shardable and self.chance(p_shard):
            i = int(self.pick(shardable))
            shard_axis(tv, i, mesh)
            self.lines.append(f"shard_axis({self.name(tv)}, {i}, mesh)")
        elif bcast and self.chance(p_bcast):  # seed 004: bDIDx
            i = int(self.pick(bcast))
            pos = tv.domain.loop.index(logical[i])
            tv.axis(pos).parallelize(ParallelType.DIDx)
            self.lines.append(f"{self.name(tv)}.axis({pos}).parallelize(fl.ParallelType.DIDx)")

    # -- ops --------------------------------------------------------------------
    def operand(self) -> fl.TensorView:
        return self.live[-1] if self.chance(0.5) else self.pick(self.live)

    @staticmethod
    def broadcastable(a: fl.TensorView, b: fl.TensorView) -> bool:
        xs, ys = a.data_axes(), b.data_axes()
        for x, y in zip(reversed(xs), reversed(ys)):
            if not (x.is_broadcast or y.is_broadcast or x.extent == y.extent):
                return False
        if max(len(xs), len(ys)) > MAX_RANK:
            return False
        # an outer product of two broadcasts must stay small too
        n = len(xs) - len(ys)
        longer, shorter = (xs, ys) if n >= 0 else (ys, xs)
        extents = [ax.extent for ax in longer[: abs(n)]]
        extents += [max(x.extent, y.extent) for x, y in zip(longer[abs(n) :], shorter)]
        return int(np.prod(extents)) <= 4 * MAX_ELEMENTS

    def op(self) -> fl.TensorView | None:
        kinds = ["unary"] * 3 + ["binary"] * 5 + ["scalar"] * 2 + ["bcast"] * 2 + ["set", "reduce"]
        kind = self.pick(kinds)
        return getattr(self, f"op_{kind}")()

    def op_unary(self):
        a = self.operand()
        b = self.bound[id(a)]
        names = FLOAT_UNARY if a.dtype.is_float else INT_UNARY
        name = self.pick([n for n in names if n != "exp" or b <= 3.0])
        nb = float(np.exp(b)) if name == "exp" else (1.0 if name == "tanh" else b)
        return self.register(getattr(fl, name)(a), f"fl.{name}({self.name(a)})", nb)

    def op_binary(self):
        a = self.operand()
        b = a if self.chance(0.2) else self.pick([t for t in self.live if self.broadcastable(a, t)])
        name = self.pick(BINARY)
        ba, bb = self.bound[id(a)], self.bound[id(b)]
        nb = ba * bb if name == "mul" else (ba + bb if name in ("add", "sub") else max(ba, bb))
        if nb > MAX_BOUND:
            name, nb = "maximum", max(ba, bb)
        out = getattr(fl, name)(a, b)
        return self.register(out, f"fl.{name}({self.name(a)}, {self.name(b)})", nb)

    def op_scalar(self):
        a = self.operand()
        name = self.pick(BINARY)
        if a.dtype.is_float or self.chance(0.2):  # a float scalar promotes int32 to float32
            s: float | int = float(self.pick([0.5, -1.5, 2.0, 3.0]))
        else:
            s = int(self.pick([-3, -1, 2, 3]))
        b = self.bound[id(a)]
        nb = b * abs(s) if name == "mul" else b + abs(s)
        if nb > MAX_BOUND:
            name, nb = "minimum", b + abs(s)
        left = self.chance(0.5)
        out = getattr(fl, name)(s, a) if left else getattr(fl, name)(a, s)
        args = f"{s!r}, {self.name(a)}" if left else f"{self.name(a)}, {s!r}"
        return self.register(out, f"fl.{name}({args})", nb)

    def op_bcast(self):
        a = self.operand()
        rank = len(a.shape)
        if rank >= MAX_RANK:
            return None
        flags = [False] * rank
        flags.insert(int(self.rng.integers(rank + 1)), True)
        out = fl.broadcast(a, flags)
        return self.register(out, f"fl.broadcast({self.name(a)}, {flags})", self.bound[id(a)])

    def op_reduce(self):
        """A reduction kernel whose output later pointwise kernels read by index."""
        a = self.operand()
        rank = len(a.shape)
        axis = int(self.rng.integers(rank))
        keepdim = self.chance(0.5)
        if rank == 1 and not keepdim:
            return None
        n = a.shape[axis]
        name = "sum" if self.bound[id(a)] * n <= MAX_BOUND and self.chance(0.6) else "max"
        nb = self.bound[id(a)] * (n if name == "sum" else 1)
        out = getattr(fl, name)(a, axis, keepdim=keepdim)
        return self.register(out, f"fl.{name}({self.name(a)}, {axis}, keepdim={keepdim})", nb)

    def op_set(self):
        a = self.operand()
        return self.register(fl.set(a), f"fl.set({self.name(a)})", self.bound[id(a)])

    # -- whole case ---------------------------------------------------------------
    def build(self) -> None:
        rng = self.rng
        d = int(self.pick([1, 1, 2, 4, 4]))
        if d > 1 or self.chance(0.5):
            self.mesh = fl.DeviceMesh.for_num_devices(d)
            self.lines.append(f"mesh = fl.DeviceMesh.for_num_devices({d})")
        dtype = self.pick(DTYPES)
        rank = int(rng.integers(1, MAX_RANK + 1))
        base = self.base_shape(rank, d)
        for _ in range(int(rng.integers(1, 4))):
            r = rank if self.chance(0.6) else int(rng.integers(1, rank + 1))
            shape = [1 if self.chance(0.25) else e for e in base[rank - r :]]
            dt = dtype if self.chance(0.8) else self.pick(DTYPES)
            tv = fl.tensor(shape, dtype=dt)
            self.fusion.add_input(tv)
            self.inputs.append(tv)
            self.register(tv, f"fl.tensor({shape}, dtype={dt!r})", 4.0 if dt != "int32" else 8.0)
            self.lines.append(f"f.add_input({self.name(tv)})")
            self.maybe_shard(tv, 0.5, 0.3)
        for _ in range(int(rng.integers(1, 9))):
            out = self.op()
            if out is not None:
                self.maybe_shard(out, 0.3, 0.1)
        computed = [t for t in self.live if t not in self.inputs]
        if not computed:
            a = self.live[-1]
            computed = [self.register(fl.neg(a), f"fl.neg({self.name(a)})", self.bound[id(a)])]
            self.maybe_shard(computed[0], 0.3, 0.1)
        outputs = [computed[-1]] + [t for t in computed[:-1] if self.chance(0.3)]
        if self.chance(0.1):  # an input that is also an output
            outputs.append(self.pick(self.inputs))
        for t in outputs:
            self.fusion.add_output(t)
            self.lines.append(f"f.add_output({self.name(t)})")


def build_case(seed: int) -> Case:
    with fl.Fusion() as fusion:
        g = Generator(seed, fusion)
        g.build()
    rng = np.random.default_rng([seed, 1])
    block_size = block_size_for(rng)
    return Case(seed, fusion, g.lines, block_size, bool(rng.random() < 0.25), g.dtypes)


def pipeline_for(block_size: int, vectorize: bool = False) -> fl.Pipeline:
    options = f"block_size={block_size}" + (",vectorize=true" if vectorize else "")
    return fl.Pipeline(default_pass_names(**{"schedule-pointwise": options}))


# -- invariants -------------------------------------------------------------------
def scheduled_kernels(lowered: fl.Fusion) -> list[Kernel]:
    return [s for s in lowered.kernels if s.scheduled]


def schedule_problems(lowered: fl.Fusion, block_size: int) -> list[str]:
    problems = []
    tensors = {id(t): t for t in lowered.tensors()}
    for seg in lowered.steps:
        if isinstance(seg, Kernel):
            tensors.update((id(t), t) for t in seg.tensors)
    for tv in tensors.values():
        types = [ax.parallel_type for ax in tv.domain.loop if ax.parallel_type.value != "S"]
        dup = [pt for pt, n in Counter(types).items() if n > 1]
        if dup:
            problems.append(f"{tv.name} has two loop axes with parallel type {dup[0].value}")
    for kernel in scheduled_kernels(lowered):
        for tv in kernel.tensors:
            if not has_schedule(tv):  # made by another segment or left alone: sharding only
                continue
            loop, logical = tv.domain.loop, tv.domain.logical
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
                        and d.outer is ax
                        and not d.inner_split
                        and d.input in logical
                        and tv.mesh is not None
                        and d.factor == tv.mesh.size
                    )
                if not ok:
                    problems.append(f"{tv.name}: device loop axis {k} comes from {d!r}")
            for ax in loop:
                if ax.parallel_type is ParallelType.TIDx and ax.extent != block_size:
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
    lowered: fl.Fusion | None = None
    unscheduled: int = 0
    scheduled: int = 0


def run_case(seed: int) -> Outcome:
    case = build_case(seed)

    def bug(what: str) -> Outcome:
        return Outcome("bug", f"{case.options}: {what}\n{case.script()}")

    try:
        pipeline = pipeline_for(case.block_size, case.vectorize)
        ex = fl.FusionExecutor(case.fusion, pipeline=pipeline)
    except ACCEPTED_ERRORS as exc:
        if NOT_THE_USERS_FAULT.search(str(exc)) or not NAMES_A_TENSOR.search(str(exc)):
            return bug(f"{type(exc).__name__}: {exc}")
        return Outcome("rejected", f"{type(exc).__name__}: {exc}")
    except Exception as exc:
        return bug(f"lowering raised {type(exc).__name__}: {exc}")
    problems = schedule_problems(ex.program, case.block_size)
    if problems:
        return bug("lowered program: " + "; ".join(problems))
    inputs = fl.random_inputs(case.fusion, seed)
    runs = {}
    for schedule in (True, False):
        try:
            runner = ex if schedule else fl.FusionExecutor(case.fusion, schedule=False)
            runs[schedule] = runner.run(inputs)
            fl.validate(case.fusion, inputs, runs[schedule])
        except Exception as exc:
            for flag, pattern in KNOWN_BUG_MESSAGES.items():
                if flag in KNOWN_BUGS and schedule and case.vectorize and pattern.search(str(exc)):
                    return Outcome("known", f"{flag}: {exc}")
            return bug(f"schedule={schedule}: {type(exc).__name__}: {exc}")
    # Integers must agree bit for bit. Floats only within tolerance: a float16 reduction
    # kernel (numpy in both paths) sums in an order that depends on its input's memory
    # layout, which differs between runner-written and numpy-written arrays.
    exact = [k for k, t in enumerate(case.fusion.outputs) if not t.dtype.is_float]
    diff = outputs_differ([runs[True][k] for k in exact], [runs[False][k] for k in exact])
    if diff is not None:
        return bug(f"kernel runner vs schedule=False: {diff}")
    kernels = ex.program.kernels
    n_sched = sum(k.scheduled for k in kernels)
    return Outcome("ok", "", ex.program, len(kernels) - n_sched, n_sched)


def run_batch(seeds) -> tuple[Counter, list[str], list[Outcome]]:
    counts: Counter = Counter()
    bugs, oks = [], []
    for seed in seeds:
        o = run_case(seed)
        counts[o.kind] += 1
        counts["kernels_scheduled"] += o.scheduled
        counts["kernels_unscheduled"] += o.unscheduled
        if o.kind == "bug":
            bugs.append(f"--- seed {seed}: {o.detail}")
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


def test_cuda_source_of_a_sharded_reduction_program() -> None:
    """An unscheduled reduction kernel with a sharded output is listed, not emitted."""
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
    assert "__global__" not in src and "not scheduled" in src


# -- nvcc -----------------------------------------------------------------------------
def _compilable(lowered: fl.Fusion) -> bool:
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
