"""A seeded mutation fuzzer over examples/*.fus: bad input never gives a traceback.

Each mutant of an example file (tests/fus_mutants.py: lines deleted, duplicated,
swapped; characters or grammar tokens deleted, inserted, replaced; numbers made 0,
-1, huge, 1e309; names made undefined; dtypes, parallel types and ops changed; the
file truncated; a random directive appended) goes through `parse`, then `verify`, `lower`,
`FusionExecutor(...).run(random_inputs(f))` and `validate`. Every stage must
either succeed or raise a FuserliteError; a ParseError must read
`file:line:col: message`, the source line, and a caret. Anything else is a bug:
a Python, numpy or lark exception, a FuserliteError that only wraps one ("internal
error ... please report it" from the parser, "crashed:" from a pass), or a
warning (the CLI would print it). A handful of mutants also go through
`fuserlite.cli.main(["run", path])`, which must never say "internal error".

Bugs found and not yet fixed are listed in KNOWN_BUGS with a minimized repro:
the fuzzer tolerates a failure whose signature matches an entry, and
`test_known_bug_still_reproduces` xfails per entry while its repro still fails and
fails once it does not, so fixing a bug turns that test red until its entry is deleted.
"""

from __future__ import annotations

import collections
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
from fus_mutants import EXAMPLES, NUM_MUTANTS, Mutant, mutants

import fuserlite as fl
import fuserlite.cli
from fuserlite.text.source import QUOTE_WIDTH, quote

FILENAME = "mutant.fus"
MAX_ELEMENTS = 1 << 16  # run only fusions whose tensors and loop nests stay this small


# -- known bugs -----------------------------------------------------------------------
@dataclass(frozen=True)
class KnownBug:
    """A bug the fuzzer found: the signature `Type: message` of its failure, a repro."""

    pattern: str  # re.search'ed in "ExceptionType: message"
    repro: str
    cause: str


# Bugs this fuzzer found, all fixed: each repro must keep the error contract now.
FIXED_BUGS: dict[str, KnownBug] = {
    "bool_neg_sub_numpy_typeerror": KnownBug(
        r"^TypeError: .*numpy boolean (negative|subtract)",
        "input x: bool[2]\ny = sub(x, x)\noutput y\n",
        "numpy_ops.eval_expr applies np.negative / np.subtract to bool arrays, which numpy "
        "refuses; neither ops.neg/ops.sub nor verify rejects a bool operand",
    ),
    "int_scalar_overflow": KnownBug(
        r"^OverflowError: ",
        "input x: int32[2]\ny = mul(x, 3000000000)\noutput y\n",
        "numpy_ops.eval_expr does np.asarray(scalar, dtype) with a scalar the tensor's dtype "
        "cannot hold (also mul(float32 x, 10**400): int too large to convert to float); the "
        "parser and ops accept any Python int as a scalar operand",
    ),
    "propagate_shardings_after_split": KnownBug(
        r"^PassFailed: pass propagate-shardings .*crashed: ValueError: .* is not in list",
        "mesh m = [0, 1]\ninput x: float32[2] on m\ny = neg(x)\noutput y\n"
        "parallelize x axis 0 DIDx\nsplit y axis 0 by 1\n",
        "_inherit_sharding calls shard_axis(out, target, ...) with a logical axis of the "
        "consumer that a user split has already replaced in its loop domain; "
        "tv.domain.loop.index(ax) raises ValueError",
    ),
    "huge_split_factor_allocates_the_grid": KnownBug(
        r"^(MemoryError|_ArrayMemoryError|ValueError): (Unable to allocate|Maximum allowed size)",
        "input x: float32[2]\ny = neg(x)\noutput y\nsplit y axis 0 by 99999999999999999999\n",
        "split accepts any factor >= 1, so a 2-element tensor gets a loop nest of 1e20; the "
        "kernel runner (_Grid) builds np.arange over every loop extent: numpy's MemoryError "
        "here, and for a factor of 2**31 a real 16 GiB allocation (this test does not run it)",
    ),
    "nested_list_recursion": KnownBug(
        r"^RecursionError: ",
        "mesh m = " + "[" * 1000 + "]" * 1000 + "\n",
        "parser._arg recurses once per list level; the Builder turns the RecursionError into "
        "an 'internal error' ParseError, but _at_stmt's stmt.scan_values recurses over the "
        "same tree and raises RecursionError again from the handler",
    ),
    "validate_inf_reference": KnownBug(
        r"^RuntimeWarning: One of rtol or atol is not valid",
        "input x: float32[2]\ny = add(x, inf)\noutput y\n",
        "validate scales atol by max|ref|, which is inf when the reference holds an inf: numpy "
        "warns, and every finite element then passes (validate accepts [inf, 12345] for "
        "exp([100, 0]) = [inf, 1])",
    ),
}

