"""Reading printed tensors back: a tensor's text and its TransformPrinter block.

    T5_l_float[ iS9{2}, ideviceIdx.x41{2}, iS42{32} ] ca_pos( 1 ) (DeviceMesh{0 1})
     logical domain : (iS9{2}, iS11{64})
     allocation domain : (ideviceIdx.x41{2}, iS9{2}, iS42{32})
     contiguity: t t t
      Outer split: iS11{64} by factor 2 -> ideviceIdx.x41{2}, iS42{32}
     loop domain : (iS9{2}, ideviceIdx.x41{2}, iS42{32})

A block holds everything about a tensor but its user name: number, memory type,
dtype, mesh, inline positions, and its domains with the transforms between
them, which `build_tensor` replays (printed extents and iteration types must be
what the transforms give). The IterDomain numbers are labels that connect the
lines of one block; the printer numbers them afresh (fuserlite.printer.Namer).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from fuserlite.ir.domain import (
    IterDomain,
    Merge,
    Split,
    Swizzle1D,
    TensorDomain,
    merged_iter_type,
    split_extents,
)
from fuserlite.ir.errors import FuserliteError, ParseError
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType, IterType, MemoryType, ParallelType
from fuserlite.ops.forms import TENSOR_PARTS

# A located error: message, line, column (the parser turns it into a ParseError).
Fail = Callable[[str, int, int], ParseError]

_PARALLEL = "|".join(
    re.escape(pt.value) for pt in sorted(ParallelType, key=lambda p: -len(p.value))
)
# An extent as printer.extent_text prints it: `4`, or the inner part of an outer split
# its factor does not divide, `( ceilDiv(13, 4) )` (of a nested one's extent too).
_EXTENT = r"\d+|\( ceilDiv\([^{}]*\) \)"
_CEIL_DIV = re.compile(r"\( ceilDiv\((?P<of>.*), (?P<by>\d+)\) \)")
AXIS = re.compile(
    rf"(?P<iter>[ibr])(?P<parallel>{_PARALLEL})(?P<number>\d+)\{{(?P<extent>{_EXTENT})\}}"
)
# One axis of a transform line: a name and its braces (spaces allowed inside them).
_ONE = r"[^\s{},]*\{[^{}]*\}|\S+"
TENSOR = re.compile(TENSOR_PARTS)
TENSOR_NUMBER = re.compile(r"T(\d+)_")
_DOMAIN = re.compile(r" (?P<which>logical|allocation|loop) domain : \((?P<axes>.*)\)")
_SPLIT = re.compile(
    rf"  (?P<kind>Split|Outer split): (?P<input>{_ONE}) by factor (?P<factor>\d+) -> "
    rf"(?P<outer>{_ONE}), (?P<inner>{_ONE})"
)
_MERGE = re.compile(rf"  Merge: (?P<outer>{_ONE}) and (?P<inner>{_ONE}) -> (?P<output>{_ONE})")
_SWIZZLE = re.compile(
    rf"  (?P<output>{_ONE}) = Swizzle1D\((?P<input>{_ONE}), parallelType=(?P<pt>[\w.]+)\)"
)
_CONTIGUITY = {"t": True, "f": False, "n": None}


@dataclass(frozen=True)
class Line:
    """One line of the source: its number (1-based) and its text."""

    number: int
    text: str


@dataclass(frozen=True)
class Block:
    """The TransformPrinter lines of one tensor, the first being the tensor's text."""

    lines: tuple[Line, ...]

    @property
    def head(self) -> Line:
        return self.lines[0]

    @property
    def tensor_number(self) -> int:
        return int(TENSOR_NUMBER.match(self.head.text).group(1))


@dataclass(frozen=True)
class _Axis:
    iter_type: IterType
    parallel_type: ParallelType
    number: int
    extent: int


