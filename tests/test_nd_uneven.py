"""Uneven shardings on N-D meshes: a tensor axis cut by several mesh axes, extents they
do not divide, and the wrong answers and crashes the N-D differential cases found.

The block model (plan.blocks) chunks a nested sharding outer first: 8 rows over DIDy
(3) then DIDx (2) are 3 3 2, then 2 1 | 2 1 | 2 0, which is not torch.chunk's chunks
of 8 over 6 devices (2 2 2 2 0 0). Every step that cuts or joins such chunks must follow
the block model, and every case is checked against the reference (fl.validate).
"""

from __future__ import annotations

import numpy as np
import pytest
from three_way import HAVE_COMPILER

import fuserlite as fl
from fuserlite.ir.types import ReductionOpType
from fuserlite.kernel.indexing import device_indices
from fuserlite.plan.blocks import blocks
from fuserlite.program.communication import CommKind, Communication, Sizing
from fuserlite.program.shards import device_slices
from fuserlite.runtime.backends.sim import SimCommunicator
from fuserlite.runtime.dispatch import run_communication
from fuserlite.schedule.shard import shard_axis

X, Y, Z = fl.ParallelType.DIDx, fl.ParallelType.DIDy, fl.ParallelType.DIDz
COMPUTE = ["interpret", "numpy", *(["compiled"] if HAVE_COMPILER else [])]


def nest(tv: fl.TensorView, axis: int, mesh: fl.DeviceMesh, order) -> None:
    """Shard `axis` of tv over the mesh axes of `order`, outer first."""
    for pt in order:
        shard_axis(tv, axis, mesh, pt, whole=False)


def moved(n: int, shape: list[int], src, dst) -> fl.Fusion:
    """x [n, 3] sharded on axis 0 over `src` (nested), y = -x over `dst`."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_shape(shape)
        x = fl.tensor([n, 3], name="x")
        f.add_input(x)
        nest(x, 0, mesh, src)
        y = fl.neg(x)
        nest(y, 0, mesh, dst)
        f.add_output(y)
    return f


MOVES = [  # also run on 8 mpi ranks against sim (tests/mpi_scripts/teams.py)
    (8, [3, 2], (X, Y), (Y, X)),  # a LocalSlice over (DIDy, DIDx) teams: 2 1 2 1 2 0
    (7, [3, 2], (Y, X), (X, Y)),
    (9, [2, 4], (Y,), (Y, X)),  # DIDx slices DIDy's chunks of 5 and 4: 2 2 1 0, 2 2 0 0
    (5, [2, 2], (X,), (Y, X)),
    (13, [2, 3], (), (X, Y)),
]


@pytest.mark.parametrize("n, shape, src, dst", MOVES)
def test_a_move_onto_a_nested_uneven_sharding_gives_each_device_its_box(n, shape, src, dst):
    f = moved(n, shape, src, dst)
    inputs = fl.random_inputs(f, 0)
    outputs = fl.FusionExecutor(f, compute="numpy").run(inputs)
    fl.validate(f, inputs, outputs)
    assert np.array_equal(outputs[0], -inputs[0])


def test_a_reduce_scatter_over_two_mesh_axes_pads_each_member_s_own_rows():
    """(P,P) -> 8 rows over (DIDy, DIDx) of a 3x2 mesh in one padded ReduceScatter: member
    r of the 6-device team gets the fold's rows of its own box (2 1 2 1 2 0), not rows
    [2r, 2r + 2) of the fold padded at its end."""
    mesh = fl.DeviceMesh.for_shape([3, 2])
    with fl.Fusion() as f:
        w = fl.tensor([6, 8], name="w")
        f.add_input(w)
        s = fl.sum(w, 0)  # [r6, 8]: partial over both mesh axes once axis 0 is sharded
        nest(s, 0, mesh, (Y, X))
        out = fl.set(s)
        nest(out, 0, mesh, (Y, X))
        f.add_output(out)
    before = fl.ir.sharding.placement(s)
    after = fl.ir.sharding.placement(out)
    comm = Communication(
        CommKind.ReduceScatter,
        out,
        s,
        mesh.devices,
        op=ReductionOpType.sum,
        out_axis=0,
        mesh=mesh,
        group=(0, 1),
        before=before,
        after=after,
        axes=(0,),
        sizing=Sizing.padded,
    )
    rng = np.random.default_rng(0)
    parts = {d: rng.integers(-9, 9, (8,)).astype(np.float32) for d in mesh.devices}
    total = sum(parts.values())
    got = run_communication(comm, SimCommunicator(), parts)
    boxes = blocks((8,), tuple(mesh.shape), after)
    assert [b[0][1] - b[0][0] for b in boxes] == [2, 1, 2, 1, 2, 0]
    for d in mesh.devices:
        assert np.array_equal(got[d], total[device_slices(out, d)]), d


def test_a_sum_over_a_sharded_broadcast_axis_is_an_error_not_d_copies():
    """sum of x [1] with its reduction axis over 4 devices: every device holds x's one row
    (b == bDIDx), so the Allreduce of the partial sums gave 4 * x."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x = fl.tensor([1, 3], name="x")
        x.set_device_mesh(mesh)
        f.add_input(x)
        s = fl.sum(x, 0)
        shard_axis(s, 0, mesh)
        f.add_output(s)
    with pytest.raises(fl.VerifyError, match=r"sums broadcast axis 0 of x.*each device would"):
        fl.FusionExecutor(f)


