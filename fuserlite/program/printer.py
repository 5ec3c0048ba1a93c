"""Printing a lowered program: each kernel as a `%kernel<k> { ... }` block, each
communication on its own line, in execution order (nvFuser's dialect)."""

from __future__ import annotations

from fuserlite.ir.tensor import TensorView
from fuserlite.printer import Namer, expr_text, transforms_text
from fuserlite.program.program import Kernel, Program


def kernel_text(kernel: Kernel, namer: Namer, label: str = "%kernel") -> str:
    """One compute kernel in the seed's format: math, then TransformPrinter."""
    mesh = f" ({kernel.mesh.text()})" if kernel.mesh is not None and label != "%kernel" else ""
    math = "".join(expr_text(e, namer) + "\n" for e in kernel.exprs)
    order: dict[int, TensorView] = {}
    for e in kernel.exprs:  # as nvFuser prints: each expression's inputs, then outputs
        for tv in (*e.inputs, *e.outputs):
            order.setdefault(id(tv), tv)
    blocks = "".join(transforms_text(tv, namer) + "\n" for tv in order.values())
    return f"{label}{mesh} {{\n{math}\nTransformPrinter : \n{blocks}}} // {label}\n"


def print_program(program: Program) -> str:
    """Each kernel as a `%kernel<k> { ... }` block, each communication (or resharding
    Set) on its own line, in execution order."""
    namer = Namer(program.fusion)
    return "".join(
        kernel_text(step, namer, f"%kernel{k}")
        if isinstance(step, Kernel)
        else expr_text(step, namer) + "\n"
        for k, step in enumerate(program.steps)
    )


def print_scheduled(program: Program) -> str:
    """Every scheduled compute kernel, exactly as nvFuser prints a kernel
    (`%kernel { ... } // %kernel`), separated by blank lines."""
    namer = Namer(program.fusion)
    return "\n".join(kernel_text(k, namer) for k in program.kernels if k.scheduled)


Program.__str__ = print_program  # type: ignore[method-assign]  # str(program), as str(fusion)
