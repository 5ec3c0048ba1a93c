"""The --json documents of explain, show, timeline and passes (docs/cli.md); run's are
in cmd_run beside its text. Each carries the numbers its text prints, unrounded."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from fuserlite.cli.cmd_run import communication_report
from fuserlite.program.program import Program, Resharding
from fuserlite.program.reshardings import needed_by
from fuserlite.show import Sheet
from fuserlite.timing.schedule import step_numbers
from fuserlite.timing.timeline import Event, Timeline, Totals


def cost_report(cost: Any) -> dict[str, int]:
    """A plan's cost (plan.cost.Cost): launches x latency_bytes + bytes = total."""
    return {
        "launches": cost.launches,
        "bytes_per_device": cost.bytes,
        "latency_bytes": cost.latency_bytes,
        "total": cost.total,
    }


def _steps_report(plan: Any) -> dict[str, Any]:
    """A plan's (or its rejected alternative's) steps and cost."""
    return {
        "steps": [{"kind": s.step.kind.value, "bytes_per_device": s.bytes} for s in plan.steps],
        "cost": cost_report(plan.cost),
    }


def resharding_report(program: Program, r: Resharding, tl: Timeline | None) -> dict[str, Any]:
    """One resharding of explain: what needed it, its placements, its plan, the rejected
    alternative and its communications (each with its modelled seconds)."""
    needed = needed_by(r.target, program, as_written=True)
    plan, alt = r.plan, r.plan.alternative if r.plan is not None else None
    steps = step_numbers(program) if tl is not None else {}
    comms = []
    for c in r.communications:
        seconds = None
        if id(c) in steps:
            events = [e for e in tl.events if e.step == steps[id(c)]]
            seconds = max((e.duration for e in events), default=None)
        comms.append({**communication_report(c), "seconds": seconds})
    return {
        "source": r.source.name,
        "target": r.target.name,
        "needed_by": needed,
        "mesh": str(r.source.mesh),
        "plan": None
        if plan is None
        else {"before": str(plan.source), "after": str(plan.target), **_steps_report(plan)},
        "rejected": None if alt is None else {"label": alt.label, **_steps_report(alt)},
        "communications": comms,
    }


def explain_document(program: Program, tl: Timeline | None, text: str) -> dict[str, Any]:
    """`explain --json`: every resharding, in program order, each with its lines of
    explain's `text`."""
    blocks = re.split(r"\n(?=\S)", text.rstrip("\n")) if program.reshardings else []
    return {
        "command": "explain",
        "machine": None if tl is None else tl.machine.name,
        "reshardings": [
            {**resharding_report(program, r, tl), "text": block + "\n"}
            for r, block in zip(program.reshardings, blocks)
        ],
    }


def _totals(t: Totals) -> dict[str, float]:
    return {"compute": t.compute, "communication": t.communication, "exposed": t.exposed}


def _event(e: Event) -> dict[str, Any]:
    return {
        "device": e.device,
        "stream": e.stream,
        "kind": e.kind,
        "name": e.name,
        "start": e.start,
        "end": e.end,
        "step": e.step,
        "detail": e.detail,
    }


def timeline_document(tl: Timeline) -> dict[str, Any]:
    """`timeline --json`: the step time, its totals, each device's and every event
    (seconds)."""
    return {
        "command": "timeline",
        "machine": tl.machine.name,
        "step_time": tl.step_time,
        "totals": _totals(tl.totals()),
        "devices": [{"device": d, **_totals(tl.device_totals(d))} for d in tl.devices],
        "events": [_event(e) for e in tl.events],
    }


def show_document(sections: list[tuple[str, list[Sheet]]]) -> dict[str, Any]:
    """`show --json`: each picture's tensor, placement and blocks (which devices hold
    rows [a, b) x columns [c, d) of the drawn axes)."""
    return {
        "command": "show",
        "sections": [
            {"heading": heading, "pictures": [dataclasses.asdict(s) for s in sheets]}
            for heading, sheets in sections
        ],
    }
