"""Where an op of several outputs computes when its outputs are sharded differently.

An expression computes once, from one placement of its inputs. sdpa's output may be
sharded on its heads and its logsumexp on its rows, or sdpa_bwd's grad_query on its
rows and grad_value partial over them: each output alone needs the inputs placed its
own way. Each output's placement is then a candidate (`Computation`): the inputs
placed as it needs them, every other output computed where those inputs put it
(`induced`: its axes sharded as the input axes that map onto them, a reduction axis
partial, on the inputs' mesh), and a resharding Set after each output whose users
asked for another sharding (or mesh). So is each group of outputs computed together
(`merged`: their needs at once, grad_key partial over DIDx and grad_value over DIDy
from the query rows over both). The pass takes the cheapest candidate: the planner's
cost (plan.cost, at the default latency: insert-reshardings runs before
lower-communications is told another) of every input it reshards and every output
Set, ties to the earlier output, then to fewer outputs together. Moved bytes are what
differ between candidates (each computes the op once), and the planner's own estimate
ranks them as lowering will plan them. A candidate is impossible where an output Set
would have to make partial values (a redistribution only combines them) or where the
inputs it places cannot compute another output locally; if every one is, the
expression is refused with every output, its sharding and what to change.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from fuserlite.ir.errors import LoweringError, RedistributionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.placement import Placement
from fuserlite.ir.sharding import MeshPlacement, describe_sharding, mesh_placement, planner_view
from fuserlite.ir.tensor import TensorView
from fuserlite.ops.registry import definition_of, operand_to_output
from fuserlite.ops.sharding import needed_placement
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES
from fuserlite.plan.search import Planner


@dataclass(frozen=True)
class Computation:
    """One way to compute an expression: its inputs' placements and its outputs'."""

    leader: int | None  # the output whose placement chose the inputs' (None: all of them)
    needs: tuple[MeshPlacement, ...]  # per operand position, on its logical axes
    computed: tuple[MeshPlacement, ...]  # per output, on its logical axes
    cost: int  # plan.cost total of every resharding it needs


def differs(expr: Expr) -> bool:
    """True when the outputs of `expr` need some input placed differently."""
    first, *others = expr.outputs
    positions = range(len(expr.inputs))
    return any(
        needed_placement(expr, o, p) != needed_placement(expr, first, p)
        for o in others
        for p in positions
    )


def induced(expr: Expr, k: int, needs: tuple[MeshPlacement, ...]) -> MeshPlacement | None:
    """Where output k of `expr` lies when computed from inputs placed `needs`: each axis
    sharded as the input axes mapping onto it; None where those inputs cannot compute it
    locally (an input axis sharded that maps nowhere in it, two disagreeing, a partial
    value of an op that says no way to combine it)."""
    out = expr.outputs[k]
    mesh, rank = needs[0][0], needs[0][1].mesh_rank
    shards: list[tuple[int, ...]] = [()] * len(out.domain.logical)
    for p, (_, need) in enumerate(needs):
        for pi, ci in operand_to_output(expr, p, out).items():
            axes = need.shards[pi]
            if axes and shards[ci] not in ((), axes):
                return None
            shards[ci] = shards[ci] or axes
    blocks = {a: need.block_of(a) for _, need in needs for a in need.cyclic}
    if any(need.block_of(a) != blocks[a] for _, need in needs for a in need.cyclic):
        return None  # one mesh axis cyclic in blocks of two sizes
    used = sorted(set(blocks) & {a for s in shards for a in s})
    placed = Placement(rank, tuple(shards), (), tuple(used), tuple(blocks[a] for a in used))
    reduced = [ax for ax, axes in zip(out.domain.logical, shards) if axes and ax.is_reduction]
    if reduced and definition_of(expr).sharding.partial is None:
        return None
    # On the inputs' mesh, whichever mesh the output's users want it on (a Set moves it).
    same = all(needed_placement(expr, out, p, placed)[1] == needs[p][1] for p in range(len(needs)))
    return (mesh, placed) if same else None


def move_cost(tv: TensorView, source: MeshPlacement, target: MeshPlacement) -> int | None:
    """plan.cost of moving `tv` (its shape and dtype) from `source` to `target`; a move
    between meshes is costed as the whole tensor in one launch; None: no plan exists."""
    if source == target:
        return 0
    (ms, ps), (mt, pt) = source, target
    data = tv.data_positions()
    if ms != mt:  # it makes complete values (lower-communications' moves between meshes)
        return None if planner_view(pt, data).partial else tv.nbytes + DEFAULT_LATENCY_BYTES
    planner = Planner(tv.shape, tv.dtype.itemsize, ms.shape)
    try:
        return planner.plan(planner_view(ps, data), planner_view(pt, data)).cost.total
    except RedistributionError:
        return None


def needs(expr: Expr, k: int) -> tuple[MeshPlacement, ...]:
    """Each operand's placement output k (as written now) needs."""
    return tuple(needed_placement(expr, expr.outputs[k], p) for p in range(len(expr.inputs)))


