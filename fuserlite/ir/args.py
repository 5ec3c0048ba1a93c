"""Argument checks at the public boundary: what numpy/torch users pass, or a clear error.

Every public function (ops, DeviceMesh, schedule methods, SPMD collectives, the
executor, the reference, the parser) checks its arguments with these helpers, so
that a wrong argument is a FuserliteError naming the function, the argument,
what was given and what is accepted, never a raw TypeError from deep inside and
never a silent coercion (`2.5` is not the extent 2, `"12"` is not [1, 2]).

Accepted: Python and numpy integers where an integer is expected (never bools,
never floats, even integral ones, as numpy and torch refuse them), lists, tuples,
ranges and 1-D integer arrays where a list of integers is expected.
"""

from __future__ import annotations

import difflib
import math
import operator
import re
import reprlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from fuserlite.ir.errors import FuserliteError, FusionError

LIST_LIMIT = 8  # long lists in messages show this many items at most
_REPR_LIMIT = 60

# A repr that never grows with the value: long lists, strings and nests are cut.
_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxdict = LIST_LIMIT
_SHORT.maxstring = _SHORT.maxother = _REPR_LIMIT
_SHORT.maxlevel = 3


def abbreviate(items: Iterable[object], limit: int = LIST_LIMIT) -> str:
    """Items separated by spaces; more than `limit` show as `0 1 2 ... 9999999`."""
    items = list(items) if not isinstance(items, Sequence) else items
    if len(items) <= limit:
        return " ".join(str(i) for i in items)
    head = " ".join(str(i) for i in items[: limit - 1])
    return f"{head} ... {items[-1]}"


def given(value: object) -> str:
    """A short description of a wrong value: its repr (shortened) and its type."""
    try:
        text = _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not hide the real error
        text = f"<{type(value).__name__} object>"
    if len(text) > _REPR_LIMIT:
        text = text[: _REPR_LIMIT - 3] + "..."
    kind = type(value).__name__
    if kind in ("int", "list"):
        return text
    return f"{text} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


def fail(
    who: str, arg: str, accepted: str, value: object, error: type[FuserliteError] = FusionError
) -> FuserliteError:
    """`who: arg must be <accepted>, got <value>` as the given error class."""
    return error(f"{who}: {arg} must be {accepted}, got {given(value)}")


def is_integer(value: object) -> bool:
    """A Python or numpy integer (bools are not integers here)."""
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, (int, np.integer))


def integer(
    value: object,
    who: str,
    arg: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[FuserliteError] = FusionError,
) -> int:
    """`value` as a Python int within [minimum, maximum], or `error`."""
    if not _is_integer_in(value, minimum, maximum):
        raise fail(who, arg, _int_words(minimum, maximum), value, error)
    return operator.index(value)


def _is_integer_in(value: object, minimum: int | None, maximum: int | None) -> bool:
    return is_integer(value) and (
        (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    )


def _bound(n: int) -> str:
    """2**63-1 rather than 9223372036854775807."""
    if n > 2**32 and (n + 1) & n == 0:
        return f"2**{(n + 1).bit_length() - 1}-1"
    return str(n)


def _int_words(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an integer in {minimum}..{_bound(maximum)}"
    if minimum is not None:
        return f"an integer >= {minimum}"
    if maximum is not None:
        return f"an integer <= {maximum}"
    return "an integer"


def is_sequence(value: object) -> bool:
    """A list, tuple, range or 1-D array: an ordered, sized collection (not text)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 1
    return isinstance(value, (list, tuple, range))


def integers(
    value: object,
    who: str,
    arg: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    scalar_ok: bool = False,
    error: type[FuserliteError] = FusionError,
) -> list[int]:
    """A list/tuple/range/1-D array of integers (a bare integer too when `scalar_ok`)."""
    if scalar_ok and is_integer(value):
        return [integer(value, who, arg, minimum=minimum, maximum=maximum, error=error)]
    accepted = (
        f"a list or tuple of {_int_words(minimum, maximum).replace('an integer', 'integers')}"
    )
    if not is_sequence(value):
        raise fail(who, arg, accepted, value, error)
    out = []
    for k, item in enumerate(value):
        if not _is_integer_in(item, minimum, maximum):
            raise error(
                f"{who}: {arg} must be {accepted}, got {given(value)}: item {k} is {given(item)}"
            )
        out.append(operator.index(item))
    return out


def boolean(value: object, who: str, arg: str, error: type[FuserliteError] = FusionError) -> bool:
    """A Python or numpy bool (not 0/1, not a string)."""
    if not isinstance(value, (bool, np.bool_)):
        raise fail(who, arg, "True or False", value, error)
    return bool(value)


def booleans(
    value: object, who: str, arg: str, error: type[FuserliteError] = FusionError
) -> list[bool]:
    """A list/tuple/1-D array of bools."""
    accepted = "a list or tuple of True/False"
    if not is_sequence(value) or not all(isinstance(v, (bool, np.bool_)) for v in value):
        raise fail(who, arg, accepted, value, error)
    return [bool(v) for v in value]


def scalar(
    value: object, who: str, arg: str, error: type[FuserliteError] = FusionError
) -> bool | int | float:
    """A Python or numpy bool, integer or real float, as the Python value."""
    kind = type(value)
    if kind is float or kind is int or kind is bool:  # most scalars: nothing to convert
        return value
    if isinstance(value, (np.bool_, np.integer, np.floating)):  # np.float64 is a float too
        return value.item()
    for kind in (bool, int, float):  # plain values, also from subclasses (IntEnum)
        if isinstance(value, kind):
            return kind(value)
    raise fail(who, arg, "a tensor or a number (bool, int, float)", value, error)


def real(value: object, who: str, arg: str, error: type[FuserliteError] = FusionError) -> float:
    """A finite Python or numpy int or float (not a bool), as a Python float."""
    if not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)):
        f = float(value)
        if math.isfinite(f):
            return f
    raise fail(who, arg, "a finite number", value, error)


def instance(
    value: Any,
    cls: type | tuple[type, ...],
    who: str,
    arg: str,
    accepted: str,
    error: type[FuserliteError] = FusionError,
) -> Any:
    """`value` itself if it is an instance of `cls`, else `error`."""
    if not isinstance(value, cls):
        raise fail(who, arg, accepted, value, error)
    return value


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*")


def identifier(value: object, who: str, arg: str, error: type[FuserliteError] = FusionError) -> str:
    """A name as the .fus format writes one: `[A-Za-z_][A-Za-z0-9_]*`, or several parts
    joined by dots, each of letters, digits and _ (PyTorch's `layers.0.weight`)."""
    if not isinstance(value, str) or _IDENTIFIER.fullmatch(value) is None:
        raise fail(
            who,
            arg,
            "a name of ASCII letters, digits and _, not starting with a digit, or such names "
            "joined by dots (layers.0.weight)",
            value,
            error,
        )
    return value


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the known name closest to a misspelled `name`, or ""."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def keywords(
    given: Iterable[str],
    accepted: Sequence[str],
    who: str,
    error: type[FuserliteError] = FusionError,
) -> None:
    """`error` naming the first of the keyword arguments `given` that `who` does not take,
    the closest one it does ("did you mean ...?") and all it takes."""
    for name in given:
        if name not in accepted:
            hint = did_you_mean(name, accepted)
            takes = ", ".join(accepted) or "none"
            raise error(f"{who}: unexpected keyword argument {name!r}{hint} (it takes {takes})")
