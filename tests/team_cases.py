"""Communicator cases over the teams of N-D meshes and moves between meshes, each with a
numpy model computed independently (concatenations, slices and sums team by team).

Shared by tests/test_teams.py (sim against the model) and tests/mpi_scripts/teams.py
(mpi against sim, bit for bit, on 4 and 8 ranks). Values are random floats, so a sum
in another order would show in the bits.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from plan_simulator import holds, source_arrays
from plan_simulator import run_step as simulate

import fuserlite as fl
from fuserlite.ir.types import ReductionOpType
from fuserlite.plan import (
    Geometry,
    Placement,
    Planner,
    all_placements,
    blocks,
    holdings,
    needs,
    plan_move,
)
from fuserlite.plan.mesh_axes import groups, teams
from fuserlite.plan.steps import moves
from fuserlite.program.communication import CommKind, Communication
from fuserlite.runtime.communicator import Buffers, BufferSpec, Communicator, Team
from fuserlite.runtime.dispatch import run_communication, teams_of
from fuserlite.runtime.moves import run_move, within
from fuserlite.runtime.redistribute import run_step
from fuserlite.schedule.shard import shard_as

SUM, MAX = ReductionOpType.sum, ReductionOpType.max
NUMPY_OP = {SUM: np.add, MAX: np.maximum}


@dataclass(frozen=True)
class Case:
    """One collective (or move): its inputs on every device, how to run it, its model."""

    name: str
    teams: tuple[Team, ...]  # what the backend must prepare (none for a move)
    inputs: Callable[[], Buffers]
    run: Callable[[Communicator, Buffers], Buffers]
    model: Callable[[Buffers], Buffers]

    def execute(self, backend: Communicator) -> Buffers:
        """The outputs of the devices `backend` hosts."""
        backend.prepare_teams(self.teams)
        mine = set(backend.hosted(list(self.inputs())))
        return self.run(backend, {d: a for d, a in self.inputs().items() if d in mine})


# (name, mesh shape, device ids row-major, world size): meshes that cover the world and
# meshes that leave ranks idle, team order unlike rank order included
MESHES = [
    ("4", (4,), (0, 1, 2, 3), 4),
    ("2x2", (2, 2), (0, 1, 2, 3), 4),
    ("2x2{3 1 0 2}", (2, 2), (3, 1, 0, 2), 4),
    ("2{0 2}", (2,), (0, 2), 4),
    ("2x4", (2, 4), tuple(range(8)), 8),
    ("2x2x2", (2, 2, 2), tuple(range(8)), 8),
    ("2x2{7 5 3 1}", (2, 2), (7, 5, 3, 1), 8),
]


def _random(seed: int, device: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The same array in every process: seeded by the case and the device."""
    rng = np.random.default_rng([seed, device])
    return rng.standard_normal(shape).astype(dtype)


def _fold(arrays: list[np.ndarray], op: ReductionOpType) -> np.ndarray:
    """Left to right; sums of float16 and bfloat16 in float32, rounded once at the end."""
    dtype = arrays[0].dtype
    if op is ReductionOpType.sum and dtype in (np.float16, ml_dtypes.bfloat16):
        return functools.reduce(np.add, [a.astype(np.float32) for a in arrays]).astype(dtype)
    return functools.reduce(NUMPY_OP[op], arrays)


def _concat_alltoall(got: dict[int, list[np.ndarray]]) -> Buffers:
    return {d: np.concatenate(parts, axis=0) for d, parts in got.items()}


