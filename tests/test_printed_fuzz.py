"""Mutants of printed programs (tests/printed_mutants.py): every line deleted, every
number, mesh and name changed, at every stage `fuserlite print` shows. Each either
reads back and runs to what its own tensors compute, or is a ParseError at
file:line:col with the line and a caret; never an exception from deep inside, never a
program the executor cannot run."""

from __future__ import annotations

import collections
import itertools
import warnings

import pytest
from printed_mutants import Mutant, mutants, outcome, printed_texts

import fuserlite as fl
from fuserlite.program.parser import parse_printed

TEXTS = printed_texts()
PER_TEXT = 25  # mutants tried of each text, spread over all of its mutants
SPREAD = 4099  # a prime: consecutive picks land on different kinds of edit


def spread(source: str, text: str, count: int) -> list[Mutant]:
    """`count` of the text's mutants, every SPREAD-th (round and round)."""
    every = list(mutants(source, text))
    return [every[(k * SPREAD) % len(every)] for k in range(min(count, len(every)))]


def check(chosen: list[Mutant]) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    bugs = []
    for m in chosen:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result, why = outcome(m)
        counts[result] += 1
        if result.startswith("BUG"):
            bugs.append(f"{m.source} / {m.what}: {result}: {why[:300]}")
    assert not bugs, f"{len(bugs)} of {len(chosen)} mutants broke the contract:\n" + "\n".join(
        bugs[:8]
    )
    return counts


@pytest.mark.parametrize("source", sorted(TEXTS))
def test_every_printed_stage_reads_back_and_runs(source: str) -> None:
    assert outcome(Mutant(source, "none", TEXTS[source])) == ("ok", "")


def test_a_spread_of_mutants_of_every_stage() -> None:
    chosen = [m for source, text in TEXTS.items() for m in spread(source, text, PER_TEXT)]
    counts = check(chosen)
    print(f"\n{len(chosen)} printed mutants: {dict(counts)}")
    assert counts["parse-error"] > len(chosen) // 2 and counts["ok"] > 0, counts


def test_every_line_of_the_lowered_tp_mlp_deleted() -> None:
    source = "tp_mlp --passes ...assign-layouts"
    deleted = [m for m in mutants(source, TEXTS[source]) if m.what.endswith("deleted")]
    assert len(deleted) > 100
    check(deleted)


def test_every_mesh_of_the_lowered_seed_changed() -> None:
    source = "seed_000 --passes ...assign-layouts"
    meshes = [m for m in mutants(source, TEXTS[source]) if m.what.startswith("mesh")]
    assert len(meshes) > 50
    check(meshes)


LOWERED = TEXTS["tp_mlp --passes ...assign-layouts"]


def read_error(text: str) -> str:
    with pytest.raises(fl.ParseError) as info:
        parse_printed(text, "t.txt")
    return str(info.value)


def test_a_kernel_on_another_mesh_than_its_tensors() -> None:
    """{0 2} was read, explained, then ran to a raw `KeyError: 2` in the executor."""
    label = "%kernel1 (DeviceMesh{0 1}) {"
    number = LOWERED.split("\n").index(label) + 1
    message = read_error(LOWERED.replace(label, "%kernel1 (DeviceMesh{0 2}) {"))
    assert message.startswith(f"t.txt:{number}:1: invalid program:\n  kernel 1 runs on")
    assert "but T5 is on DeviceMesh{0 1}" in message


def test_a_weight_line_deleted() -> None:
    """Line 7 of `print tp_mlp.fus --lowered` (a linear's weight) was an IndexError."""
    lines = LOWERED.split("\n")
    assert lines[5].startswith("   = linear(") and "T1_g_float" in lines[6]
    message = read_error("\n".join(lines[:6] + lines[7:]))
    assert message.startswith("t.txt:6:6: linear: ") and "weight must be [..., n, k]" in message


ALLGATHER = ("Communication Allreduce", "Communication Allgather")


@pytest.mark.parametrize(
    ("edits", "fragment"),
    [
        ([("= gelu(", "= squeeze(")], "squeeze"),  # not an op of these operands
        ([("= gelu(", "= linear(")], ""),  # a different form altogether
        ([ALLGATHER], "names 0 tensor axes; Allgather on one mesh shows in_axis=N"),
        ([(", layout=", ", in_axis=9, layout=")], "names 1 tensor axes; Allreduce"),
        ([ALLGATHER, (", layout=", ", in_axis=9, layout=")], "axis 9 is not an axis of T10"),
    ],
)
def test_an_expression_or_communication_its_tensors_contradict(edits, fragment) -> None:
    text = LOWERED
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    message = read_error(text)
    assert fragment in message and "internal error" not in message


def test_two_outputs_over_one_body() -> None:
    """Deleting a Set's body made its tensor a second output of the next expression."""
    source = "add_broadcast --passes ...schedule-pointwise"
    (m,) = itertools.islice(
        (m for m in mutants(source, TEXTS[source]) if m.what == "line 4 deleted"), 1
    )
    assert "set does not compute 2 tensor(s)" in read_error(m.text)
