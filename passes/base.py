"""The Pass base class and the registry of passes by name.

A pass is a small frozen dataclass: a kebab-case `name`, its options as typed
fields, the IR level it works on, and `run(ir)` that rewrites that IR in place.
Fusion passes (`level = Level.fusion`) take a Fusion, program passes a Program;
`segment` is the one pass that takes a Fusion and returns a Program
(`produces = Level.program`). Its docstring states what holds before and after
it; the first line is its description.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import ClassVar

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

    def run(self, ir: Fusion | Program) -> Program | None:
        """Rewrite `ir` (a Fusion or a Program, as `level` says) in place."""
        raise NotImplementedError

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


def make_pass(spec: str) -> Pass:
    """Build a pass from `name` or `name[key=value,...]`."""
    spec = spec.strip()
    name, _, rest = spec.partition("[")
    cls = REGISTRY.get(name)
    if cls is None:
        known = ", ".join(sorted(REGISTRY))
        raise PassOptionError(f"unknown pass {name!r}; known passes: {known}")
    options: dict[str, object] = {}
    if rest:
        if not rest.endswith("]"):
            raise PassOptionError(f"pass options must look like {name}[key=value], got {spec!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for item in filter(None, rest[:-1].split(",")):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or key not in fields:
                valid = ", ".join(fields) or "none"
                raise PassOptionError(f"pass {name}: unknown option {item!r}; options: {valid}")
            options[key] = _convert(value.strip(), fields[key].type, name, key)
    return cls(**options)


def _convert(value: str, typ: object, name: str, key: str) -> object:
    typ = str(typ)
    if "bool" in typ:
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise PassOptionError(f"pass {name}: option {key} expects true/false, got {value!r}")
    if "int" in typ:
        try:
            return int(value)
        except ValueError as exc:
            raise PassOptionError(f"pass {name}: option {key} expects an integer") from exc
    return value