def collective_cases(mesh: str, shape, devices, world: int) -> list[Case]:
    """Every kind over the teams of every group of mesh axes of one mesh."""
    idle = [d for d in range(world) if d not in devices]
    out: list[Case] = []
    for group in groups(len(shape)):
        members = [tuple(devices[i] for i in t) for t in teams(shape, group)]
        where = f"{mesh} group {''.join(map(str, group))}"
        roots = [m[i % len(m)] for i, m in enumerate(members)]  # roots at varying positions
        out += _unrooted(where, [Team(m) for m in members], len(out))
        out += _rooted(where, [Team(m, r) for m, r in zip(members, roots)], len(out) + 100)
        if len(idle) >= len(members):  # roots outside the mesh: idle ranks
            outside = [Team(m, r) for m, r in zip(members, idle)]
            out += _rooted(f"{where} root outside", outside, len(out) + 200)
    return out


def _unrooted(where: str, ts: list[Team], seed: int) -> list[Case]:
    d = len(ts[0].members)
    every = [m for t in ts for m in t.members]
    rows = 2 * d

    def inputs(shape=(rows, 3), dtype="float32", s=seed):
        return lambda: {m: _random(s, m, shape, dtype) for m in every}

    def gathered(x):
        return {m: np.concatenate([x[n] for n in t.members]) for t in ts for m in t.members}

    def swapped(x):
        return {
            m: np.concatenate([x[n][j * 2 : (j + 1) * 2] for n in t.members])
            for t in ts
            for j, m in enumerate(t.members)
        }

    def reduced(op):
        return lambda x: {m: _fold([x[n] for n in t.members], op) for t in ts for m in t.members}

    def scattered(op):
        def model(x):
            out = {}
            for t in ts:
                total = _fold([x[n] for n in t.members], op)
                out |= {m: total[j * 2 : (j + 1) * 2] for j, m in enumerate(t.members)}
            return out

        return model

    cases = [
        Case(f"Allgather {where}", tuple(ts), inputs(), lambda b, x: b.allgather(ts, x), gathered),
        Case(
            f"AllToAll {where}",
            tuple(ts),
            inputs(),
            lambda b, x: _concat_alltoall(b.alltoall(ts, x)),
            swapped,
        ),
    ]
    for op in (SUM, MAX):
        cases += [
            Case(
                f"Allreduce-{op.value} {where}",
                tuple(ts),
                inputs((2 * d + 1, 3)),  # flat chunks of uneven size
                lambda b, x, op=op: b.allreduce(ts, x, op),
                reduced(op),
            ),
            Case(
                f"ReduceScatter-{op.value} {where}",
                tuple(ts),
                inputs(),
                lambda b, x, op=op: b.reduce_scatter(ts, x, op),
                scattered(op),
            ),
        ]
    for dtype, shape in (("bfloat16", (5,)), ("float16", ()), ("int32", (3, 2))):
        cases.append(
            Case(
                f"Allreduce-sum-{dtype}{list(shape)} {where}",
                tuple(ts),
                inputs(shape, dtype),
                lambda b, x: b.allreduce(ts, x, SUM),
                reduced(SUM),
            )
        )
    return cases


def _rooted(where: str, ts: list[Team], seed: int) -> list[Case]:
    d = len(ts[0].members)
    roots = [t.root for t in ts]
    senders = [m for t in ts for m in t.members]
    spec = BufferSpec((2, 3), np.dtype("float32"))
    whole = BufferSpec((2 * d, 3), np.dtype("float32"))

    def inputs(who, shape, s=seed):
        return lambda: {m: _random(s, m, shape, "float32") for m in who}

    def gathered(x):
        return {t.root: np.concatenate([x[m] for m in t.members]) for t in ts}

    def reduced(op):
        return lambda x: {t.root: _fold([x[m] for m in t.members], op) for t in ts}

    return [
        Case(
            f"Broadcast {where}",
            tuple(ts),
            inputs(roots, spec.shape),
            lambda b, x: b.broadcast(ts, x, spec),
            lambda x: {m: x[t.root] for t in ts for m in t.members},
        ),
        Case(
            f"Scatter {where}",
            tuple(ts),
            inputs(roots, whole.shape),
            lambda b, x: b.scatter(ts, x, whole),
            lambda x: {
                m: x[t.root][2 * j : 2 * j + 2] for t in ts for j, m in enumerate(t.members)
            },
        ),
        Case(
            f"Gather {where}",
            tuple(ts),
            inputs(senders, spec.shape),
            lambda b, x: b.gather(ts, x, spec),
            gathered,
        ),
        *[
            Case(
                f"Reduce-{op.value} {where}",
                tuple(ts),
                inputs(senders, spec.shape),
                lambda b, x, op=op: b.reduce(ts, x, op, spec),
                reduced(op),
            )
            for op in (SUM, MAX)
        ],
    ]


