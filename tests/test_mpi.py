"""The mpi backend on real 2-, 4- and 8-rank jobs (mpiexec), against the sim backend.

Each test starts one short MPI job; the equivalence jobs batch every case into
one launch. Skipped when mpi4py or mpiexec is missing (pip install '.[mpi]').
"""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import stream_cases
from multi_output_cases import MOVES
from multi_output_cases import cases as multi_output_cases

import fuserlite as fl
from fuserlite import cli, models
from fuserlite.kernel.amx import amx_missing
from fuserlite.runtime.backends.sim import SimCommunicator

pytest.importorskip("mpi4py", reason="the mpi backend needs mpi4py: pip install '.[mpi]'")
MPIEXEC = shutil.which("mpiexec")
if MPIEXEC is None:
    pytest.skip("mpiexec not found: pip install '.[mpi]' (mpich)", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"
EXAMPLE = "examples/tp_mlp.fus"
TIMEOUT = 180  # seconds; a hang fails the test instead of stalling the suite (the 8-rank
# launch takes ~30 s on 2 loaded cores)

# Kinds whose data only moves: bit-identical on any number of ranks.
MOVING = {"LocalSlice", "Allgather", "AllToAll", "Broadcast", "Scatter", "Gather", "SendRecv"}
SECTION5 = MOVING | {"Allreduce", "ReduceScatter", "Reduce"}
DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "bool")


