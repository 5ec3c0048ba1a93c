"""A seeded mutation fuzzer over examples/*.fus: bad input never gives a traceback.

Each mutant of an example file (lines deleted, duplicated, swapped; characters or
grammar tokens deleted, inserted, replaced; numbers made 0, -1, huge, 1e309; names
made undefined; dtypes, parallel types and ops changed; the file truncated; a
random directive appended) goes through `parse`, then `verify`, `lower`,
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
import random
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

import fuserlite as fl
import fuserlite.cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {p.name: p.read_text() for p in sorted((ROOT / "examples").glob("*.fus"))}
FILENAME = "mutant.fus"
SEED = 20240611
NUM_MUTANTS = 600
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
    caret = "".join(c if c == "\t" else " " for c in src[: err.column - 1]) + "^"
    if lines[-2] != src or lines[-1] != caret:
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


# -- the mutators -----------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return text.split()


KEYWORDS = _words(
    "mesh input tensor output set_mesh split outer_split merge reorder parallelize "
    "noncontiguous true false inf -inf nan on axis axes by"
)
PUNCTUATION = _words("= : , [ ] ( ) { } . # - +") + ["\n"]
OPS = _words(
    "neg exp tanh relu abs gelu sqrt log add sub mul div maximum minimum "
    "set broadcast sum max expand reshape matmul linear"
)
KEYWORD_ARGS = _words("cache_op keepdim axes flags shape weight bias Streaming")
DTYPES = _words(
    "float32 float64 float16 bfloat16 int32 int64 bool float double half __bfloat int int64_t float33"
)
PTYPES = _words(
    "DIDx DIDy DIDz deviceIdx.x deviceIdx.y BIDx blockIdx.x blockIdx.y TIDx threadIdx.x "
    "threadIdx.z Unswitch US Unroll UR Vectorize V Serial S DIDw"
)
NUMBERS = _words("0 -1 1 2 3 7 64 -0 +2 1.5 1e309 -1e309 1e-5 .5 2. 1e3 00 1000000") + [
    "99999999999999999999",
    str(2**31),
    str(2**63),
]
NAMES = ["undefined_q", "m", "x", "y", "T0", "inf", "nan", "on", "_"]
VOCAB = KEYWORDS + PUNCTUATION + OPS + KEYWORD_ARGS + DTYPES + PTYPES + NUMBERS + NAMES
CHARS = "=:,[](){}.#-+_ \t\n0123456789abxyzAZ$\x00\u00e9\r\\\"'"

NUMBER_RE = re.compile(r"(?<![A-Za-z_0-9.])[+-]?\d+(\.\d*)?([eE][+-]?\d+)?")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[+-]?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\S")


def _replace_match(regex: re.Pattern, text: str, rng: random.Random, new) -> str:
    matches = list(regex.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[: m.start()] + new(m.group(0)) + text[m.end() :]


def _on_lines(fn):
    def mutator(text: str, rng: random.Random) -> str:
        lines = text.split("\n")
        fn(lines, rng)
        return "\n".join(lines)

    return mutator


def _delete_line(lines: list[str], rng: random.Random) -> None:
    del lines[rng.randrange(len(lines))]


def _duplicate_line(lines: list[str], rng: random.Random) -> None:
    lines.insert(rng.randrange(len(lines) + 1), lines[rng.randrange(len(lines))])


def _swap_lines(lines: list[str], rng: random.Random) -> None:
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]


def _move_line_to_end(lines: list[str], rng: random.Random) -> None:
    lines.append(lines.pop(rng.randrange(len(lines))))


def _delete_char(text: str, rng: random.Random) -> str:
    if not text:
        return text
    i = rng.randrange(len(text))
    return text[:i] + text[i + 1 :]


def _insert_char(text: str, rng: random.Random) -> str:
    i = rng.randrange(len(text) + 1)
    return text[:i] + rng.choice(CHARS) + text[i:]


def _insert_token(text: str, rng: random.Random) -> str:
    i = rng.randrange(len(text) + 1)
    return f"{text[:i]} {rng.choice(VOCAB)} {text[i:]}"


def _delete_token(text: str, rng: random.Random) -> str:
    return _replace_match(TOKEN_RE, text, rng, lambda _: "")


def _replace_token(text: str, rng: random.Random) -> str:
    return _replace_match(TOKEN_RE, text, rng, lambda _: rng.choice(VOCAB))


def _replace_number(text: str, rng: random.Random) -> str:
    return _replace_match(NUMBER_RE, text, rng, lambda _: rng.choice(NUMBERS))


def _replace_name(text: str, rng: random.Random) -> str:
    return _replace_match(NAME_RE, text, rng, lambda _: rng.choice(NAMES))


def _change_word(pool: list[str]):
    words = set(pool)

    def mutator(text: str, rng: random.Random) -> str:
        matches = [m for m in re.finditer(r"[A-Za-z_][\w.]*", text) if m.group(0) in words]
        if not matches:
            return _replace_token(text, rng)
        m = rng.choice(matches)
        return text[: m.start()] + rng.choice(pool) + text[m.end() :]

    return mutator


def _truncate(text: str, rng: random.Random) -> str:
    return text[: rng.randrange(len(text) + 1)]


def _append_statement(text: str, rng: random.Random) -> str:
    defined = sorted(set(NAME_RE.findall(text)) - set(KEYWORDS + OPS + DTYPES + PTYPES))
    name = rng.choice(defined or ["x"])
    a, b = rng.choice(NUMBERS), rng.choice(NUMBERS)
    arg = rng.choice(["[0]", "[1, -1]", "[true, false]", a, name, f"[{a}, {b}]"])
    statement = rng.choice(
        [
            f"split {name} axis {a} by {b}",
            f"outer_split {name} axis {a} by {b}",
            f"merge {name} axes {a} {b}",
            f"reorder {name} {{{a}: {b}}}",
            f"parallelize {name} axis {a} {rng.choice(PTYPES)}",
            f"set_mesh {name} [{a}, {b}]",
            f"output {name}",
            f"input {name}",
            f"fz = {rng.choice(OPS)}({name}, {arg})",
            f"fz = {rng.choice(OPS)}({name})",
        ]
    )
    return f"{text}\n{statement}\n"


MUTATORS = {
    "delete_line": _on_lines(_delete_line),
    "duplicate_line": _on_lines(_duplicate_line),
    "swap_lines": _on_lines(_swap_lines),
    "move_line_to_end": _on_lines(_move_line_to_end),
    "delete_char": _delete_char,
    "insert_char": _insert_char,
    "insert_token": _insert_token,
    "delete_token": _delete_token,
    "replace_token": _replace_token,
    "replace_number": _replace_number,
    "replace_name": _replace_name,
    "change_dtype": _change_word(DTYPES),
    "change_parallel_type": _change_word(PTYPES),
    "change_op": _change_word(OPS),
    "truncate": _truncate,
    "append_statement": _append_statement,
}


@dataclass(frozen=True)
class Mutant:
    index: int
    example: str
    mutations: tuple[str, ...]
    text: str


def mutants(count: int = NUM_MUTANTS, seed: int = SEED) -> list[Mutant]:
    """`count` mutants, the same ones on every run: each from its own Random(seed, i)."""
    names = sorted(EXAMPLES)
    result = []
    for i in range(count):
        rng = random.Random(seed * 1_000_003 + i)
        example = rng.choice(names)
        text, applied = EXAMPLES[example], []
        for _ in range(rng.choice([1, 1, 2, 3, 4])):
            mutation = rng.choice(sorted(MUTATORS))
            text = MUTATORS[mutation](text, rng)
            applied.append(mutation)
        result.append(Mutant(i, example, tuple(applied), text))
    return result


def describe(m: Mutant, bug: Bug) -> str:
    return (
        f"mutant {m.index} of {m.example} ({', '.join(m.mutations)}) at {bug.stage}: "
        f"{bug.signature[:300]}\n--- text ---\n{m.text}\n------------"
    )


# -- the tests ----------------------------------------------------------------------------
def test_the_unmutated_examples_run() -> None:
    for name, text in EXAMPLES.items():
        assert outcome(text, name) == "ok", name


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
