"""No process-wide side effects: the collector switch is scoped and restored, test hooks
are arguments (not environment variables), caches belong to their executor."""

from __future__ import annotations

import gc
import inspect
import threading
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


def test_the_collector_is_off_during_a_run_and_restored(probe) -> None:
    gc.enable()
    _run()
    assert probe.seen == [False] and gc.isenabled()
    gc.disable()  # a caller who turned it off keeps it off
    _run()
    assert not gc.isenabled()
    gc.enable()
    probe.hook.append(lambda: 1 / 0)  # a failing pass restores it too
    with pytest.raises(fl.FuserliteError):
        _run()
    assert gc.isenabled()


def test_nested_runs_restore_the_collector_once_the_outer_run_ends(probe) -> None:
    gc.enable()
    inner_done = []
    probe.hook.append(lambda: inner_done or inner_done.append(_run(["propagate-shardings"])))
    _run(["test-gc-probe", "test-gc-probe"])
    assert probe.seen == [False, False]  # still off in the outer run after the inner one
    assert gc.isenabled()


def test_overlapping_runs_in_threads_keep_it_off_until_the_last_ends(probe) -> None:
    gc.enable()
    main_done, b_inside = threading.Event(), threading.Event()
    b = threading.Thread(target=_run, name="b")

    def hook() -> None:
        if threading.current_thread() is b:  # b: wait inside its run until main's ended
            b_inside.set()
            main_done.wait(10)
        else:  # main: start b, and end only once b is inside its run
            b.start()
            b_inside.wait(10)

    probe.hook.append(hook)
    _run()
    main_done.set()
    b.join(20)
    assert probe.seen == [False, False]  # b still ran with it off after main's run ended
    assert gc.isenabled()


def test_production_code_reads_no_environment_variables() -> None:
    """But for one function, which reads what an MPI launcher tells its processes (rank
    and size): it decides nothing a run computes, only which rank prints an error that
    every rank meets and that `run` without --backend under mpiexec is one."""
    offenders = [
        f"{path.relative_to(ROOT)}"
        for path in [*(ROOT / "fuserlite").rglob("*.py"), *(ROOT / "passes").rglob("*.py")]
        if "os.environ" in path.read_text() or "getenv" in path.read_text()
    ]
    assert offenders == ["fuserlite/runtime/backends/__init__.py"]
    from fuserlite.runtime import backends

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


def test_running_and_evaluating_pause_the_collector_and_restore_it() -> None:
    """Running 20000 outputs made garbage collections a third of the run's time: the
    executor (lowering, preparing, running) and the reference evaluator pause it too."""
    gc.enable()
    fusion = models.add_broadcast(2, True)
    seen: list[bool] = []
    executor = fl.FusionExecutor(
        fusion, compute="interpret", progress=lambda *_: seen.append(gc.isenabled())
    )
    inputs = fl.random_inputs(fusion)
    executor.run(inputs)
    fl.evaluate(fusion, inputs, visit=lambda *_: seen.append(gc.isenabled()))
    assert seen and not any(seen)
    assert gc.isenabled()


def test_validating_pauses_the_collector_and_restores_it(monkeypatch) -> None:
    from fuserlite.reference import validate

    gc.enable()
    fusion = models.add_broadcast(2, True)
    inputs = fl.random_inputs(fusion)
    outputs = fl.evaluate(fusion, inputs)
    seen: list[bool] = []
    compare = validate.mismatch
    monkeypatch.setattr(validate, "mismatch", lambda *a: seen.append(gc.isenabled()) or compare(*a))
    fl.validate(fusion, inputs, outputs)
    assert seen and not any(seen)
    assert gc.isenabled()


def test_building_in_a_fusion_block_pauses_the_collector_and_restores_it() -> None:
    """Full collections were half the time of building 20000 outputs: `with Fusion()`
    pauses the collector, nested blocks and a failing block restore it once."""
    gc.enable()
    with fl.Fusion():
        assert not gc.isenabled()
        with fl.Fusion():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(fl.FusionError), fl.Fusion():
        fl.tensor([2.5])  # a failing block restores it too
    assert gc.isenabled()
    gc.disable()  # a caller who turned it off keeps it off
    with fl.Fusion():
        pass
    assert not gc.isenabled()
    gc.enable()