def extent_value(text: str) -> int:
    """The extent a printed one stands for: `4` is 4, `( ceilDiv(13, 4) )` is 4."""
    m = _CEIL_DIV.fullmatch(text)
    if m is None:
        return int(text)
    return -(-extent_value(m["of"]) // int(m["by"]))


def axis_texts(text: str) -> list[str]:
    """`iS0{2}, iS1{( ceilDiv(13, 4) )}` -> each axis's text (split at the commas
    outside braces; an empty text has none)."""
    if not text.strip():
        return []
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0 and text.startswith(", ", i):
            parts.append(text[start:i])
            start = i + 2
    return [*parts, text[start:]]


def _axes(text: str, line: Line, column: int, fail: Fail) -> list[_Axis]:
    """`iS0{2}, ideviceIdx.x1{2}` -> its axes (an empty text has none)."""
    out = []
    at = column
    for part in axis_texts(text):
        m = AXIS.fullmatch(part)
        if m is None:
            raise fail(
                f"{part!r} is not a printed IterDomain (like iS0{{2}} or ideviceIdx.x1{{2}})",
                line.number,
                at,
            )
        out.append(
            _Axis(
                IterType(m["iter"]),
                ParallelType(m["parallel"]),
                int(m["number"]),
                extent_value(m["extent"]),
            )
        )
        at += len(part) + 2
    return out


class _TensorAxes:
    """The axes of one tensor being rebuilt (`values`, by position in its domain), and
    the position of each printed number."""

    def __init__(self, taken: dict[int, int], tensor: int, fail: Fail) -> None:
        self.by_number: dict[int, int] = {}
        self.values: list[IterDomain] = []
        self.transforms: list[Split | Merge] = []
        self.consumed: set[int] = set()
        self.taken = taken
        self.tensor = tensor
        self.fail = fail

    def _claim(self, number: int, line: Line, column: int) -> None:
        """Each IterDomain belongs to one tensor and is printed with one number."""
        if number in self.by_number:
            raise self.fail(f"IterDomain number {number} appears twice", line.number, column)
        owner = self.taken.setdefault(number, self.tensor)
        if owner != self.tensor:
            raise self.fail(
                f"IterDomain number {number} is an axis of T{owner} already; each tensor "
                "has axes of its own",
                line.number,
                column,
            )

    def _add(self, number: int, ax: IterDomain) -> int:
        self.by_number[number] = len(self.values)
        self.values.append(ax)
        return len(self.values) - 1

    def new(self, ax: _Axis, line: Line, column: int) -> IterDomain:
        self._claim(ax.number, line, column)
        made = IterDomain(ax.extent, ax.iter_type, ax.parallel_type)
        self._add(ax.number, made)
        return made

    def listed(self, line: Line, text: str, column: int) -> list[int]:
        """The positions of the existing axes a domain line lists."""
        out = []
        for part in axis_texts(text):
            out.append(self.existing(part, line, column))
            column += len(part) + 2
        return out

    def existing(self, text: str, line: Line, column: int, *, consume: bool = False) -> int:
        """The position of an axis printed above."""
        (ax,) = _axes(text, line, column, self.fail)
        p = self.by_number.get(ax.number)
        if p is None:
            raise self.fail(
                f"{text} is not an IterDomain of this tensor's logical domain or of a "
                "transform above",
                line.number,
                column,
            )
        found = self.values[p]
        if (found.iter_type, found.parallel_type, found.extent) != (
            ax.iter_type,
            ax.parallel_type,
            ax.extent,
        ):
            raise self.fail(f"{text} is printed differently above", line.number, column)
        if consume:
            if ax.number in self.consumed:
                raise self.fail(f"{text} is transformed twice", line.number, column)
            self.consumed.add(ax.number)
        return p

    def made(self, extent: int, iter_type: IterType, text: str, line: Line, column: int) -> int:
        """A transform output of `extent` and `iter_type`: the printed axis must be it."""
        (ax,) = _axes(text, line, column, self.fail)
        if (iter_type, extent) != (ax.iter_type, ax.extent):
            expected = f"{iter_type.value}?{{{extent}}}"
            raise self.fail(
                f"{text}: the transform gives an axis {expected}, not {ax.iter_type.value}"
                f"{{{ax.extent}}}",
                line.number,
                column,
            )
        self._claim(ax.number, line, column)
        return self._add(ax.number, IterDomain(extent, iter_type, ax.parallel_type))


def _domain_line(lines: list[Line], k: int, which: str) -> tuple[Line, str, int] | None:
    """Line k if it is ` <which> domain : (...)`: the line, the text between the
    parentheses and its column."""
    if k >= len(lines):
        return None
    m = _DOMAIN.fullmatch(lines[k].text)
    if m is None or m["which"] != which:
        return None
    return lines[k], m["axes"], m.start("axes") + 1


def build_tensor(fusion: Fusion, block: Block, taken: dict[int, int], fail: Fail) -> TensorView:
    """The tensor a TransformPrinter block describes, made in `fusion` with its number
    (`taken`: IterDomain number -> tensor number, over the whole text)."""
    head = block.head
    m = TENSOR.fullmatch(head.text)
    if m is None:
        raise fail(
            "expected a tensor as printed (T3_l_float[ iS0{2} ] ca_pos( 1 ) "
            "produce_pos( 1 ) (DeviceMesh{0 1}))",
            head.number,
            1,
        )
    try:
        dtype = DType(m["dtype"])
    except ValueError:
        names = ", ".join(d.value for d in DType)
        raise fail(
            f"unknown dtype {m['dtype']!r}; one of {names}", head.number, m.start("dtype") + 1
        ) from None
    try:
        memory = MemoryType(m["memory"])
    except ValueError:
        names = ", ".join(t.value for t in MemoryType)
        raise fail(
            f"unknown memory type {m['memory']!r}; one of {names}",
            head.number,
            m.start("memory") + 1,
        ) from None
    lines = list(block.lines[1:])
    axes = _TensorAxes(taken, int(m["number"]), fail)
    found = _domain_line(lines, 0, "logical")
    if found is None:
        where = lines[0] if lines else head
        raise fail("expected ` logical domain : (...)`", where.number, 1)
    line, text, column = found
    logical = [axes.new(ax, line, column) for ax in _axes(text, line, column, fail)]
    k = 1
    allocation = _domain_line(lines, k, "allocation")
    k += allocation is not None
    contiguity = _contiguity(lines, k, len(logical), fail, head)
    k += 1
    tv = TensorView(fusion, logical, dtype, contiguity, memory, number=int(m["number"]))
    while k < len(lines) and lines[k].text.startswith("  "):
        _transform(tv, lines[k], axes, fail)
        k += 1
    loop = _domain_line(lines, k, "loop")
    if loop is None:
        where = lines[k] if k < len(lines) else lines[-1]
        raise fail("expected a transform or ` loop domain : (...)`", where.number, 1)
    if k + 1 < len(lines):
        raise fail("unexpected line after the loop domain", lines[k + 1].number, 1)
    loop_positions = axes.listed(*loop)
    if loop[1] != m["loop"].strip():
        raise fail(
            f"the loop domain ({loop[1]}) is not the one the tensor's text shows [{m['loop']}]",
            loop[0].number,
            loop[2],
        )
    tv.domain = TensorDomain.made(
        tuple(axes.values),
        len(logical),
        tuple(axes.transforms),
        tuple(loop_positions),
        None if allocation is None else tuple(axes.listed(*allocation)),
        tuple(contiguity),
    )
    tv.compute_at_pos = int(m["ca_pos"] or 0)
    tv.produce_pos = int(m["produce_pos"] or 0)
    if m["mesh"] is not None:
        try:
            tv.set_device_mesh(DeviceMesh.from_text(m["mesh"]))
        except FuserliteError as exc:
            raise fail(str(exc), head.number, m.start("mesh") + 1) from None
    return tv


def _contiguity(
    lines: list[Line], k: int, n_logical: int, fail: Fail, head: Line
) -> list[bool | None]:
    if k >= len(lines) or not lines[k].text.startswith(" contiguity:"):
        where = lines[k] if k < len(lines) else head
        raise fail("expected ` contiguity: ...` (t, f or n per axis)", where.number, 1)
    flags = lines[k].text[len(" contiguity:") :].split()
    bad = [f for f in flags if f not in _CONTIGUITY]
    if bad:
        raise fail(f"contiguity flag {bad[0]!r} is not t, f or n", lines[k].number, 14)
    return [_CONTIGUITY[f] for f in flags]


def _transform(tv: TensorView, line: Line, axes: _TensorAxes, fail: Fail) -> None:
    """Replay one printed transform on tv's axes (Split / Outer split / Merge)."""
    m = _SPLIT.fullmatch(line.text)
    if m is not None:
        col = {g: m.start(g) + 1 for g in ("input", "factor", "outer", "inner")}
        factor = int(m["factor"])
        if factor < 1:
            raise fail("a split factor is at least 1", line.number, col["factor"])
        source = axes.existing(m["input"], line, col["input"], consume=True)
        inner_split = m["kind"] == "Split"
        ax = axes.values[source]
        outer_extent, inner_extent = split_extents(ax.extent, factor, inner_split)
        outer = axes.made(outer_extent, ax.iter_type, m["outer"], line, col["outer"])
        inner = axes.made(inner_extent, ax.iter_type, m["inner"], line, col["inner"])
        axes.transforms.append(Split(source, factor, inner_split, outer, inner))
        return
    m = _MERGE.fullmatch(line.text)
    if m is not None:
        outer = axes.existing(m["outer"], line, m.start("outer") + 1, consume=True)
        inner = axes.existing(m["inner"], line, m.start("inner") + 1, consume=True)
        a, b = axes.values[outer], axes.values[inner]
        extent, iter_type = a.extent * b.extent, merged_iter_type(a.iter_type, b.iter_type)
        output = axes.made(extent, iter_type, m["output"], line, m.start("output") + 1)
        axes.transforms.append(Merge(outer, inner, output))
        return
    m = _SWIZZLE.fullmatch(line.text)
    if m is not None:
        source = axes.existing(m["input"], line, m.start("input") + 1, consume=True)
        pt = next((p for p in ParallelType if p.value == m["pt"]), None)
        if pt is None or not pt.is_device:
            raise fail(
                f"Swizzle1D by {m['pt']}: a swizzle is by a device parallel type "
                "(deviceIdx.x, deviceIdx.y, deviceIdx.z)",
                line.number,
                m.start("pt") + 1,
            )
        ax = axes.values[source]
        output = axes.made(ax.extent, ax.iter_type, m["output"], line, m.start("output") + 1)
        axes.transforms.append(Swizzle1D(source, pt, output))
        return
    raise fail(
        "expected `  Split: A by factor N -> B, C`, `  Outer split: ...`, "
        "`  Merge: A and B -> C` or `  B = Swizzle1D(A, parallelType=deviceIdx.x)`",
        line.number,
        1,
    )
