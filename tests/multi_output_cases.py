"""Ops of several outputs whose outputs are sharded differently (sdpa, sdpa_bwd): the
cases tests/test_multi_output.py lowers on sim and tests/mpi_scripts/equivalence.py on
mpi. Each is a function of the number of devices (the 2x2 and two-mesh ones need 4)."""

from __future__ import annotations

import fuserlite as fl
from fuserlite.schedule.shard import shard_axis

X, Y = fl.ParallelType.DIDx, fl.ParallelType.DIDy
FLAGS = {"dropout_p": 0.2, "is_causal": True, "seed": 9, "offset": 1}


def _inputs(f: fl.Fusion, mesh: fl.DeviceMesh, n: int, shape: list[int]) -> list[fl.TensorView]:
    tensors = [fl.tensor(shape) for _ in range(n)]
    for t in tensors:
        f.add_input(t)
        t.set_device_mesh(mesh)
    return tensors


def sdpa_out_heads_lse_rows(size: int) -> fl.Fusion:
    """q, k, v sharded on the heads, so is the output; logsumexp asked sharded on the
    query rows: computed on the heads, one AllToAll of logsumexp after."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh(list(range(size)))
        q, k, v = _inputs(f, mesh, 3, [1, size, 2 * size, 4])
        for t in (q, k, v):
            shard_axis(t, 1, mesh)
        out, lse = fl.sdpa(q, k, v, **FLAGS)
        shard_axis(lse, 2, mesh)
        f.add_output(out)
        f.add_output(lse)
    return f


def sdpa_bwd_three_shardings(size: int) -> fl.Fusion:
    """grad_output and query sharded on the rows; grad_query asked on the heads,
    grad_key on the key rows, grad_value replicated: computed on the rows (grad_key and
    grad_value partial sums), then an AllToAll, a ReduceScatter and an Allreduce."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh(list(range(size)))
        dout, q, k, v = _inputs(f, mesh, 4, [1, size, 2 * size, 4])
        for t in (dout, q):
            shard_axis(t, 2, mesh)
        out, lse = fl.sdpa(q, k, v, **FLAGS)
        dq, dk, dv = fl.sdpa_bwd(dout, q, k, v, out, lse, **FLAGS)
        shard_axis(dq, 1, mesh)
        shard_axis(dk, 2, mesh)
        for t in (dq, dk, dv):
            f.add_output(t)
    return f


