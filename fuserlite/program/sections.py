"""The printed dialect split into its parts, before anything is built.

`split_text` turns the lines of a print into a header (a program's `Planner:`
line, `Inputs:` / `Outputs:`), a fusion's `%kernel { ... }` or a program's steps (kernels with their schedule
lines, expressions, `Communication ...` lines) and the TransformPrinter blocks of
every tensor. It checks only the layout of the lines; fuserlite.program.parser
builds the IR from the parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fuserlite.ir.errors import ParseError
from fuserlite.printer import MESH_AXES
from fuserlite.program.printer import (
    ALLOCATE,
    DEALLOCATE,
    FOR,
    NOTE,
    PLANNER,
    POST,
    SCHEDULED,
    SET_STREAM,
    SYNCHRONIZE,
    WAIT,
)
from fuserlite.program.reader import TENSOR_NUMBER, Block, Line
from fuserlite.text.source import Source

LABEL = re.compile(r"%kernel(?P<k>\d+)(?: \((?P<mesh>DeviceMesh\{[^()]*\})\))? \{")
LOOP = re.compile(FOR + r"(?P<index>[a-z]\w*) in range\((?P<extent>\d+)\) \{")
# A host construct's line starts with its word (the parser reads the rest, or says what
# it expected).
HOST_LINES = tuple(
    w.split()[0] for w in (SET_STREAM, WAIT, SYNCHRONIZE, ALLOCATE, DEALLOCATE, "ShardByStream ")
)
BODY = "   = "  # an expression's body follows its output line(s)
TRANSFORM_PRINTER = "TransformPrinter :"  # printed with a trailing space


def split_text(source: Source) -> Text:
    """The parts of a printed text; ParseError where a line is not where it belongs."""
    lines = [Line(k + 1, t.rstrip("\r")) for k, t in enumerate(source.text.split("\n"))]
    return _Reader(source, lines).read()


@dataclass
class ExprText:
    """An expression's lines: its output tensor(s), then its body."""

    outputs: list[Line]
    body: list[Line]  # the first starts with `   = `


@dataclass
class KernelText:
    """A kernel's lines: its label, its schedule and note lines, its expressions (its
    TransformPrinter blocks go to the text's `blocks`)."""

    label: Line
    mesh: str | None  # `DeviceMesh{0 1}` of a program's kernel
    annotations: list[Line] = field(default_factory=list)
    exprs: list[ExprText] = field(default_factory=list)


@dataclass
class PostText:
    """`PostOnStream ` and the kernel or communication it posts."""

    line: Line  # the line that starts with PostOnStream
    step: KernelText | Line


@dataclass
class LoopText:
    """`FOR i in range(4) {`, the steps of its body, `} // FOR i`."""

    head: Line
    index: str
    extent: int
    body: list = field(default_factory=list)


@dataclass
class Text:
    """A whole print in parts: a fusion's kernel or a program's steps (a kernel, a
    resharding Set's expression, a communication's line), and every tensor's block."""

    planner: Line | None = None  # `Planner: latency_bytes=N` (a program's first line)
    mesh_axes: list[Line] = field(default_factory=list)  # `Mesh axes: DeviceMesh{...} ...`
    header: tuple[list[Line], list[Line]] | None = None
    fusion: KernelText | None = None  # `%kernel { ... }`: the text is a fusion
    # A Line is a communication's or a host construct's (SetCurrentStream, Wait, ...).
    steps: list[KernelText | ExprText | Line | PostText | LoopText] = field(default_factory=list)
    blocks: list[Block] = field(default_factory=list)


