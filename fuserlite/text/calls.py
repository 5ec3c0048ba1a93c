"""Op calls of the .fus format: binding written arguments to an op's parameters.

A call `out = op(arg, ..., keyword=arg)` maps onto the builder of the op of that
name (its parameters are the op's definition's, fuserlite.ops.registry); every
argument is checked here (kind, arity, names) so that the builder only ever sees
well-typed values, and every complaint points at the argument that is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fuserlite.ir.args import did_you_mean
from fuserlite.ir.errors import FuserliteError
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.types import DType
from fuserlite.ops.registry import Param, all_composites, all_ops, callable_def
from fuserlite.text.source import Source


@dataclass(frozen=True)
class Arg:
    """One written value: a name, a number, a bool, or a list of Args, with its position."""

    value: Any
    kind: str  # "name", "int", "float", "bool" or "list"
    text: str
    line: int
    column: int
    keyword: str | None = None


_KIND_WORDS = {
    "tensor": "a tensor name",
    "operand": "a tensor name or a number",
    "tensors": "a list of tensor names",
    "ints": "a list of integers",
    "bools": "a list of true/false",
    "axes": "an integer or a list of integers",
    "bool": "true or false",
    "int": "an integer",
    "ident": "a name",
    "dtype": "a dtype name (float32, bfloat16, int64, ...)",
    "float": "a number",
}

TensorLookup = Callable[[Arg], TensorView]


def signatures() -> dict[str, tuple[Param, ...]]:
    """{op name: its parameters} of every op a .fus call can name."""
    return {d.name: d.params for d in (*all_ops(), *all_composites())}


def _signature_text(op: str) -> str:
    params = [p.name if p.required else f"{p.name}=..." for p in callable_def(op).params]
    return f"{op}({', '.join(params)})"


def bind(source: Source, op: str, op_arg: Arg, args: list[Arg]) -> dict[str, Arg]:
    """Match positional and keyword arguments to the op's parameters."""
    params = callable_def(op).params
    bound: dict[str, Arg] = {}
    positional = [a for a in args if a.keyword is None]
    if len(positional) > len(params):
        extra = positional[len(params)]
        raise source.error(
            f"{op} takes at most {len(params)} arguments, got {len(positional)}; "
            f"usage: {_signature_text(op)}",
            extra.line,
            extra.column,
        )
    for param, arg in zip(params, positional):
        bound[param.name] = arg
    names = {p.name for p in params}
    for arg in args:
        if arg.keyword is None:
            continue
        if arg.keyword not in names:
            raise source.error(
                f"{op} has no argument {arg.keyword!r}; usage: {_signature_text(op)}",
                arg.line,
                arg.column,
            )
        if arg.keyword in bound:
            raise source.error(f"{op}: argument {arg.keyword!r} given twice", arg.line, arg.column)
        bound[arg.keyword] = arg
    missing = [p.name for p in params if p.required and p.name not in bound]
    if missing:
        raise source.error(
            f"{op} needs {len(missing)} more argument(s): {', '.join(missing)}; "
            f"usage: {_signature_text(op)}",
            op_arg.line,
            op_arg.column,
        )
    return bound


def _is_int_list(arg: Arg) -> bool:
    return arg.kind == "list" and all(a.kind == "int" for a in arg.value)


def _dtype(source: Source, op: str, param: Param, arg: Arg) -> DType:
    try:
        return DType.parse(arg.value)
    except FuserliteError:
        names = ", ".join(dt.name for dt in DType)
        raise source.error(
            f"{op}: argument {param.name!r} must be a dtype ({names}), got {arg.value}",
            arg.line,
            arg.column,
        ) from None


def convert(source: Source, op: str, param: Param, arg: Arg, tensor: TensorLookup) -> Any:
    """The Python value of one argument, or a ParseError at the argument."""
    kind = param.kind
    if kind in ("tensor", "operand") and arg.kind == "name":
        return tensor(arg)
    if kind == "operand" and arg.kind in ("int", "float", "bool"):
        return arg.value
    if kind == "tensors" and arg.kind == "list" and all(a.kind == "name" for a in arg.value):
        return [tensor(a) for a in arg.value]
    if kind == "ints" and _is_int_list(arg):
        return [a.value for a in arg.value]
    if kind == "bools" and arg.kind == "list" and all(a.kind == "bool" for a in arg.value):
        return [a.value for a in arg.value]
    if kind == "axes" and (arg.kind == "int" or _is_int_list(arg)):
        return arg.value if arg.kind == "int" else [a.value for a in arg.value]
    if kind == "int" and arg.kind == "int":
        return arg.value
    if kind == "bool" and arg.kind == "bool":
        return arg.value
    if kind == "dtype" and arg.kind == "name":
        return _dtype(source, op, param, arg)
    if kind == "float" and arg.kind in ("int", "float"):
        return float(arg.value)
    if kind == "ident" and arg.kind == "name" and arg.value in (param.choices or (arg.value,)):
        return arg.value
    if kind == "ident" and arg.kind == "name":
        raise source.error(
            f"{op}: argument {param.name!r} must be one of {', '.join(param.choices)}, "
            f"got {arg.value}",
            arg.line,
            arg.column,
        )
    # Point at the first wrong element of a list rather than at its bracket.
    element = "bool" if kind == "bools" else "int"
    if arg.kind == "list" and kind in ("ints", "bools", "axes"):
        arg = next((a for a in arg.value if a.kind != element), arg)
    raise source.error(
        f"{op}: argument {param.name!r} must be {_KIND_WORDS[kind]}, got {arg.text}",
        arg.line,
        arg.column,
    )


def call_op(
    source: Source, op_arg: Arg, args: list[Arg], tensor: TensorLookup
) -> TensorView | tuple[TensorView, ...]:
    """Check a call against its op's signature and run the op's builder (a composite's
    builder may return several tensors)."""
    op = op_arg.value
    d = callable_def(op)
    if d is None:
        raise source.error(
            f"unknown op {op!r}{did_you_mean(op, signatures())} "
            f"(known ops: {', '.join(sorted(signatures()))})",
            op_arg.line,
            op_arg.column,
        )
    bound = bind(source, op, op_arg, args)
    params = {p.name: p for p in d.params}
    values = {name: convert(source, op, params[name], arg, tensor) for name, arg in bound.items()}
    return d.build(**values)
