"""Printing in nvFuser's TransformPrinter dialect (late 2024).

Printing is a pure function of what is printed. TensorViews print with their
number (T<n>, given at creation, as in nvFuser). IterDomains are numbered here,
over the tensors the print shows, in T-number order: first the logical axes of
each, then the outputs of each tensor's transforms in the order they were
applied (an axis is a position in its tensor's domain: its logical axes, then its
transforms' outputs). Tensors a print does not show (dead ones a pass left behind)
take no numbers from it, so the printed program, parsed back
(fuserlite.program.parser), prints the same text again; docs/printed-form.md
describes the dialect.
"""

from __future__ import annotations

from collections.abc import Iterable

from fuserlite.ir.domain import Split, Swizzle1D, TensorDomain
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import Axis, TensorView
from fuserlite.ir.types import MemoryType


def extent_text(dom: TensorDomain, p: int) -> str:
    """Axis `p`'s printed extent: `4`, or for the inner part of an outer split its factor
    does not divide, `( ceilDiv(13, 4) )`, as nvFuser prints it (the trailing devices of
    a sharding split hold fewer rows, and every loop over it is predicated)."""
    d = dom.transform_of(p)
    if type(d) is Split and not d.inner_split and p == d.inner and not dom.divisible(d):
        return f"( ceilDiv({extent_text(dom, d.input)}, {d.factor}) )"
    return str(dom.axes[p].extent)


class Namer:
    """Assigns printer numbers to the IterDomains of the tensors one print shows.

    Given a fusion, it shows `fusion.tensors()` (what `str(fusion)` prints); the other
    tensors it made are numbered after those, for messages about them. The logical axes
    of the tensors come first, then their transforms' outputs: a tensor's axes take
    two runs of numbers, from `_bases[tensor]`."""

    def __init__(self, shown: Fusion | Iterable[TensorView]) -> None:
        self._bases: dict[int, tuple[int, int]] = {}
        self._count = 0
        if isinstance(shown, Fusion):
            self._number(sorted(shown.tensors(), key=_number))
            self._number(shown.tensors_created)
        else:
            self._number(sorted(shown, key=_number))

    def _number(self, tensors: list[TensorView]) -> None:
        new = [tv for tv in dict.fromkeys(tensors) if id(tv) not in self._bases]
        logical = {}
        for tv in new:
            logical[id(tv)] = self._count
            self._count += tv.domain.n_logical
        for tv in new:
            dom = tv.domain
            self._bases[id(tv)] = (logical[id(tv)], self._count - dom.n_logical)
            self._count += len(dom.axes) - dom.n_logical

    def number(self, tv: TensorView, p: int) -> int:
        """The printed number of axis `p` of `tv`."""
        bases = self._bases.get(id(tv))
        if bases is None:  # a tensor outside this print's tensors
            self._number([tv])
            bases = self._bases[id(tv)]
        return bases[0] + p if p < tv.domain.n_logical else bases[1] + p

    def at(self, tv: TensorView, p: int) -> str:
        """`iS0{2}`, `bdeviceIdx.x1{1}`, `ithreadIdx.x25{128}`: axis `p` of `tv`."""
        dom = tv.domain
        ax = dom.axes[p]
        n = self.number(tv, p)
        return f"{ax.iter_type.value}{ax.parallel_type.value}{n}{{{extent_text(dom, p)}}}"

    def id(self, ax: Axis) -> str:
        """An axis handle as printed: `iS0{2}`."""
        return self.at(ax.tensor, ax.position)

    def ids(self, tv: TensorView, positions: Iterable[int]) -> str:
        return ", ".join(self.at(tv, p) for p in positions)

    def tensor(self, tv: TensorView) -> str:
        """`T3_l_float[ iS0{2} ] ca_pos( 2 ) produce_pos( 3 ) (DeviceMesh{0 1})`."""
        axes = self.ids(tv, tv.domain.loop_positions)
        text = (
            f"{tv.ir_name}_{tv.memory_type.value}_{tv.dtype.value}[ {axes} ]"
            if axes
            else (f"{tv.ir_name}_{tv.memory_type.value}_{tv.dtype.value}[ ]")
        )
        if tv.compute_at_pos:
            text += f" ca_pos( {tv.compute_at_pos} )"
        if tv.produce_pos:
            text += f" produce_pos( {tv.produce_pos} )"
        if tv.mesh is not None:
            text += f" ({tv.mesh.text()})"
        return text


def _number(tv: TensorView) -> int:
    return tv.number


def implied_io(
    shown: Iterable[TensorView], exprs: Iterable[Expr]
) -> tuple[list[TensorView], list[TensorView]]:
    """The inputs and outputs a print without an `Inputs:` / `Outputs:` header stands
    for, from the tensors and expressions it shows: the tensors no expression defines,
    and those defined that are global or read by none, each in T order."""
    defined: set[int] = set()
    read: set[int] = set()
    for e in exprs:
        defined.update(id(t) for t in e.outputs)
        read.update(id(t) for t in e.inputs)
    tensors = sorted(shown, key=_number)
    inputs = [t for t in tensors if id(t) not in defined]
    outputs = [
        t
        for t in tensors
        if id(t) in defined and (t.memory_type is MemoryType.GLOBAL or id(t) not in read)
    ]
    return inputs, outputs


def io_header(
    inputs: list[TensorView],
    outputs: list[TensorView],
    implied: tuple[list[TensorView], list[TensorView]],
    namer: Namer,
) -> str:
    """`Inputs:` and `Outputs:`, one tensor a line, where the printed tensors do not
    imply them (`implied`: their order, an input that is also an output, a local
    output that is read); else ''."""
    if implied == (list(inputs), list(outputs)):
        return ""
    lines = ["Inputs:", *(f"  {namer.tensor(t)}" for t in inputs)]
    lines += ["Outputs:", *(f"  {namer.tensor(t)}" for t in outputs)]
    return "\n".join(lines) + "\n\n"


