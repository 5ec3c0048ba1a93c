"""What the seeded random-fusion builders share: tests/random_sharded.py (the
differential test's sharded fusions) and tests/random_pointwise.py (the pointwise
scheduler's adversarial cases) both build a fusion from a seed while recording each
call as a line of a runnable script, and tell a clear rejection from a bug the same way.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

import fuserlite as fl
from fuserlite.program import Program

ACCEPTED_ERRORS = (fl.LoweringError, fl.VerifyError, fl.ScheduleError)
NAMES_A_TENSOR = re.compile(r"\bT\d+\b")
# Rejections that are the compiler's fault, not the fusion's: the user scheduled
# nothing (shard_axis only), so the automatic scheduler must not fail, and
# propagate-shardings promises every tensor a mesh, and insert-reshardings has the
# reduction make every partial value the planner is asked to keep (it never makes them).
NOT_THE_USERS_FAULT = re.compile(r"cannot propagate the schedule|both need a mesh|never makes them")
BINARY = ("add", "sub", "mul", "maximum", "minimum")
SCRIPT_HEAD = "import fuserlite as fl\nfrom fuserlite.schedule.shard import shard_axis\n\n"


class RandomFusion:
    """Builds one random fusion inside an active `fl.Fusion()`, recording each call."""

    def __init__(self, seed: int, fusion: fl.Fusion) -> None:
        self.rng = np.random.default_rng(seed)
        self.fusion = fusion
        self.lines: list[str] = []
        self.names: dict[int, str] = {}
        self.bound: dict[int, float] = {}  # a bound on |values|, to keep within tolerance
        self.live: list[fl.TensorView] = []
        self.inputs: list[fl.TensorView] = []

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def name(self, tv: fl.TensorView) -> str:
        return self.names[id(tv)]

    def emit(self, line: str) -> None:
        self.lines.append(line)

    def register(self, tv: fl.TensorView, expr: str, bound: float) -> fl.TensorView:
        """Name a new tensor `t<k> = expr`; it may be an operand from now on."""
        self.names[id(tv)] = f"t{len(self.names)}"
        self.emit(f"{self.name(tv)} = {expr}")
        self.bound[id(tv)] = bound
        self.live.append(tv)
        return tv

    def broadcast_of(self, a: fl.TensorView, max_rank: int) -> tuple[fl.TensorView, str] | None:
        """`a` broadcast on one new axis at a random position, and its call (None when
        `a` has max_rank axes already)."""
        rank = len(a.shape)
        if rank >= max_rank:
            return None
        flags = [False] * rank
        flags.insert(int(self.rng.integers(rank + 1)), True)
        return fl.broadcast(a, flags), f"fl.broadcast({self.name(a)}, {flags})"

    def add_input(self, tv: fl.TensorView, expr: str, bound: float) -> fl.TensorView:
        self.fusion.add_input(tv)
        self.inputs.append(tv)
        self.register(tv, expr, bound)
        self.emit(f"f.add_input({self.name(tv)})")
        return tv

    def add_output(self, tv: fl.TensorView) -> None:
        self.fusion.add_output(tv)
        self.emit(f"f.add_output({self.name(tv)})")


def fusion_script(lines: list[str]) -> str:
    """A script that rebuilds the fusion as `f`."""
    body = "\n".join("    " + line for line in lines)
    return f"{SCRIPT_HEAD}with fl.Fusion() as f:\n{body}\n"


def repro_script(lines: list[str], seed: int, executor: str = "fl.FusionExecutor(f)") -> str:
    """A runnable repro of a case: build the fusion, lower it with `executor`, run the
    seed's random inputs and validate the outputs."""
    return fusion_script(lines) + (
        f"ex = {executor}\n"
        f"inputs = fl.random_inputs(f, {seed})\n"
        "fl.validate(f, inputs, ex.run(inputs))\n"
    )


def rejection_bug(exc: Exception) -> str | None:
    """None when `exc`, an accepted error, clearly rejects a fusion the user got wrong;
    otherwise why it is a bug."""
    text = str(exc)
    if NOT_THE_USERS_FAULT.search(text):
        return f"{type(exc).__name__} on a valid fusion: {exc}"
    if not NAMES_A_TENSOR.search(text):
        return f"unclear {type(exc).__name__}: {exc}"
    return None


def duplicate_parallel_types(program: Program) -> list[str]:
    """Tensors of the program (its kernels' included) with one parallel type on two axes."""
    tensors = {id(t): t for t in program.tensors()}
    for kernel in program.kernels:
        tensors.update((id(t), t) for t in kernel.tensors)
    problems = []
    for tv in tensors.values():
        types = [ax.parallel_type for ax in tv.domain.loop if ax.parallel_type.value != "S"]
        dup = [pt for pt, n in Counter(types).items() if n > 1]
        if dup:
            problems.append(f"{tv.name} has two loop axes with parallel type {dup[0].value}")
    return problems
