"""The Pass base class and the registry of passes by name.

A pass is a small frozen dataclass: a kebab-case `name`, its options as typed
fields (bool, int, str or a Literal of choices, checked when the pass is made),
the IR level it works on, and `run(ir)` that rewrites that IR in place. Fusion
passes (`level = Level.fusion`) take a Fusion, program passes a Program;
`segment` is the one pass that takes a Fusion and returns a Program
(`produces = Level.program`).

Its contract is code: `requires(ir)` lists what is wrong with its input,
`ensures(ir)` what is wrong with its result (empty lists when all holds); the
pipeline runs both around the pass, with the validator. The module docstring
states the same in prose (Before / After); the class docstring's first line is
its description.
"""

from __future__ import annotations

import dataclasses
import typing
from enum import Enum
from typing import ClassVar, Literal

from fuserlite.ir.args import did_you_mean
from fuserlite.ir.errors import PassOptionError
from fuserlite.ir.fusion import Fusion
from fuserlite.program.program import Program

REGISTRY: dict[str, type[Pass]] = {}


class Level(str, Enum):
    """The IR a pass works on: the fusion (a tensor graph) or the lowered program."""

    fusion = "fusion"
    program = "program"


IR_CLASSES: dict[Level, type] = {Level.fusion: Fusion, Level.program: Program}


@dataclasses.dataclass(frozen=True)
class Pass:
    """Base class of every pass."""

    name: ClassVar[str] = ""
    level: ClassVar[Level] = Level.fusion
    # The level of what run() returns, for a pass that changes level (segment); other
    # passes rewrite their IR in place and return None.
    produces: ClassVar[Level | None] = None

    def __post_init__(self) -> None:
        for key, typ in option_types(type(self)).items():
            _check_option(self.name, key, typ, getattr(self, key))

    def run(self, ir: Fusion | Program) -> Program | None:
        """Rewrite `ir` (a Fusion or a Program, as `level` says) in place."""
        raise NotImplementedError

    def requires(self, ir: Fusion | Program) -> list[str]:
        """What is wrong with `ir` as this pass's input (nothing, by default)."""
        return []

    def ensures(self, ir: Fusion | Program) -> list[str]:
        """What is wrong with `ir` as this pass's result (nothing, by default)."""
        return []

    @classmethod
    def output_level(cls) -> Level:
        """The level of the IR after this pass."""
        return cls.produces or cls.level

    @classmethod
    def description(cls) -> str:
        """First line of the pass's docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    def __str__(self) -> str:
        opts = [
            f"{f.name}={getattr(self, f.name)}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        ]
        return self.name + (f"[{','.join(opts)}]" if opts else "")


def register(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make a pass available by its name."""
    if not cls.name or cls.name in REGISTRY:
        raise ValueError(f"pass {cls.__name__} needs a unique kebab-case name, got {cls.name!r}")
    REGISTRY[cls.name] = cls
    return cls


def option_types(cls: type[Pass]) -> dict[str, object]:
    """The type of each option (dataclass field) of a pass, resolved from its hints
    once per class (the class keeps them)."""
    types = cls.__dict__.get("_option_types")
    if types is None:
        hints = typing.get_type_hints(cls)
        types = {f.name: hints[f.name] for f in dataclasses.fields(cls)}
        cls._option_types = types  # type: ignore[attr-defined]  # a class fact, not a field
    return types


def _choices(typ: object) -> tuple | None:
    return typing.get_args(typ) if typing.get_origin(typ) is Literal else None


def _type_text(typ: object) -> str:
    choices = _choices(typ)
    if choices is not None:
        return "one of " + ", ".join(str(c) for c in choices)
    return {bool: "true/false", int: "an integer", str: "a string"}.get(typ, str(typ))


def _check_option(name: str, key: str, typ: object, value: object) -> None:
    choices = _choices(typ)
    if choices is not None:
        ok = value in choices
    elif typ is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, typ) if isinstance(typ, type) else True
    if not ok:
        raise PassOptionError(f"pass {name}: option {key} expects {_type_text(typ)}, got {value!r}")


def make_pass(spec: str) -> Pass:
    """Build a pass from `name` or `name[key=value,...]`."""
    spec = spec.strip()
    name, _, rest = spec.partition("[")
    cls = REGISTRY.get(name)
    if cls is None:
        known = ", ".join(sorted(REGISTRY))
        raise PassOptionError(
            f"unknown pass {name!r}{did_you_mean(name, REGISTRY)} (known passes: {known})"
        )
    options: dict[str, object] = {}
    types = option_types(cls)
    if rest:
        if not rest.endswith("]"):
            raise PassOptionError(f"pass options must look like {name}[key=value], got {spec!r}")
        for item in filter(None, rest[:-1].split(",")):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or key not in types:
                valid = ", ".join(types) or "none"
                raise PassOptionError(f"pass {name}: unknown option {item!r}; options: {valid}")
            options[key] = _convert(value.strip(), types[key], name, key)
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in options
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        example = ",".join(f"{k}=..." for k in missing)
        raise PassOptionError(f"pass {name} needs option {missing[0]}: write {name}[{example}]")
    return cls(**options)


def _convert(value: str, typ: object, name: str, key: str) -> object:
    """The option text as a value of the option's type."""
    if typ is bool:
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
    elif typ is int:
        try:
            return int(value)
        except ValueError:
            pass
    else:
        return value  # strings and choices: checked when the pass is made
    raise PassOptionError(f"pass {name}: option {key} expects {_type_text(typ)}, got {value!r}")
