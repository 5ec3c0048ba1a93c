"""ir.readonly: inside `reading_only()` an answer about a node is computed once (by the
node's identity); outside, and after the block, every call computes afresh. Facts about
tensors are kept on their stamps instead (ir.stamps.derived, tests/test_stamps.py)."""

from __future__ import annotations

from fuserlite.ir.readonly import reading_only, remembered


class _Node:
    pass


def _counting():
    calls = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    return calls, compute


def test_outside_a_read_only_block_every_call_computes() -> None:
    node = _Node()
    calls, compute = _counting()
    assert [remembered("q", node, compute) for _ in range(3)] == [1, 2, 3]


def test_inside_one_answer_per_question_and_node_then_forgotten() -> None:
    a, b = _Node(), _Node()
    calls, compute = _counting()
    with reading_only():
        assert remembered("q", a, compute) == remembered("q", a, compute) == 1
        assert remembered("q", b, compute) == 2  # another node
        assert remembered("other", a, compute) == 3  # another question
        with reading_only():  # a nested block shares the answers
            assert remembered("q", a, compute) == 1
        assert remembered("q", a, compute) == 1
    assert remembered("q", a, compute) == 4  # the block ended: computed afresh
    assert len(calls) == 4


def test_a_fusions_expression_order_is_one_list_while_reading_only() -> None:
    import fuserlite as fl

    with fl.Fusion() as f:
        x = fl.tensor([4])
        f.add_input(x)
        f.add_output(x + 1.0)
    with reading_only():
        assert f.exprs() is f.exprs()
    assert f.exprs() is not f.exprs() and f.exprs() == f.exprs()  # copies outside
