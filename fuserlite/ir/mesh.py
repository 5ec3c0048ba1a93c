"""DeviceMesh: the devices a TensorView is distributed over, as an N-D grid.

A mesh is an array of distinct device ids of any rank up to three: `devices`
lists them flat in row-major order (the last axis varies fastest), `shape`
gives the axis sizes, axis 0 outermost. nvFuser's convention names the mesh
axes from the inside out: DIDx is the last axis, DIDy the one before it, DIDz
the one before that. A 1-D mesh has DIDx only.

Its axes may also have the user's names, JAX's and DTensor's `axis_names`
(`DeviceMesh(devices, axis_names=("dp", "tp"))`): every API that takes a mesh axis
accepts its name as well as its parallel type (`parallel_type_of`), and messages
show the name beside nvFuser's (`DIDx (tp)`, `axis_label`). The names are labels:
two meshes of the same devices on the same grid are equal whatever their names.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fuserlite.ir.args import LIST_LIMIT, abbreviate, fail, integer, is_integer
from fuserlite.ir.errors import FusionError
from fuserlite.ir.teams import teams as index_teams
from fuserlite.ir.types import DEVICE_PARALLEL_TYPES, ParallelType
from fuserlite.ir.values import interned

# Device ids are 0..MAX_DEVICES-1, so a mesh has at most MAX_DEVICES devices: far more
# than a simulated run in one process or one machine's MPI ranks can use, and small
# enough that a typo (--devices 1000000000) is an error up front, not a MemoryError.
MAX_DEVICES = 4096
# One mesh axis per device parallel type: DIDx, DIDy, DIDz.
MAX_MESH_RANK = len(DEVICE_PARALLEL_TYPES)
# Per mesh rank, the device parallel types of its axes, axis 0 first: asked for every
# sharded axis of every tensor between passes, so looked up, not rebuilt (a tuple: an enum
# in a dict hashes in Python, `in` and index on a tuple compare identities in C).
_TYPES_OF_RANK = {
    r: tuple(reversed(DEVICE_PARALLEL_TYPES[:r])) for r in range(1, MAX_MESH_RANK + 1)
}


def axis_types(rank: int) -> tuple[ParallelType, ...]:
    """The device parallel types of the axes of a rank-`rank` mesh, axis 0 first, (DIDy,
    DIDx) on 2-D: the one naming of mesh axes (the planner's messages use it too)."""
    if rank not in _TYPES_OF_RANK:
        raise FusionError(f"a mesh has 1 to {MAX_MESH_RANK} axes, not {rank}")
    return _TYPES_OF_RANK[rank]


def check_device_count(n: object, who: str) -> int:
    """A number of devices: an integer in 1..MAX_DEVICES, or a FusionError."""
    return integer(n, who, "the number of devices", minimum=1, maximum=MAX_DEVICES)


def _short(devices: object) -> str:
    text = repr(devices.tolist() if isinstance(devices, np.ndarray) else devices)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_row(value: object) -> bool:
    return isinstance(value, (list, tuple, range))


def _flatten(
    devices: object, accepted: str, depth: int = 1
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(flat ids, shape) of a nested list of device ids, or a FusionError saying what is wrong."""
    if isinstance(devices, np.ndarray):
        devices = devices.tolist()
    if not _is_row(devices):
        raise fail("DeviceMesh", "devices", accepted, devices)
    # Before looking at the ids: range(10**9) must not be walked.
    if len(devices) > MAX_DEVICES:
        raise FusionError(
            f"DeviceMesh: {len(devices)} devices; a mesh has at most {MAX_DEVICES} "
            f"(device ids 0..{MAX_DEVICES - 1})"
        )
    rows = list(devices)
    if rows and all(_is_row(r) or isinstance(r, np.ndarray) for r in rows):
        if depth >= MAX_MESH_RANK:  # before recursing: a deep nest must not overflow the stack
            raise FusionError(
                f"DeviceMesh: {_short(devices)} nests deeper than {MAX_MESH_RANK} axes; a mesh "
                f"has at most {MAX_MESH_RANK} (DIDz, DIDy, DIDx): merge some axes into one"
            )
        rows = [r.tolist() if isinstance(r, np.ndarray) else r for r in rows]
        parts = [_flatten(r, accepted, depth + 1) for r in rows]
        shapes = {shape for _, shape in parts}
        if len(shapes) > 1:
            lengths = " ".join(str(len(r)) for r in rows)
            raise FusionError(
                f"DeviceMesh: the rows of {_short(devices)} have different lengths ({lengths}); "
                "a mesh is a grid: give every row the same number of devices"
            )
        shape = (len(rows), *shapes.pop())
        return tuple(d for ids, _ in parts for d in ids), shape
    bad = [d for d in rows if not is_integer(d) or not 0 <= d < MAX_DEVICES]
    if bad:
        raise FusionError(
            f"DeviceMesh: devices must be {accepted}, got {_short(devices)}: {bad[0]!r} is not one"
        )
    return tuple(int(d) for d in rows), (len(rows),)


_MESH_TOKEN = re.compile(r"\{|\}|\d+|\S+")


def _read_braces(body: str, text: str) -> list:
    """`{0 1}` -> [0, 1]; nested braces nest lists (`{{0 1}{2 3}}`, one level per axis)."""
    tokens = _MESH_TOKEN.findall(body)
    stack: list[list] = []
    for k, tok in enumerate(tokens):
        if tok == "{":
            stack.append([])
        elif not stack or not (tok == "}" or tok.isdigit()):
            break
        elif tok.isdigit():
            stack[-1].append(int(tok))
        elif len(stack) > 1:
            done = stack.pop()
            stack[-1].append(done)
        elif k == len(tokens) - 1:  # the outermost brace closes the text
            return stack[0]
        else:
            break
    raise FusionError(f"{text!r} is not a printed mesh; write DeviceMesh{{0 1 2 3}}")


def parallel_types_of_rank(rank: int) -> tuple[ParallelType, ...]:
    """The device parallel types of a rank-`rank` mesh's axes, axis 0 first."""
    return _TYPES_OF_RANK[rank]


def _axis_names(names: object, rank: int) -> tuple[str, ...] | None:
    """The user's names of a rank-`rank` mesh's axes, checked: None, or one distinct
    identifier per axis that is not a parallel type's name (DIDx, deviceIdx.x, ...)."""
    if names is None:
        return None
    if isinstance(names, str) and rank == 1:
        names = (names,)
    accepted = f"None or {rank} distinct names, one per mesh axis, axis 0 first"
    if isinstance(names, str) or not _is_row(names) or len(names) != rank:
        raise fail("DeviceMesh", "axis_names", accepted, names)
    names = tuple(names)
    for n in names:
        if not isinstance(n, str) or not n.isidentifier() or not n.isascii():
            raise fail("DeviceMesh", "axis_names", f"{accepted} (identifiers)", names)
        if n in _DEVICE_NAMES:
            raise FusionError(
                f"DeviceMesh: axis name {n!r} is a parallel type's name; name the axes "
                "otherwise (e.g. dp, tp): DIDx, DIDy and DIDz stay nvFuser's names of them"
            )
    if len(set(names)) != len(names):
        raise FusionError(f"DeviceMesh: axis_names {names} names an axis twice")
    return names


def _checked(devices: object) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(flat device ids, shape) of a DeviceMesh's `devices`, or a FusionError."""
    accepted = (
        f"a list of distinct device ids in 0..{MAX_DEVICES - 1}, or a list of equally "
        "long such lists (an N-D mesh)"
    )
    first, depth = devices.tolist() if isinstance(devices, np.ndarray) else devices, 0
    while _is_row(first) and first and depth <= MAX_MESH_RANK:
        first, depth = first[0], depth + 1
    if depth > MAX_MESH_RANK:
        raise FusionError(
            f"DeviceMesh: {_short(devices)} has more than {MAX_MESH_RANK} axes; a mesh has "
            f"at most {MAX_MESH_RANK} (DIDz, DIDy, DIDx): merge some axes into one"
        )
    devs, shape = _flatten(devices, accepted)
    if not devs:
        raise FusionError(f"DeviceMesh: a mesh needs at least one device, got {_short(devices)}")
    if len(devs) > MAX_DEVICES:
        raise FusionError(
            f"DeviceMesh: {len(devs)} devices; a mesh has at most {MAX_DEVICES} "
            f"(device ids 0..{MAX_DEVICES - 1})"
        )
    if len(set(devs)) != len(devs):
        twice = sorted(d for d, n in Counter(devs).items() if n > 1)
        what = f"DeviceMesh{{{abbreviate(devs)}}}" if len(shape) == 1 else _short(devices)
        raise FusionError(
            f"{what} lists a device twice ({twice[0]}); every device of a mesh appears once"
        )
    return devs, shape


_DEVICE_NAMES = frozenset(n for pt in DEVICE_PARALLEL_TYPES for n in (pt.name, pt.value))


@dataclass(frozen=True)
class DeviceMesh:
    """Distinct device ids on a grid of rank 1..3 (compared by ids and shape), its axes
    optionally named by the user."""

    devices: tuple[int, ...]  # flat, row-major
    shape: tuple[int, ...]
    axis_names: tuple[str, ...] | None = field(default=None, compare=False)  # axis 0 first

    def __new__(cls, devices, axis_names: Sequence[str] | None = None) -> DeviceMesh:
        """The mesh of `devices` (a list, or equally long lists: an N-D mesh): a value, made
        once per content (ids, shape and names) while it lives, so the meshes of programs
        built alike are one object (fuserlite.ir.values), compared by identity first."""
        devs, shape = _checked(devices)
        names = _axis_names(axis_names, len(shape))
        return interned((cls, devs, shape, names), cls._made, devs, shape, names)

    @classmethod
    def _made(cls, devs: tuple[int, ...], shape: tuple[int, ...], names) -> DeviceMesh:
        mesh = object.__new__(cls)
        object.__setattr__(mesh, "devices", devs)
        object.__setattr__(mesh, "shape", shape)
        object.__setattr__(mesh, "axis_names", names)
        # Hashed once: a mesh is an argument of many facts (fuserlite.ir.values).
        object.__setattr__(mesh, "_hash", hash((devs, shape)))
        return mesh

    def __init__(self, devices, axis_names: Sequence[str] | None = None) -> None:
        """Made by __new__ (checked and interned): nothing is left to set."""

    def __reduce__(self) -> tuple:
        return (DeviceMesh, (self.tolist(), self.axis_names))

    def __copy__(self) -> DeviceMesh:
        return self

    def __deepcopy__(self, memo: dict) -> DeviceMesh:
        return self

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        # By ids and shape; the same mesh object first, as most comparisons are (every
        # tensor of a kernel, every source of a propagation, on the one mesh).
        if self is other:
            return True
        if type(other) is not DeviceMesh:
            return NotImplemented
        return self._hash == other._hash and (self.devices, self.shape) == (
            other.devices,
            other.shape,
        )

    @classmethod
    def for_num_devices(cls, n: int, axis_names: Sequence[str] | None = None) -> DeviceMesh:
        """The 1-D mesh of devices 0..n-1."""
        return cls(range(check_device_count(n, "DeviceMesh.for_num_devices")), axis_names)

    @classmethod
    def for_shape(cls, shape: Sequence[int], axis_names: Sequence[str] | None = None) -> DeviceMesh:
        """The mesh of devices 0..prod(shape)-1 laid out row-major on `shape`."""
        if not _is_row(shape) or not shape or len(shape) > MAX_MESH_RANK:
            raise fail(
                "DeviceMesh.for_shape", "shape", f"a list of 1..{MAX_MESH_RANK} axis sizes", shape
            )
        sizes = [integer(s, "DeviceMesh.for_shape", "an axis size", minimum=1) for s in shape]
        count = check_device_count(math.prod(sizes), "DeviceMesh.for_shape")
        return cls(np.arange(count).reshape(sizes), axis_names)

    def with_axis_names(self, axis_names: Sequence[str] | None) -> DeviceMesh:
        """This mesh with its axes named `axis_names` (None: unnamed)."""
        return DeviceMesh(self.tolist(), axis_names)

    # -- shape ----------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.devices)

    @property
    def rank(self) -> int:
        """Number of mesh axes."""
        return len(self.shape)

    def __len__(self) -> int:
        return len(self.devices)

    def __contains__(self, device: object) -> bool:
        return device in self.devices

    def index(self, device: int) -> int:
        """Position of a device in the flat, row-major device list."""
        return self.devices.index(device)

    def coordinates(self, device: int) -> tuple[int, ...]:
        """The mesh coordinates of a device, axis 0 first."""
        if device not in self.devices:
            raise FusionError(f"device {device!r} is not in {self}")
        return tuple(int(c) for c in np.unravel_index(self.index(device), self.shape))

    def tolist(self) -> list:
        """The device ids as nested lists (a flat list for a 1-D mesh)."""
        return np.array(self.devices).reshape(self.shape).tolist()

    # -- parallel types -----------------------------------------------------------------
    @property
    def parallel_types(self) -> tuple[ParallelType, ...]:
        """The device parallel types of the mesh axes, axis 0 first: (DIDy, DIDx) on 2-D."""
        return _TYPES_OF_RANK[len(self.shape)]

    def has(self, pt: ParallelType) -> bool:
        """True when the mesh has an axis for device parallel type `pt`."""
        return pt in _TYPES_OF_RANK[len(self.shape)]

    def axis_of(self, pt: ParallelType) -> int:
        """The mesh axis of a device parallel type: DIDx is the last axis."""
        types = _TYPES_OF_RANK[len(self.shape)]
        if pt not in types:
            names = ", ".join(p.name for p in self.parallel_types)
            raise FusionError(
                f"{pt.name} needs a mesh of rank {DEVICE_PARALLEL_TYPES.index(pt) + 1} or more; "
                f"{self} has {self.rank} axis{'es' if self.rank > 1 else ''} ({names})"
            )
        return types.index(pt)

    def parallel_type_of(self, axis: object, who: str = "mesh axis") -> ParallelType:
        """The device parallel type of the mesh axis `axis` names: a ParallelType, its name
        or printed form (DIDx, deviceIdx.x) or the user's name of the axis (tp)."""
        pt = axis if isinstance(axis, ParallelType) else None
        if isinstance(axis, str):
            names = self.axis_names or ()
            if axis in names:
                return self.parallel_types[names.index(axis)]
            pt = next((p for p in DEVICE_PARALLEL_TYPES if axis in (p.name, p.value)), None)
        if pt is None or pt not in self.parallel_types:
            labels = ", ".join(self.axis_label(a) for a in range(self.rank))
            raise fail(who, "axis", f"a mesh axis of {self}: {labels}", axis)
        return pt

    def axis_label(self, axis: int | ParallelType) -> str:
        """A mesh axis as messages name it: `DIDx`, or `DIDx (tp)` when the user named it."""
        a = axis if isinstance(axis, int) else self.axis_of(axis)
        name = self.parallel_types[a].name
        return name if self.axis_names is None else f"{name} ({self.axis_names[a]})"

    def axis_size(self, pt: ParallelType) -> int:
        """Devices along the mesh axis of `pt` (a FusionError when the mesh lacks it)."""
        return self.shape[self.axis_of(pt)]

    def _group(self, pts: ParallelType | Iterable[ParallelType]) -> tuple[int, ...]:
        pts = (pts,) if isinstance(pts, ParallelType) else tuple(pts)
        group = tuple(self.axis_of(pt) for pt in pts)
        if not group or len(set(group)) != len(group):
            raise FusionError(
                f"a team is along one or more distinct parallel types, got "
                f"{[pt.name for pt in pts]}"
            )
        return group

    def teams(self, pts: ParallelType | Iterable[ParallelType]) -> list[tuple[int, ...]]:
        """Every team along `pts` (ordered outer -> inner): fuserlite.ir.teams' teams of
        device indices, the first parallel type outermost, named by their device ids."""
        teams = index_teams(self.shape, self._group(pts))
        return [tuple(self.devices[i] for i in team) for team in teams]

    def team(self, device: int, pts: ParallelType | Iterable[ParallelType]) -> tuple[int, ...]:
        """The team of `device` along `pts` (see `teams`)."""
        self.coordinates(device)  # a device outside the mesh is an error
        return next(t for t in self.teams(pts) if device in t)

    # -- text -----------------------------------------------------------------------------
    def text(self) -> str:
        """The printed IR form with every device: `DeviceMesh{0 1 2}`, `DeviceMesh{{0 1}{2 3}}`."""
        return "DeviceMesh" + _braces(self.tolist())

    @classmethod
    def from_text(cls, text: str) -> DeviceMesh:
        """The mesh whose `text()` is `text`; FusionError if it is not one."""
        body = text[len("DeviceMesh") :] if text.startswith("DeviceMesh{") else ""
        return cls(_read_braces(body, text))

    def __str__(self) -> str:
        """For messages: at most 8 ids, `DeviceMesh{0 1 2 3 4 5 6 ... 4095}`."""
        if self.size <= LIST_LIMIT:
            return self.text()
        if self.rank == 1:
            return "DeviceMesh{" + abbreviate(self.devices) + "}"
        shape = "x".join(map(str, self.shape))
        return f"DeviceMesh[{shape}]{{" + abbreviate(self.devices) + "}"


def _braces(nested: list) -> str:
    """Nested lists as nvFuser prints a mesh: `{0 1 2}`, `{{0 1}{2 3}}`."""
    if nested and isinstance(nested[0], list):
        return "{" + "".join(_braces(row) for row in nested) + "}"
    return "{" + " ".join(str(d) for d in nested) + "}"
