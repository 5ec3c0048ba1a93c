"""fl.explain with time: each communication's modelled time, and whether compute hides it.

    time: Allgather 4.07 us on NVLink 4 (3.6 us + 1 step x 470 ns + 512 B at 450 GB/s);
    exposed: no compute runs beside it

after the lines fuserlite.program.explain gives each resharding. A communication is
hidden where compute of its device runs beside it (another stream's kernel), exposed
where none does; a program of one stream (what the pipeline makes without Stream
parallelization) has every communication exposed.
"""

from __future__ import annotations

from fuserlite.program.communication import CommKind, Communication
from fuserlite.program.explain import explain as explain_plans
from fuserlite.program.program import Program
from fuserlite.timing.machine import Machine
from fuserlite.timing.machine import machine as machine_model
from fuserlite.timing.schedule import step_numbers, timeline
from fuserlite.timing.timeline import Timeline
from fuserlite.timing.units import seconds_text


def _chunks(tl: Timeline, step: int) -> list[list]:
    """The events of program step `step`, one list per run of it (a loop's chunk: its
    events are named with the loop index, `[i=2]`), in order."""
    runs: dict[str, list] = {}
    for e in tl.events:
        if e.step == step:
            runs.setdefault(e.name, []).append(e)
    return list(runs.values())


def _unindexed(name: str) -> str:
    return name.split(" [", 1)[0]


def hiding(tl: Timeline, step: int) -> str:
    """Whether the events of program step `step` (a communication) are hidden, and by
    which kernels: the most exposed of its devices decides, chunk by chunk where a loop
    runs it (what is exposed is the sum of the chunks')."""
    runs = _chunks(tl, step)
    duration = sum(max(e.duration for e in run) for run in runs)
    exposed = sum(max(tl.exposed(e) for e in run) for run in runs)
    beside = [h.name for run in runs for e in run for h, _ in tl.beside(e)]
    if len(runs) > 1:  # each kernel once, with the chunks it hides behind in
        beside = [_unindexed(name) for name in beside]
    behind = list(dict.fromkeys(beside))
    if not behind:
        return "exposed: no compute runs beside it"
    names = ", ".join(behind)
    if exposed <= 1e-12 * max(duration, 1e-30):
        return f"hidden behind {names}"
    return f"{seconds_text(exposed)} of {seconds_text(duration)} exposed, the rest behind {names}"


def communication_line(tl: Timeline, program: Program, comm: Communication) -> str | None:
    """The time line of one communication (None for a LocalSlice, which takes none);
    in a loop, a chunk's time and the chunks' count."""
    if comm.kind is CommKind.LocalSlice:
        return None
    step = step_numbers(program)[id(comm)]
    runs = _chunks(tl, step)
    longest = max((e for run in runs for e in run), key=lambda e: e.duration)
    link, _, terms = longest.detail.partition(": ")
    took = seconds_text(longest.duration)
    if len(runs) > 1:
        took = f"{len(runs)} chunks of {took}"
    return f"{comm.kind.value} {took} on {link} ({terms}); " + hiding(tl, step)


def explain(program: Program, machine: str | Machine | None = None) -> str:
    """fuserlite.program.explain's account of every resharding, each communication's
    time on `machine` (default: h100-nvlink, or h100-multinode beyond 8 devices) and
    what hides it."""
    if machine is not None:
        machine = machine_model(machine)  # checked now, though nothing may communicate
    made: list[Timeline] = []

    def times(comm: Communication) -> str | None:
        if not made:  # after explain_plans has checked its argument
            made.append(timeline(program, machine))
        return communication_line(made[0], program, comm)

    return explain_plans(program, times)