def test_a_broadcast_axis_sharded_as_input_still_sums_once():
    """The other way round stays legal: x's broadcast axis is bDIDx, the sum is local."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(4)
        x = fl.tensor([1, 4], name="x")
        x.set_device_mesh(mesh)
        f.add_input(x)
        x.axis(0).parallelize(X)
        f.add_output(fl.sum(x, 0))
    inputs = fl.random_inputs(f, 1)
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))


@pytest.mark.parametrize("compute", COMPUTE)
def test_a_kernel_tells_a_didx_sharding_from_a_didy_one_of_the_same_shape(compute):
    """x [3] over DIDy and y [3] over DIDx, both uneven (2 1), in one scheduled kernel:
    their index lowerings differ in the mesh axis the predicate reads. The kernel runner
    reused one for both and predicated y's rows with didy (a NaN on interpret)."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_shape([2, 2])
        x, y = fl.tensor([3], name="x"), fl.tensor([3], name="y")
        for t in (x, y):
            f.add_input(t)
        shard_axis(x, 0, mesh, Y)
        shard_axis(y, 0, mesh, X)
        z = fl.add(fl.broadcast(x, [False, True]), fl.broadcast(y, [True, False]))
        shard_axis(z, 0, mesh, Y)
        shard_axis(z, 1, mesh, X)
        f.add_output(z)
    ex = fl.FusionExecutor(f, compute=compute)
    assert all(k.scheduled for k in ex.program.kernels)
    inputs = fl.random_inputs(f, 0)
    outputs = ex.run(inputs)
    fl.validate(f, inputs, outputs)
    assert np.array_equal(outputs[0], inputs[0][:, None] + inputs[1][None, :])


def test_the_predicate_of_an_uneven_outer_sharding_reads_the_nested_device_index():
    """10 rows over DIDy (3: 4 4 2), each chunk over DIDx (2, even): the row is
    didy * 4 + didx * 2 + r < 10, so the kernel takes didx as well as didy."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_shape([3, 2])
        x = fl.tensor([10, 3], name="x")
        f.add_input(x)
        nest(x, 0, mesh, (Y, X))
        f.add_output(fl.neg(x))
    assert device_indices([x]) == ["didx", "didy"]


def partially_reduced(op: str, shape: list[int], n: list[int], xs, ss, ys=((),)) -> fl.Fusion:
    """x [n], s = op(x, 1), y = neg(s), each axis of each over the mesh axes `xs`, `ss`
    and `ys` give it (nested, outer first): s's reduction axis over fewer mesh axes than
    x's axis 1, so insert-reshardings reduces locally and asks for s's partial placement,
    or over others, so it reshards x first."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_shape(shape)
        x = fl.tensor(n, name="x")
        f.add_input(x)
        s = getattr(fl, op)(x, 1)
        y = fl.neg(s)
        for tv, per_axis in ((x, xs), (s, ss), (y, ys)):
            tv.set_device_mesh(mesh)
            for axis, order in enumerate(per_axis):
                nest(tv, axis, mesh, order)
        f.add_output(y)
    return f