# (name, shape, (source mesh shape, devices, placement), (destination ...), world size)
MOVES = [
    ("{0 1} S0 -> {2 3} S1", (5, 6, 8), ((2,), (0, 1), "(S0)"), ((2,), (2, 3), "(S1)"), 4),
    ("{0} R -> {1 2 3} S1", (5, 6, 8), ((1,), (0,), "(R)"), ((3,), (1, 2, 3), "(S1)"), 4),
    ("2x2 (P,S0) -> {0} R", (5, 6, 8), ((2, 2), (0, 1, 2, 3), "(P,S0)"), ((1,), (0,), "(R)"), 4),
    ("{0 2} S0 -> {1 3} R", (5, 6, 8), ((2,), (0, 2), "(S0)"), ((2,), (1, 3), "(R)"), 4),
    ("{0 1} R -> {1 2 3} S0", (5, 6, 8), ((2,), (0, 1), "(R)"), ((3,), (1, 2, 3), "(S0)"), 4),
    (
        "{0 1} S1 -> 2x2{2 3 4 5} (S0,S1)",
        (8, 8, 16),
        ((2,), (0, 1), "(S1)"),
        ((2, 2), (2, 3, 4, 5), "(S0,S1)"),
        8,
    ),
    (
        "2x4 (S0,S1) -> 2x2x2 (S1,S0,R)",
        (8, 8, 16),
        ((2, 4), tuple(range(8)), "(S0,S1)"),
        ((2, 2, 2), tuple(range(8)), "(S1,S0,R)"),
        8,
    ),
    (
        "2x2{0 1 2 3} (P,P) -> 2x2{4 5 6 7} (S1,R)",
        (5, 6, 8),
        ((2, 2), (0, 1, 2, 3), "(P,P)"),
        ((2, 2), (4, 5, 6, 7), "(S1,R)"),
        8,
    ),
]


def move_case(name: str, shape, src, dst, seed: int) -> Case:
    """A move planned by plan.cross_mesh, executed by runtime.moves."""
    (s_mesh, s_devs, s_text), (d_mesh, d_devs, d_text) = src, dst
    s_place, d_place = Placement.parse(s_text, len(shape)), Placement.parse(d_text, len(shape))
    sources = holdings(shape, s_mesh, s_devs, s_place)
    destinations = needs(shape, d_mesh, d_devs, d_place)
    move = plan_move(sources, destinations, 4)
    terms = sorted({h.term for h in sources})
    addends = [_random(seed, 1000 + term, shape, "float32") for term in terms]
    whole = _fold(addends, SUM)

    def inputs() -> Buffers:
        return {
            h.device: np.ascontiguousarray(addends[h.term][within(h.box, _all(shape))])
            for h in sources
        }

    def run(backend: Communicator, bufs: Buffers) -> Buffers:
        return run_move(move, sources, destinations, backend, bufs, np.dtype("float32"), SUM)

    def model(_: Buffers) -> Buffers:
        return {d: whole[within(box, _all(shape))] for d, box in destinations}

    return Case(f"move {name}", (), inputs, run, model)


def _all(shape) -> tuple[tuple[int, int], ...]:
    return tuple((0, n) for n in shape)