# Bugs found and not yet fixed (none at present).
KNOWN_BUGS: dict[str, KnownBug] = {}


class Bug(Exception):
    """A mutant broke the error contract; `signature` is matched against KNOWN_BUGS."""

    def __init__(self, stage: str, signature: str) -> None:
        super().__init__(f"{stage}: {signature}")
        self.stage = stage
        self.signature = signature


def known_bug(signature: str) -> str | None:
    """The KNOWN_BUGS entry whose pattern matches `signature`, if any."""
    for name, bug in KNOWN_BUGS.items():
        if re.search(bug.pattern, signature, re.DOTALL):
            return name
    return None


# -- the oracle -----------------------------------------------------------------------
def check_parse_error(err: fl.ParseError, text: str, filename: str) -> None:
    """`file:line:col: message`, then the source line, then a caret under the column."""
    message = str(err)
    if err.line is None or err.column is None:
        raise Bug("parse", f"ParseError without line/column: {message}")
    if "internal error" in message:
        raise Bug("parse", f"ParseError: {message}")
    lines = message.split("\n")
    prefix = f"{filename}:{err.line}:{err.column}: "
    if len(lines) < 3 or not lines[0].startswith(prefix):
        raise Bug("parse", f"ParseError without a {prefix!r} prefix: {message!r}")
    src = text.split("\n")[err.line - 1].rstrip("\r") if err.line <= text.count("\n") + 1 else ""
    shown, caret = quote(src, err.column)
    if lines[-2] != shown or lines[-1] != caret or len(shown) > QUOTE_WIDTH + 6 * 4 + 6:
        raise Bug("parse", f"ParseError without the source line and caret: {message!r}")