# name: (op, mesh, x's shape, x's axes over, s's axes over[, y's]); also run on 8 mpi
# ranks against sim (tests/mpi_scripts/teams.py).
PARTIAL_REDUCTIONS = {
    "sum 2x3": ("sum", [2, 3], [4, 6], ((), (Y, X)), ((), (X,))),
    "max 2x3": ("max", [2, 3], [4, 6], ((), (Y, X)), ((), (X,))),
    "sum 2x3 uneven": ("sum", [2, 3], [5, 7], ((), (Y, X)), ((), (X,))),
    "sum 2x4": ("sum", [2, 4], [4, 8], ((), (Y, X)), ((), (X,))),
    "max 2x4 kept on DIDy": ("max", [2, 4], [3, 8], ((), (Y, X)), ((), (Y,))),
    "sum 2x2x2 sliced while partial": (
        "sum",
        [2, 2, 2],
        [5, 8],
        ((Z,), (Y, X)),
        ((), (X,)),
        ((Y,),),
    ),
    # partial -> sharded on another mesh axis, uneven: 5 rows over DIDy's 2 (3 2), over
    # DIDx's 4 (2 2 1 0)
    "sum 2x3 reduce-scattered while partial": ("sum", [2, 3], [5, 6], ((), (Y, X)), ((Y,), (X,))),
    "max 2x4 reduce-scattered while partial": ("max", [2, 4], [5, 8], ((), (Y, X)), ((X,), (Y,))),
    # s partial over a mesh axis x's axis 1 is not sharded on: only the reduction makes
    # partial values, so x is resharded first (sliced, or moved off another axis), and
    # the partial values x's own sharding adds are combined by the Set after it
    "sum 2x2 made partial from x whole": ("sum", [2, 2], [4, 6], ((X,), ()), ((X,), (Y,))),
    "sum 2x2 made partial from x rows": ("sum", [2, 2], [4, 6], ((Y,), ()), ((), (Y,))),
    "sum 2x2 made partial on DIDy, x's on DIDx": ("sum", [2, 2], [4, 6], ((), (X,)), ((), (Y,))),
    "max 2x3 made partial on DIDx, x's on DIDy": ("max", [2, 3], [5, 6], ((), (Y,)), ((Y,), (X,))),
    "sum 2x4 made partial on DIDy, x's on DIDx": (
        "sum",
        [2, 4],
        [4, 8],
        ((Y,), (X,)),
        ((X,), (Y,)),
    ),
}
# Their communications: (kind, placements, teams, bytes per device); an Allreduce of n
# floats over teams of D sends 2(D-1) ceil(n/D) * 4 B.
DIDY_2x2, DIDX_2x2 = [(0, 2), (1, 3)], [(0, 1), (2, 3)]
DIDY_2x3, DIDX_2x3 = [(0, 3), (1, 4), (2, 5)], [(0, 1, 2), (3, 4, 5)]
DIDY_2x4, DIDX_2x4 = [(0, 4), (1, 5), (2, 6), (3, 7)], [(0, 1, 2, 3), (4, 5, 6, 7)]
PARTIAL_COMMUNICATIONS = {
    "sum 2x3": [
        ("Allreduce", "(P,P)->(R,P)", DIDY_2x3, 16),
        ("Allreduce", "(R,P)->(R,R)", DIDX_2x3, 32),
    ],
    "max 2x3": [
        ("Allreduce", "(P,P)->(R,P)", DIDY_2x3, 16),
        ("Allreduce", "(R,P)->(R,R)", DIDX_2x3, 32),
    ],
    "sum 2x3 uneven": [
        ("Allreduce", "(P,P)->(R,P)", DIDY_2x3, 24),
        ("Allreduce", "(R,P)->(R,R)", DIDX_2x3, 32),
    ],
    "sum 2x4": [
        ("Allreduce", "(P,P)->(R,P)", DIDY_2x4, 16),
        ("Allreduce", "(R,P)->(R,R)", DIDX_2x4, 24),
    ],
    "max 2x4 kept on DIDy": [
        ("Allreduce", "(P,P)->(P,R)", DIDX_2x4, 24),
        ("Allreduce", "(P,R)->(R,R)", DIDY_2x4, 16),
    ],
    "sum 2x2x2 sliced while partial": [  # x gathered on DIDz; the LocalSlice moves partial sums
        ("Allgather", "(S0,S1,S1)->(R,S1,S1)", DIDY_2x4, 24),
        ("Allreduce", "(R,P,P)->(R,R,P)", [(0, 2), (1, 3), (4, 6), (5, 7)], 24),
        ("LocalSlice", "(R,R,P)->(R,S0,P)", [(0, 2), (1, 3), (4, 6), (5, 7)], 0),
        ("Allreduce", "(R,S0,P)->(R,S0,R)", [(0, 1), (2, 3), (4, 5), (6, 7)], 16),
    ],
    # (P,P) -> (S0,P): a ReduceScatter on DIDy padded to 3 rows, (2-1) * 3 * 4 B; the
    # Allreduce over DIDx of those 3, 2(3-1) ceil(3/3) * 4 B; then gathered for neg
    "sum 2x3 reduce-scattered while partial": [
        ("ReduceScatter", "(P,P)->(S0,P)", DIDY_2x3, 12),
        ("Allreduce", "(S0,P)->(S0,R)", DIDX_2x3, 16),
        ("Allgather", "(S0,R)->(R,R)", DIDY_2x3, 12),
    ],
    "max 2x4 reduce-scattered while partial": [
        ("ReduceScatter", "(P,P)->(P,S0)", DIDX_2x4, 24),
        ("Allreduce", "(P,S0)->(R,S0)", DIDY_2x4, 8),
        ("Allgather", "(R,S0)->(R,R)", DIDX_2x4, 24),
    ],
    # x's axis 1 sliced over DIDy: s (P,S0) locally, no data moved
    "sum 2x2 made partial from x whole": [
        ("LocalSlice", "(R,S0)->(S1,S0)", DIDY_2x2, 0),
        ("Allreduce", "(P,S0)->(R,S0)", DIDY_2x2, 8),
        ("Allgather", "(R,S0)->(R,R)", DIDX_2x2, 8),
    ],
    # x's DIDy moves from axis 0 to axis 1: (2-1) * 2 * 3 floats
    "sum 2x2 made partial from x rows": [
        ("AllToAll", "(S0,R)->(S1,R)", DIDY_2x2, 24),
        ("Allreduce", "(P,R)->(R,R)", DIDY_2x2, 16),
    ],
    # x's axis 1 sliced again over DIDy (nested inside DIDx), so s is made (P,P) and
    # the Set to s's (P,R) combines DIDx's partial values, leaving DIDy's
    "sum 2x2 made partial on DIDy, x's on DIDx": [
        ("LocalSlice", "(R,S1)->(S1.1,S1.0)", DIDY_2x2, 0),
        ("Allreduce", "(P,P)->(P,R)", DIDX_2x2, 16),
        ("Allreduce", "(P,R)->(R,R)", DIDY_2x2, 16),
    ],
    "max 2x3 made partial on DIDx, x's on DIDy": [
        ("LocalSlice", "(S1,R)->(S1,S1)", DIDX_2x3, 0),
        ("ReduceScatter", "(P,P)->(S0,P)", DIDY_2x3, 12),
        ("Allreduce", "(S0,P)->(S0,R)", DIDX_2x3, 16),
        ("Allgather", "(S0,R)->(R,R)", DIDY_2x3, 12),
    ],
    # x's rows on DIDy move onto its axis 1 (inside DIDx): an AllToAll on DIDy
    "sum 2x4 made partial on DIDy, x's on DIDx": [
        ("AllToAll", "(S0,S1)->(S1.1,S1.0)", DIDY_2x4, 8),
        ("ReduceScatter", "(P,P)->(P,S0)", DIDX_2x4, 12),
        ("Allreduce", "(P,S0)->(R,S0)", DIDY_2x4, 8),
        ("Allgather", "(R,S0)->(R,R)", DIDX_2x4, 12),
    ],
}


