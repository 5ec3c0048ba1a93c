"""Source text of a .fus file and the ParseErrors located in it (file:line:col, line, caret)."""

from __future__ import annotations

import re
import unicodedata

from lark import Lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lexer import PatternStr, Token

from fuserlite.ir.errors import ParseError

# How lark's regex terminals are named in messages; string terminals show as 'text'.
_TERMINAL_WORDS = {
    "NAME": "a name",
    "NUMBER": "a number",
    "_NL": "end of line",
    "$END": "end of file",
}

_STATEMENT_WORDS = (
    "mesh, input, tensor, output, set_mesh, split, outer_split, merge, reorder, parallelize"
)


class Source:
    """The text being parsed and its file name; makes located ParseErrors."""

    def __init__(self, text: str, filename: str) -> None:
        self.text = text
        self.filename = filename
        self.lines = text.split("\n")

    def line_text(self, line: int) -> str:
        """Source line `line` (1-based) without its newline, or '' past the end."""
        return self.lines[line - 1].rstrip("\r") if 0 < line <= len(self.lines) else ""

    def error(self, message: str, line: int, column: int) -> ParseError:
        """`file:line:col: message`, then the source line and a caret under the column."""
        src = self.line_text(line)
        # Keep tabs so the caret lines up however the terminal expands them.
        pad = "".join(c if c == "\t" else " " for c in src[: column - 1])
        text = f"{self.filename}:{line}:{column}: {message}\n{src}\n{pad}^"
        return ParseError(text, line=line, column=column)

    def end(self) -> tuple[int, int]:
        """Line and column just after the last character of the text."""
        line = len(self.lines)
        return line, len(self.line_text(line)) + 1


def _describe_terminal(lark: Lark, name: str) -> str:
    if name in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[name]
    try:
        pattern = lark.get_terminal(name).pattern
    except KeyError:
        return name
    return f"'{pattern.value}'" if isinstance(pattern, PatternStr) else name.lower()


def _describe_token(tok: Token) -> str:
    if tok.type in ("_NL", "$END"):
        return _TERMINAL_WORDS[tok.type]
    if tok.type in ("NAME", "NUMBER"):
        return f"{tok.type.lower()} {tok.value!r}"
    return repr(str(tok.value))


def _expected(lark: Lark, names: set[str]) -> str:
    words = sorted({_describe_terminal(lark, n) for n in names})
    if len(words) > 8:
        words = words[:8] + ["..."]
    return ", ".join(words)


def syntax_error(source: Source, lark: Lark, exc: UnexpectedInput) -> ParseError:
    """Translate a lark exception into a located ParseError (no lark type escapes)."""
    if isinstance(exc, UnexpectedCharacters):
        hint = ""
        if exc.char.isdigit() and not exc.char.isascii():  # '٣' would otherwise look like 3
            hint = f" ({unicodedata.name(exc.char, 'a digit')}); write numbers with the digits 0-9"
        return source.error(f"unexpected character {exc.char!r}{hint}", exc.line, exc.column)
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        if tok.type == "$END":
            line, column = source.end()
        else:
            line, column = tok.line, tok.column
        expected = set(exc.accepts or exc.expected)
        first = re.match(r"[ \t]*([A-Za-z_]\w*)", source.line_text(line))
        if "EQUAL" in expected and expected <= {"EQUAL", "COMMA"} and first is not None:
            # `word name ...` where word is no keyword: an unknown statement (a name
            # may be followed by `=` or, naming several results, by `,`).
            return source.error(
                f"unknown statement {first.group(1)!r}; a statement is one of "
                f"{_STATEMENT_WORDS}, or `name = op(args)`",
                line,
                first.start(1) + 1,
            )
        return source.error(
            f"unexpected {_describe_token(tok)}; expected {_expected(lark, expected)}",
            line,
            column,
        )
    if isinstance(exc, UnexpectedEOF):
        line, column = source.end()
        return source.error(
            f"unexpected end of file; expected {_expected(lark, set(exc.expected))}", line, column
        )
    line, column = source.end()
    return source.error(f"syntax error: {exc}", line, column)
