"""A Timeline as one SVG document: a lane per device and stream, a box per event to
scale, each titled with its name, times and how its time is made."""

from __future__ import annotations

from xml.sax.saxutils import escape

from fuserlite.timing.chart import header
from fuserlite.timing.timeline import COMMUNICATION, Timeline, stream_label
from fuserlite.timing.units import seconds_text

WIDTH, LANE, LABEL, TOP, MARGIN = 960.0, 28.0, 150.0, 48.0, 16.0
FILL = {"compute": "#a7c957", "communication": "#8ecae6", "exposed": "#f28482"}
TICKS = 5


def svg(tl: Timeline) -> str:
    """The timeline as an SVG document."""
    span = tl.step_time or 1.0
    lanes = [(d, s) for d in tl.devices for s in tl.streams(d)]
    scale = (WIDTH - LABEL - MARGIN) / span
    height = TOP + LANE * len(lanes) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH:.0f}" height="{height:.0f}" '
        'font-family="monospace" font-size="12">',
        f'<text x="{MARGIN}" y="20" font-weight="bold">{escape(header(tl).strip())}</text>',
    ]
    axis = TOP + LANE * len(lanes) + 16
    for k in range(TICKS + 1):
        t = span * k / TICKS
        x = LABEL + t * scale
        out.append(
            f'<line x1="{x:.2f}" y1="{TOP}" x2="{x:.2f}" y2="{axis - 12}" stroke="#cccccc"/>'
        )
        out.append(
            f'<text x="{x:.2f}" y="{axis:.1f}" text-anchor="middle">{seconds_text(t)}</text>'
        )
    for i, (d, s) in enumerate(lanes):
        y = TOP + i * LANE
        out.append(f'<text x="{MARGIN}" y="{y + 17:.1f}">device {d} {stream_label(s)}</text>')
        for e in (e for e in tl.on(d) if e.stream == s):
            exposed = e.kind == COMMUNICATION and tl.exposed(e) > 0.5 * e.duration
            fill = FILL["exposed" if exposed else e.kind]
            x, w = LABEL + e.start * scale, max(e.duration * scale, 0.5)
            title = (
                f"{e.name}: {seconds_text(e.start)} to {seconds_text(e.end)} "
                f"({seconds_text(e.duration)}); {e.detail}"
            )
            out.append(
                f'<g><title>{escape(title)}</title><rect x="{x:.2f}" y="{y + 4:.1f}" '
                f'width="{w:.2f}" height="{LANE - 8:.1f}" fill="{fill}" stroke="#333333" '
                'stroke-width="0.5"/></g>'
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"
