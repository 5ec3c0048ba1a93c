"""Partial values through a lowered program (fuserlite.program.partials): their op is
found through the collectives that combined or moved them."""

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
