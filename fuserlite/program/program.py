"""The lowered program: the fusion's tensors and its steps in execution order.

`segment` is the one pass that turns a Fusion into a Program. A step is a Kernel
(expressions every device of its mesh runs on its local shards), a Communication
between kernels, or, until lower-communications runs, the resharding Set that
will become one. The fusion keeps the tensor graph (inputs, outputs, numbering);
the steps say what runs, in which order. A host program's steps also hold streams,
posts, waits, loops and buffers (fuserlite.program.host).
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field

from fuserlite.ir.changes import GraphList, structure_changed
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.tensor import TensorView
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES
from fuserlite.plan.cross_mesh import Move
from fuserlite.plan.search import Plan
from fuserlite.program import host
from fuserlite.program.communication import Communication


@dataclass(eq=False)
class Kernel:
    """Expressions computed locally on each device of `mesh`, in order."""

    exprs: list[Expr]
    inputs: list[TensorView]
    outputs: list[TensorView]
    mesh: DeviceMesh | None
    scheduled: bool = False
    # Set by schedule-pointwise: the reference tensor whose loop domain drives the kernel.
    reference: TensorView | None = None
    notes: list[str] = field(default_factory=list)

    def __setattr__(self, name: str, value: object) -> None:
        _set_graph_field(self, name, value)

    @property
    def tensors(self) -> list[TensorView]:
        """Every tensor the kernel reads or writes, inputs first."""
        seen: dict[int, TensorView] = {id(t): t for t in self.inputs}
        add = seen.setdefault
        for e in self.exprs:
            for t in e.inputs:
                add(id(t), t)
            for t in e.outputs:
                add(id(t), t)
        return list(seen.values())


_GRAPH_LISTS = frozenset({"exprs", "inputs", "outputs", "steps"})


def _set_graph_field(node: object, name: str, value: object) -> None:
    """Set a field of a Kernel or a Program: a list of the graph is a GraphList (edited
    by assigning a new one, which the change log hears: fuserlite.ir.changes)."""
    if name in _GRAPH_LISTS:
        value = GraphList(value)
        old = node.__dict__.get(name)
        if old is not None and len(old) == len(value) and all(map(operator.is_, old, value)):
            object.__setattr__(node, name, value)
            return  # the same steps again: nothing of the graph changed
    object.__setattr__(node, name, value)
    if name in _GRAPH_LISTS or name == "mesh":
        structure_changed()


def finish_kernel(
    kernel: Kernel, fusion_outputs: set[int], users: dict[int, list[Expr]] | None = None
) -> None:
    """Fill a kernel's inputs (read, not produced inside) and outputs (used outside or
    `fusion_outputs`, the ids of the fusion's outputs); `users`: each tensor's readers
    by id, where its `uses` are not (None: they are)."""
    inside = {id(e) for e in kernel.exprs}
    produced = {id(t) for e in kernel.exprs for t in e.outputs}
    inputs, outputs = {}, {}
    for e in kernel.exprs:
        for t in e.inputs:
            if id(t) not in produced:
                inputs.setdefault(id(t), t)
        for t in e.outputs:
            if id(t) in fusion_outputs:
                outputs.setdefault(id(t), t)
                continue
            for u in t.uses if users is None else users.get(id(t), ()):
                if id(u) not in inside:  # read outside the kernel
                    outputs.setdefault(id(t), t)
                    break
    kernel.inputs = list(inputs.values())
    kernel.outputs = list(outputs.values())


Step = Kernel | Expr  # an Expr step is a Communication, or a resharding Set before lowering
# What a program's steps hold: a Step, or a host construct (fuserlite.program.host).
HostStep = Step | host.SetCurrentStream | host.PostOnStream | host.Wait | host.Synchronize
HostStep = HostStep | host.ForLoop | host.ShardByStream | host.Allocate | host.Deallocate


@dataclass(eq=False)
class Resharding:
    """One resharding Set as lower-communications lowered it.

    `needed_by` is the expression that reads the resharded tensor (or `output`);
    `plan` is the planner's plan on one mesh (its steps are the communications, and
    it knows its cheapest rejected alternative), `move` the transfers of a move
    between two meshes; one of them is set, except for communications read from text
    that are no plan of the planner (fuserlite.program.reshardings). `latency_bytes` is
    the latency the planner planned at, its plan's or, for a CollectivePermute, the
    one explain plans the rejected gather at.
    """

    source: TensorView
    target: TensorView
    needed_by: str
    communications: list[Communication]
    plan: Plan | None = None
    move: Move | None = None
    latency_bytes: int = DEFAULT_LATENCY_BYTES


class Program:
    """A fusion's tensors and the steps that compute them, in execution order."""

    def __init__(self, fusion: Fusion, steps: list[HostStep]) -> None:
        self.fusion = fusion
        self.steps = list(steps)
        self.reshardings: list[Resharding] = []  # filled by lower-communications
        # lower-streams[chunks=S]: each pair it gave no Stream axes, and why (the CLI
        # prints them); not part of the printed program
        self.left_whole: list[str] = []

    def __setattr__(self, name: str, value: object) -> None:
        _set_graph_field(self, name, value)

    @property
    def inputs(self) -> list[TensorView]:
        return self.fusion.inputs

    @property
    def outputs(self) -> list[TensorView]:
        return self.fusion.outputs

    @property
    def kernels(self) -> list[Kernel]:
        """The compute kernels, in execution order (posted ones and loop bodies' once)."""
        return [s for s in host.runs(self.steps) if isinstance(s, Kernel)]

    @property
    def communications(self) -> list[Communication]:
        """The communications, in execution order (posted ones and loop bodies' once)."""
        return [s for s in host.runs(self.steps) if isinstance(s, Communication)]

    @property
    def runs(self) -> list[Step]:
        """The kernels, communications and resharding Sets, each once, in printing order."""
        return list(host.runs(self.steps))

    def executed(self) -> list[Step]:
        """The kernels and communications in the order they run, loops unrolled."""
        return host.executed(self.steps)

    def tensors(self) -> list[TensorView]:
        """Every tensor of the program, in printing order."""
        return self.fusion.tensors()

    def clone(self) -> Program:
        """A deep copy with the same numbering."""
        fusion, mapping = self.fusion.clone()
        program = Program(fusion, [_clone_step(s, mapping) for s in self.steps])
        program.reshardings = [
            dataclasses.replace(
                r,
                source=mapping[r.source],
                target=mapping[r.target],
                communications=[mapping[c] for c in r.communications],
            )
            for r in self.reshardings
        ]
        return program

    def __repr__(self) -> str:
        kinds = [type(s).__name__ for s in self.steps]
        return f"<Program {len(kinds)} steps: {', '.join(kinds)}>"


