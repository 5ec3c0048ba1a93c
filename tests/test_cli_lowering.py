"""The lowering side of the command: print --lowered/--scheduled/--passes, passes, codegen."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import fuserlite as fl
from fuserlite.cli import main
from fuserlite.kernel.cuda import cuda_source

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples").glob("*.fus"))


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_print_lowered_every_example(capsys, golden, path: Path) -> None:
    code, out, err = cli(capsys, "print", path, "--lowered")
    assert (code, err) == (0, "")
    golden(f"lowered/{path.stem}.txt", out)


@pytest.mark.parametrize("name", ["parallelized", "not_parallelized"])
def test_print_scheduled_seed_004_on_2_devices(capsys, golden, name: str) -> None:
    code, out, _ = cli(capsys, "print", REPO / f"examples/add_broadcast_{name}.fus", "--scheduled")
    assert code == 0
    golden(f"scheduled_seed004_{name}_2dev.txt", out)
    for line in out.splitlines():
        if line.startswith("T") and "[" in line:
            assert line.split("]")[0].count("deviceIdx.x") <= 1, line


def test_print_passes_and_print_after(capsys) -> None:
    path = REPO / "examples/tp_mlp.fus"
    code, out, _ = cli(capsys, "print", path, "--passes", "propagate-shardings,insert-reshardings")
    assert code == 0 and "rdeviceIdx.x" in out and "Communication" not in out
    code, out, _ = cli(capsys, "print", path, "--print-after", "lower-communications")
    assert code == 0 and out.count("// ----- after ") == 1 and "Communication Allreduce" in out
    code, out, _ = cli(capsys, "print", path, "--print-after-all")
    assert out.count("// ----- after ") == len(fl.pipeline.default_pass_names())
    code, out, err = cli(capsys, "print", path, "--passes", "nope")
    assert code == 1 and "unknown pass 'nope'" in err


def test_passes_lists_every_pass(capsys) -> None:
    code, out, _ = cli(capsys, "passes")
    assert code == 0
    for name in fl.pipeline.DEFAULT_PASSES:
        assert name in out
    assert "pin=all" in out


def test_run_reports_communications_and_resizes_devices(capsys) -> None:
    code, out, _ = cli(capsys, "run", REPO / "examples/tp_mlp.fus", "--devices", "2")
    assert code == 0 and "Allreduce" in out and "validation: ok" in out
    for n in ("1", "4", "8"):
        code, out, _ = cli(capsys, "run", REPO / "examples/sp_mlp.fus", "--devices", n)
        assert code == 0 and f"on {n} sim device(s)" in out and "validation: ok" in out
    code, out, _ = cli(capsys, "run", REPO / "examples/tp_mlp.fus", "--devices", "4")
    assert "Allreduce  T10    y (T7)  0-3" in out
    code, _, err = cli(
        capsys, "run", REPO / "examples/add_broadcast_not_parallelized.fus", "--devices", "4"
    )
    assert code == 1 and "parallelized as a whole" in err and "outer_split" in err


def test_resizing_a_shard_map_program_says_it_is_written_for_its_mesh(capsys) -> None:
    """A shard_map region's per-device values cannot be resized: the error names the
    region's line and says so (was: "outer_split it", about a tensor the user never
    wrote)."""
    code, out, err = cli(capsys, "run", REPO / "examples/seed_000.fus", "--devices", "4")
    assert (code, out) == (1, "")
    assert "seed_000.fus:16: T1 (a tensor the compiler made there)" in err
    assert "as a shard_map region does" in err and "write it for 4" in err
    assert "outer_split" not in err
    code, _, err = cli(capsys, "run", REPO / "examples/tp_mlp.fus", "--devices", "0")
    assert (
        code == 1 and "--devices: the number of devices must be an integer in 1..4096, got 0" in err
    )
    code, out, _ = cli(capsys, "run", REPO / "examples/softmax.fus", "--no-schedule")
    assert code == 0 and "validation: ok" in out


def test_codegen_prints_one_global_kernel_per_scheduled_kernel(capsys) -> None:
    code, out, _ = cli(capsys, "codegen", REPO / "examples/add_broadcast_parallelized.fus")
    assert code == 0 and out.count("__global__") == 1 and "threadIdx.x" in out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_the_cuda_of_every_example(tmp_path: Path) -> None:
    sources = []
    for path in EXAMPLES:
        lowered = fl.lower(fl.load(path))
        kernels = [s for s in lowered.kernels if s.scheduled]
        sources.append(cuda_source(kernels, prefix=f"k_{path.stem}"))
    cu = tmp_path / "examples.cu"
    cu.write_text("\n".join(sources))
    proc = subprocess.run(
        ["nvcc", "-ptx", "-o", str(tmp_path / "examples.ptx"), str(cu)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "examples.ptx").read_text().count(".entry") >= len(EXAMPLES) - 2


def _two_gathers_and_a_scatter(path: Path) -> Path:
    """x1 [8, 16] and x2 [12, 16] sharded on their rows over 2 devices, each all-gathered
    into a linear; h [12, 2*8] @ w3 contracting its sharded axis, reduce-scattered onto
    12 rows. With 4 chunks: x1's product streams (4 rows a device), x2's and the
    ReduceScatter's (6 rows a device) cannot."""
    with fl.Fusion() as f:
        mesh = fl.DeviceMesh.for_num_devices(2)
        x1, x2 = fl.tensor([8, 16]), fl.tensor([12, 16])  # T0, T1
        w1, w2 = fl.tensor([6, 16]), fl.tensor([6, 16])
        h, w3 = fl.tensor([12, 16]), fl.tensor([16, 6])
        for t in (x1, x2, w1, w2, h, w3):
            t.set_device_mesh(mesh)
            f.add_input(t)
        for t, axis in ((x1, 0), (x2, 0), (h, 1), (w3, 0)):
            t.outer_split(axis, 2)
            t.axis(axis).parallelize(fl.ParallelType.DIDx)
        y1, y2, z = fl.linear(x1, w1), fl.linear(x2, w2), fl.matmul(h, w3)
        z.outer_split(0, 2)
        for t in (y1, y2, z):
            t.set_device_mesh(mesh)
            f.add_output(t)
        z.axis(0).parallelize(fl.ParallelType.DIDx)
    path.write_text(fl.to_fus(f))
    return path


@pytest.mark.parametrize("command", ["timeline", "print", "run", "explain"])
def test_partial_streams_say_which_pairs_they_leave_whole(capsys, tmp_path, command) -> None:
    """--streams 4 streams the pair it can and prints, on stderr, one line per pair it
    leaves whole with the reason; stdout is the command's output alone."""
    path = _two_gathers_and_a_scatter(tmp_path / "pairs.fus")
    code, out, err = cli(capsys, command, path, "--streams", "4")
    assert code == 0, err
    prefix = f"fuserlite {command}: --streams 4: left whole: "
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith(prefix) for line in lines), err
    rows = "its axis 0 of 12 rows is not axis 0 in 4 chunks of 2 blocks of equal rows"
    assert lines[0][len(prefix) :] == f"T7 = linear(T10, T3) after Allgather T1 -> T10: T7: {rows}"
    scatter = f"T11 = matmul(T4, T5) before ReduceScatter T11 -> T8: T8: {rows}"
    assert lines[1][len(prefix) :] == scatter
    assert "T0" not in err  # x1's pair streamed
    code, out, err = cli(capsys, command, path)  # without --streams: nothing said
    assert code == 0 and err == ""
