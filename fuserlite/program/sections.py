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
from fuserlite.program.printer import NOTE, PLANNER, SCHEDULED
from fuserlite.program.reader import TENSOR_NUMBER, Block, Line
from fuserlite.text.source import Source

LABEL = re.compile(r"%kernel(?P<k>\d+)(?: \((?P<mesh>DeviceMesh\{[^()]*\})\))? \{")
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
class Text:
    """A whole print in parts: a fusion's kernel or a program's steps (a kernel, a
    resharding Set's expression, a communication's line), and every tensor's block."""

    planner: Line | None = None  # `Planner: latency_bytes=N` (a program's first line)
    header: tuple[list[Line], list[Line]] | None = None
    fusion: KernelText | None = None  # `%kernel { ... }`: the text is a fusion
    steps: list[KernelText | ExprText | Line] = field(default_factory=list)
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
        while (line := self.peek()) is not None:
            self.skip_blank()
            if (line := self.peek()) is None:
                break
            if line.text.rstrip() == TRANSFORM_PRINTER:  # the tensors no kernel shows: last
                self.take()
                out.blocks.extend(self.blocks(None))
                self.tail("after the last TransformPrinter section")
            elif (m := LABEL.fullmatch(line.text)) is not None:
                label = f"%kernel{m['k']}"
                if m["k"] != str(len(out.steps)):
                    raise self.fail(
                        f"{label} is step {len(out.steps)}: kernels are numbered by their step, "
                        f"so this one is %kernel{len(out.steps)}",
                        line,
                    )
                out.steps.append(self.kernel(self.take(), m["mesh"], label, out.blocks))
            elif line.text.startswith("Communication "):
                out.steps.append(self.take())
            elif TENSOR_NUMBER.match(line.text):
                out.steps.append(self.expression())
            else:
                raise self.fail(
                    "expected a kernel (`%kernel0 (DeviceMesh{0 1}) {`), a Set, a "
                    "`Communication ...` line or `TransformPrinter :`",
                    line,
                )
        return out

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