def _signature(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _stage(stage: str, fn, *args):
    """Run one stage: FuserliteErrors are outcomes (unless they wrap a crash); the rest bugs."""
    try:
        return fn(*args)
    except fl.ParseError:
        raise
    except fl.FuserliteError as exc:
        if "crashed:" in str(exc) or "internal error" in str(exc):
            raise Bug(stage, _signature(exc)) from exc
        raise
    except RecursionError as exc:  # before Exception: keep the signature short
        raise Bug(stage, _signature(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - the point of the test
        raise Bug(stage, _signature(exc)) from exc


def _product(extents) -> int:
    n = 1
    for extent in extents:
        n *= extent
    return n


def small(fusion: fl.Fusion, max_elements: int) -> bool:
    """The tensors hold at most `max_elements` in all, and no loop nest is larger (the
    kernel runner materializes the whole loop grid: a split by 2**31 allocates 16 GiB)."""
    total = sum(_product(tv.shape) for tv in fusion.tensors())
    grid = max((_product(ax.extent for ax in tv.domain.loop) for tv in fusion.tensors()), default=1)
    return total <= max_elements and grid <= max_elements


def outcome(text: str, filename: str = FILENAME, max_elements: int | None = MAX_ELEMENTS) -> str:
    """The stage at which `text` stops ("ok" when it runs and validates); raises Bug.
    Fusions larger than `max_elements` (None: no limit) are lowered but not run."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _outcome(text, filename, max_elements)
    if caught:
        w = caught[0]
        raise Bug(result, f"{w.category.__name__}: {w.message}")
    return result


def _outcome(text: str, filename: str, max_elements: int | None) -> str:
    try:
        fusion = _stage("parse", fl.parse, text, filename)
    except fl.ParseError as err:
        check_parse_error(err, text, filename)
        return "parse-error"
    try:
        _stage("verify", fl.verify, fusion)
    except fl.FuserliteError:
        return "verify-error"
    try:
        _stage("lower", fl.lower, fusion)
    except fl.FuserliteError:
        return "lower-error"
    if max_elements is not None and not small(fusion, max_elements):
        return "too-big-to-run"
    try:
        inputs = _stage("random_inputs", fl.random_inputs, fusion)
        executor = _stage("executor", fl.FusionExecutor, fusion)
        outputs = _stage("run", executor.run, inputs)
        _stage("validate", fl.validate, fusion, inputs, outputs)
    except fl.FuserliteError:
        return "run-error"
    return "ok"


def describe(m: Mutant, bug: Bug) -> str:
    return (
        f"mutant {m.index} of {m.example} ({', '.join(m.mutations)}) at {bug.stage}: "
        f"{bug.signature[:300]}\n--- text ---\n{m.text}\n------------"
    )


# -- the tests ----------------------------------------------------------------------------
def test_the_unmutated_examples_run() -> None:
    for name, text in EXAMPLES.items():
        assert outcome(text, name, max_elements=None) == "ok", name  # each runs whole


def test_mutants_fail_only_with_fuserlite_errors() -> None:
    counts: collections.Counter[str] = collections.Counter()
    known: collections.Counter[str] = collections.Counter()
    new: list[str] = []
    for m in mutants():
        try:
            counts[outcome(m.text)] += 1
        except Bug as bug:
            entry = known_bug(bug.signature)
            if entry is None:
                counts["BUG"] += 1
                new.append(describe(m, bug))
            else:
                counts["known-bug"] += 1
                known[entry] += 1
    print(f"\n{NUM_MUTANTS} mutants: {dict(counts)}; known bugs hit: {dict(known)}")
    assert not new, f"{len(new)} mutant(s) broke the error contract:\n\n" + "\n\n".join(new[:5])
    # The fuzzer reaches every stage, not only the parser.
    assert counts["parse-error"] >= NUM_MUTANTS // 10, counts
    assert counts["ok"] >= NUM_MUTANTS // 10, counts
    assert counts["verify-error"] + counts["lower-error"] + counts["run-error"] > 0, counts


def _cli_mutants() -> list[tuple[Mutant, str]]:
    """A dozen small mutants, deterministic, with a spread of API outcomes."""
    quota = {"ok": 4, "parse-error": 3, "verify-error": 2, "lower-error": 2, "run-error": 1}
    chosen = []
    for m in mutants():
        try:
            result = outcome(m.text)
        except Bug:
            continue  # a known bug: test_known_bug_still_reproduces covers it
        if quota.get(result, 0) > 0:
            quota[result] -= 1
            chosen.append((m, result))
            if not any(quota.values()):
                break
    return chosen


def test_cli_run_reports_user_errors_only(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    chosen = _cli_mutants()
    assert len(chosen) >= 8, [r for _, r in chosen]
    for m, expected in chosen:
        path = tmp_path / f"mutant_{m.index}.fus"
        path.write_text(m.text)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            rc = fuserlite.cli.main(["run", str(path)])
        out, err = capsys.readouterr()
        where = f"mutant {m.index} ({expected}):\n{m.text}\n--- stderr ---\n{err}"
        assert "internal error" not in err and "Traceback" not in err, where
        if expected == "ok":
            assert rc == 0 and "validation: ok" in out, where
        else:
            assert rc == 1 and err.startswith("error: "), where
        if expected == "parse-error":
            assert err.startswith(f"error: {path}:"), where


@pytest.mark.parametrize("name", sorted(FIXED_BUGS))
def test_fixed_bug_repro_keeps_the_error_contract(name: str) -> None:
    """Each bug this fuzzer found now ends in success or a clear FuserliteError."""
    outcome(FIXED_BUGS[name].repro, "repro.fus", max_elements=None)
