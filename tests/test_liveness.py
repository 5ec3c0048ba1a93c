"""Liveness: the executor and the reference evaluator free each value after its last use.

These count live arrays; peak memory itself is measured by benchmarks/memory.py,
never asserted in tests.
"""

from __future__ import annotations

import weakref

import pytest
from three_way import PATHS

import fuserlite as fl
import fuserlite.reference.evaluator as reference
import fuserlite.reference.rounding as rounding
from fuserlite.ir.liveness import dead_after, peak_live
from fuserlite.schedule.shard import shard_axis


def chain_with_communication(n_ops: int = 6) -> fl.Fusion:
    """x sharded on 2 devices -> n pointwise ops -> Allgather -> n more ops."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x = fl.tensor([8, 6])
        f.add_input(x)
        shard_axis(x, 0, mesh)
        t = x
        for k in range(n_ops):
            t = fl.exp(t) if k % 2 else t * 0.5
        t = fl.set(t)
        t.set_device_mesh(mesh)  # replicated: an Allgather
        for k in range(n_ops):
            t = fl.tanh(t) if k % 2 else t + 1.0
        f.add_output(t)
    return f


def test_dead_after_drops_each_value_after_its_last_reader():
    steps = [("a", ["x"], ["t1"]), ("b", ["t1"], ["t2", "unused"]), ("c", ["t1", "t2"], ["y"])]
    dead = dead_after(steps, lambda s: s[1], lambda s: s[2], keep=["y"])
    assert [sorted(d) for d in dead] == [["x"], ["unused"], ["t1", "t2"]]
    sizes = {"x": 1, "t1": 10, "t2": 100, "unused": 1000, "y": 1}
    assert peak_live(steps, lambda s: s[1], lambda s: s[2], sizes.get, exclude=["x", "y"]) == 1110


@pytest.mark.parametrize("compute", PATHS)
def test_executor_keeps_only_the_outputs(compute: str):
    f = chain_with_communication()
    inputs = fl.random_inputs(f)
    live: list[int] = []

    class Counting(fl.FusionExecutor):
        def _post_communication(self, comm, values):
            live.append(sum(len(v) for v in values.values()))
            return super()._post_communication(comm, values)

    ex = Counting(f, compute=compute)
    values = ex._execute(inputs)
    assert {tv for v in values.values() for tv in v} == set(ex.program.outputs)
    # Before the Allgather each device holds its input shard's successors only:
    # the kernel's result (no input, no intermediate of the op-by-op kernel).
    assert live == [2]
    fl.validate(f, inputs, ex.run(inputs))


def test_reference_frees_intermediates_after_their_last_use(monkeypatch):
    f = chain_with_communication(n_ops=10)
    produced: list[weakref.ref] = []
    most_alive = 0
    original = reference.eval_outputs

    def counting_eval(expr, args, shapes, **where):
        nonlocal most_alive
        most_alive = max(most_alive, sum(r() is not None for r in produced))
        outs = original(expr, args, shapes, **where)
        produced.extend(weakref.ref(out) for out in outs)
        return outs

    monkeypatch.setattr(reference, "eval_outputs", counting_eval)
    inputs = fl.random_inputs(f)
    (out,) = fl.evaluate(f, inputs)
    assert len(produced) == 21
    assert most_alive <= 2  # a chain: the operand and nothing older


def test_rounding_bounds_free_dead_bounds(monkeypatch):
    f = chain_with_communication(n_ops=10)
    produced: list[weakref.ref] = []
    most_alive = 0

    def counting(rule):
        def counted(op):
            nonlocal most_alive
            most_alive = max(most_alive, sum(r() is not None for r in produced))
            out = rule(op)
            produced.append(weakref.ref(out[0].parts))
            return out

        return counted

    rules = {name: counting(rule) for name, rule in rounding.PROPAGATE.items()}
    monkeypatch.setattr(rounding, "PROPAGATE", rules)
    found = rounding.bounds(f, fl.random_inputs(f), rounding.AGAINST_REFERENCE)
    # every op of the chain but the first two (x * 0.5 is exact, and exp of it has only
    # its own rounding) propagates a bound
    assert len(produced) == 19 and found.errs[0].parts.shape[1:] == (8, 6)
    assert most_alive <= 2  # as the reference's values: the operand's and nothing older


def test_working_set_of_a_chain():
    f = chain_with_communication()
    ws = fl.FusionExecutor(f).working_set()
    assert (ws.inputs, ws.outputs) == (8 * 6 * 4, 2 * 8 * 6 * 4)  # the output on both devices
    # The first kernel's output (sharded) and the Allgather's (replicated) meet in it.
    assert ws.intermediates == 8 * 6 * 4 + 2 * 8 * 6 * 4
    op_by_op = fl.FusionExecutor(f, schedule=False).working_set()
    # Op by op, two replicated arrays of the second chain are live at once.
    assert op_by_op.intermediates == 2 * (2 * 8 * 6 * 4)
    assert ws.total == ws.inputs + ws.outputs + ws.intermediates
