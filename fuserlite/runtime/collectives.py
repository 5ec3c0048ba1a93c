"""Collectives of the `sim` backend planned once: a copy or a fold per team, nothing else.

    plan = collective_plan(comm, backend)     # None: dispatch.run_communication runs it
    outputs = plan.run(values)                # {device: its output}

A program's Allgather, Allreduce and ReduceScatter of equal chunks on one mesh
are, on the sim backend, a concatenation (one memcpy per member) or a fold of
the members' arrays (`communicator.fold`, in team order: the same bits as
every backend) and views of its parts. What dispatch and the planner step work
out on every call (the step, its teams, the axis, each device's shape, the
chunks) is worked out here once per Communication; each run only checks the
shapes and copies. Uneven chunks, moves between meshes and rooted collectives
go through dispatch as before.
"""

from __future__ import annotations

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.sharding import placement
from fuserlite.plan.steps import StepKind
from fuserlite.program.communication import Communication, Sizing, as_reduced
from fuserlite.program.shards import device_shape
from fuserlite.runtime.backends.sim import SimCommunicator
from fuserlite.runtime.communicator import Communicator, fold
from fuserlite.runtime.dispatch import ONE_MESH, step_of
from fuserlite.runtime.redistribute import mesh_teams

PLANNED = (StepKind.Allgather, StepKind.Allreduce, StepKind.ReduceScatter)


class CollectivePlan:
    """One Communication's collective on the sim backend, its teams and shapes fixed."""

    def __init__(self, comm: Communication, kind: StepKind, axis: int, teams) -> None:
        self.comm = comm
        self.kind = kind
        self.axis = axis
        self.teams = [t.members for t in teams]
        self.want = {d: device_shape(comm.input, d) for t in self.teams for d in t}
        # what the collective reads: the one row of each axis it reduces itself dropped
        self.read = {d: as_reduced(comm.input, comm.reduces, s) for d, s in self.want.items()}
        self.cast = None if comm.input.dtype is comm.output.dtype else comm.output.dtype.numpy

    def run(self, values: dict[int, dict], threads=None) -> dict:
        """The collective over every team on `values`' inputs: each device's output (the
        executor stores it at the Communication's Await). `threads`: a
        runtime.threads.DeviceThreads that folds ranges of a large team's elements at
        once (a fold is element by element: the same bits), or None."""
        comm, tv, out = self.comm, self.comm.input, self.comm.output
        outputs = {}
        for members in self.teams:
            arrays = []
            for d in members:
                a = values[d].get(tv)
                if a is None or a.shape != self.want[d]:
                    got = "no buffer" if a is None else f"a buffer of shape {list(a.shape)}"
                    raise ExecutionError(
                        f"{comm.kind.value} {tv.name} -> {out.name}: device {d} holds {got}, "
                        f"expected {list(self.want[d])}"
                    )
                arrays.append(a if comm.reduces is None else a.reshape(self.read[d]))
            if self.kind is StepKind.Allgather:
                whole = np.concatenate(arrays, axis=self.axis)
                results = [whole] * len(members)
            else:
                total = _fold(arrays, comm.op, threads)
                if self.kind is StepKind.Allreduce:
                    results = [total] * len(members)
                else:
                    results = np.split(total, len(members), axis=self.axis)
            if self.cast is not None:
                with np.errstate(over="ignore"):  # beyond float16's range: inf, as a store
                    cast = {id(r): r.astype(self.cast) for r in results}
                results = [cast[id(r)] for r in results]
            outputs.update(zip(members, results))
        return outputs


def _fold(arrays: list[np.ndarray], op, threads) -> np.ndarray:
    """fold(arrays, op), ranges of the elements on `threads` where the fold is large."""
    first = arrays[0]
    size = first.size
    if (
        threads is None
        or not threads.spreads(size * len(arrays), size)
        or any(a.shape != first.shape or not a.flags.c_contiguous for a in arrays)
    ):
        return fold(arrays, op)
    flat = [a.reshape(-1) for a in arrays]
    out = np.empty(size, first.dtype)  # fold's result is in its operands' dtype

    def work(start: int, stop: int) -> None:
        out[start:stop] = fold([f[start:stop] for f in flat], op)

    threads.run(work, size)
    return out.reshape(first.shape)


def collective_plan(comm: Communication, backend: Communicator) -> CollectivePlan | None:
    """The plan of `comm` where it is a planned collective of equal chunks on the sim
    backend; None where dispatch runs it."""
    if not isinstance(backend, SimCommunicator) or comm.kind not in ONE_MESH:
        return None
    if comm.sizing is not Sizing.even or placement(comm.input).cyclic:
        return None  # uneven chunks, or a cyclic shard's rows to interleave: dispatch's
    step = step_of(comm)
    if step.kind not in PLANNED or (step.kind is not StepKind.Allgather and comm.op is None):
        return None  # dispatch runs it, or says what is wrong
    teams = mesh_teams(comm.input.mesh, step.group)
    if step.kind is StepKind.ReduceScatter:
        for t in teams:
            for d in t.members:
                shape = as_reduced(comm.input, comm.reduces, device_shape(comm.input, d))
                if not shape or shape[step.axis] % len(t.members):
                    return None  # dispatch says why
    return CollectivePlan(comm, step.kind, step.axis, teams)
