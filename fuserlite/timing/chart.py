"""A Timeline as a Gantt chart, a table of its steps and its totals, for a terminal.

One row per device and stream (neighbouring devices alike share one), time to
scale across `width` columns: each column
shows the kind of event that fills most of it (`#` compute, `=` communication, `!`
communication with no compute beside it on that device, blank idle), and an event
too short for a column of its own still marks the column it lies in. `plain` is the
text (what a pipe gets, and golden files pin); `coloured` the same in rich colours.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from fuserlite.timing.timeline import COMMUNICATION, COMPUTE, Event, Timeline, stream_label
from fuserlite.timing.units import seconds_text

WIDTH = 72  # columns of the time axis
MARKS = {COMPUTE: "#", COMMUNICATION: "=", "exposed": "!"}
STYLES = {COMPUTE: "green", COMMUNICATION: "cyan", "exposed": "bold red"}


@dataclass(frozen=True)
class Row:
    """One device's stream: its label and, per column, the mark that fills it (or ' ')."""

    label: str
    cells: str


def _mark(tl: Timeline, e: Event) -> str:
    if e.kind == COMMUNICATION and tl.exposed(e) > 0.5 * e.duration:
        return MARKS["exposed"]
    return MARKS[e.kind]


def _cells(tl: Timeline, device: int, stream: int, width: int) -> str:
    span = tl.step_time or 1.0
    filled = [0.0] * width
    cells = [" "] * width
    for e in (e for e in tl.on(device) if e.stream == stream):
        mark = _mark(tl, e)
        first = min(int(e.start / span * width), width - 1)
        last = min(int(e.end / span * width), width - 1)
        for c in range(first, last + 1):
            lo, hi = c * span / width, (c + 1) * span / width
            covered = min(hi, e.end) - max(lo, e.start)
            if covered > filled[c]:
                filled[c], cells[c] = covered, mark
            elif cells[c] == " " and e.duration > 0 and lo <= e.start < hi:
                cells[c] = mark  # too short to fill most of any column
    return "".join(cells)


def devices_label(devices: list[int]) -> str:
    """'device 3', 'devices 0-7' (a run), 'devices 0, 2, 5'."""
    if len(devices) == 1:
        return f"device {devices[0]}"
    if devices == list(range(devices[0], devices[-1] + 1)):
        return f"devices {devices[0]}-{devices[-1]}"
    return "devices " + ", ".join(map(str, devices))


def grouped(devices: list[int], key) -> list[tuple[list[int], object]]:
    """Neighbouring devices whose `key(device)` is equal, as one group each."""
    groups: list[tuple[list[int], object]] = []
    for d in devices:
        k = key(d)
        if groups and groups[-1][1] == k:
            groups[-1][0].append(d)
        else:
            groups.append(([d], k))
    return groups


def rows(tl: Timeline, width: int = WIDTH) -> list[Row]:
    """The chart's rows, one per (device, stream) in order; neighbouring devices whose
    rows are all alike share theirs ('devices 0-7 stream 0')."""

    def lanes(d: int) -> tuple[tuple[int, str], ...]:
        return tuple((s, _cells(tl, d, s, width)) for s in tl.streams(d))

    return [
        Row(f"{devices_label(ds)} {stream_label(s)}", cells)
        for ds, same in grouped(tl.devices, lanes)
        for s, cells in same
    ]


def _axis(tl: Timeline, indent: int, width: int) -> str:
    end = seconds_text(tl.step_time)
    return " " * indent + "0" + " " * max(width - 1 - len(end), 1) + end


def header(tl: Timeline) -> str:
    """'step time 16.1 us on h100-nvlink (one DGX H100 node: ...)'."""
    return f"step time {seconds_text(tl.step_time)} on {tl.machine.summary()}\n"


def legend() -> str:
    return (
        f"{MARKS[COMPUTE]} compute  {MARKS[COMMUNICATION]} communication  "
        f"{MARKS['exposed']} communication with no compute beside it\n"
    )


def step_lines(tl: Timeline) -> list[tuple[str, str, str, str, str, str]]:
    """Per program step: name, kind, start (earliest), end (latest), duration (longest)
    and, for a communication, its exposed time (the most on any device)."""
    by_step: dict[int, list[Event]] = {}
    for e in tl.events:
        by_step.setdefault(e.step, []).append(e)
    lines = []
    for step in sorted(by_step):
        events = by_step[step]
        first = events[0]
        exposed = (
            seconds_text(max(tl.exposed(e) for e in events)) if first.kind == COMMUNICATION else ""
        )
        lines.append(
            (
                first.name,
                first.kind,
                seconds_text(min(e.start for e in events)),
                seconds_text(max(e.end for e in events)),
                seconds_text(max(e.duration for e in events)),
                exposed,
            )
        )
    return lines


def totals_text(tl: Timeline) -> str:
    """'compute 8 us, communication 8.14 us, exposed communication 8.14 us'."""
    t = tl.totals()
    return (
        f"compute {seconds_text(t.compute)}, communication {seconds_text(t.communication)}, "
        f"exposed communication {seconds_text(t.exposed)} (the most on any device)\n"
    )


def _table(headings: tuple[str, ...], lines: list[tuple[str, ...]]) -> str:
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headings)]
    out = []
    for line in (headings, *lines):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
    return "\n".join(out) + "\n"


def plain(tl: Timeline, width: int = WIDTH) -> str:
    """The whole report as plain text: header, chart, legend, steps, totals."""
    chart = rows(tl, width)
    indent = max((len(r.label) for r in chart), default=0) + 2
    lines = [header(tl), "\n"]
    lines += [f"{r.label.ljust(indent - 2)} |{r.cells}|\n" for r in chart]
    lines += [_axis(tl, indent, width) + "\n", legend(), "\n"]
    lines.append(_table(("step", "kind", "start", "end", "duration", "exposed"), step_lines(tl)))
    lines.append("\n")

    def totals(d: int) -> tuple[str, str, str]:
        t = tl.device_totals(d)
        return seconds_text(t.compute), seconds_text(t.communication), seconds_text(t.exposed)

    per_device = [(devices_label(ds), *same) for ds, same in grouped(tl.devices, totals)]
    lines.append(_table(("", "compute", "communication", "exposed"), per_device))
    lines.append("\n" + f"step time {seconds_text(tl.step_time)}: " + totals_text(tl))
    return "".join(lines)


def coloured(tl: Timeline, width: int = WIDTH) -> Text:
    """The report with the chart's marks in colour (for a terminal)."""
    text = Text()
    for line in plain(tl, width).splitlines(keepends=True):
        if line.startswith("device") and line.rstrip().endswith("|"):
            head, cells = line.split("|", 1)
            text.append(head + "|")
            for ch in cells.rstrip("\n")[:-1]:
                style = next((STYLES[k] for k, m in MARKS.items() if m == ch), None)
                text.append("█" if style else ch, style=style)
            text.append("|\n")
        else:
            text.append(line)
    return text
