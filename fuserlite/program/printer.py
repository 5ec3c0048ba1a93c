"""Printing a lowered program: each kernel as a `%kernel<k> { ... }` block, each
communication on its own line, in execution order (nvFuser's dialect).

What the steps do not show is printed too, so that the text parses back to an
equal program (fuserlite.program.parser; docs/printed-form.md): a `Planner:` line
with the latency_bytes the communications were planned at, a `Mesh axes:` line per
mesh whose axes the user named, and an `Inputs:` /
`Outputs:` header where the tensors do not imply them, a kernel's schedule and
notes, a ` plan intermediate : T7 -> T14` line in the block of each tensor between
two steps of one plan, and a last `TransformPrinter :` section for the tensors no
kernel shows (a fusion input a communication reads, an output a communication
writes, a plan's intermediates).
"""

from __future__ import annotations

import re

from fuserlite.ir.expr import Expr
from fuserlite.ir.tensor import TensorView
from fuserlite.printer import (
    Namer,
    expr_text,
    implied_io,
    io_header,
    mesh_axes_header,
    transforms_text,
)
from fuserlite.program import host
from fuserlite.program.program import HostStep, Kernel, Program, Step
from fuserlite.program.reshardings import plan_intermediates, plans_latency

SCHEDULED = " scheduled : "  # ` scheduled : reference T6`: schedule-pointwise ran on it
NOTE = " note : "  # ` note : schedule-pointwise: not scheduled: ...`, one line each
# `Planner: latency_bytes=131072`, first: what a collective cost lower-communications' planner
PLANNER = "Planner: latency_bytes="
# ` plan intermediate : T7 -> T14`, second in the block of a tensor between two steps of
# the plan from T7 to T14 (fl.explain reads the steps as one resharding)
INTERMEDIATE = " plan intermediate : "


def kernel_tensors(kernel: Kernel) -> list[TensorView]:
    """The tensors of a kernel's TransformPrinter, as nvFuser prints them: each
    expression's inputs, then its outputs."""
    order: dict[int, TensorView] = {}
    for e in kernel.exprs:
        for tv in (*e.inputs, *e.outputs):
            order.setdefault(id(tv), tv)
    return list(order.values())


def _step_tensors(step: Step) -> list[TensorView]:
    return kernel_tensors(step) if isinstance(step, Kernel) else [*step.inputs, *step.outputs]


def printed_tensors(program: Program) -> list[TensorView]:
    """Every tensor the program's print shows, in order of first appearance: the
    steps', then inputs and outputs no step uses."""
    order: dict[int, TensorView] = {}
    for step in host.walk(program.steps):
        run = host.executable(step)
        shown = _step_tensors(run) if run is not None else _host_tensors(step)
        for tv in shown:
            order.setdefault(id(tv), tv)
    for tv in (*program.inputs, *program.outputs):
        order.setdefault(id(tv), tv)
    return list(order.values())


def _host_tensors(step: HostStep) -> list[TensorView]:
    if isinstance(step, host.ShardByStream):
        return [step.whole, step.chunk]
    return [step.tensor] if isinstance(step, (host.Allocate, host.Deallocate)) else []


def step_exprs(program: Program) -> list[Expr]:
    """Every expression of the program's steps, in execution order."""
    return [e for s in program.runs for e in (s.exprs if isinstance(s, Kernel) else [s])]


def escape_note(text: str) -> str:
    """A note on one line: backslashes and newlines escaped (`unescape_note` reverses it)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def unescape_note(text: str) -> str:
    """The note `escape_note` printed."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def _annotations(kernel: Kernel) -> str:
    lines = []
    if kernel.scheduled:
        ref = kernel.reference
        lines.append(SCHEDULED + ("no reference" if ref is None else f"reference {ref.ir_name}"))
    lines.extend(NOTE + escape_note(n) for n in kernel.notes)
    return "".join(line + "\n" for line in lines)


def kernel_text(kernel: Kernel, namer: Namer, label: str = "%kernel") -> str:
    """One compute kernel in the seed's format: math, then TransformPrinter. A kernel
    of a program (`%kernel<k>`) also shows its mesh, its schedule and its notes."""
    in_program = label != "%kernel"
    mesh = f" ({kernel.mesh.text()})" if kernel.mesh is not None and in_program else ""
    notes = _annotations(kernel) if in_program else ""
    math = "".join(expr_text(e, namer) + "\n" for e in kernel.exprs)
    blocks = "".join(transforms_text(tv, namer) + "\n" for tv in kernel_tensors(kernel))
    return f"{label}{mesh} {{\n{notes}{math}\nTransformPrinter : \n{blocks}}} // {label}\n"


