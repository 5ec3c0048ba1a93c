"""Every Python script in examples/ runs as a new user would run it and says what it should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "examples").glob("*.py"))

# The line each script must print: what a reader checks first.
KEY_LINES = {
    "seed_000.py": [
        *(f"device {d}: t5 = 65536" for d in range(8)),
        "communications: Allgather, Allreduce, ReduceScatter; validation ok",
    ],
    "fsdp_tp.py": [
        "Allgather on DIDy teams: (S1,S0) -> (R,S0), 512 B/device",
        "Allgather on DIDy teams: (S0,S1) -> (R,S1), 512 B/device",
        "ReduceScatter on DIDx teams: (S0,P) -> (S0,S2), 768 B/device",
        "communications: Allgather, Allgather, ReduceScatter",
        "validation ok",
    ],
    "fsdp_train_step.py": [
        "Allgather on DIDx teams: (S0) -> (R), 1536 B/device (forward: unshard w1)",
        "Allgather on DIDx teams: (S0) -> (R), 1536 B/device (backward: unshard w2)",
        "ReduceScatter on DIDx teams: (P) -> (S0), 1536 B/device (backward: reduce-scatter grad_w1)",
        "communications: Allgather, Allgather, Allreduce, Allgather, ReduceScatter, ReduceScatter",
        "validation ok",
        "gradients match float64 central differences",
    ],
    "transformer_train_step.py": [
        "forward: Allgather, ReduceScatter, Allgather, ReduceScatter, Allreduce",
        "backward: Allgather, ReduceScatter, Allgather, ReduceScatter, ReduceScatter, "
        "ReduceScatter, Allreduce, Allreduce, Allreduce, Allreduce, Allreduce, Allreduce",
        "validation ok",
        "step time 382 us on h100-nvlink (forward 93.8 us): compute 242 us, communication 140 us",
    ],
    "transformer_block.py": [
        "placements: x Shard(dim=1), wq Shard(dim=0), bq Shard(dim=0),",
        "communications: Allgather, ReduceScatter, Allgather, ReduceScatter; validation ok",
    ],
    "torch_gpt_block.py": [
        "imported in",
        "attn.q.weight (Shard(dim=0),), attn.proj.weight (Shard(dim=1),), x (Replicate(),)",
        "communications: Allreduce, Allreduce; matches torch",
        "communications: Allgather, ReduceScatter, Allgather, ReduceScatter; matches torch",
    ],
    "tp_mlp.py": [
        "communications: Allreduce; validation ok",
        "communications: Allgather, ReduceScatter; validation ok",
    ],
}


def test_every_script_has_key_lines() -> None:
    assert sorted(p.name for p in SCRIPTS) == sorted(KEY_LINES)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_example_script_runs(script: Path) -> None:
    if script.name.startswith("torch_"):
        pytest.importorskip("torch", reason="the torch extra is not installed")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    for key in KEY_LINES[script.name]:
        assert any(line.startswith(key) for line in lines), f"{key!r} not in:\n{done.stdout}"
