"""Machine models: the data the step-time model reads, one JSON object per machine.

`machines.json` beside this module holds the built-in ones (docs/time.md gives their
sources): `h100-nvlink` (the default: one DGX H100 node, 8 GPUs on NVLink),
`h100-multinode` (nodes of 8 on NVLink, InfiniBand between them) and `cpu` (one
core per device, MPI over shared memory). `machine(name_or_path)` returns one, or
reads a user's JSON file of one machine object in the same form, checked field by
field (a wrong or missing field is a MachineError naming the file and the field):

    devices_per_node  devices a node holds (null: any number, one node)
    nodes             how many nodes (null: as many as the program needs)
    matmul_flops      peak FLOP/s of the matrix units, by operand dtype
    vector_flops      peak FLOP/s of the vector units, by compute dtype (half and
                      bfloat16 compute in float32); a dtype not listed takes float32's
    memory_bandwidth  bytes/s between a device and its memory
    kernel_launch     seconds every kernel costs besides its roofline
    links             "node": the link inside a node; "network": between nodes
                      (needed where nodes is not 1), each with its name, bandwidth
                      (bytes/s each way), latency (s per collective) and
                      step_latency (s per step of the collective's algorithm)
    sources           where the numbers come from (text)
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fuserlite.ir.args import did_you_mean
from fuserlite.ir.errors import MachineError
from fuserlite.ir.types import DType

BUILT_IN = Path(__file__).with_name("machines.json")
DEFAULT_MACHINE = "h100-nvlink"
LARGE = "h100-multinode"  # the default for programs on more devices than DEFAULT_MACHINE's
MAX_FILE_BYTES = 1 << 20  # a machine file is a few hundred bytes


@dataclass(frozen=True)
class Link:
    """What one collective step costs on a link: latency + bytes / bandwidth."""

    name: str
    bandwidth: float  # bytes/s each way
    latency: float  # s: a collective's fixed cost (its launch, NCCL's base latency)
    step_latency: float  # s: each step of its algorithm (a ring's hop)


@dataclass(frozen=True)
class Machine:
    """A machine model (see the module doc for the fields)."""

    name: str
    description: str
    devices_per_node: int | None
    nodes: int | None
    matmul_flops: Mapping[str, float]
    vector_flops: Mapping[str, float]
    memory_bandwidth: float
    kernel_launch: float
    node_link: Link
    network_link: Link | None
    sources: tuple[str, ...]

    @property
    def devices(self) -> int | None:
        """How many devices it has (None: as many as a program uses)."""
        if self.devices_per_node is None or self.nodes is None:
            return None
        return self.devices_per_node * self.nodes

    def node(self, device: int) -> int:
        """The node that holds `device` (devices 0..n-1 fill node 0 first)."""
        return 0 if self.devices_per_node is None else device // self.devices_per_node

    def link(self, devices: tuple[int, ...]) -> Link:
        """The link a team of devices communicates over: the node's where they share a
        node, else the network (the slowest link a ring of them crosses)."""
        if len({self.node(d) for d in devices}) <= 1 or self.network_link is None:
            return self.node_link
        return self.network_link

    def matmul_peak(self, dtype: DType) -> float:
        """Peak FLOP/s of a matmul of operands of `dtype` (the vector units' where the
        matrix units have no rate for it)."""
        return self.matmul_flops.get(dtype.name) or self.vector_peak(dtype)

    def vector_peak(self, dtype: DType) -> float:
        """Peak FLOP/s of arithmetic computed in `dtype`'s compute type."""
        return self.vector_flops.get(dtype.compute.name) or self.vector_flops["float32"]

    def check_devices(self, used: list[int]) -> None:
        """A MachineError unless the machine has every device the program uses."""
        n = self.devices
        if n is not None and used and max(used) >= n:
            raise MachineError(
                f"the program uses devices up to {max(used)}, but machine {self.name} "
                f"({self.description}) has {n}; choose a larger one (--machine "
                f"{', '.join(n for n in built_in_names() if n != self.name)})"
            )

    def summary(self) -> str:
        """'h100-nvlink (one DGX H100 node: ...)'."""
        return f"{self.name} ({self.description})"


def built_in_names() -> list[str]:
    """The names of the built-in machines, in their file's order."""
    return list(_built_in())


@functools.cache
def _built_in() -> dict[str, Machine]:
    data = json.loads(BUILT_IN.read_text())
    return {name: _machine(name, entry, BUILT_IN.name) for name, entry in data.items()}