# `Mesh axes: DeviceMesh{{0 1 2 3}{4 5 6 7}} DIDy (dp), DIDx (tp)`: the user's names of a
# mesh's axes beside nvFuser's, one line per named mesh before the rest of a print (the
# tensors print their meshes as nvFuser does; the parser gives them these names back)
MESH_AXES = "Mesh axes: "


def mesh_axes_header(meshes: Iterable[DeviceMesh | None]) -> str:
    """A `Mesh axes:` line per distinct mesh with named axes, in order of appearance."""
    named: list[DeviceMesh] = []
    for m in meshes:
        if m is not None and m.axis_names is not None and m not in named:
            named.append(m)
    labels = (", ".join(m.axis_label(a) for a in range(m.rank)) for m in named)
    lines = "".join(f"{MESH_AXES}{m.text()} {text}\n" for m, text in zip(named, labels))
    return lines + "\n" if lines else ""  # a blank line, as after the `Inputs:` header


def tensor_text(tv: TensorView) -> str:
    """One tensor as printed in its fusion."""
    return Namer(tv.fusion).tensor(tv)


def axis_text(ax: Axis) -> str:
    """One axis as printed in the fusion of its tensor."""
    return Namer(ax.tensor.fusion).id(ax)


def expr_text(expr: Expr, namer: Namer) -> str:
    """One expression: the output line, then `   = ` and its op's printed form."""
    if hasattr(expr, "describe"):  # communications and other lowered nodes
        return expr.describe(namer)
    outs = "\n".join(namer.tensor(o) for o in expr.outputs)
    d = expr.op_def
    if d is None:  # an expression of no registered op
        args = ", ".join(namer.tensor(i) for i in expr.inputs)
        return f"{outs}\n   = {expr.op_name}( {args} )"
    return f"{outs}\n   = {d.form.print(d.values(expr), expr, namer.tensor)}"


def _math_lines(fusion: Fusion, namer: Namer) -> list[str]:
    return [expr_text(e, namer) for e in fusion.exprs()]


def print_math(fusion: Fusion) -> str:
    """The math of a fusion, wrapped in `%kernel_math { ... }`."""
    namer = Namer(fusion)
    body = "\n".join(_math_lines(fusion, namer))
    return "%kernel_math {\n" + (body + "\n" if body else "") + "} // %kernel_math\n"


def transforms_text(tv: TensorView, namer: Namer) -> str:
    """The TransformPrinter block of one tensor."""
    dom = tv.domain
    at = namer.at
    lines = [namer.tensor(tv), f" logical domain : ({namer.ids(tv, range(dom.n_logical))})"]
    if dom.allocation_positions is not None:
        lines.append(f" allocation domain : ({namer.ids(tv, dom.allocation_positions)})")
    contiguity = " ".join("n" if c is None else ("t" if c else "f") for c in dom.contiguity)
    lines.append(f" contiguity: {contiguity}".rstrip())
    for tr in dom.transforms:
        if type(tr) is Split:
            kind = "Split" if tr.inner_split else "Outer split"
            lines.append(
                f"  {kind}: {at(tv, tr.input)} by factor {tr.factor} -> "
                f"{at(tv, tr.outer)}, {at(tv, tr.inner)}"
            )
        elif type(tr) is Swizzle1D:  # nvFuser's Swizzle1D::toString
            lines.append(
                f"  {at(tv, tr.output)} = Swizzle1D({at(tv, tr.input)}, "
                f"parallelType={tr.parallel_type.value})"
            )
        else:
            lines.append(
                f"  Merge: {at(tv, tr.outer)} and {at(tv, tr.inner)} -> {at(tv, tr.output)}"
            )
    lines.append(f" loop domain : ({namer.ids(tv, dom.loop_positions)})")
    return "\n".join(lines)


def print_transforms(fusion: Fusion) -> str:
    """`TransformPrinter : ` and the block of every tensor, in printing order."""
    namer = Namer(fusion)
    blocks = [transforms_text(tv, namer) for tv in fusion.tensors()]
    return "TransformPrinter : \n" + "".join(b + "\n" for b in blocks)


def print_kernel(fusion: Fusion) -> str:
    """The whole fusion as nvFuser prints a kernel: math, then TransformPrinter (after
    an `Inputs:` / `Outputs:` header where the tensors do not imply them)."""
    exprs = fusion.exprs()
    shown = fusion.tensors(exprs)
    namer = Namer(shown)
    header = mesh_axes_header(tv.mesh for tv in shown)
    header += io_header(fusion.inputs, fusion.outputs, implied_io(shown, exprs), namer)
    math = "".join(expr_text(e, namer) + "\n" for e in exprs)
    blocks = "".join(transforms_text(tv, namer) + "\n" for tv in shown)
    return f"{header}%kernel {{\n{math}\nTransformPrinter : \n{blocks}}} // %kernel\n"


def install() -> None:
    """Give the IR classes their printed form: `str(tv)`, `str(fusion)`,
    `fusion.print_math()`, `fusion.print_transforms()` (the IR imports no printer)."""
    TensorView.__str__ = tensor_text  # type: ignore[method-assign]
    Fusion.__str__ = print_kernel  # type: ignore[method-assign]
    Fusion.print_math = print_math  # type: ignore[attr-defined]
    Fusion.print_transforms = print_transforms  # type: ignore[attr-defined]


install()
