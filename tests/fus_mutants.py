"""The mutators of tests/test_text_fuzz.py: seeded edits of examples/*.fus text.

Lines deleted, duplicated, swapped or moved; characters or grammar tokens deleted,
inserted, replaced; numbers made 0, -1, huge, 1e309; names made undefined; dtypes,
parallel types and ops changed; the file truncated; a random directive appended.
`mutants()` gives the same mutants on every run.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {p.name: p.read_text() for p in sorted((ROOT / "examples").glob("*.fus"))}
SEED = 20240611
NUM_MUTANTS = 600


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
