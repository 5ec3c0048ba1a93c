"""Run under `mpiexec -n 4` or `-n 8`: collectives over N-D mesh teams, moves and the
planner's plans step by step, mpi against sim bit for bit (tests/team_cases.py), and programs
on meshes that leave ranks idle, validated against the reference; on 8 ranks the N-D
examples, uneven N-D shardings (nested too, random N-D cases), `fuserlite run
examples/dp_tp_mlp.fus --backend mpi`; JAX's ppermute examples (one CollectivePermute
each) on 4 and 8 ranks.

Each rank compares its own device's outputs with the sim backend's for that device
(an idle rank must get none). Rank 0 prints one JSON object: case name -> verdict
("identical" or what differs on which rank).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from team_cases import PLAN_MESHES, all_cases, dispatch_cases, plan_cases, same_bits  # noqa: E402

import fuserlite as fl  # noqa: E402
from fuserlite import models  # noqa: E402
from fuserlite.runtime.backends.mpi import MpiCommunicator  # noqa: E402
from fuserlite.runtime.backends.sim import SimCommunicator  # noqa: E402
from fuserlite.schedule.shard import shard_axis  # noqa: E402


def on_mesh(devices: tuple[int, ...]) -> fl.Fusion:
    """x row-sharded on `devices` -> Allgather, and a k-sharded matmul -> Allreduce."""
    mesh = fl.DeviceMesh(devices)
    n = len(devices)
    with fl.Fusion() as f:
        x, a, b = fl.tensor([2 * n, 3]), fl.tensor([4, 2 * n]), fl.tensor([2 * n, 5])
        for t in (x, a, b):
            f.add_input(t)
        shard_axis(x, 0, mesh)
        shard_axis(a, 1, mesh)
        shard_axis(b, 0, mesh)
        y = fl.set(x)
        y.set_device_mesh(mesh)
        f.add_output(fl.mul(y, 2.0))
        z = fl.matmul(a, b)
        z.set_device_mesh(mesh)
        f.add_output(z)
    return f


def programs(size: int) -> dict[str, tuple[int, ...]]:
    """Meshes that leave ranks idle: {0 2} of 4 (as nvFuser runs {0 2 3} on 4), ..."""
    return {4: {"program on {0 2}": (0, 2), "program on {3 1 2}": (3, 1, 2)}}.get(
        size, {"program on {1 3 5 7}": (1, 3, 5, 7), "program on {6 2}": (6, 2)}
    )


def nd_examples() -> dict[str, tuple[fl.Fusion, fl.Program | None]]:
    """The N-D examples on a 2x4 mesh (8 ranks), as tests/test_nd_examples.py runs them,
    the 2-D shard_map program of tests/test_shard_map.py, and axis_index on 2x4."""
    from axis_index_cases import grid_indices
    from test_nd_examples import REPO, fsdp_tp_mlp

    from fuserlite.pipeline import default_pass_names

    tp = fl.load(REPO / "examples/tp_mlp.fus")
    return {
        "example axis_index on 2x4": (grid_indices(), None),
        "example dp_tp_mlp.fus": (fl.load(REPO / "examples/dp_tp_mlp.fus"), None),
        "example fsdp_tp.py": (fsdp_tp_mlp(), None),
        "shard_map 2x4 gather then reduce": (models.gather_then_reduce_on_a_2d_mesh(), None),
        "example tp_mlp.fus on 2x4": (
            tp,
            fl.Pipeline(["resize-mesh[mesh=2x4]", *default_pass_names()]).run(tp),
        ),
    }


def ppermutes(size: int) -> dict[str, tuple]:
    """JAX's ppermute examples on this many devices (tests/ppermute_cases.py), with their
    inputs and the values they must give: one CollectivePermute each."""
    from ppermute_cases import cases_on

    return {f"ppermute {c.name}": (c.fusion(), None, [c.x], c.expected()) for c in cases_on(size)}


def nd_uneven() -> dict[str, tuple[fl.Fusion, None]]:
    """Uneven N-D shardings, nested ones included: tests/test_nd_uneven.py's moves and
    reductions completed in stages (partial targets), random reductions partial where
    their input is not sharded, and the first N-D cases of the differential generator
    that lower (8 ranks)."""
    from random_nd import is_nd_case
    from random_reductions import reduction_case
    from random_sharded import build_case
    from test_nd_uneven import MOVES, PARTIAL_REDUCTIONS, moved, partially_reduced

    runs = {
        f"uneven N-D move {n} on {shape}": (moved(n, shape, *how), None) for n, shape, *how in MOVES
    }
    for name, case in PARTIAL_REDUCTIONS.items():
        runs[f"partial target {name}"] = (partially_reduced(*case), None)
    for seed in REFUSED_REDUCTIONS:
        runs[f"random reduction {seed}"] = (reduction_case(seed), None)
    for seed in (s for s in range(60) if is_nd_case(s)):
        fusion = build_case(seed).fusion
        try:
            fl.lower(fusion)
        except fl.FuserliteError:
            continue  # a clear rejection: test_differential's business
        runs[f"random N-D case {seed}"] = (fusion, None)
    return runs


# Seeds of tests/random_reductions.py whose partial values the planner was asked to make
# (refused before insert-reshardings resharded the reduction's input first).
REFUSED_REDUCTIONS = (29, 62, 66, 77, 82, 87)


def run_programs(world, rank: int, runs: dict, compute: str | None = None) -> dict[str, str]:
    """Each (fusion, program or None[, inputs, expected first output]) on mpi against sim,
    rank 0 validating (and comparing with the expected values); verdicts."""
    results = {}
    for name, (fusion, program, *given) in runs.items():
        inputs = given[0] if given else fl.random_inputs(fusion, 3)
        try:
            ex = fl.FusionExecutor(program or fusion, backend="mpi", compute=compute)
            mine = ex.run_per_device(inputs)
            want = fl.FusionExecutor(program or fusion, compute=compute).run_per_device(inputs)
            devices = ex.devices
            verdict = "identical"
            if sorted(mine) != ([rank] if rank in devices else []):
                verdict = f"hosts {sorted(mine)}"
            for d, outs in mine.items():
                if any(
                    np.asarray(a).tobytes() != np.asarray(b).tobytes()
                    for a, b in zip(outs, want[d])
                ):
                    verdict = "differs from sim"
            outs = ex.run(inputs)
            if rank == 0:
                fl.validate(fusion, inputs, outs)
                if len(given) > 1 and not np.array_equal(outs[0], given[1]):
                    verdict = "not the expected values"
            ex.close()
        except fl.FuserliteError as exc:
            verdict = f"error: {exc}"
        verdicts = world.gather(verdict, root=0)
        if rank == 0:
            bad = [f"rank {r}: {v}" for r, v in enumerate(verdicts) if v != "identical"]
            results[name] = "; ".join(bad) or "identical"
    return results


def cli_run(rank: int, example: str) -> dict[str, str]:
    """`fuserlite run EXAMPLE --backend mpi` on every rank of this launch: on rank 0 the
    verdict of its report against `--backend sim`'s (the same but for the backend's
    name, and validated)."""
    from test_nd_examples import REPO

    from fuserlite import cli

    def report(*backend: str) -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = cli.main(
                ["run", str(REPO / "examples" / example), "--compute", "interpret", *backend]
            )
        return code, out.getvalue()

    code, got = report("--backend", "mpi")
    if rank != 0:
        return {}
    # Under mpiexec the sim backend is asked for by name (without --backend, run refuses).
    want = report("--backend", "sim")[1].replace(" sim device(s)", " mpi device(s)")
    ok = code == 0 and "validation: ok" in got and got == want
    return {f"cli run {example}": "identical" if ok else f"exit {code}: {got}"}


def main() -> None:
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    mpi, sim = MpiCommunicator(), SimCommunicator()
    results = {}
    cases = all_cases(size) + dispatch_cases(size)
    for entry in PLAN_MESHES:
        if entry[-1] == size:
            cases += plan_cases(entry, mpi=True)
    for case in cases:
        try:
            mine = case.execute(mpi)
            want = {d: a for d, a in case.execute(sim).items() if d == rank}
            verdict = same_bits(mine, want) or "identical"
        except fl.FuserliteError as exc:
            verdict = f"error: {exc}"
        verdicts = world.gather(verdict, root=0)
        if rank == 0:
            bad = [f"rank {r}: {v}" for r, v in enumerate(verdicts) if v != "identical"]
            results[case.name] = "; ".join(bad) or "identical"
    mpi.release()
    results |= run_programs(world, rank, {n: (on_mesh(d), None) for n, d in programs(size).items()})
    results |= run_programs(world, rank, ppermutes(size))
    if size == 8:
        results |= run_programs(world, rank, nd_examples())
        results |= run_programs(world, rank, nd_uneven(), compute="numpy")
        results |= cli_run(rank, "dp_tp_mlp.fus")
    if rank == 0:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
