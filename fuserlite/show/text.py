"""A Sheet as a character grid: plain ASCII when piped, coloured per device on a terminal.

Column widths and row heights follow the blocks' extents (uneven blocks look
uneven), widened only where a cell's label would not fit. A cell names its
devices: `d3`, `d0,4` (copies of one block), `d0+d1` (addends of a partial
block), `d0..d7 (8)` when there are many.
"""

from __future__ import annotations

from rich.text import Text

from fuserlite.show.layout import Cell, Sheet

WIDTH = 64  # characters the columns share, before widening for labels
HEIGHT_PER_ROW = 2  # text lines per grid row, on average, before scaling
PALETTE = tuple(
    f"bold white on {c}"
    for c in ("dark_blue", "dark_green", "dark_red", "purple4", "dark_orange3", "deep_sky_blue4",
              "dark_olive_green3", "orchid4")
)  # fmt: skip
PLAIN = {"corner": "+", "h": "-", "v": "|"}
BOXED = {"corner": "┼", "h": "─", "v": "│"}


def label(cell: Cell, partial: bool) -> str:
    """The devices of a cell: `d3`, `d0,4`, `d0+d1`, `d0..d7 (8)`, or `-` for none."""
    devs = cell.devices
    if not devs:
        return "-"
    if len(devs) == 1:
        return f"d{devs[0]}"
    if len(devs) > 4:
        return f"d{devs[0]}..d{devs[-1]} ({len(devs)})"
    return "+".join(f"d{d}" for d in devs) if partial else "d" + ",".join(map(str, devs))


def _scaled(bounds: tuple[int, ...], total: int, minimum: list[int]) -> list[int]:
    """Sizes of the intervals between bounds, to scale over `total`, each at least its minimum."""
    extent = bounds[-1] - bounds[0] or 1
    return [
        max(m, round(total * (b - a) / extent))
        for (a, b), m in zip(zip(bounds, bounds[1:]), minimum)
    ]


def grid(sheet: Sheet, boxed: bool = False) -> list[tuple[str, list[tuple[int, int, Cell]]]]:
    """The picture's lines, each with the (start, end, cell) spans of its cell interiors."""
    if not sheet.cells:
        return []
    chars = BOXED if boxed else PLAIN
    nrows, ncols = sheet.shape
    cells = [sheet.cells[r * ncols : (r + 1) * ncols] for r in range(nrows)]
    labels = [[label(c, sheet.partial) for c in row] for row in cells]
    widths = _scaled(
        sheet.col_bounds,
        WIDTH,
        [max(len(labels[r][c]) for r in range(nrows)) + 2 for c in range(ncols)],
    )
    lines_per_row = HEIGHT_PER_ROW if sheet.axes[0] is not None else 1  # a 1-D row: one line
    heights = _scaled(sheet.row_bounds, lines_per_row * nrows, [1] * nrows)
    margin = len(str(sheet.extents[0])) + 1 if sheet.axes[0] is not None else 0
    border = (
        " " * margin
        + chars["corner"]
        + chars["corner"].join(chars["h"] * w for w in widths)
        + chars["corner"]
    )
    lines: list[tuple[str, list]] = [(_ruler(sheet, widths, margin), [])]
    for r, row in enumerate(cells):
        lines.append((border, []))
        for k in range(heights[r]):
            middle = k == (heights[r] - 1) // 2
            start = str(sheet.row_bounds[r]) if k == 0 and sheet.axes[0] is not None else ""
            text, spans = start.rjust(margin - 1) + " " if margin else "", []
            for c, w in enumerate(widths):
                text += chars["v"]
                spans.append((len(text), len(text) + w, row[c]))
                text += (labels[r][c] if middle else "").center(w)
            lines.append((text + chars["v"], spans))
    lines.append((border, []))
    if sheet.empty:
        lines.append(("holds nothing: " + " ".join(f"d{d}" for d in sheet.empty), []))
    return lines


def _ruler(sheet: Sheet, widths: list[int], margin: int) -> str:
    """The start index of each column above its left border, the extent at the right."""
    ruler = [" "] * (margin + sum(widths) + len(widths) + 8)
    x = margin
    for bound, w in zip(sheet.col_bounds, [*widths, 0]):
        text = str(bound)
        if all(ch == " " for ch in ruler[max(0, x - 1) : x + len(text) + 1]):
            ruler[x : x + len(text)] = text
        x += w + 1
    return "".join(ruler).rstrip()


def header(sheet: Sheet) -> list[str]:
    """Title, placement and which axes the grid shows."""
    rows, cols = sheet.axes
    if not sheet.cells:
        return [sheet.title, sheet.placement]
    drawn = f"columns: axis {cols}" if cols is not None else "a scalar"
    if rows is not None:
        drawn = f"rows: axis {rows}, {drawn}"
    return [sheet.title, f"{sheet.placement} ({drawn})"]


def plain(sheet: Sheet) -> str:
    """The picture in ASCII."""
    return "\n".join([*header(sheet), *(line for line, _ in grid(sheet))]) + "\n"


def coloured(sheet: Sheet) -> Text:
    """The picture for a terminal: box characters, each cell on its first device's colour."""
    out = Text("\n".join(header(sheet)) + "\n", style="bold")
    for line, spans in grid(sheet, boxed=True):
        text = Text(line)
        for start, end, cell in spans:
            if cell.devices:
                text.stylize(PALETTE[cell.devices[0] % len(PALETTE)], start, end)
        out.append(text)
        out.append("\n")
    return out
