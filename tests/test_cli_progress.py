"""Progress of long work: the pipeline and executor hook, and the CLI's display of it."""

from __future__ import annotations

import io

from rich.console import Console

import fuserlite as fl
from fuserlite import models
from fuserlite.cli.progress import ProgressDisplay
from fuserlite.pipeline import DEFAULT_PASSES


def recorder() -> tuple[list[tuple], object]:
    calls: list[tuple] = []
    return calls, lambda *call: calls.append(call)


def test_pipeline_reports_each_pass_then_the_end():
    calls, hook = recorder()
    fl.Pipeline.default(progress=hook).run(models.tensor_parallel_mlp(2))
    n = len(DEFAULT_PASSES)
    assert calls == [("passes", i, n, name) for i, name in enumerate(DEFAULT_PASSES)] + [
        ("passes", n, n, "")
    ]


def test_executor_reports_passes_then_each_kernel_and_communication():
    calls, hook = recorder()
    ex = fl.FusionExecutor(models.tensor_parallel_mlp(2), progress=hook)
    ex.run(fl.random_inputs(ex.fusion))
    steps = [c for c in calls if c[0] == "kernels/communications"]
    segments = ex.program.steps
    assert [c[1:3] for c in steps] == [(i, len(segments)) for i in range(len(segments) + 1)]
    (comm,) = ex.communications
    assert f"Allreduce {comm.input.name} -> {comm.output.name}" in [c[3] for c in steps]
    assert steps[0][3] == "kernel linear on 2 device(s)"
    assert calls.index(steps[0]) == len(DEFAULT_PASSES) + 1  # after every pass


def run_with_display(console: Console, delay: float) -> None:
    with ProgressDisplay(console, delay=delay) as progress:
        progress.phase("random inputs")
        fusion = models.tensor_parallel_mlp(2)
        inputs = fl.random_inputs(fusion)
        progress.finish("random inputs")
        fl.FusionExecutor(fusion, progress=progress).run(inputs)


def test_a_terminal_shows_the_passes_and_the_kernels():
    buf = io.StringIO()
    run_with_display(Console(file=buf, force_terminal=True, width=160), delay=0)
    shown = buf.getvalue()
    n = len(DEFAULT_PASSES)
    for text in ("random inputs", "passes", f"{n}/{n}", "kernels/communications", "5/5"):
        assert text in shown


def test_nothing_is_shown_when_piped_or_when_the_work_ends_before_the_delay():
    piped = io.StringIO()
    run_with_display(Console(file=piped), delay=0)
    assert piped.getvalue() == ""
    quick = io.StringIO()
    run_with_display(Console(file=quick, force_terminal=True), delay=3600)
    assert quick.getvalue() == ""
