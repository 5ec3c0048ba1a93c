"""Sheets as one SVG document: a titled grid per tensor, boxes to scale, every device named."""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from fuserlite.show.layout import Sheet

WIDTH, HEIGHT = 480.0, 240.0  # a grid's size in px: a 1-D tensor's row is one fifth as tall
MARGIN, TITLE = 16.0, 40.0
COLOURS = ("#8ecae6", "#a7c957", "#f4a261", "#cdb4db", "#e9c46a", "#90be6d", "#f28482", "#84a59d")


def _grid_height(sheet: Sheet) -> float:
    if not sheet.cells:
        return 0.0
    return HEIGHT if sheet.axes[0] is not None else HEIGHT / 5


def _cell_text(sheet: Sheet, devices: tuple[int, ...]) -> str:
    if not devices:
        return "no device"
    word = "device" if len(devices) == 1 else "devices"
    return f"{word} {(' + ' if sheet.partial else ', ').join(map(str, devices))}"


def _one(sheet: Sheet, top: float) -> list[str]:
    """The elements of one sheet, its title at `top`."""
    out = [
        f'<text x="{MARGIN}" y="{top + 16}" font-weight="bold">{escape(sheet.title)}</text>',
        f'<text x="{MARGIN}" y="{top + 32}">{escape(sheet.placement)}</text>',
    ]
    (rows_extent, cols_extent), height = sheet.extents, _grid_height(sheet)
    y0 = top + TITLE
    for cell in sheet.cells:
        x = MARGIN + WIDTH * cell.cols[0] / cols_extent
        y = y0 + height * cell.rows[0] / rows_extent
        w = WIDTH * (cell.cols[1] - cell.cols[0]) / cols_extent
        h = height * (cell.rows[1] - cell.rows[0]) / rows_extent
        fill = COLOURS[cell.devices[0] % len(COLOURS)] if cell.devices else "#ffffff"
        text = _cell_text(sheet, cell.devices)
        dash = ' stroke-dasharray="4 2"' if sheet.partial else ""
        out.append(
            f'<g><title>{escape(text)}</title><rect x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" '
            f'height="{h:.2f}" fill="{fill}" stroke="#333333"{dash}/>'
            f'<text x="{x + w / 2:.2f}" y="{y + h / 2 + 4:.2f}" text-anchor="middle" '
            f'font-size="{10 if len(text) > 20 else 12}">{escape(text)}</text></g>'
        )
    if sheet.empty:
        nothing = "holding nothing: devices " + ", ".join(map(str, sheet.empty))
        out.append(f'<text x="{MARGIN}" y="{y0 + height + 12}">{escape(nothing)}</text>')
    return out


def svg(sheets: Sequence[Sheet]) -> str:
    """One SVG document with the sheets one under another."""
    body, top = [], 0.0
    for s in sheets:
        body += _one(s, top)
        top += TITLE + _grid_height(s) + MARGIN + (16 if s.empty else 0)
    width, height = WIDTH + 2 * MARGIN, max(top, 1.0)
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="monospace" font-size="12">',
            f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
            *body,
            "</svg>",
            "",
        ]
    )