def merged(each: list[tuple[MeshPlacement, ...]]) -> tuple[MeshPlacement, ...] | None:
    """Every output's needs at once: each operand axis sharded over the mesh axes any
    output needs it sharded over (in output order, nested outer to inner); None where a
    mesh axis would shard two axes of one operand."""
    out = []
    for per_output in zip(*each):
        mesh, rank = per_output[0][0], per_output[0][1].mesh_rank
        if any(m != mesh for m, _ in per_output):
            return None  # outputs on other meshes: computed on one, moved to the others
        shards = [
            tuple(dict.fromkeys(a for _, p in per_output for a in p.shards[i]))
            for i in range(per_output[0][1].ndim)
        ]
        used = {a for s in shards for a in s}
        blocks = {a: p.block_of(a) for _, p in per_output for a in p.cyclic}
        if any(p.block_of(a) != blocks[a] for _, p in per_output for a in p.cyclic):
            return None  # one mesh axis cyclic in blocks of two sizes
        cyclic = tuple(sorted(set(blocks) & used))
        block = tuple(blocks[a] for a in cyclic)
        try:
            out.append((mesh, Placement(rank, tuple(shards), (), cyclic, block)))
        except RedistributionError:
            return None  # a mesh axis used twice
    return tuple(out)


def candidate(
    expr: Expr, needs: tuple[MeshPlacement, ...], users: list[TensorView], leader: int | None
) -> Computation | None:
    """`expr` computed from its inputs placed `needs`, each output then resharded to its
    user's `users[k]`; None where impossible."""
    cost = 0
    for p, producer in enumerate(expr.inputs):
        if any(t is producer for t in expr.inputs[:p]) and needs[p] in needs[:p]:
            continue  # one Set serves both reads (matmul(x, x))
        moved = move_cost(producer, mesh_placement(producer), needs[p])
        if moved is None:
            return None
        cost += moved
    computed = []
    for k, user in enumerate(users):
        placed = induced(expr, k, needs)
        moved = None if placed is None else move_cost(user, placed, mesh_placement(user))
        if moved is None:
            return None
        computed.append(placed)
        cost += moved
    return Computation(leader, needs, tuple(computed), cost)


def choose(expr: Expr, users: list[TensorView]) -> Computation:
    """The cheapest candidate (ties: the earlier output); a LoweringError naming every
    output and its sharding if there is none."""
    each = [needs(expr, k) for k in range(len(users))]
    tries: list[tuple[tuple[MeshPlacement, ...], int | None]] = list(zip(each, range(len(each))))
    for n in range(2, len(each) + 1):  # outputs computed together: their needs merged
        for together in itertools.combinations(each, n):
            if (union := merged(list(together))) is not None:
                tries.append((union, None))
    found = [c for placed, k in tries if (c := candidate(expr, placed, users, k)) is not None]
    if found:
        return min(found, key=lambda c: c.cost)
    outputs = "; ".join(describe_sharding(u) for u in users)
    raise LoweringError(
        f"{expr!r}: its outputs need its inputs placed differently ({outputs}), and no "
        "placement of its inputs computes every output so that a resharding can move it to "
        "its sharding (partial values come only from the op, on its mesh; a resharding "
        "only combines them): put the partial outputs on one mesh, partial over the same "
        "mesh axes, or leave all but one of them complete (its reduction axis unsharded)"
    )