PLAN_SHAPE = (8, 8, 16)
# (mesh shape, device ids, every how many-th pair on sim, on mpi, world size)
PLAN_MESHES = [
    ((2, 2), (0, 1, 2, 3), 1, 1, 4),
    ((2, 2), (3, 1, 0, 2), 5, 5, 4),
    ((2, 4), tuple(range(8)), 1, 5, 8),
    ((2, 2, 2), tuple(range(8)), 37, 97, 8),
]


def plan_pairs(mesh: tuple[int, ...], every: int) -> list[tuple[Placement, Placement]]:
    """Every `every`-th (source, target) pair of placements of PLAN_SHAPE, the target
    complete or partial over some of the source's partial mesh axes."""
    sources = list(all_placements(len(PLAN_SHAPE), len(mesh)))
    pairs = [(s, t) for s in sources for t in sources if set(t.partial) <= set(s.partial)]
    return pairs[::every]


@functools.cache
def planner(mesh: tuple[int, ...]) -> Planner:
    """Plans by bytes alone (latency_bytes=0): the longest plans, of every step kind over
    flattened teams (the default latency gives these small tensors one-collective plans)."""
    return Planner(PLAN_SHAPE, 4, mesh, latency_bytes=0)


def plan_case(mesh: tuple[int, ...], devices, source, target, seed: int) -> Case:
    """The planner's plan from `source` to `target`, step by step (runtime.redistribute),
    against tests/plan_simulator.py's numpy execution of the same steps."""
    steps = [s.step for s in planner(mesh).plan(source, target).steps]
    ids = fl.DeviceMesh(np.array(devices).reshape(mesh))
    rng = np.random.default_rng(seed)
    value = rng.integers(-100, 100, PLAN_SHAPE)
    start = [a.astype("float32") for a in source_arrays(value, mesh, source, rng)]

    def run(backend: Communicator, bufs: Buffers) -> Buffers:
        for step in steps:
            bufs = run_step(step, ids, backend, bufs, SUM)
        return bufs

    def model(_: Buffers) -> Buffers:
        local = start
        for step in steps:
            local = simulate(mesh, step, local)
        assert holds(value, mesh, target, local) == "", f"{source} -> {target}"
        return dict(zip(devices, local))

    where = "x".join(map(str, mesh)) + ("" if list(devices) == sorted(devices) else str(devices))
    return Case(
        f"plan {where} {source} -> {target}", (), lambda: dict(zip(devices, start)), run, model
    )


def plan_cases(entry, *, mpi: bool = False) -> list[Case]:
    """The sampled plans of one PLAN_MESHES entry (mpi's sample or sim's)."""
    mesh, devices, on_sim, on_mpi, _ = entry
    pairs = plan_pairs(mesh, on_mpi if mpi else on_sim)
    return [plan_case(mesh, devices, s, t, i) for i, (s, t) in enumerate(pairs)]


def nd_tensor(mesh: fl.DeviceMesh, p: Placement, shape=PLAN_SHAPE):
    """A tensor of `shape` on `mesh` with placement `p` (inside a Fusion)."""
    t = fl.tensor(list(shape))
    shard_as(t, mesh, p)
    return t


def local_blocks(value: np.ndarray, mesh: fl.DeviceMesh, p: Placement) -> Buffers:
    """Each device's block of `value` under `p` (plan.blocks)."""
    boxes = blocks(value.shape, mesh.shape, p)
    return {d: value[within(box, _all(value.shape))] for d, box in zip(mesh.devices, boxes)}


def one_step_pairs(shape: tuple[int, ...], every: int = 1):
    """Every `every`-th (source, target, step) of a complete placement and a collective
    (or slice) that applies to it."""
    geometry = Geometry(PLAN_SHAPE, 4, shape)
    out = []
    for s in all_placements(len(PLAN_SHAPE), len(shape), partial=False):
        for step in moves(s):
            moved = geometry.transition(step, s)
            if moved is not None:
                out.append((s, moved[0], step))
    return out[::every]


