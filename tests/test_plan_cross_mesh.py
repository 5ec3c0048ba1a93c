"""Moves between meshes: each destination receives exactly what it lacks, once, balanced."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite.plan import Placement, RedistributionError, StepKind
from fuserlite.plan.cross_mesh import Holding, Move, holdings, needs, plan_move

SHAPE = (8, 4)
B = 8 * 4 * 4  # float32
R1, S0, P1 = (Placement.parse(t, 2) for t in ("(R)", "(S0)", "(P)"))


def on(devices, p, mesh=None):
    """Holdings of placement p on a mesh of `devices` (1-D unless `mesh` says otherwise)."""
    return holdings(SHAPE, mesh or (len(devices),), devices, p)


def to(devices, p, mesh=None):
    return needs(SHAPE, mesh or (len(devices),), devices, p)


def execute(move: Move, sources, destinations, seed: int = 0) -> None:
    """Run the transfers on numpy: every destination ends with the value on its box.

    Each part of a destination's box, per addend, is filled exactly once: by
    what the device holds itself or by one transfer (a duplicate or a gap fails).
    """
    rng = np.random.default_rng(seed)
    value = rng.integers(-99, 99, SHAPE)
    terms = sorted({h.term for h in sources})
    addend = {t: rng.integers(-99, 99, SHAPE) for t in terms[:-1]}
    addend[terms[-1]] = value - sum(addend[t] for t in terms[:-1])
    held = {h.device: h for h in sources}
    for dst, box in destinations:
        total = np.zeros([b - a for a, b in box], int)
        for term in terms:
            got, count = np.zeros_like(total), np.zeros_like(total)
            parts = [(t.box, t.src) for t in move.transfers if t.dst == dst and t.term == term]
            if dst in held and held[dst].term == term:
                parts.append((held[dst].box, dst))
            for part, src in parts:
                assert src in held and held[src].term == term
                lo = [max(a, p) for (a, _), (p, _) in zip(box, part)]
                hi = [min(b, q) for (_, b), (_, q) in zip(box, part)]
                if any(x >= y for x, y in zip(lo, hi)):
                    continue
                assert all(h0 <= x and y <= h1 for (h0, h1), x, y in zip(held[src].box, lo, hi))
                here = tuple(slice(x - a, y - a) for (a, _), x, y in zip(box, lo, hi))
                got[here] = addend[term][tuple(slice(x, y) for x, y in zip(lo, hi))]
                count[here] += 1
            assert (count == 1).all(), f"device {dst}, addend {term}: parts {parts}"
            total += got
        assert np.array_equal(total, value[tuple(slice(a, b) for a, b in box)])


def check(sources, destinations, itemsize=4) -> Move:
    move = plan_move(sources, destinations, itemsize)
    execute(move, sources, destinations)
    return move


def test_sharded_on_two_devices_to_sharded_on_four_others_is_point_to_point():
    move = check(on([0, 1], S0), to([2, 3, 4, 5], S0))
    assert (move.kind, move.bytes, move.sent()) == (StepKind.SendRecv, B, {0: B // 2, 1: B // 2})
    assert [(t.src, t.dst, t.box) for t in move.transfers] == [
        (0, 2, ((0, 2), (0, 4))),
        (0, 3, ((2, 4), (0, 4))),
        (1, 4, ((4, 6), (0, 4))),
        (1, 5, ((6, 8), (0, 4))),
    ]


def test_sharded_to_one_device_of_the_mesh_is_a_gather_and_a_sum_a_reduce():
    move = check(on([0, 1, 2, 3], S0), to([0], R1))
    assert (move.kind, move.roots, move.bytes) == (StepKind.Gather, (0,), 3 * B // 4)
    move = check(on([0, 1, 2, 3], P1), to([0], R1))
    assert (move.kind, move.roots, move.bytes) == (StepKind.Reduce, (0,), 3 * B)


def test_one_device_to_many_is_a_broadcast_or_a_scatter():
    move = check(on([0], R1), to([1, 2, 3], R1))
    assert (move.kind, move.roots, move.bytes) == (StepKind.Broadcast, (0,), 3 * B)
    move = check(on([0], R1), to([0, 1, 2, 3], S0))  # the root keeps its own chunk
    assert (move.kind, move.roots, move.bytes) == (StepKind.Scatter, (0,), 3 * B // 4)


def test_a_replicated_source_scatters_from_every_replica_evenly():
    move = check(on([0, 1], R1), to([2, 3, 4, 5], S0))
    assert (move.kind, move.roots, move.bytes) == (StepKind.Scatter, (0, 1), B)
    assert move.sent() == {0: B // 2, 1: B // 2}
    move = check(on([0, 1, 2, 3], R1), to([4, 5], S0))  # fewer parts than replicas: split
    assert move.sent() == {d: B // 4 for d in range(4)} and move.bytes == B


def test_a_replicated_side_on_both_ends_sends_each_destination_the_tensor_once():
    move = check(on([0, 1], R1), to([2, 3, 4, 5], R1))
    assert (move.kind, move.bytes, move.sent()) == (StepKind.Broadcast, 4 * B, {0: 2 * B, 1: 2 * B})
    move = check(on([0, 1, 2, 3], R1), to([4], R1))
    assert (move.kind, move.sent()) == (StepKind.Broadcast, {d: B // 4 for d in range(4)})
    move = check(on([0, 1], S0), to([2, 3, 4, 5], R1))  # a Gather onto a replicated side
    assert (move.kind, move.roots, move.bytes) == (StepKind.Gather, (2, 3, 4, 5), 4 * B)


def test_overlapping_meshes_move_only_what_each_destination_lacks():
    move = check(on([0, 1, 2, 3], S0), to([2, 3, 4, 5], S0))
    assert [(t.src, t.dst) for t in move.transfers] == [(0, 2), (1, 3), (2, 4), (3, 5)]
    assert move.bytes == B
    move = check(on([0, 1], R1), to([1, 2], S0))  # 1 already holds its half
    assert move.bytes == B // 2 and {t.dst for t in move.transfers} == {2}
    assert check(on([0, 1], S0), to([0, 1], S0)).kind is None
    assert check(on([0, 1], S0), to([0, 1], S0)).describe() == "nothing to move"


def test_a_partial_source_replicated_on_one_mesh_axis_reduces_each_addend_once():
    """(P,R) on a 2x2 mesh: devices 0 1 hold one addend, 2 3 the other."""
    sources = on([0, 1, 2, 3], Placement.parse("(P,R)", 2), mesh=(2, 2))
    assert [h.term for h in sources] == [0, 0, 1, 1]
    move = check(sources, to([4], R1))
    assert (move.kind, move.roots, move.bytes) == (StepKind.Reduce, (4,), 2 * B)
    assert move.sent() == {d: B // 2 for d in range(4)}
    move = check(sources, to([0, 5], S0))  # 0 holds addend 0 of its half already
    assert move.kind is StepKind.SendRecv and move.bytes == 3 * B // 2


@pytest.mark.parametrize(
    "src_mesh, src, dst_mesh, dst",
    [
        ((2, 2), "(S0,S1)", (3,), "(S1)"),
        ((2, 2), "(S1,S0)", (2, 3), "(S0,S1)"),
        ((4,), "(S1)", (2, 2), "(S1,S0)"),
        ((2, 2), "(P,S0)", (2,), "(S1)"),
        ((2, 2), "(R,S1)", (3,), "(S0)"),
    ],
)
def test_moves_between_meshes_of_other_shapes_and_uneven_blocks(src_mesh, src, dst_mesh, dst):
    n_src = int(np.prod(src_mesh))
    sources = holdings(SHAPE, src_mesh, list(range(n_src)), Placement.parse(src, 2))
    destinations = needs(
        SHAPE, dst_mesh, list(range(2, 2 + int(np.prod(dst_mesh)))), Placement.parse(dst, 2)
    )
    move = check(sources, destinations)
    lacking = (
        sum((b1 - b0) * (c1 - c0) for _, ((b0, b1), (c0, c1)) in destinations)
        * 4
        * len({h.term for h in sources})
    )
    assert move.bytes <= lacking  # what a destination holds itself is never sent


def test_senders_are_balanced_and_the_plan_is_deterministic():
    sources, destinations = on([0, 1, 2], R1), to([3, 4, 5, 6, 7], S0)
    first, again = plan_move(sources, destinations, 4), plan_move(sources, destinations, 4)
    assert first == again
    execute(first, sources, destinations)
    sent = first.sent()
    assert max(sent.values()) - min(sent.values()) <= 2 * 4 * 4  # within one row-chunk


def test_data_that_does_not_exist_is_an_error_saying_what_is_missing():
    half = [Holding(0, ((0, 4), (0, 4))), Holding(1, ((0, 4), (0, 4)))]
    with pytest.raises(RedistributionError) as e:
        plan_move(half, [(2, ((2, 6), (0, 4)))], 4)
    assert str(e.value) == (
        "cannot move the tensor: destination device 2 needs [2:6, 0:4], but no source device "
        "holds [4:6, 0:4]; the source devices hold 0: [0:4, 0:4], 1: [0:4, 0:4]"
    )
    one_addend_short = [Holding(0, ((0, 8), (0, 4)), 0), Holding(1, ((0, 4), (0, 4)), 1)]
    with pytest.raises(
        RedistributionError, match=r"holds \[4:8, 0:4\] of addend 1 \(a sum needs every addend\)"
    ):
        plan_move(one_addend_short, [(2, ((0, 8), (0, 4)))], 4)
    with pytest.raises(RedistributionError, match="lists destination device"):
        plan_move(half, [(2, ((0, 1), (0, 1))), (2, ((0, 1), (0, 1)))], 4)
    with pytest.raises(RedistributionError, match="partial"):
        to([0, 1], P1)


def test_the_harness_catches_a_part_sent_twice_or_never():
    sources, destinations = on([0, 1], S0), to([2], R1)
    move = plan_move(sources, destinations, 4)
    twice = Move(move.kind, move.roots, (*move.transfers, move.transfers[0]), 4)
    with pytest.raises(AssertionError, match="device 2, addend 0"):
        execute(twice, sources, destinations)
    never = Move(move.kind, move.roots, move.transfers[1:], 4)
    with pytest.raises(AssertionError, match="device 2, addend 0"):
        execute(never, sources, destinations)


def test_a_scalar_held_by_several_devices_moves_whole():
    """sum(x) replicated on {0 1 2 3}, read on {4}: a 0-d box has no axis to cut between
    its four holders (was: lower-communications crashed, max() of an empty sequence)."""
    with fl.Fusion() as f:
        x = fl.tensor([3], name="x")
        f.add_input(x)
        x.set_device_mesh(fl.DeviceMesh([0, 1, 2, 3]))
        s = fl.sum(x)
        s.set_device_mesh(fl.DeviceMesh([0, 1, 2, 3]))
        y = fl.neg(s)
        y.set_device_mesh(fl.DeviceMesh([4]))
        f.add_output(y)
    inputs = fl.random_inputs(f, 0)
    ex = fl.FusionExecutor(f)
    fl.validate(f, inputs, ex.run(inputs))
    assert [c.bytes_per_device for c in ex.communications] == [4]
