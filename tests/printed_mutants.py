"""Systematic mutants of printed programs: what `fuserlite print` prints (the fusion,
after each pass of the default pipeline (--passes / --print-after-all), --lowered and each
--scheduled kernel) with one edit each: every line deleted, every number changed
(to 0, one more, one less, a large one), every DeviceMesh changed (a device replaced,
dropped, added, two swapped), every name changed (a tensor's number, an op, a dtype,
a memory, iteration or parallel type, a communication's kind or a keyword).

`printed_texts()` gives the texts, `mutants(source, text)` every mutant of one of them
in a fixed order, and `outcome(mutant)` what became of it: a located ParseError, or read
back and run (the rest of the pipeline first) to what its own tensors compute; anything
else is a bug. `python tests/printed_mutants.py` tries every mutant (about 190 000,
minutes) and counts; tests/test_printed_fuzz.py tries a spread of them.
"""

from __future__ import annotations

import collections
import re
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import fuserlite as fl
from fuserlite.ir.types import ReductionOpType
from fuserlite.pipeline import DEFAULT_PASSES, Pipeline
from fuserlite.program.communication import Communication
from fuserlite.program.parser import parse_printed
from fuserlite.program.printer import print_scheduled
from fuserlite.program.program import Program
from fuserlite.reference.numpy_ops import eval_outputs
from fuserlite.text.source import quote

ROOT = Path(__file__).resolve().parents[1]
# Small programs of every kind: a broadcast, a reduction of partials, uneven moves.
EXAMPLES = ("add_broadcast", "bias_gelu", "seed_000", "softmax", "tp_mlp", "sp_mlp")

NUMBER_RE = re.compile(r"\d+")
MESH_RE = re.compile(r"DeviceMesh(?:\[[\dx]+\])?\{(?P<devices>[^{}]*)\}")
WORD_RE = re.compile(r"[A-Za-z_][\w.]*")
# Each word that names something, and what it may be changed into.
RENAMES = {
    **{w: ["relu", "exp", "neg", "linear", "matmul", "bogus"] for w in ["gelu", "relu", "exp"]},
    **{w: ["matmul", "add", "linear2"] for w in ["linear", "matmul"]},
    **{w: ["sum", "max", "min", "Set"] for w in ["sum", "max"]},
    "Set": ["broadcast", "neg", "Sett"],
    "broadcast": ["Set", "squeeze"],
    **{w: ["double", "__half", "int", "bool", "float33"] for w in ["float", "double", "__half"]},
    **{
        w: ["Allgather", "Allreduce", "ReduceScatter", "Broadcast", "SendRecv", "Scatter"]
        for w in ["Allgather", "Allreduce", "ReduceScatter", "Broadcast", "SendRecv"]
    },
    "Streaming": ["Unknown"],
    "add": ["mul", "max", "sub"],
    "op": ["ops"],
    "team": ["teams", "root"],
    "root": ["team"],
    "input": ["output"],
    "output": ["input"],
    "logical": ["loop", "allocation"],
    "loop": ["logical"],
    "Split": ["Outer split", "Merge"],
    "Merge": ["Split"],
    "reference": ["referenc"],
}
# A printed IterDomain's or tensor's letters: iS3 -> rS3, T5_l_float -> T5_g_float.
TENSOR_PREFIX = re.compile(r"\bT\d+_(?P<memory>[gls])_")
AXIS_PREFIX = re.compile(
    r"\b(?P<iter>[ibr])(?P<parallel>S|US|UR|V|deviceIdx\.[xyz]|blockIdx\.[xyz]|threadIdx\.[xyz])\d"
)


@dataclass(frozen=True)
class Mutant:
    """One edit of one printed text: `what` says which (for messages)."""

    source: str  # e.g. "tp_mlp --lowered"
    what: str
    text: str


