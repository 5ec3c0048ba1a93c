"""Scheduling a program's steps on each device's streams: fl.timeline.

Every device runs the host program's steps in order (loops unrolled) on its streams,
as a GPU runs work on CUDA streams:

- a kernel runs on the current stream of each device of its mesh, when that stream is
  free (after what was put on it before) and the device is: a device runs one kernel
  at a time, whatever its stream (a kernel fills the GPU), so streams overlap kernels
  with communications, not kernels with each other;
- a communication that is not posted (what the pipeline makes) runs on the current
  stream too and holds it up until it completes; a collective starts when every
  member of its team has reached it (at the latest of their streams) and ends for all
  of them together;
- a posted communication (PostOnStream) runs on its team's communication stream
  (numbered from COMMUNICATION_STREAMS: one per team, as a process group has one for
  its collectives), after the current stream's work so far and the team's earlier
  communications, and does not hold the current stream up; a Wait makes the current
  stream wait for its end (a blocking one waits for the team's earlier ones too);
- SetCurrentStream chooses the stream later steps go on; Synchronize makes the current
  stream wait for another's work so far; Allocate and Deallocate take no time.

The pipeline's programs (no host constructs) run on stream 0, so nothing of one device
overlaps: each step waits for the one before it, which is also every data dependence.
Each step's time is fuserlite.timing.model's.
"""

from __future__ import annotations

from collections.abc import Mapping

from fuserlite.ir import args
from fuserlite.ir.errors import LoweringError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.pipeline import lower
from fuserlite.program import host
from fuserlite.program.communication import Communication
from fuserlite.program.program import Kernel, Program, unlowered_steps
from fuserlite.timing.machine import Machine
from fuserlite.timing.machine import machine as machine_model
from fuserlite.timing.model import CommTime, KernelTime, communication_time, kernel_time
from fuserlite.timing.timeline import (
    COMMUNICATION,
    COMMUNICATION_STREAMS,
    COMPUTE,
    Event,
    Timeline,
)
from fuserlite.timing.units import bytes_text, rate_text, seconds_text

SINGLE_DEVICE = DeviceMesh([0])  # a fusion without meshes runs on device 0


def step_numbers(program: Program) -> dict[int, int]:
    """id(step) -> its number in the printed program (`%kernel<k>`: every step counted in
    printing order, loop bodies inside their loops); a post's step has the post's."""
    numbers = {}
    for k, s in enumerate(host.walk(program.steps)):
        numbers[id(s)] = k
        if isinstance(s, host.PostOnStream):
            numbers[id(s.step)] = k
    return numbers


def step_name(step: Kernel | Communication, number: int) -> str:
    """'%kernel3 (linear)' (as the program prints it, with its ops other than copies),
    'Allgather T0 -> T10' (with the users' names of its tensors)."""
    if isinstance(step, Kernel):
        ops = list(dict.fromkeys(e.op_name for e in step.exprs if e.op_name != "set"))
        shown = ", ".join(ops[:3]) + (", ..." if len(ops) > 3 else "") if ops else "set"
        return f"%kernel{number} ({shown})"
    return f"{step.op_name} {step.input.name} -> {step.output.name}"


def kernel_detail(t: KernelTime) -> str:
    """'memory-bound: 1.5 KiB (0.46 ns), 42 FLOP (0.6 ps); launch 2 us'."""
    return (
        f"{t.bound}-bound: {bytes_text(t.bytes)} ({seconds_text(t.memory)}), "
        f"{t.flops} FLOP ({seconds_text(t.compute)}); launch {seconds_text(t.launch)}"
    )


def communication_detail(t: CommTime) -> str:
    """'NVLink 4: 3.6 us + 7 steps x 470 ns + 512 B at 450 GB/s'."""
    if t.link is None:
        return "moves nothing"
    link = t.link
    return (
        f"{link.name}: {seconds_text(link.latency)} + {t.steps} step{'s' if t.steps != 1 else ''}"
        f" x {seconds_text(link.step_latency)} + {bytes_text(t.bytes)} at "
        f"{rate_text(link.bandwidth)}"
    )


