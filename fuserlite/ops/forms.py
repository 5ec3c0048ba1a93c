"""Printed forms: how nvFuser's math printer shows an op, in both directions.

A Template is the body of an expression's printed text (what follows `   = `),
with fields in braces and optional parts in brackets:

    -{x};                                       neg
    {a:operand}\\n   + {b:operand};              add: a tensor or a number either side
    Set( {x}[, cache_op={cache_op:ident}] )     set: the cache hint where there is one
    reduction( {x}, op = add, initial value = {init:typed}, allreduce = false )

A field names an operand or an attribute of the op; its kind (`tensor` unless
given) says how a value is printed and read back. `print` fills the fields from
an expression; `match` reads a printed body back into field values (a tensor as
its printed text, for the reader to resolve). One template per op thus serves
the printer and the parser of the printed dialect alike, and
tests/test_op_registry.py checks print -> match -> print for every op.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from fuserlite.ir.errors import FusionError, ParseError
from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.ops.registry import OpDef, Operand, all_ops, definition_of

TensorText = Callable[[TensorView], str]  # how the printer shows a tensor (Namer.tensor)

# A tensor as the printer shows it: T3_l_float[ iS0{2} ] ca_pos( 2 ) produce_pos( 3 )
# (DeviceMesh{0 1}); N-D meshes nest braces but never parentheses. The groups name
# its parts (fuserlite.program.reader reads them); TENSOR is the same without groups,
# for a field's pattern (a form may have several tensor fields).
TENSOR_PARTS = (
    r"T(?P<number>\d+)_(?P<memory>[a-z])_(?P<dtype>\w+)\[(?P<loop>[^\]]*)\]"
    r"(?: ca_pos\( (?P<ca_pos>\d+) \))?(?: produce_pos\( (?P<produce_pos>\d+) \))?"
    r"(?: \((?P<mesh>DeviceMesh\{[^()]*\})\))?"
)
TENSOR = re.sub(r"\(\?P<\w+>", "(?:", TENSOR_PARTS)
_SCALAR = re.compile(r"(double|int64_t)\(([^()]*)\)")
_TENSOR_NAME = re.compile(r"T\d+")


def tensor_name(text: str) -> str:
    """`T3` of a printed tensor `T3_l_float[ ... ]`."""
    m = _TENSOR_NAME.match(text)
    if m is None:
        raise ParseError(f"{text!r} is not a printed tensor")
    return m.group(0)


def _number(value: float) -> str:
    """An attribute number as nvFuser prints it: `0`, `-inf`, `0.5`."""
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def _read_number(text: str) -> int | float:
    return int(text) if text.lstrip("-").isdigit() else float(text)


def scalar_text(value: int | float) -> str:
    """A scalar operand as nvFuser prints it: `double(2.5)`, `int64_t(3)`."""
    if isinstance(value, (bool, int)):
        return f"int64_t({value})"
    return f"double({value!r})"


def _read_scalar(text: str) -> int | float:
    kind, value = _SCALAR.fullmatch(text).groups()
    if kind == "double":
        return float(value)
    if value in ("True", "False"):  # a bool scalar prints as int64_t(True)
        return value == "True"
    return int(value)


def _read_operand(text: str) -> str | int | float:
    return _read_scalar(text) if _SCALAR.fullmatch(text) else text


def _braced(values: tuple, show: Callable[[object], str] = str) -> str:
    return "{" + ", ".join(show(v) for v in values) + "}"


def _read_list(text: str, read: Callable[[str], object]) -> tuple:
    inner = text[1:-1]
    return tuple(read(v) for v in inner.split(", ")) if inner else ()


@dataclass(frozen=True)
class Kind:
    """How one field's value is printed and read back."""

    pattern: str
    show: Callable[[object, Expr, TensorText], str]
    read: Callable[[str], object]


def _show_operand(value: Operand, expr: Expr, tensor: TensorText) -> str:
    return tensor(value) if isinstance(value, TensorView) else scalar_text(value)


_INTS = r"\{(?:-?\d+(?:, -?\d+)*)?\}"
_BOOLS = r"\{(?:(?:true|false)(?:, (?:true|false))*)?\}"