def stages(fusion: fl.Fusion) -> list[tuple[str, fl.Fusion | Program]]:
    """The fusion and the IR after each pass of the default pipeline."""
    out: list[tuple[str, fl.Fusion | Program]] = [("fusion", fusion)]
    ir: fl.Fusion | Program = fusion
    for name in DEFAULT_PASSES:
        level = "program" if isinstance(ir, Program) else "fusion"
        ir = Pipeline([name], input_level=level).run(ir)
        out.append((f"--passes ...{name}", ir))
    return out


def printed_texts(examples: tuple[str, ...] = EXAMPLES) -> dict[str, str]:
    """Each example's print at every stage, and each of its scheduled kernels alone."""
    texts = {}
    for name in examples:
        fusion = fl.load(ROOT / "examples" / f"{name}.fus")
        for stage, ir in stages(fusion):
            texts[f"{name} {stage}"] = str(ir)
        scheduled = print_scheduled(ir).split("\n%kernel {")
        for k, kernel in enumerate(scheduled):
            texts[f"{name} --scheduled {k}"] = kernel if k == 0 else "%kernel {" + kernel
    return texts


def _edit(text: str, start: int, stop: int, new: str) -> str:
    return text[:start] + new + text[stop:]


def _number_edits(n: int) -> list[int]:
    return sorted({0, n + 1, max(n - 1, 0), 1 << 20} - {n})


def mutants(source: str, text: str) -> Iterator[Mutant]:
    """Every mutant of one printed text, in a fixed order."""
    lines = text.split("\n")
    for k in range(len(lines)):
        if lines[k].strip():
            yield Mutant(source, f"line {k + 1} deleted", "\n".join(lines[:k] + lines[k + 1 :]))
    for m in NUMBER_RE.finditer(text):
        for new in _number_edits(int(m.group())):
            yield Mutant(
                source, f"number at {m.start()} -> {new}", _edit(text, *m.span(), str(new))
            )
    for m in MESH_RE.finditer(text):
        devices = m["devices"]
        numbers = NUMBER_RE.findall(devices)
        if not numbers:
            continue
        last = numbers[-1]
        edits = {
            "a device replaced": devices[: devices.rfind(last)] + str(int(last) + 1),
            "a device dropped": devices[: devices.rfind(last)].rstrip(),
            "a device added": f"{devices} {max(int(x) for x in numbers) + 1}",
            "reversed": " ".join(reversed(devices.split(" "))),
        }
        for what, new in edits.items():
            if new != devices:
                edited = _edit(text, m.start("devices"), m.end("devices"), new)
                yield Mutant(source, f"mesh at {m.start()} {what}", edited)
    for m in WORD_RE.finditer(text):
        for new in RENAMES.get(m.group(), []):
            yield Mutant(
                source, f"{m.group()} at {m.start()} -> {new}", _edit(text, *m.span(), new)
            )
    for m in TENSOR_PREFIX.finditer(text):
        for new in sorted(set("gls") - {m["memory"]}):
            yield Mutant(
                source, f"memory at {m.start()} -> {new}", _edit(text, *m.span("memory"), new)
            )
    for m in AXIS_PREFIX.finditer(text):
        for new in sorted(set("ibr") - {m["iter"]}):
            yield Mutant(source, f"iter at {m.start()} -> {new}", _edit(text, *m.span("iter"), new))
        for new in ("S", "deviceIdx.x", "blockIdx.x"):
            if new != m["parallel"]:
                edited = _edit(text, *m.span("parallel"), new)
                yield Mutant(source, f"parallel at {m.start()} -> {new}", edited)


def sample(items: list, count: int) -> list:
    """`count` of `items` spread evenly over them (all of them if there are fewer)."""
    if len(items) <= count:
        return list(items)
    step = len(items) / count
    return [items[int(k * step)] for k in range(count)]


# -- the oracle -----------------------------------------------------------------------
_REDUCE = {
    ReductionOpType.sum: np.add.reduce,
    ReductionOpType.max: np.maximum.reduce,
    ReductionOpType.min: np.minimum.reduce,
}


