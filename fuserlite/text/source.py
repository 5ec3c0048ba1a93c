"""Source text of a .fus file and the ParseErrors located in it (file:line:col, line, caret)."""

from __future__ import annotations

import re
import unicodedata

from lark import Lark
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lexer import PatternStr, Token

from fuserlite.ir.errors import ParseError
from fuserlite.ir.fusion import Fusion

# How lark's regex terminals are named in messages; string terminals show as 'text'.
_TERMINAL_WORDS = {
    "NAME": "a name",
    "NUMBER": "a number",
    "_NL": "end of line",
    "$END": "end of file",
}

_STATEMENT_WORDS = (
    "mesh, input, tensor, output, set_mesh, split, outer_split, merge, reorder, parallelize, "
    "swizzle1d"
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
        """`file:line:col: message`, then the source line (a window of a long one around
        the column) and a caret under the column."""
        shown, caret = quote(self.line_text(line), column)
        text = f"{self.filename}:{line}:{column}: {shortened(message)}\n{shown}\n{caret}"
        return ParseError(text, line=line, column=column)

    def end(self) -> tuple[int, int]:
        """Line and column just after the last character of the text."""
        line = len(self.lines)
        return line, len(self.line_text(line)) + 1


QUOTE_WIDTH = 200  # characters of a source line an error quotes at most (and "...")
MESSAGE_LIMIT = 2000  # characters of a message, past which it is cut


def _shown(ch: str) -> str:
    """A character as an error quotes it: control and format characters escaped (a
    binary file must not send escape sequences to the terminal), tabs kept."""
    if ch == "\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co"):
        return ch
    return ascii(ch)[1:-1]


def quote(src: str, column: int) -> tuple[str, str]:
    """A source line as an error shows it, and the caret line under `column`: the whole
    line, or QUOTE_WIDTH characters around the column with "..." where it is cut (a
    1 MB line must not give 1 MB of stderr); tabs kept so the caret lines up however
    the terminal expands them."""
    start = 0
    if len(src) > QUOTE_WIDTH:
        start = min(max(column - 1 - QUOTE_WIDTH // 2, 0), len(src) - QUOTE_WIDTH)
    window = src[start : start + QUOTE_WIDTH]
    head = "..." if start > 0 else ""
    tail = "..." if start + QUOTE_WIDTH < len(src) else ""
    pieces = [_shown(ch) for ch in window]
    before = pieces[: max(column - 1 - start, 0)]
    pad = " " * len(head) + "".join(p if p == "\t" else " " * len(p) for p in before)
    return head + "".join(pieces) + tail, pad + "^"


def shortened(message: str) -> str:
    """A message of at most about MESSAGE_LIMIT characters (one quoting a huge text is cut)."""
    if len(message) <= MESSAGE_LIMIT:
        return message
    return f"{message[:MESSAGE_LIMIT]}... ({len(message) - MESSAGE_LIMIT} more characters)"


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
        return f"{tok.type.lower()} {_short(tok.value)!r}"
    return repr(_short(str(tok.value)))


def _short(text: str, limit: int = 60) -> str:
    """A token as a message quotes it: a long one cut ("zzz...")."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def invalid_fusion(source: Source, problems: str, fusion: Fusion) -> ParseError:
    """The fusion validator's `problems` with the .fus text `source`, at the line that made
    the first tensor they name; an empty text, or one with no output, at its end."""
    lines = [
        k + 1 for k, t in enumerate(source.lines) if t.strip() and not t.lstrip().startswith("#")
    ]
    if not lines:
        return source.error(
            "the file holds no statement: a .fus file declares its inputs, computes from "
            "them and marks its outputs (docs/fus-format.md)",
            *source.end(),
        )
    if not fusion.outputs:
        return source.error(
            "no tensor is marked as an output: add `output NAME` for each tensor the "
            "fusion computes for its caller",
            lines[-1],
            1,
        )
    by_number = {tv.number: tv for tv in fusion.tensors_created}
    for m in re.finditer(r"\bT(\d+)\b", problems):
        origin = getattr(by_number.get(int(m.group(1))), "origin", None) or ""
        where = re.fullmatch(r".*:(\d+)", origin)
        if where is not None:
            return source.error(problems, int(where.group(1)), 1)
    return source.error(problems, lines[0], 1)
