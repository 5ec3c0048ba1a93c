"""A scheduled kernel's structural signature: what its generated C++ is a function of.

The name of a kernel's CPU function, and through it the cache key of the library
that holds it (fuserlite.kernel.compile), is a hash of the kernel's structure, not
of its C++: a process that finds the library on disk loads it without generating
the source (at 1000 ops, generating it was most of a warm load:
benchmarks/README.md). So the signature holds everything the code generator
(fuserlite.kernel.cpu, .cuda, .cpu_parts, .reduction) reads of a kernel:

- every expression: its kind, op, attributes, scalar operands (with their types),
  and its inputs and outputs as positions in the kernel's tensor list;
- every tensor: its number (the generated code names it T<number> and t<number>),
  dtype, memory type, mesh, inline positions, its domain (each axis's extent, iteration
  and parallel type; the splits, merges and swizzles; the loop and allocation domains;
  the contiguity), and for an input whether an indexed op made it (its device
  indices are then kernel parameters);
- the kernel's inputs, outputs, reference tensor and mesh;
- the generator's parameters that tests and tuning change at run time (PARALLEL_WORK,
  the split limits of cpu_parts), and
- the generator's version: the path, size and time of every Python file of the
  fuserlite package, read once per process (the C text of every op and the prelude
  are in them).

Where a kernel holds something the signature cannot vouch for (an expression of a
kind other than a registered op or a Set, an op defined outside fuserlite, an
attribute of an unknown type), `signature` returns None and the symbol is the hash
of the generated source, as before. Two kernels of equal signature generate the
same source (tests/test_kernel_signature.py checks that over the test suite's
kernels, and that changing each ingredient changes the signature).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fuserlite.ir.domain import TensorDomain
from fuserlite.ir.expr import Expr, LoadStoreOp
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView
from fuserlite.ir.values import fact
from fuserlite.ops.registry import OpDef, is_indexed
from fuserlite.program.program import Kernel

PACKAGE = Path(__file__).resolve().parent.parent  # fuserlite/


class Unsigned(Exception):
    """Something of a kernel the signature cannot vouch for (the source is hashed)."""


@functools.cache
def generator_version() -> str:
    """What the code generator is, once per process: the path, size and modification
    time of every Python file of the fuserlite package (as the compiler's identity is
    its file's size and time: fuserlite.kernel.compile). About 1 ms, where hashing the
    1.5 MB of source took 20 to 30 ms, more than a whole warm load."""
    h = hashlib.sha256()
    files = []
    for folder, _, names in os.walk(PACKAGE):
        files += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    for path in sorted(files):
        info = os.stat(path)
        h.update(f"{os.path.relpath(path, PACKAGE)}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    return h.hexdigest()


def generator_parameters() -> str:
    """The generator's module-level limits, read now (tests change them)."""
    from fuserlite.kernel import cpu, cpu_parts

    return repr(
        (cpu.PARALLEL_WORK, cpu_parts.FUNCTION_BYTES, cpu_parts.PART_BYTES, cpu_parts.MAX_SLOTS)
    )


@fact
def domain_signature(dom: TensorDomain) -> str:
    """A domain's whole content as text (a value: computed once per domain)."""
    axes = ";".join(f"{a.extent},{a.iter_type.name},{a.parallel_type.name}" for a in dom.axes)
    transforms = ";".join(
        type(t).__name__ + repr(tuple(getattr(v, "name", v) for v in t)) for t in dom.transforms
    )
    return (
        f"[{axes}|{dom.n_logical}|{transforms}|{dom.loop_positions}|"
        f"{dom.allocation_positions}|{dom.contiguity}]"
    )


@fact
def mesh_signature(mesh: DeviceMesh | None) -> str:
    """A mesh's devices and shape, what a mesh compares by (its axis names, which it does
    not compare by and no generated code reads, are left out)."""
    return "-" if mesh is None else repr((mesh.devices, mesh.shape))


def _vouched(e: Expr) -> bool:
    """True for a Set, or an op whose definition and expression kind are fuserlite's own
    (the generator's C text for it is then in the package the version hashes)."""
    cls = type(e)
    return cls is LoadStoreOp or _ours(cls, e.op_def)


@functools.cache
def _ours(cls: type, d: OpDef | None) -> bool:
    return (
        d is not None
        and cls.__module__.startswith("fuserlite.")
        and getattr(d.build, "__module__", "").startswith("fuserlite.")
    )


def _value(x: object) -> str:
    """An attribute or scalar as exact text with its type; Unsigned for an unknown type."""
    t = type(x)
    if x is None or t in (bool, int, str):
        return f"{t.__name__}:{x!r}"
    if t is float:
        return f"float:{x.hex()}"
    if isinstance(x, np.generic):
        return f"np.{x.dtype.str}:{x.tobytes().hex()}"
    if isinstance(x, np.ndarray):
        data = hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()
        return f"array:{x.dtype.str}:{x.shape}:{data}"
    if t in (tuple, list):
        return f"{t.__name__}(" + ",".join(map(_value, x)) + ")"
    if t is dict:
        return "dict(" + ",".join(f"{_value(k)}={_value(v)}" for k, v in x.items()) + ")"
    if hasattr(t, "__members__") and t.__module__.startswith("fuserlite."):  # an enum of ours
        return f"{t.__name__}.{x.name}"
    if t is DeviceMesh:
        return mesh_signature(x)
    raise Unsigned(f"{t.__name__} attribute")


def signature(kernel: Kernel) -> str | None:
    """The kernel's structural signature (see the module), or None where it holds
    something the signature cannot vouch for."""
    index: dict[int, int] = {}  # tensor (by id) -> its position
    parts: list[str] = []
    # Each distinct domain, mesh and kind of tensor once, as `D3=...`, and tensors by their
    # positions in these: the signature of 1000 tensors of one shape stays short.
    local: dict[object, str] = {}

    def named(key: object, text: Callable[[], str]) -> str:
        name = local.get(key)
        if name is None:
            name = local[key] = f"#{len(local)}"
            parts.append(f"{name}={text()}")
        return name

    # A tensor's text after its number, by what it is made of: worked out once per kind
    # (the 1000 tensors of a chain are of one).
    described: dict[tuple, str] = {}

    def tensor(tv: TensorView, is_input: bool) -> int:
        k = index.get(id(tv))
        if k is None:
            k = index[id(tv)] = len(index)
            indexed = is_input and tv.definition is not None and is_indexed(tv.definition)
            dtype, memory, mesh, dom = tv.dtype, tv.memory_type, tv.mesh, tv.domain
            at, produce = tv.compute_at_pos, tv.produce_pos
            # ids: the tensors hold them alive, and a mesh hashes in Python
            key = (id(dtype), id(memory), at, produce, indexed, id(mesh), dom)
            text = described.get(key)
            if text is None:
                kind = named(
                    key[:5], lambda: f"{dtype.name}:{memory.name}:{at}:{produce}:{indexed:d}"
                )
                where = named(("mesh", mesh_signature(mesh)), lambda: mesh_signature(mesh))
                shape = named(dom, lambda: domain_signature(dom))
                text = described[key] = f":{kind}:{where}:{shape}"
            parts.append(f"T{tv.number}{text}")
        return k

    def positions(tensors: list[TensorView]) -> list[int]:
        # Most tensors are seen before (an expression's input is an earlier one's output):
        # their position is looked up here, the closure called for a new one only.
        found = []
        for t in tensors:
            k = index.get(id(t))
            found.append(tensor(t, False) if k is None else k)
        return found

    try:
        inputs = [tensor(t, True) for t in kernel.inputs]
        for e in kernel.exprs:
            parts.append(_expr(e, positions(e.inputs)))
            parts.append(repr(positions(e.outputs)))
        outputs = positions(kernel.outputs)
    except Unsigned:
        return None
    ref = kernel.reference
    parts.append(f"in{inputs} out{outputs} ref:{ref.number if ref is not None else '-'}")
    parts.append(f"mesh:{mesh_signature(kernel.mesh)} scheduled:{kernel.scheduled:d}")
    return "\n".join(parts)


def _expr(e: Expr, inputs: list[int]) -> str:
    cls = type(e)
    if not _vouched(e):
        raise Unsigned(f"{cls.__name__} {e.op_name}")
    scalars = getattr(e, "scalars", None)
    attrs = getattr(e, "attrs", None)  # an Op's (read-only): attributes() would copy them
    attributes = e.attributes() if attrs is None else attrs
    attribute_text = _value(dict(attributes)) if attributes else ""
    # _value of the scalars as a dict of positions, without the copy: "dict(int:1=...)"
    if not scalars:
        scalar_text = ""
    elif len(scalars) == 1:  # a binary op of a tensor and a number
        ((k, x),) = scalars.items()
        scalar_text = f"dict(int:{k!r}={_value(x)})"
    else:
        scalar_text = (
            "dict(" + ",".join([f"int:{k!r}={_value(x)}" for k, x in scalars.items()]) + ")"
        )
    return f"{cls.__name__}:{e.op_name}:{attribute_text}:{scalar_text}:{inputs}"


def structural_symbol(kernel: Kernel) -> str | None:
    """`fl_<hash>`: the name of the kernel's CPU function from its signature, the
    generator's parameters and version; None where there is no signature."""
    text = signature(kernel)
    if text is None:
        return None
    h = hashlib.sha256()
    for part in (generator_version(), generator_parameters(), text):
        h.update(part.encode() + b"\0")
    return "fl_" + h.hexdigest()[:24]


__all__ = [
    "domain_signature",
    "generator_parameters",
    "generator_version",
    "signature",
    "structural_symbol",
]