class _Reader:
    """Splits the lines into header, kernels, expressions, communications and blocks."""

    def __init__(self, source: Source, lines: list[Line]) -> None:
        self.source = source
        self.lines = lines
        self.k = 0

    def fail(self, message: str, line: Line, column: int = 1) -> ParseError:
        return self.source.error(message, line.number, column)

    def peek(self) -> Line | None:
        return self.lines[self.k] if self.k < len(self.lines) else None

    def take(self) -> Line:
        line = self.peek()
        if line is None:
            end = self.lines[-1]
            raise self.source.error("unexpected end of the text", end.number, len(end.text) + 1)
        self.k += 1
        return line

    def skip_blank(self) -> None:
        """Past blank lines and `//` comments (outside kernels only: inside, a blank
        line separates the math from the TransformPrinter section)."""
        while (line := self.peek()) is not None and (
            not line.text.strip() or line.text.startswith("//")
        ):
            self.k += 1

    def read(self) -> Text:
        out = Text()
        self.skip_blank()
        first = self.peek()
        if first is None:
            raise self.source.error("the text is empty: nothing was printed", 1, 1)
        if first.text.startswith(PLANNER.split()[0]):
            out.planner = self.take()
            self.skip_blank()
            first = self.peek()
        while first is not None and first.text.startswith(MESH_AXES):
            out.mesh_axes.append(self.take())
            self.skip_blank()
            first = self.peek()
        if first is not None and first.text.rstrip() == "Inputs:":
            out.header = self.header()
            self.skip_blank()
        line = self.peek()
        if line is not None and line.text == "%kernel {":
            if out.planner is not None:
                raise self.fail(
                    "a fusion has no `Planner:` line (a lowered program's communications "
                    "were planned at its latency_bytes)",
                    out.planner,
                )
            out.fusion = self.kernel(self.take(), None, "%kernel", out.blocks)
            self.tail("after the fusion's `} // %kernel`")
            return out
        if line is not None and line.text.startswith("%kernel_math"):
            raise self.fail(
                "this is the math-only form (print --math), which does not show the tensors' "
                "domains; print the fusion without --math to read it back",
                line,
            )
        self.counted = 0  # steps so far, host constructs and loop bodies counted in turn
        out.steps = self.steps(out, None)
        return out

    def steps(self, out: Text, loop: LoopText | None) -> list:
        """The steps up to the last TransformPrinter section (or a loop's `} // FOR i`)."""
        steps: list = []
        end = None if loop is None else f"}} // {FOR}{loop.index}"
        while True:
            self.skip_blank()
            if (line := self.peek()) is None:
                if loop is not None:
                    raise self.fail(f"the loop has no `{end}`", loop.head)
                return steps
            if line.text == end:
                self.take()
                return steps
            if line.text.rstrip() == TRANSFORM_PRINTER:  # the tensors no kernel shows: last
                if loop is not None:
                    raise self.fail(
                        f"the loop at line {loop.head.number} has no `{end}` before the "
                        "last TransformPrinter section",
                        line,
                    )
                self.take()
                out.blocks.extend(self.blocks(None))
                self.tail("after the last TransformPrinter section")
                return steps
            steps.append(self.step(out, line))

    def step(self, out: Text, line: Line) -> KernelText | ExprText | Line | PostText | LoopText:
        """One step, from its first line (which is not taken yet)."""
        number = self.counted
        self.counted += 1
        if line.text.startswith(POST):
            posted = self.take()
            rest = Line(posted.number, posted.text[len(POST) :])
            if (m := LABEL.fullmatch(rest.text)) is not None:
                self.check_number(m["k"], number, posted)
                kernel = self.kernel(posted, m["mesh"], f"%kernel{m['k']}", out.blocks)
                return PostText(posted, kernel)
            if rest.text.startswith("Communication "):
                return PostText(posted, rest)
            raise self.fail(
                "expected a kernel (`%kernel3 (DeviceMesh{0 1}) {`) or a `Communication ...` "
                "after PostOnStream",
                posted,
                len(POST) + 1,
            )
        if (m := LOOP.fullmatch(line.text)) is not None:
            loop = LoopText(self.take(), m["index"], int(m["extent"]))
            loop.body = self.steps(out, loop)
            return loop
        if line.text.startswith(HOST_LINES) or line.text.startswith(FOR):
            return self.take()
        if (m := LABEL.fullmatch(line.text)) is not None:
            self.check_number(m["k"], number, line)
            return self.kernel(self.take(), m["mesh"], f"%kernel{m['k']}", out.blocks)
        if line.text.startswith("Communication "):
            return self.take()
        if TENSOR_NUMBER.match(line.text):
            return self.expression()
        raise self.fail(
            "expected a kernel (`%kernel0 (DeviceMesh{0 1}) {`), a Set, a "
            "`Communication ...` line, a host construct (PostOnStream, SetCurrentStream, "
            "Wait, Synchronize, FOR, Allocate, Deallocate, ShardByStream) or `TransformPrinter :`",
            line,
        )

    def check_number(self, k: str, number: int, line: Line) -> None:
        if k != str(number):
            raise self.fail(
                f"%kernel{k} is step {number}: kernels are numbered by their step, so this "
                f"one is %kernel{number}",
                line,
                line.text.index("%kernel") + 1,
            )

    def tail(self, where: str) -> None:
        """The end of the text, after blank lines and comments."""
        self.skip_blank()
        if (rest := self.peek()) is not None:
            raise self.fail(
                f"unexpected text {where}: a text holds one fusion or program (split "
                "--print-after-all's output at its `// ----- after` lines)",
                rest,
            )

    def header(self) -> tuple[list[Line], list[Line]]:
        self.take()  # Inputs:
        inputs = self.indented()
        line = self.take()
        if line.text.rstrip() != "Outputs:":
            raise self.fail("expected `Outputs:` after the inputs (one `  T...` line each)", line)
        return inputs, self.indented()

    def indented(self) -> list[Line]:
        out = []
        while (line := self.peek()) is not None and line.text.startswith("  T"):
            out.append(self.take())
        return out

    def kernel(self, label: Line, mesh: str | None, name: str, blocks: list[Block]) -> KernelText:
        """A kernel's body after its label line, up to and with `} // <name>`."""
        kernel = KernelText(label, mesh)
        while (line := self.peek()) is not None and line.text.startswith((SCHEDULED, NOTE)):
            if name == "%kernel":
                raise self.fail("a fusion's %kernel has no schedule or notes", line)
            kernel.annotations.append(self.take())
        while (line := self.peek()) is not None and line.text.strip():
            if not TENSOR_NUMBER.match(line.text):
                raise self.fail(
                    "expected a tensor computed by the next expression, or a blank line", line
                )
            kernel.exprs.append(self.expression())
        self.take()  # the blank line before TransformPrinter
        line = self.take()
        if line.text.rstrip() != TRANSFORM_PRINTER:
            raise self.fail("expected `TransformPrinter :` after the blank line", line)
        blocks.extend(self.blocks(f"}} // {name}"))
        return kernel

    def expression(self) -> ExprText:
        outputs = []
        while (line := self.peek()) is not None and TENSOR_NUMBER.match(line.text):
            outputs.append(self.take())
        line = self.take()
        if not line.text.startswith(BODY):
            raise self.fail(
                "expected `   = ` and the expression that computes the tensor above", line
            )
        body = [line]
        while (
            (line := self.peek()) is not None
            and line.text.startswith(" ")
            and not (line.text.startswith(BODY))
        ):
            body.append(self.take())
        return ExprText(outputs, body)

    def blocks(self, end: str | None) -> list[Block]:
        """TransformPrinter blocks up to the line `end` (taken), or to the text's end."""
        out = []
        while True:
            if end is None:
                self.skip_blank()
                if self.peek() is None:
                    return out
            line = self.take()
            if line.text == end:
                return out
            if not TENSOR_NUMBER.match(line.text):
                expected = f"a tensor or `{end}`" if end else "a tensor"
                raise self.fail(f"expected {expected}", line)
            lines = [line]
            while (more := self.peek()) is not None and more.text.startswith(" "):
                lines.append(self.take())
            out.append(Block(tuple(lines)))
