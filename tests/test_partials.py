"""Partial values through a lowered program (fuserlite.program.partials): their op is
found through the collectives that combined or moved them, and the validator rejects a
communication that combines them by another op or does not do the step it names."""

from __future__ import annotations

import pytest
from test_nd_uneven import PARTIAL_REDUCTIONS, partially_reduced

import fuserlite as fl
from fuserlite.ir.types import ReductionOpType
from fuserlite.program.parser import parse_printed
from fuserlite.program.partials import partial_op_of


def lowered_text(name: str) -> tuple[str, list[str]]:
    """The printed lowered program of PARTIAL_REDUCTIONS[name], and its communication lines."""
    text = str(fl.lower(partially_reduced(*PARTIAL_REDUCTIONS[name])))
    return text, [line for line in text.splitlines() if line.startswith("Communication ")]


def edited(text: str, line: str, old: str, new: str) -> str:
    assert old in line
    return text.replace(line, line.replace(old, new))


@pytest.mark.parametrize(
    "name, op", [("sum 2x2x2 sliced while partial", "add"), ("max 2x3", "max")]
)
def test_the_op_of_partial_values_is_found_through_the_communications_that_made_them(name, op):
    """(R,R,P) is an Allreduce's output, (R,S0,P) a LocalSlice's of it (no op): both are
    partial results of the reduction's op, the one the last Allreduce combines by."""
    program = fl.lower(partially_reduced(*PARTIAL_REDUCTIONS[name]))
    partial = [c.output for c in program.communications if str(c.after).count("P")]
    assert partial and {partial_op_of(t) for t in partial} == {ReductionOpType(op)}
    text = str(program)
    assert str(parse_printed(text)) == text  # and it reads back, the validator satisfied


@pytest.mark.parametrize(
    "name, k, old, new, message",
    [
        (  # an Allreduce of partial sums by max: the sum of maxima of addends
            "sum 2x3",
            1,
            "op=add",
            "op=max",
            r"Allreduce T1 -> T\d+ combines the partial values of T1 with op=max, but they "
            r"are partial results of a sum: combine them with op=add",
        ),
        (  # the op of a LocalSlice's partial output is the first Allreduce's
            "sum 2x2x2 sliced while partial",
            3,
            "op=add",
            "op=max",
            r"Allreduce T\d+ -> T\d+ combines the partial values of T\d+ with op=max, but "
            r"they are partial results of a sum",
        ),
        (  # the second Allreduce: the first reduces x itself (one row a device), by its op
            "max 2x3",
            1,
            "op=max",
            "op=add",
            r"combines the partial values of T\d+ with op=add, but they are partial results "
            r"of a max: combine them with op=max",
        ),
        (  # completes over both mesh axes where T1 is still partial over DIDx
            "sum 2x3",
            0,
            "teams=(DIDy)",
            "teams=(DIDy DIDx)",
            r"Allreduce T\d+ -> T1: Allreduce on \(DIDy, DIDx\) teams takes \(P,P\) to "
            r"\(R,R\), but T1 is \(R,P\); the step must make its output's placement",
        ),
        (
            "sum 2x3",
            0,
            "teams=(DIDy)",
            "teams=(DIDx)",
            r"Allreduce on DIDx teams takes \(P,P\) to \(P,R\), but T1 is \(R,P\)",
        ),
    ],
    ids=["sum-by-max", "through-a-slice", "max-by-sum", "completes-too-much", "wrong-axis"],
)
def test_a_collective_that_combines_partial_values_wrongly_is_rejected(name, k, old, new, message):
    """The op edits read back and ran to wrong numbers without an error (a max of partial
    sums: max error 4.6 on "sum 2x3"); the team edits read back and failed only when run."""
    text, comms = lowered_text(name)
    bad = edited(text, comms[k], old, new)
    with pytest.raises(fl.ParseError, match=message) as info:  # at the communication's line
        parse_printed(bad)
    assert bad.split("\n")[info.value.line - 1].startswith("Communication ")


def test_an_op_on_complete_values_and_a_missing_op_are_rejected():
    program = fl.lower(partially_reduced(*PARTIAL_REDUCTIONS["sum 2x2x2 sliced while partial"]))
    gather, first = program.communications[:2]
    gather.op = ReductionOpType.sum  # an Allgather of x, which holds complete values
    first.op = None
    with pytest.raises(fl.VerifyError) as e:
        fl.verify_program(program)
    assert str(e.value).splitlines()[1:] == [
        "  Allgather x (T0) -> T4 has op=add, but x (T0) holds complete values",
        "  Allreduce T3 -> T1 combines the partial values of T3 but names no op",
    ]