KINDS: dict[str, Kind] = {
    "tensor": Kind(TENSOR, lambda v, e, t: t(v), str),
    "operand": Kind(f"(?:{TENSOR}|{_SCALAR.pattern})", _show_operand, _read_operand),
    "ints": Kind(_INTS, lambda v, e, t: _braced(v), lambda s: _read_list(s, int)),
    "bools": Kind(
        _BOOLS,
        lambda v, e, t: _braced(v, lambda f: "true" if f else "false"),
        lambda s: _read_list(s, lambda f: f == "true"),
    ),
    "ident": Kind(r"\w+", lambda v, e, t: str(v), str),
    "tensors": Kind(
        f"{TENSOR}(?:, {TENSOR})*",
        lambda v, e, t: ", ".join(t(x) for x in v),
        lambda s: tuple(m.group(0) for m in re.finditer(TENSOR, s)),
    ),
    # slice's {start, stop, step} per axis, as nvFuser prints them: { {0, 4, 1} {2, 8, 2} }
    "ranges": Kind(
        r"\{ (?:\{-?\d+, -?\d+, -?\d+\} ?)*\}",
        lambda v, e, t: "{ " + " ".join(_braced(r) for r in v) + " }",
        lambda s: tuple(
            tuple(int(n) for n in r) for r in re.findall(r"\{(-?\d+), (-?\d+), (-?\d+)\}", s)
        ),
    ),
    "int": Kind(r"-?\d+", lambda v, e, t: str(v), int),
    "dtype": Kind(r"\w+", lambda v, e, t: v.value, DType.parse),  # nvFuser's name: float
    "bool": Kind(r"true|false", lambda v, e, t: "true" if v else "false", lambda s: s == "true"),
    # An attribute number as nvFuser prints a double: `double(0.1)`.
    "float": Kind(
        r"double\([^()]*\)", lambda v, e, t: f"double({float(v)!r})", lambda s: float(s[7:-1])
    ),
    # A number printed with the output's dtype: `float(0)`, `int64_t(-9223372036854775808)`.
    "typed": Kind(
        r"\w+\([^()]*\)",
        lambda v, e, t: f"{e.output.dtype.value}({_number(v)})",
        lambda s: _read_number(s[s.index("(") + 1 : -1]),
    ),
}


class Form(Protocol):
    """A printed form: what the registry and the printer need of one."""

    fields: frozenset[str]

    def print(self, values: dict[str, object], expr: Expr, tensor: TensorText) -> str: ...

    def match(self, text: str) -> dict[str, object] | None: ...


@dataclass(frozen=True)
class _Field:
    name: str
    kind: str


@dataclass(frozen=True)
class _Group:
    pieces: tuple  # literal strings and _Fields


_TOKEN = re.compile(r"\{(\w+)(?::(\w+))?\}|\[|\]")