def sdpa_bwd_partials_2x2(size: int = 4) -> fl.Fusion:
    """On a 2x2 mesh, replicated inputs; grad_query asked on the heads (DIDy), grad_key
    partial over DIDx, grad_value partial over DIDy: no single output's placement makes
    both partial values, the two partial outputs' together do (the query rows over both
    mesh axes)."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh([[0, 1], [2, 3]])
        dout, q, k, v = _inputs(f, mesh, 4, [1, 2, 8, 4])
        out, lse = fl.sdpa(q, k, v, **FLAGS)
        dq, dk, dv = fl.sdpa_bwd(dout, q, k, v, out, lse, **FLAGS)
        shard_axis(dq, 1, mesh, Y)
        shard_axis(dk, 4, mesh, X)  # its trailing rL: partial sums over DIDx
        shard_axis(dv, 4, mesh, Y)
        for t in (dq, dk, dv):
            f.add_output(t)
    return f


def sdpa_2x2_heads_and_rows(size: int = 4) -> fl.Fusion:
    """On a 2x2 mesh, q, k, v sharded on the heads over DIDy and the batch over DIDx;
    logsumexp asked on the rows over DIDy (differential seed 3's pattern)."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh([[0, 1], [2, 3]])
        q, k, v = _inputs(f, mesh, 3, [2, 2, 4, 4])
        for t in (q, k, v):
            shard_axis(t, 0, mesh, X)
            shard_axis(t, 1, mesh, Y)
        out, lse = fl.sdpa(q, k, v, **FLAGS)
        shard_axis(lse, 2, mesh, Y)
        f.add_output(out)
        f.add_output(lse)
    return f


def sdpa_lse_on_another_mesh(size: int = 4) -> fl.Fusion:
    """q, k, v on devices {0 1} sharded on the heads; logsumexp asked on {2 3}, on its
    rows: computed where the inputs are, one SendRecv after."""
    with fl.Fusion() as f:
        mesh, other = fl.DeviceMesh([0, 1]), fl.DeviceMesh([2, 3])
        q, k, v = _inputs(f, mesh, 3, [1, 2, 4, 4])
        for t in (q, k, v):
            shard_axis(t, 1, mesh)
        out, lse = fl.sdpa(q, k, v, **FLAGS)
        lse.set_device_mesh(other)
        shard_axis(lse, 2, other)
        f.add_output(out)
        f.add_output(lse)
    return f


def sdpa_bwd_partials_on_two_meshes(size: int = 4) -> fl.Fusion:
    """grad_key partial on {0 1}, grad_value partial on {2 3}: computed once, on one
    mesh, the other's partial values cannot be made (a move between meshes makes
    complete values). Refused."""
    with fl.Fusion() as f:
        a, b = fl.DeviceMesh([0, 1]), fl.DeviceMesh([2, 3])
        dout, q, k, v = _inputs(f, a, 4, [1, 2, 4, 4])
        out, lse = fl.sdpa(q, k, v, **FLAGS)
        dq, dk, dv = fl.sdpa_bwd(dout, q, k, v, out, lse, **FLAGS)
        shard_axis(dk, 4, a)
        dv.set_device_mesh(b)
        shard_axis(dv, 4, b)
        for t in (dq, dk, dv):
            f.add_output(t)
    return f


# (kind, team, bytes per device, before, after) of each communication, in program order.
MOVES = {
    (2, "sdpa-out-heads-lse-rows"): [("AllToAll", "DIDx teams", 8, "(S1)", "(S2)")],
    (4, "sdpa-out-heads-lse-rows"): [("AllToAll", "DIDx teams", 24, "(S1)", "(S2)")],
    (4, "sdpa_bwd-three-shardings"): [
        ("AllToAll", "DIDx teams", 96, "(S2)", "(S1)"),  # grad_query: rows -> heads
        ("ReduceScatter", "DIDx teams", 384, "(P)", "(S2)"),  # grad_key: onto its key rows
        ("Allreduce", "DIDx teams", 768, "(P)", "(R)"),  # grad_value: replicated
    ],
    (4, "sdpa_bwd-partials-2x2"): [
        *[("LocalSlice", "(DIDx, DIDy) teams", 0, "(R,R)", "(S2.1,S2.0)")] * 4,  # the rows
        ("Allgather", "(DIDx, DIDy) teams", 192, "(S2.1,S2.0)", "(R,R)"),  # grad_query ...
        ("LocalSlice", "DIDy teams", 0, "(R,R)", "(S1,R)"),  # ... onto its heads
        ("Allreduce", "DIDy teams", 256, "(P,P)", "(R,P)"),  # grad_key: partial over DIDx
        ("Allreduce", "DIDx teams", 256, "(R,P)", "(R,R)"),  # completed as a fusion output
        ("Allreduce", "DIDx teams", 256, "(P,P)", "(P,R)"),  # grad_value: over DIDy
        ("Allreduce", "DIDy teams", 256, "(P,R)", "(R,R)"),
    ],
    (4, "sdpa-lse-on-another-mesh"): [("SendRecv", "{0 1 2 3}", 16, "(S1)", "(S2)")],
    (4, "sdpa-2x2-heads-and-rows"): [
        ("AllToAll", "DIDy teams", 8, "(S1,S0)", "(S2,S0)"),  # logsumexp: heads -> rows
        ("Allgather", "DIDx teams", 16, "(S2,S0)", "(S2,R)"),  # its batch, not asked sharded
    ],
}


ONE_D = {
    "sdpa-out-heads-lse-rows": sdpa_out_heads_lse_rows,
    "sdpa_bwd-three-shardings": sdpa_bwd_three_shardings,
}
ON_FOUR = {
    "sdpa_bwd-partials-2x2": sdpa_bwd_partials_2x2,
    "sdpa-2x2-heads-and-rows": sdpa_2x2_heads_and_rows,
    "sdpa-lse-on-another-mesh": sdpa_lse_on_another_mesh,
}


def cases(size: int) -> dict:
    """Name -> builder of every case on `size` devices (the 2x2 and two-mesh ones on 4)."""
    return {**ONE_D, **(ON_FOUR if size == 4 else {})}
