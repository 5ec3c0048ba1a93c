"""Several results in one .fus statement: `a, b = chunk(x, 2, 1)` for a composite that
returns several tensors, and `T1, T2 = op(...)` written for an op with several outputs."""

from __future__ import annotations

import re

import pytest

import fuserlite as fl
from fuserlite.ops import registry
from fuserlite.ops.common import X, like
from fuserlite.ops.forms import Template
from fuserlite.ops.registry import Op, OpDef


def test_one_name_per_piece() -> None:
    f = fl.parse("input x: float32[4, 8]\na, b = chunk(x, 2, 1)\noutput a\noutput b\n")
    assert [t.shape for t in f.outputs] == [(4, 4), (4, 4)]
    assert [t.user_name for t in f.outputs] == ["a", "b"]
    text = fl.to_fus(f)  # the parts: two slices
    assert text.count("= slice(") == 2
    assert str(fl.parse(text)) == str(f)


@pytest.mark.parametrize(
    ("statement", "says"),
    [
        ("a = chunk(x, 2, 1)", "chunk returns 2 tensors but the statement names 1 (a)"),
        ("a, b = exp(x)", "exp returns 1 tensor but the statement names 2 (a, b)"),
        ("a, a = chunk(x, 2, 1)", "a is assigned twice in one statement"),
        ("x, b = chunk(x, 2, 1)", "x is already defined"),
    ],
)
def test_the_names_must_match_the_results(statement: str, says: str) -> None:
    with pytest.raises(fl.ParseError, match=re.escape(says)):
        fl.parse(f"input x: float32[4, 8]\n{statement}\n")


def _halves(x: fl.TensorView) -> tuple[fl.TensorView, fl.TensorView]:
    """Two copies (an op with two outputs, for the writer)."""
    a, b = like(x), like(x)
    Op("halves", [a, b], [x])
    return a, b


def test_an_op_with_two_outputs_is_written_as_one_statement(monkeypatch) -> None:
    d = OpDef("halves", _halves, Template("halves( {x} )"), (X,))
    monkeypatch.setitem(registry._DEFS, "halves", d)
    f = fl.parse("input x: float32[3]\na, b = halves(x)\nc = add(a, b)\noutput c\n")
    text = fl.to_fus(f)
    assert "T1, T2 = halves(T0)" in text
    assert str(fl.parse(text)) == str(f)