class Template:
    """A printed form written as text with {field:kind} and [optional] parts; `kinds`
    names the field kinds it may use (KINDS unless given: the program level adds its
    own for communications)."""

    def __init__(self, text: str, kinds: Mapping[str, Kind] | None = None) -> None:
        self.text = text
        self.kinds = KINDS if kinds is None else kinds
        self.pieces = self._pieces(text)
        fields = [p for p in self._flat(self.pieces) if isinstance(p, _Field)]
        self.fields = frozenset(f.name for f in fields)
        if len(self.fields) != len(fields):
            raise FusionError(f"printed form {text!r}: a field appears twice")
        self.regex = re.compile(self._pattern(self.pieces), re.DOTALL)
        # The literal it starts with (if any): a quick test before the regex.
        self.lead = self.pieces[0] if self.pieces and isinstance(self.pieces[0], str) else ""

    def _pieces(self, text: str) -> tuple:
        top: list = []
        group: list | None = None
        at = 0
        for m in _TOKEN.finditer(text):
            out = top if group is None else group
            if m.start() > at:
                out.append(text[at : m.start()])
            at = m.end()
            if m.group(0) == "[":
                if group is not None:
                    raise FusionError(f"printed form {text!r}: optional parts do not nest")
                group = []
            elif m.group(0) == "]":
                if group is None:
                    raise FusionError(f"printed form {text!r}: ']' without '['")
                top.append(_Group(tuple(group)))
                group = None
            else:
                kind = m.group(2) or "tensor"
                if kind not in self.kinds:
                    raise FusionError(f"printed form {text!r}: unknown field kind {kind!r}")
                out.append(_Field(m.group(1), kind))
        if group is not None:
            raise FusionError(f"printed form {text!r}: '[' without ']'")
        if at < len(text):
            top.append(text[at:])
        return tuple(top)

    @staticmethod
    def _flat(pieces: tuple) -> list:
        out: list = []
        for p in pieces:
            out.extend(p.pieces if isinstance(p, _Group) else [p])
        return out

    def _pattern(self, pieces: tuple) -> str:
        parts = []
        for p in pieces:
            if isinstance(p, str):
                parts.append(re.escape(p))
            elif isinstance(p, _Field):
                parts.append(f"(?P<{p.name}>{self.kinds[p.kind].pattern})")
            else:
                parts.append(f"(?:{self._pattern(p.pieces)})?")
        return "".join(parts)

    def print(self, values: dict[str, object], expr: Expr, tensor: TensorText) -> str:
        """The body of `expr`'s printed text; an optional part shows where all its
        fields have values."""
        out = []
        for p in self.pieces:
            if isinstance(p, _Group):
                if all(values.get(f.name) is not None for f in p.pieces if isinstance(f, _Field)):
                    out.extend(self._show(q, values, expr, tensor) for q in p.pieces)
            else:
                out.append(self._show(p, values, expr, tensor))
        return "".join(out)

    def _show(self, p: str | _Field, values: dict, expr: Expr, tensor: TensorText) -> str:
        if isinstance(p, str):
            return p
        if values.get(p.name) is None:
            raise FusionError(f"{expr!r}: nothing to print for {p.name!r}")
        return self.kinds[p.kind].show(values[p.name], expr, tensor)

    def match(self, text: str) -> dict[str, object] | None:
        """The field values of a printed body, or None if it is not of this form; a
        ParseError with the column (1-based, in `text`) of a value its kind rejects."""
        if not text.startswith(self.lead):
            return None
        m = self.regex.fullmatch(text)
        if m is None:
            return None
        kinds = {f.name: f.kind for f in self._flat(self.pieces) if isinstance(f, _Field)}
        values = {}
        for n, v in m.groupdict().items():
            if v is None:
                continue
            try:
                values[n] = self.kinds[kinds[n]].read(v)
            except ParseError as exc:  # a value of the right shape but unknown (a typo)
                raise ParseError(str(exc), column=m.start(n) + 1) from None
        return values

    def __repr__(self) -> str:
        return f"Template({self.text!r})"


def call(name: str) -> Template:
    """`name(T0);`: a unary op printed as a function call."""
    return Template(f"{name}({{x}});")


def infix(symbol: str) -> Template:
    """`T0\\n   + T1;`: a binary op printed with its symbol between the operands."""
    return Template(f"{{a:operand}}\n   {symbol} {{b:operand}};")


def binary_call(name: str) -> Template:
    """`fmax(T0\\n  , T1);`: a binary op printed as a call, with nvFuser's line break."""
    return Template(f"{name}({{a:operand}}\n  , {{b:operand}});")


# -- both directions for a whole expression ---------------------------------------
def print_body(expr: Expr, tensor: TensorText) -> str:
    """What follows `   = ` in an expression's printed text."""
    d = definition_of(expr)
    return d.form.print(d.values(expr), expr, tensor)


def match_body(text: str) -> tuple[OpDef, dict[str, object]]:
    """The op whose printed form `text` is, and its field values (tensors as their
    printed text); ParseError if no op prints that way."""
    found = [(d, v) for d in all_ops() if (v := d.form.match(text)) is not None]
    if not found:
        raise ParseError(f"no op is printed as {text!r}")
    if len(found) > 1:  # two forms that overlap: a bug of the definitions
        names = ", ".join(d.name for d, _ in found)
        raise ParseError(f"{text!r} is the printed form of several ops: {names}")
    return found[0]


def build_from_printed(
    text: str,
    outputs: list[TensorView],
    tensor: Callable[[str], TensorView],
    check: Callable[[OpDef, list[TensorView], list[Operand], dict[str, object]], None]
    | None = None,
) -> Expr:
    """The expression a printed body describes, between existing tensors: `outputs`,
    and the operands `tensor(printed text)` resolves; `check(op, outputs, operands,
    attributes)`, if given, sees its parts before it is made (and may raise)."""
    d, values = match_body(text)
    operands = []
    for v in (values[name] for name in d.operands if name in values):
        items = v if isinstance(v, tuple) else (v,)  # a `tensors` field: several
        operands += [tensor(x) if isinstance(x, str) else x for x in items]
    attrs = {a: values.get(a) for a in d.attrs}
    if check is not None:
        check(d, outputs, operands, attrs)
    return d.make(outputs, operands, attrs)
