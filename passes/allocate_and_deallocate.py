"""allocate-and-deallocate: every intermediate buffer's life as explicit host steps.

nvFuser's AllocateAndDeallocate / InsertDeallocations host passes: liveness made a
part of the program, where it prints, parses and is checked, instead of worked out
again by each consumer.

Before: a lowered Program (lower-communications ran), flat or a host program.
After: for every tensor a step writes that is neither a fusion input nor an output
(the caller owns those), `Allocate T` right before the first step that writes it and
`Deallocate T` right after the last step that reads it (or writes it, if none reads
it), at the outermost level of the program: a tensor used inside a loop lives from
before the loop to after it. In a host program the Deallocate waits, further, for the
first step after which every use is ordered before the current stream (a stream that
read it synchronized with), so no stream still reads a freed buffer. Liveness is ir.liveness.dead_after's, the function the
executor and the reference evaluator free values by, so they agree; Allocate and
Deallocate take no time and run nothing. The pass replaces any it finds, so running
it twice gives the same program.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fuserlite.ir.liveness import dead_after
from fuserlite.ir.tensor import TensorView
from fuserlite.passes.base import Level, Pass, register
from fuserlite.program import host
from fuserlite.program.host_verify import settled_after
from fuserlite.program.program import HostStep, Program, unlowered_steps


def _reads(step: HostStep) -> list[TensorView]:
    return [t for s in host.runs([step]) for t in s.inputs]


def _writes(step: HostStep) -> list[TensorView]:
    return [t for s in host.runs([step]) for t in s.outputs]


def _without_buffers(steps: list) -> list:
    """The steps with every Allocate and Deallocate taken out, loop bodies included."""
    out = []
    for s in steps:
        if isinstance(s, (host.Allocate, host.Deallocate)):
            continue
        if isinstance(s, host.ForLoop):
            s.body = _without_buffers(s.body)
        out.append(s)
    return out


def buffers(program: Program) -> list[TensorView]:
    """The tensors whose buffers the program owns: written by a step, neither a fusion
    input nor an output, in the order they are first written."""
    owned = {id(t) for t in (*program.inputs, *program.outputs)}
    found: dict[int, TensorView] = {}
    for s in host.runs(program.steps):
        for t in s.outputs:
            if id(t) not in owned:
                found.setdefault(id(t), t)
    return list(found.values())


@register
@dataclass(frozen=True)
class AllocateAndDeallocate(Pass):
    """Make each intermediate buffer's allocation and deallocation explicit steps."""

    name: ClassVar[str] = "allocate-and-deallocate"
    level: ClassVar[Level] = Level.program

    def requires(self, program: Program) -> list[str]:
        return [f"{p}; run lower-communications first" for p in unlowered_steps(program)]

    def ensures(self, program: Program) -> list[str]:
        allocated = [s.tensor for s in host.walk(program.steps) if isinstance(s, host.Allocate)]
        freed = [s.tensor for s in host.walk(program.steps) if isinstance(s, host.Deallocate)]
        want = buffers(program)
        problems = []
        for what, got in (("an Allocate", allocated), ("a Deallocate", freed)):
            ids = [id(t) for t in got]
            if sorted(ids) != sorted(id(t) for t in want):
                missing = [t.name for t in want if ids.count(id(t)) != 1]
                problems.append(f"not every buffer has exactly {what}: {', '.join(missing)}")
        return problems

    def run(self, program: Program) -> None:
        program.steps = steps = _without_buffers(program.steps)
        owned = buffers(program)
        ids = {id(t) for t in owned}
        dead = dead_after(steps, _reads, _writes)
        settled = settled_after(program, owned) if host.is_host_program(steps) else None
        out: list = []
        born: set[int] = set()
        waiting: list[TensorView] = []  # dead, not yet safe to free on the current stream
        for k, (step, gone) in enumerate(zip(steps, dead)):
            for t in _writes(step):
                if id(t) in ids and id(t) not in born:
                    born.add(id(t))
                    out.append(host.Allocate(t))
            out.append(step)
            waiting += [t for t in gone if id(t) in ids]
            free = [t for t in waiting if settled is None or id(t) in settled[k]]
            out.extend(host.Deallocate(t) for t in free)
            waiting = [t for t in waiting if t not in free]
        out.extend(host.Deallocate(t) for t in waiting)  # the verifier says why, if unsafe
        program.steps = out