def machine(which: str | Machine | None = None, devices: int = 0) -> Machine:
    """A built-in machine by name, a user's machine file (a path ending in .json), or
    `which` itself; None: the default for a program of `devices` devices, h100-nvlink
    (8 GPUs), or h100-multinode where it has more."""
    if isinstance(which, Machine):
        return which
    if which is None:
        which = DEFAULT_MACHINE if devices <= (_built_in()[DEFAULT_MACHINE].devices or 0) else LARGE
    if not isinstance(which, str):
        raise MachineError(
            f"machine: expected a machine name ({', '.join(built_in_names())}), a .json file "
            f"of one, or a Machine; got {type(which).__name__}"
        )
    if which in _built_in():
        return _built_in()[which]
    if which.endswith(".json"):
        return read_machine(Path(which))
    raise MachineError(
        f"unknown machine {which!r}{did_you_mean(which, built_in_names())} (choose one of "
        f"{', '.join(built_in_names())}, or give a .json file of one: docs/time.md)"
    )


def read_machine(path: Path) -> Machine:
    """The machine a JSON file describes (one object in machines.json's form), checked."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise MachineError(f"cannot read machine file {path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise MachineError(f"machine file {path} is over {MAX_FILE_BYTES} bytes")
    try:
        entry = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise MachineError(f"machine file {path} is not JSON: {exc}") from None
    return _machine(path.stem, entry, str(path))


_FIELDS = (
    "description",
    "devices_per_node",
    "nodes",
    "matmul_flops",
    "vector_flops",
    "memory_bandwidth",
    "kernel_launch",
    "links",
    "sources",
)
_LINK_FIELDS = ("name", "bandwidth", "latency", "step_latency")
_UNSET = object()


class _Fields:
    """Reads the fields of one JSON object, naming the file and field of any error."""

    def __init__(self, entry: object, where: str, fields: tuple[str, ...]) -> None:
        self.where = where
        if not isinstance(entry, dict):
            raise self.error(f"must be an object with the fields {', '.join(fields)}")
        unknown = sorted(set(entry) - set(fields))
        missing = [f for f in fields if f not in entry]
        if unknown or missing:
            said = [f"unknown fields {', '.join(unknown)}"] if unknown else []
            said += [f"missing fields {', '.join(missing)}"] if missing else []
            raise self.error(f"{'; '.join(said)} (the fields: {', '.join(fields)})")
        self.entry = entry

    def error(self, message: str) -> MachineError:
        return MachineError(f"machine {self.where}: {message}")

    def number(self, name: str, positive: bool = True, value: object = _UNSET) -> float:
        """Field `name` (or `value`, named so) as a finite number, > 0 or >= 0."""
        value = self.entry[name] if value is _UNSET else value
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value < 0 or (positive and value == 0):
            need = "a positive" if positive else "a non-negative"
            raise self.error(f"{name} must be {need} number, got {value!r}")
        return float(value)

    def count(self, name: str) -> int | None:
        value = self.entry[name]
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1 << 20:
            raise self.error(f"{name} must be a positive integer or null, got {value!r}")
        return value

    def text(self, name: str) -> str:
        value = self.entry[name]
        if not isinstance(value, str) or not value:
            raise self.error(f"{name} must be a non-empty string, got {value!r}")
        return value

    def rates(self, name: str) -> dict[str, float]:
        value = self.entry[name]
        dtypes = [d.name for d in DType]
        if not isinstance(value, dict) or not value:
            raise self.error(f"{name} must be an object {{dtype: FLOP/s}} ({', '.join(dtypes)})")
        for key in value:
            if key not in dtypes:
                raise self.error(f"{name}: unknown dtype {key!r}; one of {', '.join(dtypes)}")
        return {k: self.number(f"{name}.{k}", value=v) for k, v in value.items()}


def _link(entry: object, where: str) -> Link:
    f = _Fields(entry, where, _LINK_FIELDS)
    return Link(
        f.text("name"),
        f.number("bandwidth"),
        f.number("latency", positive=False),
        f.number("step_latency", positive=False),
    )


def _machine(name: str, entry: object, where: str) -> Machine:
    f = _Fields(entry, f"{name} ({where})", _FIELDS)
    vector = f.rates("vector_flops")
    if "float32" not in vector:
        raise f.error("vector_flops must give float32's rate (dtypes not listed take it)")
    links = entry["links"]
    if not isinstance(links, dict) or "node" not in links or set(links) - {"node", "network"}:
        raise f.error('links must be {"node": {...}} or {"node": {...}, "network": {...}}')
    node_link = _link(links["node"], f"{f.where} links.node")
    nodes = f.count("nodes")
    network = _link(links["network"], f"{f.where} links.network") if "network" in links else None
    if nodes != 1 and network is None:
        raise f.error("a machine of several nodes needs links.network (between its nodes)")
    sources = entry["sources"]
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise f.error("sources must be a list of strings (where the numbers come from)")
    return Machine(
        name=name,
        description=f.text("description"),
        devices_per_node=f.count("devices_per_node"),
        nodes=nodes,
        matmul_flops=f.rates("matmul_flops"),
        vector_flops=vector,
        memory_bandwidth=f.number("memory_bandwidth"),
        kernel_launch=f.number("kernel_launch", positive=False),
        node_link=node_link,
        network_link=network,
        sources=tuple(sources),
    )