def unlowered_steps(program: Program) -> list[str]:
    """Each step that is neither a kernel, a Communication nor a host construct (a
    resharding Set), by its printed number."""
    return [
        f"step {k}, {s.output.name} = {s.op_name}({s.input.name}), is not lowered to a "
        "Communication"
        for k, step in enumerate(host.walk(program.steps))
        if (s := host.executable(step)) is not None and not isinstance(s, (Kernel, Communication))
    ]


def _clone_step(step: HostStep, mapping: dict) -> HostStep:
    if isinstance(step, (host.PostOnStream, host.Wait)):
        if step in mapping:  # a Wait's post, copied already
            return mapping[step]
        if isinstance(step, host.Wait):
            return host.Wait(_clone_step(step.post, mapping))
        mapping[step] = host.PostOnStream(_clone_step(step.step, mapping))
        return mapping[step]
    if isinstance(step, host.ForLoop):
        return host.ForLoop(step.index, step.extent, [_clone_step(s, mapping) for s in step.body])
    if isinstance(step, (host.Allocate, host.Deallocate)):
        return type(step)(mapping[step.tensor])
    if isinstance(step, host.ShardByStream):
        return host.ShardByStream(
            mapping[step.whole], mapping[step.chunk], step.chunking, step.index
        )
    if host.is_host_node(step):  # a stream's: nothing of the fusion
        return dataclasses.replace(step)
    if not isinstance(step, Kernel):
        return mapping[step]
    return dataclasses.replace(
        step,
        exprs=[mapping[e] for e in step.exprs],
        inputs=[mapping[t] for t in step.inputs],
        outputs=[mapping[t] for t in step.outputs],
        reference=None if step.reference is None else mapping[step.reference],
        notes=list(step.notes),
    )