@pytest.mark.parametrize("name", PARTIAL_REDUCTIONS)
def test_a_reduction_sharded_over_fewer_mesh_axes_than_its_input_lowers(name):
    """The planner's partial target: insert-reshardings reduces locally to partial values
    over every mesh axis of x's reduction axis and asks for s's, partial over fewer; one
    Allreduce over the others gives it, in the reduction's op (a max stays a max), and
    a later one completes s for neg. The plan refused partial targets ('a redistribution
    produces complete values'), and the second Allreduce could not name the op of the
    first one's partial output. Where s is partial over a mesh axis x's axis 1 is not
    sharded on ('made partial'), x is resharded first so that the reduction makes those
    partial values: the planner refused the Set after it ('a redistribution combines
    partial values, it never makes them')."""
    f = partially_reduced(*PARTIAL_REDUCTIONS[name])
    ex = fl.FusionExecutor(f)
    comms = ex.program.communications
    got = [(c.kind.value, f"{c.before}->{c.after}", c.teams, c.bytes_per_device) for c in comms]
    assert got == PARTIAL_COMMUNICATIONS[name]
    op = ReductionOpType.max if name.startswith("max") else ReductionOpType.sum
    assert {c.op for c in comms if c.kind is CommKind.Allreduce} == {op}
    inputs = fl.random_inputs(f, 0)
    outputs = ex.run(inputs)
    fl.validate(f, inputs, outputs)
    reduce = np.max if op is ReductionOpType.max else np.sum
    assert np.allclose(outputs[0], -reduce(inputs[0], axis=1), rtol=1e-5)


def test_a_copy_does_not_reuse_the_index_lowering_of_an_iota_of_the_same_shape():
    """iota [2] sharded on a 1-device mesh reads didx (its values are global indices);
    a copy of the same shape in the next kernel shared its cached TensorIndex and asked
    the kernel runner for a didx it was not given (KeyError 'didx'). Seed 1993 of the
    differential generator."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh([0])
        x = fl.tensor([2], name="x")
        f.add_input(x)
        x.set_device_mesh(mesh)
        i = fl.iota(2, "int64", 2, -1)
        i.set_device_mesh(mesh)
        shard_axis(i, 0, mesh)
        f.add_output(fl.where(fl.lt(i, 0), x, 0.0))
    inputs = fl.random_inputs(f, 0)
    fl.validate(f, inputs, fl.FusionExecutor(f, compute="interpret").run(inputs))
