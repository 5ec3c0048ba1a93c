"""Printing a lowered program: each kernel as a `%kernel<k> { ... }` block, each
communication on its own line, in execution order (nvFuser's dialect)."""

from __future__ import annotations

from fuserlite.ir.fusion import Fusion
from fuserlite.ir.tensor import TensorView
from fuserlite.printer import Namer, expr_text, print_kernel, transforms_text
from fuserlite.program.program import Kernel


def kernel_text(kernel, namer: Namer, label: str = "%kernel") -> str:
    """One compute kernel in the seed's format: math, then TransformPrinter."""
    mesh = f" ({kernel.mesh.text()})" if kernel.mesh is not None and label != "%kernel" else ""
    math = "".join(expr_text(e, namer) + "\n" for e in kernel.exprs)
    order: dict[int, TensorView] = {}
    for e in kernel.exprs:  # as nvFuser prints: each expression's inputs, then outputs
        for tv in (*e.inputs, *e.outputs):
            order.setdefault(id(tv), tv)
    blocks = "".join(transforms_text(tv, namer) + "\n" for tv in order.values())
    return f"{label}{mesh} {{\n{math}\nTransformPrinter : \n{blocks}}} // {label}\n"


def print_program(fusion: Fusion) -> str:
    """A lowered fusion: each kernel as a `%kernel<k> { ... }` block, each
    communication on its own line, in execution order. Unsegmented fusions
    print as one kernel."""
    if fusion.segments is None:
        return print_kernel(fusion)
    namer = Namer(fusion)
    return "".join(
        kernel_text(seg, namer, f"%kernel{k}")
        if isinstance(seg, Kernel)
        else expr_text(seg, namer) + "\n"
        for k, seg in enumerate(fusion.segments)
    )


def print_scheduled(fusion: Fusion) -> str:
    """Every scheduled compute kernel of a lowered fusion, exactly as nvFuser prints
    a kernel (`%kernel { ... } // %kernel`), separated by blank lines."""
    namer = Namer(fusion)
    kernels = [s for s in fusion.segments or [] if isinstance(s, Kernel) and s.scheduled]
    return "\n".join(kernel_text(k, namer) for k in kernels)
