"""A training step on real processes: `fuserlite run --grad` under mpiexec reports what
the sim backend reports (the same gradients' checksums and communications)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="the mpi backend needs mpi4py: pip install '.[mpi]'")
MPIEXEC = shutil.which("mpiexec")
if MPIEXEC is None:
    pytest.skip("mpiexec not found: pip install '.[mpi]' (mpich)", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
STEP = ["run", "examples/tp_mlp_loss.fus", "--grad", "w1,b1,w2,b2,x"]


def test_the_step_on_two_mpi_ranks_reports_what_sim_reports() -> None:
    command = [sys.executable, "-m", "fuserlite.cli"]
    sim = subprocess.run([*command, *STEP], cwd=ROOT, capture_output=True, text=True)
    mpi = subprocess.run(
        [MPIEXEC, "-n", "2", *command, *STEP, "--backend", "mpi"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert sim.returncode == 0 and mpi.returncode == 0, mpi.stderr
    assert mpi.stdout.replace("2 mpi device(s)", "2 sim device(s)") == sim.stdout
    assert "grad_x" in sim.stdout and "validation: ok" in sim.stdout