def mpiexec(n: int, *args: str):
    """Run `mpiexec -n n args...` in the repository root; returns the CompletedProcess."""
    return subprocess.run(
        [MPIEXEC, "-n", str(n), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def reductions(results: dict[str, dict], kinds: list[str]) -> dict[str, dict]:
    """The every-dtype x sum/max cases on NaN, inf, -0.0 and ties, all of them present."""
    names = [f"{k}-{op}-{d}" for k in kinds for op in ("sum", "max") for d in DTYPES]
    names += [f"Allreduce-matmul-{d}" for d in DTYPES]
    assert set(names) <= set(results), set(names) - set(results)
    return {name: results[name] for name in names}


# Cases each rank computes in place, no communication (both world sizes run them).
IN_PLACE = (
    "iota-positions",
    "iota-positions-uneven",
    "axis_index",
    "merge-with-broadcast",
    "cyclic",
    "block-cyclic",
)


def equivalence(n: int) -> dict[str, dict]:
    proc = mpiexec(n, sys.executable, str(SCRIPTS / "equivalence.py"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@functools.cache
def equivalence_cached(n: int) -> dict[str, dict]:
    """One launch per world size serves every test that reads its results."""
    return equivalence(n)


def test_two_ranks_are_bit_identical_to_sim():
    results = equivalence_cached(2)
    # SendRecv needs two disjoint meshes, so it runs in the 4-rank job.
    assert {name.split("-")[0] for name in results} >= SECTION5 - {"SendRecv"}
    assert any(name.startswith("example:") for name in results)
    for name, r in results.items():
        assert r["verdict"] == "identical", (name, r)
        if name in SECTION5:
            assert r["kinds"] == [name]
    for name, r in reductions(results, ["Allreduce", "ReduceScatter", "Reduce"]).items():
        assert r["kinds"] == [name.split("-")[0]], (name, r)
    for name in IN_PLACE:
        assert (results[name]["verdict"], results[name]["kinds"]) == ("identical", []), name
    assert results["cyclic-gathered"]["kinds"] == ["Allgather"]  # padded, interleaved
    assert results["block-cyclic-gathered"]["kinds"] == ["Allgather"]  # interleaved blocks
    for dtype in ("float16", "bfloat16"):  # 40000 + 40000 - 40000 - 40000: float32 partials
        assert results[f"half-partials-{dtype}"]["first"] == [0.0, 0.0], dtype
    seed = results["seed000-ones"]  # torch_xla's program in shard_map form
    assert seed["first"] == [4096.0, 4096.0]
    assert seed["kinds"] == ["Allgather", "Allreduce", "ReduceScatter"]
    for kind in SECTION5 - {"SendRecv"}:  # bfloat16 moves as uint16 bits on MPI
        assert results[f"{kind}-bfloat16"]["kinds"] == [kind]


def test_four_ranks_are_bit_identical_to_sim():
    """Reductions too: mpi folds partial results in member order, as sim does, so float
    sums over 4 ranks keep sim's bits (MPI's own reduction tree would not)."""
    results = equivalence_cached(4)
    assert {name.split("-")[0] for name in results} >= SECTION5
    for name, r in results.items():
        kind = name.split("-")[0]
        if kind in SECTION5:
            assert r["kinds"][0] == kind, (name, r)
        assert r["verdict"] == "identical", (name, r)
    kinds = ["Allreduce", "ReduceScatter", "Reduce", "Reduce-root-outside"]
    assert len(reductions(results, kinds)) == 4 * 2 * len(DTYPES) + len(DTYPES)
    assert results["SendRecv-bfloat16"]["kinds"] == ["SendRecv"]
    assert results["seed000-ones"]["first"] == [16384.0] * 4
    assert (results["sdpa-batch"]["verdict"], results["sdpa-batch"]["kinds"]) == ("identical", [])
    assert results["sdpa-rows"]["verdict"] in ("identical", "close")
    assert results["sdpa-rows"]["kinds"] == ["Allreduce", "Allreduce"]  # grad_key, grad_value
    for name in multi_output_cases(4):  # outputs of one op sharded differently
        expected = [m[0] for m in MOVES.get((4, name), [])]
        assert results[name]["verdict"] == "identical", (name, results[name])
        assert not expected or results[name]["kinds"] == expected, name
    # each rank draws its own shard's random numbers: the unsharded mask, no communication
    for name in [n for n in results if n.startswith("dropout-")]:
        assert (results[name]["verdict"], results[name]["kinds"]) == ("identical", []), name
    for name in IN_PLACE:
        assert (results[name]["verdict"], results[name]["kinds"]) == ("identical", []), name
    assert results["cyclic-gathered"]["kinds"] == ["Allgather"]  # padded, interleaved
    assert results["block-cyclic-gathered"]["kinds"] == ["Allgather"]  # interleaved blocks
    assert results["2d-sharded-vector-gathered"]["kinds"] == ["Allgather"]  # per DIDy team
    # a team smaller than the world: ranks 0 and 1 skip the Allgather of {2 3}
    assert results["SendRecv-then-Allgather-on-a-subteam"]["kinds"] == ["SendRecv", "Allgather"]


@pytest.mark.parametrize("n", [2, 4])
def test_a_reduction_of_one_row_a_device_is_its_collective_alone_as_on_sim(n):
    """sum/max of x with one row a device (tests/test_local_reduction.py): mpi reads x
    itself and folds it in member order as sim does, on NaN, inf, -0.0 and ties; sums of
    bfloat16 keep their kernel (float32 partial sums)."""
    results = equivalence_cached(n)
    local = {name: r for name, r in results.items() if name.startswith("local-")}
    assert len(local) == (4 if n == 4 else 3) * 2 * 3, sorted(local)
    for name, r in local.items():
        kind = name.split("-")[1]
        assert r["verdict"] == "identical" and r["kinds"] == [kind], (name, r)
        assert r["kernels"] == (1 if name.endswith("sum-bfloat16") else 0), (name, r)


@pytest.mark.parametrize("n", [4, 8])
def test_teams_of_nd_meshes_and_moves_are_bit_identical_to_sim(n):
    """Every kind over every group of mesh axes of 2x2, 2x4, 2x2x2 (and meshes on some
    ranks only, roots on idle ranks), moves between meshes, the planner's plans of
    placement pairs step by step, N-D Communications through runtime.dispatch (teams
    prepared from them), programs on {0 2} of 4 ranks (1 and 3 idle)."""
    proc = mpiexec(n, sys.executable, str(SCRIPTS / "teams.py"))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert results and all(v == "identical" for v in results.values()), {
        k: v for k, v in results.items() if v != "identical"
    }
    meshes = ["2x2 group", "2x2{3 1 0 2} group", "2{0 2} group"] if n == 4 else ["2x2x2 group"]
    for mesh in meshes:
        assert any(f" {mesh}" in name for name in results), mesh
    assert any(name.startswith("move ") for name in results)
    plans = ["plan 2x2 ", "plan 2x2(3, 1, 0, 2) "] if n == 4 else ["plan 2x4 ", "plan 2x2x2 "]
    for mesh in plans:
        assert sum(name.startswith(mesh) for name in results) >= 5, mesh
    assert sum(name.startswith("dispatch ") for name in results) >= 50  # N-D Communications
    if n == 8:  # the N-D examples on a 2x4 mesh, validated on rank 0
        for example in ("dp_tp_mlp.fus", "fsdp_tp.py", "tp_mlp.fus on 2x4", "axis_index on 2x4"):
            assert results[f"example {example}"] == "identical", example
        # seed 000's shape in a 2-D shard_map: its Allgather on DIDx, Allreduce on DIDy
        assert results["shard_map 2x4 gather then reduce"] == "identical"
        # mpiexec -n 8 fuserlite run examples/dp_tp_mlp.fus --backend mpi: sim's report
        assert results["cli run dp_tp_mlp.fus"] == "identical"
        # uneven N-D shardings, nested too (test_nd_uneven.MOVES), and random N-D cases
        assert sum(name.startswith("uneven N-D move ") for name in results) == 5
        # reductions completed in stages through partial targets (PARTIAL_REDUCTIONS)
        assert sum(name.startswith("partial target ") for name in results) == 13
        assert sum(name.startswith("random reduction ") for name in results) == 6
        assert sum(name.startswith("random N-D case ") for name in results) >= 5
    assert ("program on {0 2}" if n == 4 else "program on {1 3 5 7}") in results
    # ppermute as point-to-point messages (Isend/Irecv): the documented values, sim's bits
    want = ["ring on 4", "pair swap on 4"] if n == 4 else ["ring on 8", "ring over DIDx of 2x4"]
    want += ["pair swap over DIDy of 2x4", "ring over DIDx of 2x4, DIDy replicated"] * (n == 8)
    for name in want:
        assert results[f"ppermute {name}"] == "identical", name


def uneven(results: dict[str, dict], n_ranks: int) -> dict[str, dict]:
    """The §5 rows on extents the mesh does not divide, padded and variable, all present."""
    extents = (13, 5, 3) if n_ranks == 4 else (13,)
    kinds = SECTION5 if n_ranks == 4 else SECTION5 - {"SendRecv"}  # SendRecv: 2 + 2 ranks
    names = [f"{k}-uneven{n}-{c}" for k in kinds for n in extents for c in ("padded", "variable")]
    assert set(names) <= set(results), set(names) - set(results)
    return {name: results[name] for name in names}


@pytest.mark.parametrize("n_ranks", [2, 4])
def test_uneven_chunks_move_padded_and_variable_as_on_sim(n_ranks: int):
    for name, r in uneven(equivalence_cached(n_ranks), n_ranks).items():
        kind, _, chunks = name.split("-")
        assert r["kinds"][0] == kind, (name, r)
        assert r["verdict"] == "identical", (name, r)  # reductions folded in member order
        chunked = kind not in ("LocalSlice", "Allreduce", "Broadcast", "Reduce", "SendRecv")
        assert (chunks in r["chunks"]) == chunked, (name, r)


def test_transformer_block_on_eight_ranks_equals_sim(capsys):
    """examples/transformer_block.py: Megatron-SP's four collectives, validated, and the
    same report as on 8 sim devices."""
    proc = mpiexec(8, sys.executable, "examples/transformer_block.py", "--backend", "mpi")
    assert proc.returncode == 0, proc.stderr
    sim = subprocess.run(
        [sys.executable, "examples/transformer_block.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.stdout == sim.stdout.replace("8 sim devices", "8 mpi devices")
    last = "communications: Allgather, ReduceScatter, Allgather, ReduceScatter; validation ok"
    assert proc.stdout.splitlines()[-1].startswith(last)


def test_cli_report_on_rank_zero_equals_sim(capsys):
    assert cli.main(["run", EXAMPLE]) == 0
    sim = capsys.readouterr().out
    proc = mpiexec(2, sys.executable, "-m", "fuserlite.cli", "run", EXAMPLE, "--backend", "mpi")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == sim.replace("2 sim device(s)", "2 mpi device(s)")
    assert "validation: ok" in proc.stdout and "Allreduce" in proc.stdout


@pytest.mark.skipif(amx_missing() is not None, reason=f"{amx_missing()}")
def test_amx_gemms_on_eight_ranks_equal_sim(capsys):
    """gemm="amx" (kernel/amx.py) on every rank: each device's products are its own
    call's, so the mpi run's report (its checksums, its validation) is sim's."""
    block = "examples/transformer_block.fus"
    assert cli.main(["run", block, "--gemm", "amx"]) == 0
    sim = capsys.readouterr().out
    proc = mpiexec(8, sys.executable, "-m", "fuserlite.cli", "run", block, "--backend", "mpi",
                   "--gemm", "amx")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == sim.replace("8 sim device(s)", "8 mpi device(s)")
    assert "(compiled, gemm=amx): bit-identical" in proc.stdout


def reports(text: str) -> dict[str, tuple[int, str]]:
    """`=== NAME` / report / `=== status S` blocks: name -> (status, report)."""
    blocks = text.split("=== ")[1:]
    out = {}
    for head, tail in zip(blocks[::2], blocks[1::2]):
        name, _, body = head.partition("\n")
        out[name] = (int(tail.split()[1]), body)
    return out


def communications(report: str) -> str:
    """The communications table of a run report (kinds, teams, layouts, bytes)."""
    return report.split("communications\n")[1].split("validation:")[0]


@pytest.mark.parametrize("n", [3, 5, 6])
def test_every_example_on_a_device_count_that_does_not_divide_it(capsys, n: int):
    proc = mpiexec(n, sys.executable, str(SCRIPTS / "examples_on_devices.py"))
    assert proc.returncode == 0, proc.stderr
    got = reports(proc.stdout)
    assert {"tp_mlp.fus", "sp_mlp.fus", "softmax.fus", "transformer_block.fus"} <= set(got)
    assert got["transformer_block.fus"][0] == 0, got["transformer_block.fus"][1]
    for name, (status, report) in got.items():
        assert cli.main(["run", str(ROOT / "examples" / name), "--devices", str(n)]) == status
        sim = capsys.readouterr().out
        if status != 0:  # a whole-axis DIDx cannot move: the same error, no report
            continue
        assert "validation: ok" in report and "validation: ok" in sim, (name, report)
        assert communications(report) == communications(sim), name
    # 8 over 3 ranks: chunks 3 3 2, so the MLPs' collectives are uneven ones
    assert n != 3 or "ReduceScatter" in communications(got["sp_mlp.fus"][1])


def test_fewer_ranks_than_devices_is_one_clear_error():
    cmd = [sys.executable, "-m", "fuserlite.cli", "run", EXAMPLE, "--backend", "mpi"]
    proc = mpiexec(2, *cmd, "--devices", "4")
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert proc.stderr.count("error:") == 1, proc.stderr
    assert "devices {0 1 2 3} but MPI started 2 rank(s)" in proc.stderr
    assert "mpiexec -n 4 or more (ranks in no mesh stay idle)" in proc.stderr


def test_failing_rank_ends_the_job_with_its_message_once():
    proc = mpiexec(2, sys.executable, str(SCRIPTS / "failing_rank.py"))
    assert proc.returncode != 0
    assert proc.stderr.count("rank 1: injected failure") == 1, proc.stderr
    assert "finished" not in proc.stdout


def test_bad_local_input_on_one_rank_never_hangs():
    proc = mpiexec(2, sys.executable, str(SCRIPTS / "bad_input.py"))
    assert proc.returncode != 0
    assert proc.stderr.count("error: rank 1:") == 1, proc.stderr
    assert "shape" in proc.stderr
    assert "finished" not in proc.stdout


def launch_stalling(tmp_path: Path, n: int, rank: int, how: str, path: str, timeout: float):
    """mpiexec -n n stalled_rank.py: `rank` stops, dies or sleeps as step 3 (the Allreduce)
    begins. The CompletedProcess, the seconds from the stall to the job's end, and the
    ranks' pids."""
    args = [str(tmp_path), str(rank), "3", how, path, str(timeout)]
    proc = mpiexec(n, sys.executable, str(SCRIPTS / "stalled_rank.py"), *args)
    ended = time.time()
    stalled = float((tmp_path / "stopped").read_text())
    pids = [int((tmp_path / f"pid.{r}").read_text()) for r in range(n)]
    return proc, ended - stalled, pids


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether process `pid` has ended (a zombie waiting to be reaped has ended too)."""
    stat = Path(f"/proc/{pid}/stat")
    until = time.monotonic() + within
    while time.monotonic() < until:
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(("n", "rank", "path"), [(4, 2, "cli"), (2, 1, "executor")])
def test_a_stopped_rank_ends_the_job_through_the_watchdog(tmp_path, n, rank, path):
    """A SIGSTOPped rank fails nothing: the others' watchdog finds it within timeout +
    its answer window, every live rank names it, its step and its collective once,
    and MPI_Abort ends the job, the stopped process too."""
    timeout = 2
    proc, seconds, pids = launch_stalling(tmp_path, n, rank, "STOP", path, timeout)
    assert proc.returncode != 0
    assert "finished" not in proc.stdout and "validation" not in proc.stdout
    # The bound (the watchdog's parts are fixed: timeout, a 2 s answer window,
    # 0.5 s for stderr to get out); a hang would have been cut by TIMEOUT instead.
    assert seconds < timeout + 5, (seconds, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    team = "{" + " ".join(map(str, range(n))) + "}"
    name = "Allreduce T10 -> y (T7)" if path == "cli" else "Allreduce T10 -> T7"
    for live in sorted(set(range(n)) - {rank}):
        (mine,) = [line for line in lines if line.startswith(f"error: rank {live}:")]
        assert f"at step 3 ({name}), in MPI_Ialltoallv over team {team}" in mine, mine
        assert f"rank {rank} did not answer" in mine, mine
    assert len(lines) == n - 1, proc.stderr
    assert all(gone(pid) for pid in pids), pids


def test_a_killed_rank_still_ends_the_job_at_once(tmp_path):
    proc, seconds, pids = launch_stalling(tmp_path, 2, 1, "KILL", "executor", 300)
    assert proc.returncode != 0
    assert "finished" not in proc.stdout
    assert seconds < 5, seconds  # mpiexec's doing, long before the 300 s timeout
    assert all(gone(pid) for pid in pids), pids


def test_a_slow_rank_that_answers_the_watchdog_finishes(tmp_path):
    """Rank 1 sleeps 2.5 s before the Allreduce with a 2 s timeout: rank 0 asks, rank 1
    answers as it reaches the collective (within the 2 s answer window, which leaves
    rank 1 1.5 s to reach step 3 behind rank 0 on a loaded machine), and the run ends
    normally."""
    proc, _, _ = launch_stalling(tmp_path, 2, 1, "2.5", "executor", 2)
    assert proc.returncode == 0, proc.stderr
    assert sorted(re.findall(r"rank \d finished", proc.stdout)) == [
        "rank 0 finished",
        "rank 1 finished",
    ], proc.stdout


def test_mpiexec_without_backend_mpi_is_one_error():
    """Each process would run the sim backend on its own and print its own report."""
    proc = mpiexec(4, sys.executable, "-m", "fuserlite.cli", "run", EXAMPLE)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert proc.stderr.count("error:") == 1, proc.stderr
    assert "started by an MPI launcher as 4 processes" in proc.stderr
    assert f"mpiexec -n 4 fuserlite run {EXAMPLE} --backend mpi" in proc.stderr


def test_a_syntax_error_under_mpiexec_is_printed_once(tmp_path):
    bad = tmp_path / "bad.fus"
    bad.write_text("input x: float32[4]\ny = relu(x\noutput y\n")
    proc = mpiexec(2, sys.executable, "-m", "fuserlite.cli", "run", str(bad), "--backend", "mpi")
    assert proc.returncode != 0
    assert proc.stderr.count("error:") == 1, proc.stderr
    assert f"{bad}:2:" in proc.stderr


@pytest.mark.parametrize("rank", ["0", "1"])
def test_under_a_launcher_rank_zero_alone_reports_what_every_rank_meets(capsys, monkeypatch, rank):
    """What mpiexec's Hydra (and Open MPI's mpirun) tell each process, in one process:
    rank 0 prints the errors that every rank meets alike, the others exit quietly."""
    monkeypatch.setenv("PMI_RANK", rank)
    monkeypatch.setenv("PMI_SIZE", "3")
    for argv, said in (
        (["run", EXAMPLE], "add --backend mpi (mpiexec -n 3 fuserlite run"),
        (["run", EXAMPLE, "--backend", "mpi", "--timeout", "0"], "argument --timeout"),
        (["run", "missing.fus", "--backend", "mpi"], "missing.fus"),
    ):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert (said in err) if rank == "0" else err == "", (argv, err)
    assert cli.main(["run", EXAMPLE, "--backend", "sim"]) == 0  # asked for: every rank runs it
    assert "validation: ok" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_timeout_flag_takes_positive_seconds(capsys, value):
    assert cli.main(["run", EXAMPLE, "--timeout", value]) == 1
    assert "not a positive number of seconds (inf waits for ever)" in capsys.readouterr().err


def test_executor_timeout_is_checked():
    fusion = models.tensor_parallel_mlp(2)
    for value in (0, -1.0, True, "5", float("nan")):
        with pytest.raises(fl.ExecutionError, match="timeout must be a positive number"):
            fl.FusionExecutor(fusion, timeout=value)
    with pytest.raises(fl.ExecutionError, match=r"MpiCommunicator\(timeout=\.\.\.\)"):
        fl.FusionExecutor(fusion, backend=SimCommunicator(), timeout=5)
    assert fl.FusionExecutor(fusion, timeout=math.inf).run(fl.random_inputs(fusion, 0))


def test_ranks_waiting_on_each_other_end_the_wait():
    """Every rank answers the watchdog, none completes anything: a verdict, here (with
    abort_on_error=False) an ExecutionError on each rank."""
    proc = mpiexec(2, sys.executable, str(SCRIPTS / "waiting_on_each_other.py"))
    assert proc.returncode != 0
    assert "finished" not in proc.stdout
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("caught: rank ") for line in lines), lines
    assert "every rank answered, but none completed an operation" in proc.stdout
    assert "in MPI_Isend/MPI_Irecv over team {0 1}" in proc.stdout
    assert "in MPI_Iallgather over team {0 1}" in proc.stdout


def test_streamed_programs_overlap_on_four_ranks_with_sim_s_bits():
    """Stream loops on 4 ranks: every output equals sim's bit for bit (every case of
    stream_cases, against the unstreamed program on sim), and each rank
    posts chunk i+1's Allgather before chunk i's matmul and waits for it after (rank 0's
    order reported); a ReduceScatter or Allreduce that reads its chunk's matmul is
    posted after it and waited after chunk i+1's matmul, before chunk i's store."""
    proc = mpiexec(4, sys.executable, str(SCRIPTS / "streamed.py"))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    bits = results.pop("bits")  # every stream case, streamed on MPI: the unstreamed bits on sim
    cases = [*stream_cases.CASES, *(f"{n}, rounding size" for n in stream_cases.ROUNDING)]
    assert bits == {f"{n} ({c})": True for n in cases for c in ("interpret", "numpy")}
    names = {"ag_matmul_4", "ag_matmul_2", "matmul_reduce_scatter", "matmul_allreduce"}
    assert set(results) == names | {"allreduce"}
    for name, r in results.items():
        assert r["same"], name
        events = [tuple(e) for e in r["events"]]
        if name in names:  # the Allgather's order, or the reduction's (overlap_order)
            assert events == [tuple(e) for e in r["pipelined"]], name
        assert events.count(("kernel",)) == 4, name


def test_four_mpi_ranks_run_the_ring_as_sim(tmp_path) -> None:
    """The ring-based AG+matmul (swizzle1d) on 4 ranks: each step's CollectivePermute as
    point-to-point MPI messages, the report (sums, communications, validation on every
    rank) the sim backend's."""
    path = tmp_path / "ring.fus"
    path.write_text(fl.to_fus(stream_cases.ag_matmul_ring(4)))
    cmd = [sys.executable, "-m", "fuserlite.cli", "run", str(path)]
    proc = mpiexec(4, *cmd, "--backend", "mpi")
    assert proc.returncode == 0, proc.stderr
    sim = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT)
    assert sim.returncode == 0, sim.stderr
    assert proc.stdout == sim.stdout.replace("sim device(s)", "mpi device(s)")
    assert "CollectivePermute" in proc.stdout and "validation: ok" in proc.stdout