def print_program(program: Program) -> str:
    """Each kernel as a `%kernel<k> { ... }` block, each communication (or resharding
    Set) on its own line, in execution order; with the header and the last
    TransformPrinter section where needed (module docstring)."""
    shown = printed_tensors(program)
    namer = Namer(shown)
    implied = implied_io(shown, step_exprs(program))
    header = io_header(program.inputs, program.outputs, implied, namer)
    meshes = [*(tv.mesh for tv in shown), *(k.mesh for k in program.kernels)]
    header = mesh_axes_header(meshes) + header
    latency = plans_latency(program)
    if latency is not None:
        header = f"{PLANNER}{latency}\n" + (header or "\n")
    steps = "".join(steps_text(program.steps, namer))
    in_kernels = {id(tv) for k in program.kernels for tv in kernel_tensors(k)}
    rest = [tv for tv in shown if id(tv) not in in_kernels]
    marks = plan_intermediates(program)
    blocks = "".join(_block(tv, namer, marks) + "\n" for tv in rest)
    return header + steps + ("TransformPrinter : \n" + blocks if rest else "")


# The lines of the host constructs (fuserlite.program.host; docs/printed-form.md).
POST = "PostOnStream "  # before a kernel's label or a communication's line
SET_STREAM = "SetCurrentStream to Stream "
WAIT = "Wait Communication "  # and the output tensor of the posted communication
SYNCHRONIZE = "Synchronize Stream "
ALLOCATE, DEALLOCATE = "Allocate ", "Deallocate "
FOR = "FOR "  # `FOR i in range(4) {`, the body, `} // FOR i`


def steps_text(steps: list, namer: Namer, counter: list[int] | None = None) -> list[str]:
    """The printed steps in order: `%kernel<k>` numbered by each step's place in the
    program (every host construct, a loop and its body's steps counted in turn)."""
    counter = [0] if counter is None else counter
    out = []
    for step in steps:
        k = counter[0]
        counter[0] += 1
        run = host.executable(step)
        if run is not None:
            text = (
                kernel_text(run, namer, f"%kernel{k}")
                if isinstance(run, Kernel)
                else expr_text(run, namer) + "\n"
            )
            out.append(POST + text if isinstance(step, host.PostOnStream) else text)
        elif isinstance(step, host.ForLoop):
            out.append(f"{FOR}{step.index} in range({step.extent}) {{\n")
            out.extend(steps_text(step.body, namer, counter))
            out.append(f"}} // {FOR}{step.index}\n")
        else:
            out.append(host_line(step) + "\n")
    return out


def host_line(step: HostStep) -> str:
    """The one line of a stream, wait or buffer construct."""
    if isinstance(step, host.SetCurrentStream):
        return SET_STREAM + step.stream.text()
    if isinstance(step, host.Synchronize):
        return SYNCHRONIZE + step.stream.text()
    if isinstance(step, host.Wait):
        return WAIT + step.post.step.output.ir_name
    if isinstance(step, host.ShardByStream):
        return step.text()
    word = ALLOCATE if isinstance(step, host.Allocate) else DEALLOCATE
    return word + step.tensor.ir_name


def _block(tv: TensorView, namer: Namer, marks: dict) -> str:
    """A tensor's TransformPrinter block, with its plan intermediate line where it is one."""
    text = transforms_text(tv, namer)
    r = marks.get(id(tv))
    if r is None:
        return text
    head, rest = text.split("\n", 1)
    return f"{head}\n{INTERMEDIATE}{r.source.ir_name} -> {r.target.ir_name}\n{rest}"


def print_scheduled(program: Program) -> str:
    """Every scheduled compute kernel, exactly as nvFuser prints a kernel
    (`%kernel { ... } // %kernel`), separated by blank lines."""
    namer = Namer(printed_tensors(program))
    return "\n".join(kernel_text(k, namer) for k in program.kernels if k.scheduled)


Program.__str__ = print_program  # type: ignore[method-assign]  # str(program), as str(fusion)