def dispatch_case(mesh: fl.DeviceMesh, kind: CommKind, sp: Placement, tp: Placement, tmesh=None):
    """A Communication built by hand between tensors of placements sp and tp (on `mesh`,
    or from `mesh` to `tmesh`), run by runtime.dispatch; its model is tp's blocks."""
    tmesh = tmesh or mesh
    with fl.Fusion():
        x, y = nd_tensor(mesh, sp), nd_tensor(tmesh, tp)
    comm = Communication(kind, y, x, mesh.devices)
    value = _random(7, 0, PLAN_SHAPE, "float32")
    return Case(
        f"dispatch {kind.value} {mesh} {sp} -> {tmesh} {tp}",
        teams_of(comm),
        lambda: local_blocks(value, mesh, sp),
        lambda b, x: run_communication(comm, b, x),
        lambda _: local_blocks(value, tmesh, tp),
    )


# moves between N-D meshes through dispatch: (source mesh, placement, target ..., world)
DISPATCH_MOVES = [
    ([[0, 1], [2, 3]], "(S0,S1)", [[3, 2], [1, 0]], "(S1,S0)", 4),
    ([0, 1], "(S1)", [[0, 1], [2, 3]], "(S0,S1)", 4),
    ([[0, 1], [2, 3]], "(S0,S1)", [[4, 5], [6, 7]], "(S1,S0)", 8),
    ([0, 1], "(S1)", [[2, 3], [4, 5]], "(S0,S1)", 8),
    ([[0, 1, 2, 3], [4, 5, 6, 7]], "(S0,S1)", [[[0, 1], [2, 3]], [[4, 5], [6, 7]]], "(S1,S0,R)", 8),
    ([[0, 1], [2, 3]], "(R,S2)", [5], "(R)", 8),
]
# (mesh shape, every how many-th one-step pair on sim, on mpi, world size)
DISPATCH_MESHES = [((2, 2), 1, 1, 4), ((2, 4), 1, 3, 8), ((2, 2, 2), 1, 17, 8)]


def dispatch_cases(world: int | None = None) -> list[Case]:
    """Same-mesh steps on N-D meshes (devices in reverse order) and moves between N-D meshes."""
    out = []
    for shape, on_sim, on_mpi, size in DISPATCH_MESHES:
        if world in (None, size):
            mesh = fl.DeviceMesh(np.arange(math.prod(shape))[::-1].reshape(shape).tolist())
            for sp, tp, step in one_step_pairs(shape, on_sim if world is None else on_mpi):
                out.append(dispatch_case(mesh, step.kind, sp, tp))
    for src, sp, dst, dp, size in DISPATCH_MOVES:
        if world in (None, size):
            a, b = fl.DeviceMesh(src), fl.DeviceMesh(dst)
            sp, dp = Placement.parse(sp, 3), Placement.parse(dp, 3)
            out.append(dispatch_case(a, CommKind.SendRecv, sp, dp, b))
    return out


def all_cases(world: int | None = None) -> list[Case]:
    """Every collective and move case for a world of `world` ranks (None: all, for sim)."""
    out = []
    for name, shape, devices, size in MESHES:
        if world in (None, size):
            out += collective_cases(name, shape, devices, size)
    for i, (name, shape, src, dst, size) in enumerate(MOVES):
        if world in (None, size):
            out.append(move_case(name, shape, src, dst, 5000 + i))
    return out


def same_bits(a: Buffers, b: Buffers) -> str:
    """'' when both hold the same devices with bit-identical arrays, else what differs."""
    if sorted(a) != sorted(b):
        return f"devices {sorted(a)} vs {sorted(b)}"
    for d in a:
        x, y = np.asarray(a[d]), np.asarray(b[d])
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"device {d}: {x.shape} {x.dtype} vs {y.shape} {y.dtype}"
        if x.tobytes() != y.tobytes():
            return f"device {d}: values differ"
    return ""
