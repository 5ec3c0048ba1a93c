"""No process-wide side effects: the collector switch is left alone, test hooks are
arguments (not environment variables), caches belong to their executor."""

from __future__ import annotations

import gc
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.passes.base import REGISTRY, Level, Pass

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class _Probe(Pass):
    """Test-only: records whether the collector is on while it runs, and calls `hook`."""

    name: ClassVar[str] = "test-gc-probe"
    level: ClassVar[Level] = Level.fusion
    seen: ClassVar[list[bool]] = []
    hook: ClassVar[list] = []

    def run(self, fusion) -> None:
        for fn in self.hook:
            fn()
        self.seen.append(gc.isenabled())


@pytest.fixture
def probe():
    REGISTRY[_Probe.name] = _Probe
    _Probe.seen.clear()
    _Probe.hook.clear()
    was = gc.isenabled()
    try:
        yield _Probe
    finally:
        del REGISTRY[_Probe.name]
        (gc.enable if was else gc.disable)()


def _run(names=("test-gc-probe",)) -> None:
    fl.Pipeline(list(names)).run(models.add_broadcast(2, True))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_left_as_the_caller_set_it_in_a_run(probe, enabled) -> None:
    """No pass, no pipeline, no failing pass touches the process-wide collector switch."""
    (gc.enable if enabled else gc.disable)()
    _run(["test-gc-probe", "test-gc-probe"])
    assert probe.seen == [enabled, enabled] and gc.isenabled() is enabled
    probe.hook.append(lambda: 1 / 0)
    with pytest.raises(fl.FuserliteError):
        _run()
    assert gc.isenabled() is enabled


def test_production_code_reads_no_environment_variables() -> None:
    """But for one function, which reads what an MPI launcher tells its processes (rank
    and size): it decides nothing a run computes, only which rank prints an error that
    every rank meets and that `run` without --backend under mpiexec is one."""
    offenders = sorted(
        f"{path.relative_to(ROOT)}"
        for path in [*(ROOT / "fuserlite").rglob("*.py"), *(ROOT / "passes").rglob("*.py")]
        if "os.environ" in path.read_text() or "getenv" in path.read_text()
    )
    assert offenders == ["fuserlite/kernel/cpu.py", "fuserlite/runtime/backends/__init__.py"]
    # kernel/cpu.py only sets OMP_WAIT_POLICY where the user has not (how idle OpenMP
    # threads wait: speed, never a value), before libgomp loads; it reads nothing.
    from fuserlite.kernel import cpu
    from fuserlite.runtime import backends

    cpu_source = (ROOT / offenders[0]).read_text()
    assert cpu_source.count("os.environ") == 1 and "getenv" not in cpu_source
    assert 'os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)' in inspect.getsource(
        cpu.quiet_openmp
    )
    offenders = offenders[1:]

    source = (ROOT / offenders[0]).read_text()
    assert source.count("os.environ") == 2 and "getenv" not in source
    assert inspect.getsource(backends.mpi_launch).count("os.environ") == 2
    assert backends.LAUNCH_VARIABLES == (
        ("PMI_RANK", "PMI_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    )


def test_the_kernel_runner_s_index_cache_belongs_to_its_executor() -> None:
    import fuserlite.kernel.grid_index as kernel_grid

    assert not hasattr(kernel_grid, "_GRIDS")  # no module-level cache
    fusion = models.add_broadcast(2, True)
    inputs = fl.random_inputs(fusion)
    ex = fl.FusionExecutor(fusion, compute="interpret")
    assert len(ex.grids) == 0
    ex.run(inputs)
    assert len(ex.grids) == 1  # the one scheduled kernel's grid, reused by the next run
    other = fl.FusionExecutor(fusion, compute="interpret")
    assert len(other.grids) == 0


def test_building_running_evaluating_and_validating_leave_the_collector_alone() -> None:
    """A user's `with Fusion():` block, the executor (lowering, preparing, running), the
    reference evaluator and validation run with the collector as the caller set it."""
    gc.enable()
    seen: list[bool] = []
    with fl.Fusion():
        seen.append(gc.isenabled())
    fusion = models.add_broadcast(2, True)
    executor = fl.FusionExecutor(
        fusion, compute="interpret", progress=lambda *_: seen.append(gc.isenabled())
    )
    inputs = fl.random_inputs(fusion)
    outputs = executor.run(inputs)
    fl.evaluate(fusion, inputs, visit=lambda *_: seen.append(gc.isenabled()))
    fl.validate(fusion, inputs, outputs)
    assert seen and all(seen) and gc.isenabled()