class Streams:
    """When each (device, stream) is next free, and the events run on them so far."""

    def __init__(self, program: Program, machine: Machine) -> None:
        self.program = program
        self.machine = machine
        self.numbers = step_numbers(program)
        self.current = host.MAIN_STREAM
        self.free: dict[tuple[int, int], float] = {}
        self.computing: dict[int, float] = {}  # device -> when its last kernel ends
        self.team_streams: dict[tuple[int, ...], int] = {}
        self.ends: dict[tuple[int, int], float] = {}  # (id(post), device) -> its latest end
        self.events: list[Event] = []

    def ready(self, device: int, stream: int) -> float:
        return self.free.get((device, stream), 0.0)

    def name(self, step: Kernel | Communication, env: Mapping[str, int]) -> str:
        loops = ", ".join(f"{k}={v}" for k, v in env.items())
        return step_name(step, self.numbers[id(step)]) + (f" [{loops}]" if loops else "")

    def kernel(self, kernel: Kernel, env: Mapping[str, int]) -> None:
        """`kernel` on the current stream of each device of its mesh."""
        name, number, s = self.name(kernel, env), self.numbers[id(kernel)], self.current
        for d in (kernel.mesh or SINGLE_DEVICE).devices:
            t = kernel_time(self.machine, kernel, d)
            start = max(self.ready(d, s), self.computing.get(d, 0.0))
            self.events.append(
                Event(d, s, COMPUTE, name, start, start + t.seconds, number, kernel_detail(t))
            )
            self.free[d, s] = self.computing[d] = start + t.seconds

    def communication(
        self, comm: Communication, env: Mapping[str, int], post: host.PostOnStream | None
    ) -> None:
        """`comm` on each of its teams: on the current stream (blocking), or posted on
        the team's communication stream."""
        name, number, s = self.name(comm, env), self.numbers[id(comm)], self.current
        step = host.bound(comm, env)  # a ring step's permute: the one of step i
        for team in comm.teams:
            t = communication_time(self.machine, step, team)
            lane = self._team_stream(team)
            start = max(max(self.ready(d, s), self.ready(d, lane)) for d in team)
            end = start + t.seconds
            shown = s if post is None else lane  # a blocking one holds the current stream
            for d in team:
                detail = communication_detail(t)
                self.events.append(Event(d, shown, COMMUNICATION, name, start, end, number, detail))
                self.free[d, lane] = end
                if post is None:
                    self.free[d, s] = end
                else:
                    self.ends[id(post), d] = end

    def _team_stream(self, team: tuple[int, ...]) -> int:
        if team not in self.team_streams:
            self.team_streams[team] = COMMUNICATION_STREAMS + len(self.team_streams)
        return self.team_streams[team]

    def wait(self, wait: host.Wait) -> None:
        for team in wait.post.step.teams:
            for d in team:
                end = self.ends.get((id(wait.post), d), 0.0)
                self.free[d, self.current] = max(self.ready(d, self.current), end)

    def synchronize(self, other: int) -> None:
        for d, s in list(self.free):
            if s == other:
                self.free[d, self.current] = max(self.ready(d, self.current), self.free[d, s])

    def run(self) -> None:
        """Every step of the program, in order."""
        for step, env in host.unrolled(self.program.steps):
            if isinstance(step, host.SetCurrentStream):
                self.current = step.stream.value(env)
            elif isinstance(step, host.Synchronize):
                self.synchronize(step.stream.value(env))
            elif isinstance(step, host.Wait):
                self.wait(step)
            elif isinstance(step, host.PostOnStream):
                if isinstance(step.step, Kernel):
                    self.kernel(step.step, env)
                else:
                    self.communication(step.step, env, step)
            elif isinstance(step, Kernel):
                self.kernel(step, env)
            elif isinstance(step, Communication):
                self.communication(step, env, None)


def devices_used(program: Program) -> list[int]:
    """Every device some step of the program runs on, in order."""
    used: set[int] = set()
    for step in program.runs:
        if isinstance(step, Kernel):
            used.update((step.mesh or SINGLE_DEVICE).devices)
        else:
            used.update(step.team)
    return sorted(used)


def check_lowered(program: Program) -> None:
    """A LoweringError unless every step is a kernel, a Communication or a host construct."""
    unlowered = unlowered_steps(program)
    if unlowered:
        raise LoweringError(
            f"timeline: {unlowered[0]}: a resharding not yet lowered to communications; run "
            "lower-communications first (fl.lower does)"
        )


def timeline(program: Program | Fusion, machine: str | Machine | None = None) -> Timeline:
    """The modelled timeline of one step of `program` (a Fusion is lowered first with
    the default pipeline) on `machine`: a built-in machine's name, a .json file of one,
    or a Machine (default h100-nvlink, or h100-multinode beyond its 8 devices)."""
    args.instance(
        program, (Program, Fusion), "timeline", "program", "a Program or a Fusion", LoweringError
    )
    if isinstance(program, Fusion):
        program = lower(program)
    check_lowered(program)
    used = devices_used(program)
    model = machine_model(machine, devices=len(used) and max(used) + 1)
    model.check_devices(used)
    streams = Streams(program, model)
    streams.run()
    return Timeline(model, streams.events)