def _global_values(program: Program, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """The program's outputs computed on whole tensors: each expression by the numpy op
    table, each communication as what it is on global values (the identity; the
    reduction of the axes it reduces itself, `reduces=(0)`, by its op)."""
    values = dict(zip(program.fusion.inputs, inputs))
    for e in program.fusion.exprs():
        if isinstance(e, Communication):
            v = values[e.input]
            if e.reduces:
                axes = tuple(e.input.data_positions().index(a) for a in e.reduces)
                v = _REDUCE[e.op](v, axis=axes)
            values[e.output] = v
            continue
        shapes = [t.shape for t in e.outputs]
        values.update(zip(e.outputs, eval_outputs(e, [values[t] for t in e.inputs], shapes)))
    return [values[t] for t in program.fusion.outputs]


def _rest(source: str) -> list[str]:
    """The passes of the default pipeline after the stage `source` printed."""
    m = re.search(r"\.\.\.(\S+)$", source)
    return list(DEFAULT_PASSES[DEFAULT_PASSES.index(m[1]) + 1 :]) if m else []


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return False
    scale = 1 + float(np.nanmax(np.abs(want), initial=0))
    return bool(np.allclose(got, want, rtol=1e-3, atol=1e-3 * scale, equal_nan=True))


FILENAME = "printed.txt"


def outcome(m: Mutant) -> tuple[str, str]:
    """("parse-error", "") for a located ParseError, ("ok", "") when the mutant reads back
    and runs (the rest of the pipeline first) to what its own tensors compute; otherwise
    ("BUG-<what>", the failure)."""
    try:
        ir = parse_printed(m.text, FILENAME)
    except fl.ParseError as err:
        return ("parse-error", "") if located(err, m.text) else ("BUG-unlocated", str(err))
    except Exception as exc:  # noqa: BLE001 - the point of the test
        return "BUG-read", f"{type(exc).__name__}: {exc}"
    try:
        fusion = ir.fusion if isinstance(ir, Program) else ir
        inputs = fl.random_inputs(fusion)
        rest = _rest(m.source)
        if isinstance(ir, Program) and rest:
            ir = Pipeline(rest, input_level="program").run(ir)
        pipeline = None
        if "--scheduled" in m.source:  # a scheduled kernel keeps its schedule
            pipeline = Pipeline([p for p in DEFAULT_PASSES if p != "schedule-pointwise"])
        executor = fl.FusionExecutor(ir, backend="sim", compute="interpret", pipeline=pipeline)
        outputs = executor.run(inputs)
        want = _global_values(ir, inputs) if isinstance(ir, Program) else fl.evaluate(ir, inputs)
    except Exception as exc:  # noqa: BLE001 - read back, it must run
        return "BUG-run", f"{type(exc).__name__}: {exc}"
    if not all(_close(o, w) for o, w in zip(outputs, want)):
        return "BUG-wrong", "the outputs differ from the program's own values"
    return "ok", ""


def located(err: fl.ParseError, text: str) -> bool:
    """`printed.txt:line:col: message`, the source line as quoted, a caret under it."""
    if err.line is None or err.column is None or "internal error" in str(err):
        return False
    lines = str(err).split("\n")
    src = text.split("\n")[err.line - 1].rstrip("\r") if err.line <= text.count("\n") + 1 else ""
    shown, caret = quote(src, err.column)
    prefix = f"{FILENAME}:{err.line}:{err.column}: "
    return lines[0].startswith(prefix) and lines[-2:] == [shown, caret]


def main() -> None:
    """Every mutant of every text (minutes): the count of each outcome, and the bugs."""
    counts: collections.Counter[str] = collections.Counter()
    bugs: dict[str, list[str]] = collections.defaultdict(list)
    start = time.perf_counter()
    for source, text in printed_texts().items():
        for m in mutants(source, text):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result, why = outcome(m)
            counts[result] += 1
            if result.startswith("BUG"):
                bugs[why.split("\n")[0][:150]].append(f"{m.source} / {m.what}")
    seconds = time.perf_counter() - start
    print(f"{sum(counts.values())} mutants in {seconds:.0f} s: {dict(counts)}")
    for why, where in sorted(bugs.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(where):5d} {why}  [{where[0]}]")


if __name__ == "__main__":
    main()
