"""A Timeline: the events of one step of a program on each device's streams.

    tl = fl.timeline(program)              # machine="h100-nvlink" by default
    tl.step_time                           # seconds, the last event's end
    tl.events[0]                           # Event(device=0, stream=0, kind="communication", ...)
    tl.totals()                            # compute, communication, exposed communication
    json.dump(tl.to_chrome_trace(), f)     # open in Perfetto or chrome://tracing

An event is one kernel or communication on one device: `kind` is "compute" or
"communication", `start` and `end` in seconds from the step's start. A device's
communication is exposed where no compute of that device runs beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fuserlite.timing.machine import Machine
from fuserlite.timing.units import seconds_text

COMPUTE = "compute"
COMMUNICATION_STREAMS = 100  # a posted communication's stream: 100 + its team's number
COMMUNICATION = "communication"

Interval = tuple[float, float]


@dataclass(frozen=True)
class Event:
    """One step on one device's stream, from `start` to `end` (seconds)."""

    device: int
    stream: int
    kind: str  # COMPUTE or COMMUNICATION
    name: str
    start: float
    end: float
    step: int  # the index of the program step it runs
    detail: str = ""  # how its time is made (its roofline, its alpha-beta terms)

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Totals:
    """Seconds a device spends computing, communicating, and communicating with no
    compute beside it (each the length of a union of intervals)."""

    compute: float
    communication: float
    exposed: float

    @property
    def hidden(self) -> float:
        """Communication time that compute overlaps."""
        return self.communication - self.exposed


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged where they touch or overlap, in order."""
    merged: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def length(intervals: Iterable[Interval]) -> float:
    """The total length of the union of `intervals`."""
    return sum(b - a for a, b in union(intervals))


def overlap(xs: Iterable[Interval], ys: Iterable[Interval]) -> float:
    """The length of the intersection of the unions of xs and ys."""
    ux, uy = union(xs), union(ys)
    total, j = 0.0, 0
    for a, b in ux:
        while j < len(uy) and uy[j][1] <= a:
            j += 1
        k = j
        while k < len(uy) and uy[k][0] < b:
            total += min(b, uy[k][1]) - max(a, uy[k][0])
            k += 1
    return total


class Timeline:
    """The modelled events of one step of a program on `machine` (module doc)."""

    def __init__(self, machine: Machine, events: Iterable[Event]) -> None:
        self.machine = machine
        self.events: tuple[Event, ...] = tuple(
            sorted(events, key=lambda e: (e.start, e.device, e.stream, e.step))
        )

    @property
    def step_time(self) -> float:
        """Seconds from the step's start to the end of its last event."""
        return max((e.end for e in self.events), default=0.0)

    @property
    def devices(self) -> list[int]:
        """The devices that run something, in order."""
        return sorted({e.device for e in self.events})

    def on(self, device: int, kind: str | None = None) -> list[Event]:
        """The events of `device` (of one kind), in start order."""
        return [e for e in self.events if e.device == device and kind in (None, e.kind)]

    def streams(self, device: int) -> list[int]:
        """The streams `device` uses, in order."""
        return sorted({e.stream for e in self.on(device)})

    def device_totals(self, device: int) -> Totals:
        """What `device` spends computing, communicating and exposed."""
        compute = [(e.start, e.end) for e in self.on(device, COMPUTE)]
        comm = [(e.start, e.end) for e in self.on(device, COMMUNICATION)]
        return Totals(length(compute), length(comm), length(comm) - overlap(comm, compute))

    def totals(self) -> Totals:
        """The most any device spends computing, communicating and with communication
        exposed (each its own device's: the three may come from different devices)."""
        per = [self.device_totals(d) for d in self.devices] or [Totals(0.0, 0.0, 0.0)]
        return Totals(
            max(t.compute for t in per),
            max(t.communication for t in per),
            max(t.exposed for t in per),
        )

    def beside(self, event: Event) -> list[tuple[Event, float]]:
        """The compute events of `event`'s device that run while it does, with the
        seconds each overlaps it: what hides a communication."""
        return [
            (e, min(e.end, event.end) - max(e.start, event.start))
            for e in self.on(event.device, COMPUTE)
            if e.start < event.end and event.start < e.end
        ]

    def exposed(self, event: Event) -> float:
        """Seconds of `event` with no compute of its device beside it."""
        hiding = [(e.start, e.end) for e, _ in self.beside(event)]
        return event.duration - overlap([(event.start, event.end)], hiding)

    def to_chrome_trace(self) -> dict:
        """The Chrome trace event format ({"traceEvents": [...]}, complete events "X" with
        ts and dur in microseconds, pid the device and tid the stream, and metadata
        events naming them), which Perfetto and chrome://tracing open."""
        trace: list[dict] = []
        for d in self.devices:
            trace.append(_meta("process_name", d, 0, f"device {d}"))
            trace.append(_meta("process_sort_index", d, 0, d, key="sort_index"))
            for s in self.streams(d):
                trace.append(_meta("thread_name", d, s, stream_label(s)))
        for e in self.events:
            args = {"step": e.step}
            if e.detail:
                args["detail"] = e.detail
            trace.append(
                {
                    "name": e.name,
                    "cat": e.kind,
                    "ph": "X",
                    "ts": e.start * 1e6,
                    "dur": e.duration * 1e6,
                    "pid": e.device,
                    "tid": e.stream,
                    "args": args,
                }
            )
        return {
            "traceEvents": trace,
            "displayTimeUnit": "ns",
            "otherData": {"machine": self.machine.summary(), "step_time_s": self.step_time},
        }

    def __repr__(self) -> str:
        return (
            f"<Timeline {len(self.events)} events on {len(self.devices)} devices, "
            f"step time {seconds_text(self.step_time)} on {self.machine.name}>"
        )


def stream_label(stream: int) -> str:
    """'stream 1'; a team's communication stream (numbered from 100) 'communication 0'."""
    if stream >= COMMUNICATION_STREAMS:
        return f"communication {stream - COMMUNICATION_STREAMS}"
    return f"stream {stream}"


def _meta(name: str, pid: int, tid: int, value: object, key: str = "name") -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}
