"""FusionExecutor: run a lowered program per device, return global arrays.

    ex = FusionExecutor(fusion)              # lowers the fusion (fl.lower); backend "sim"
    ex = FusionExecutor(program)             # ... or runs a Program lowered already
    outputs = ex.run(inputs)                 # global numpy arrays in, global arrays out
    ex.program.communications                # the lowered Communications (ex.communications)

Inputs are sharded as the fusion's inputs say; each kernel runs on every
device of its mesh on local shards, a scheduled one as `compute` says
(compiled C++, the kernel runner or numpy, fuserlite.runtime.compute);
communications go through the backend.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from fuserlite.ir import args
from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.expr import Expr
from fuserlite.ir.fusion import Fusion
from fuserlite.ir.liveness import dead_after, peak_live, read_anywhere
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import (
    is_partial,
    local_shape,
)
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.amx import AmxGemm, check_gemm
from fuserlite.kernel.compile import KernelCompiler
from fuserlite.kernel.grid_index import GridCache
from fuserlite.kernel.library import LibraryKernels
from fuserlite.kernel.runner import device_coordinates
from fuserlite.ops.registry import definition
from fuserlite.pipeline import Level, Pipeline, Progress
from fuserlite.program.communication import Communication
from fuserlite.program.host import ChunkView
from fuserlite.program.program import Kernel, Program
from fuserlite.program.shards import (
    Layout,
    device_shape,
    device_slices,
    is_sharded,
    layout,
    layouts_of,
    logical_start,
)
from fuserlite.program.verify import verify_program
from fuserlite.reference.evaluator import check_inputs
from fuserlite.reference.numpy_ops import eval_outputs, store
from fuserlite.runtime.backends import BACKENDS, make_backend
from fuserlite.runtime.backends.mpi_watchdog import check_timeout
from fuserlite.runtime.collectives import CollectivePlan, collective_plan
from fuserlite.runtime.communicator import Communicator, Posted, pad_to, ready
from fuserlite.runtime.compute import (
    CompiledKernels,
    default_compiler,
    kernel_path,
    resolve_compute,
)
from fuserlite.runtime.dispatch import post_communication
from fuserlite.runtime.host_loops import (
    Await,
    Post,
    action_reads,
    action_writes,
    pipelined,
    run_view,
)
from fuserlite.runtime.launch import (
    KernelLaunch,
    LibraryLaunch,
    ViewLaunch,
    library_launch,
    plan_launches,
)
from fuserlite.runtime.threads import DeviceThreads, check_workers
from fuserlite.runtime.validation import Validation, validate_run

SINGLE_DEVICE = DeviceMesh([0])


def mesh_of(tv: TensorView) -> DeviceMesh:
    """A tensor's mesh; tensors of a fusion without meshes live on device 0."""
    return tv.mesh if tv.mesh is not None else SINGLE_DEVICE


def shard(tv: TensorView, array: np.ndarray, device: int) -> np.ndarray:
    """The part of a global array that `device` holds (plan.blocks' box, on a mesh of
    any rank: a view)."""
    return array[device_slices(tv, device)] if is_sharded(tv) else array


def shard_start(tv: TensorView, device: int) -> tuple[int, ...]:
    """The global coordinates of the first element of `device`'s block of `tv`'s logical
    domain (where `shard` cuts its data; on a partial reduction axis, which part of the
    sum it holds), for the ops whose values depend on their position."""
    return logical_start(tv, device)


def unshard(
    tv: TensorView, shards: dict[int, np.ndarray], parts: Layout | None = None
) -> np.ndarray:
    """Assemble a global array from every device's shard (each its plan.blocks box; the
    devices of a team along an unsharded mesh axis hold the same box); `parts` is
    layout(tv), for a caller that knows it."""
    mesh = mesh_of(tv)
    first = shards[mesh.devices[0]]
    parts = layout(tv) if parts is None else parts
    if not parts.sharded:
        return first
    whole = np.empty(parts.shape, first.dtype)
    for d, where in zip(mesh.devices, parts.slices):
        whole[where] = shards[d]
    return whole


def device_bytes(tv: TensorView) -> int:
    """Bytes of `tv` summed over the devices of its mesh (a replicated tensor on D
    devices counts D times, as D devices would hold it; a short chunk its own rows)."""
    rows = sum(math.prod(device_shape(tv, d)) for d in mesh_of(tv).devices)
    return rows * tv.dtype.itemsize


def local_bytes(tv: TensorView, device: int) -> int:
    """Bytes of `tv` that `device` holds (0 off its mesh)."""
    if device not in mesh_of(tv).devices:
        return 0
    return math.prod(device_shape(tv, device)) * tv.dtype.itemsize


@dataclass(frozen=True)
class WorkingSet:
    """What an execution must hold at its fullest, in bytes summed over devices."""

    inputs: int
    outputs: int
    intermediates: int  # the largest set live at once

    @property
    def total(self) -> int:
        return self.inputs + self.outputs + self.intermediates


class FusionExecutor:
    """Runs a Program (a Fusion is lowered once first) on a backend's devices."""

    def __init__(
        self,
        ir: Fusion | Program,
        backend: str | Communicator = "sim",
        *,
        schedule: bool = True,
        pipeline: Pipeline | None = None,
        progress: Progress | None = None,
        compute: str | KernelCompiler | None = None,
        timeout: float | None = None,
        threads: int | None = None,
        gemm: str = "auto",
    ) -> None:
        """`pipeline` lowers a Fusion (default: Pipeline.default(progress=progress));
        `compute`: "compiled" (the default where a C++ compiler is found), "interpret" or
        "numpy" (`schedule=False` is the same), or a KernelCompiler for "compiled";
        `progress` also observes each run's kernels and communications; `timeout`: seconds
        an mpi operation may wait before the watchdog looks for a stalled rank (default
        300, math.inf for ever; sim never waits); `threads`: how many threads compute a
        launch's devices at once (runtime/threads.py; default the machine's cores; 1:
        the calling thread alone). No value depends on it. `gemm`: how a library kernel's
        linear or matmul of bfloat16 operands is computed, on the compiled and the
        interpreted path alike (so their bits agree): "amx" (Intel AMX's bfloat16 tiles,
        fuserlite/kernel/amx.py), "blas" (numpy's GEMM of their float32 values), or
        "auto" (the default: amx where the CPU, Linux and a C++ compiler allow it, else
        blas); `self.gemm` says which was chosen."""
        who = "FusionExecutor"
        self.threads = DeviceThreads(check_workers(threads, who))
        args.instance(ir, (Fusion, Program), who, "fusion", "a Fusion or a Program", ExecutionError)
        accepted = f"one of {', '.join(BACKENDS)} or a Communicator"
        args.instance(backend, (str, Communicator), who, "backend", accepted, ExecutionError)
        if timeout is not None:
            timeout = check_timeout(timeout, who)
            if not isinstance(backend, str):
                raise ExecutionError(
                    f"{who}: timeout= sets the timeout of the backend made from a name "
                    "(backend='mpi'); give a Communicator its own: MpiCommunicator(timeout=...)"
                )
        self.backend = make_backend(backend, timeout) if isinstance(backend, str) else backend
        schedule = args.boolean(schedule, who, "schedule", ExecutionError)
        self.compute, compiler = resolve_compute(compute, schedule, who)
        self.compiler = compiler  # "compiled": the KernelCompiler; else None
        self.gemm = check_gemm(gemm, self.compute, who)
        self.schedule = self.compute != "numpy"
        if pipeline is not None:
            args.instance(pipeline, Pipeline, who, "pipeline", "a Pipeline or None", ExecutionError)
        self.progress = progress
        # The pipeline that lowered the fusion (None: a Program given lowered already).
        self.pipeline: Pipeline | None = None
        if isinstance(ir, Fusion):
            self.fusion = ir
            self.pipeline = pipeline or Pipeline.default(progress=progress)
            self.program = _lowered(ir, self.pipeline)
        else:
            verify_program(ir)  # built or edited outside a pipeline: check it as one would
            self.program = ir
            self.fusion = ir.fusion
        self._prepare(compiler)

    def _prepare(self, compiler: KernelCompiler | None) -> None:
        program = self.program
        for step in program.runs:
            if not isinstance(step, (Kernel, Communication)):
                raise ExecutionError(
                    f"the program has an unlowered step {step!r}; its pipeline must run "
                    "segment and lower-communications (fl.Pipeline.default() does)"
                )
        for tv in program.inputs:
            if is_partial(tv):
                raise ExecutionError(
                    f"input {tv.name} is marked partial (rDIDx); inputs hold whole values"
                )
        # Values are freed after their last reader, on every device: the outputs stay. A
        # host program's steps run unrolled, each communication posted ahead of the kernels
        # it does not feed and awaited at its first reader (host_loops.pipelined).
        # Each needed input's hosted devices and the slice of it each holds (as `shard`).
        self._input_slices = {
            tv: [
                (d, device_slices(tv, d) if is_sharded(tv) else ())
                for d in self.backend.hosted(mesh_of(tv).devices)
            ]
            for tv in program.inputs
        }
        steps = self._steps = pipelined(program.executed())
        self._dead = dead_after(steps, _reads, _writes, keep=program.outputs)
        self._needed = read_anywhere(steps, _reads) | set(program.outputs)
        self.grids = GridCache()  # the kernel runner's index arrays, reused across runs
        self._layouts: dict[int, list] = {}  # per scheduled kernel, its outputs' (layouts, meshes)
        # How scheduled kernels run; None: op by op, as unscheduled ones always do.
        self._kernels = kernel_path(self.compute, compiler, program.kernels, self.grids)
        # Kernels of one matmul, linear or sdpa: numpy's BLAS, sdpa's dropout compiled.
        self._library = None
        if self._kernels is not None:
            # AMX's GEMM is built by the compiled path's compiler, or (interpreted) the default
            amx = AmxGemm(compiler or default_compiler()) if self.gemm == "amx" else None
            self._library = LibraryKernels(program.kernels, compiler, amx)
        # How many library kernels run on AMX (what the run report names)
        self.amx_kernels = self._library.on_amx() if self._library is not None else 0
        self._launches: dict[int, KernelLaunch] | None = None  # made at the first run
        self._library_launches: dict[int, LibraryLaunch | ViewLaunch] = {}  # with them
        self._blas_spread = False  # some library launch runs on the threads (with them)
        self._pooled: dict[TensorView, list[np.ndarray]] = {}
        self._collectives: dict[int, CollectivePlan] = {}
        self._wholes: dict[TensorView, tuple[np.ndarray, list[np.ndarray]]] = {}
        self._input_slices = {
            tv: d_slices for tv, d_slices in self._input_slices.items() if tv in self._needed
        }
        self._dead_in_kernel = {  # for the kernels run op by op
            id(k): dead_after(k.exprs, attrgetter("inputs"), attrgetter("outputs"), kernel_io(k))
            for k in program.kernels
            if not (k.scheduled and self._kernels is not None)
        }
        # Multi-process backends check their world and build team communicators here,
        # on every process, before any communication.
        self.backend.prepare(self.devices, self.communications)

    def close(self) -> None:
        """Free what the backend made in prepare() (mpi: the team communicators); on a
        multi-process backend every process calls it. Also `with FusionExecutor(...)`.
        Stops the threads of runtime/threads.py too."""
        self.backend.release()
        self.threads.close()

    def __enter__(self) -> FusionExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def validate(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> Validation:
        """Check `outputs` of a run on `inputs`: against the same program run unsharded on
        this compute path, then against the float reference (runtime.validation); returns
        the Validation, or raises ValidationError."""
        return validate_run(self, inputs, outputs)

    def working_set(self, device: int | None = None) -> WorkingSet:
        """Bytes of the inputs, the outputs and the largest set of intermediates live
        at once, each summed over the devices that hold it (docs/design.md §8), or
        those `device` holds itself."""
        size = device_bytes if device is None else functools.partial(local_bytes, device=device)
        steps: list = []  # what the executor materializes one at a time
        for s in self._steps:
            if isinstance(s, Kernel) and not (s.scheduled and self.schedule):
                steps.extend(s.exprs)  # op by op: each expression's output is an array
            else:
                steps.append(s)
        io = {*self.program.inputs, *self.program.outputs}
        return WorkingSet(
            inputs=sum(size(t) for t in dict.fromkeys(self.program.inputs)),
            outputs=sum(size(t) for t in dict.fromkeys(self.program.outputs)),
            intermediates=peak_live(steps, _reads, _writes, size, exclude=io),
        )

    @property
    def communications(self) -> list[Communication]:
        """The lowered communications, in execution order."""
        return self.program.communications

    @functools.cached_property
    def devices(self) -> list[int]:
        """Every device any tensor of the lowered program lives on: the inputs' (dead code
        reads them too) and those of every tensor a step computes (found once: every run
        asks, and the walk over the program took most of a 1000-op chain's run)."""
        meshes = {id(m): m for m in map(mesh_of, self.program.inputs)}
        for step in self.program.runs:  # the steps compute every other tensor
            for e in step.exprs if isinstance(step, Kernel) else [step]:
                for tv in e.outputs:
                    if id(tv.mesh) not in meshes:
                        meshes[id(tv.mesh)] = mesh_of(tv)
        return sorted({d for m in meshes.values() for d in m.devices})

    def run_per_device(self, inputs: Sequence[np.ndarray]) -> dict[int, list[np.ndarray | None]]:
        """Each hosted device's local output shards (None where it holds none)."""
        values = self._execute(inputs)
        return {
            d: [values[d].get(t) for t in self.program.outputs]
            for d in self.backend.hosted(self.devices)
        }

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray] | None:
        """Global outputs assembled from the devices' shards.

        With the mpi backend the shards are gathered to rank 0, which returns the
        global outputs; every other rank returns None.
        """
        every = self.backend.collect(self.run_per_device(inputs))
        wholes, self._wholes = self._wholes, {}
        if every is None:
            return None
        outs = []
        for i, (tv, (parts, _)) in enumerate(zip(self.program.outputs, self._output_layouts)):
            shards = {d: o[i] for d, o in every.items() if o[i] is not None}
            whole, views = wholes.get(tv, (None, ()))
            # A launch wrote the global array itself, if the shards are still its rows.
            if (
                whole is not None
                and len(shards) == len(views)
                and all(shards.get(d) is v for d, v in zip(mesh_of(tv).devices, views))
            ):
                outs.append(whole)
            else:
                outs.append(unshard(tv, shards, parts))
            for o in every.values():  # the shards are copied into the global array: free them
                o[i] = None
            del shards
        return outs

    @functools.cached_property
    def _output_layouts(self) -> list:
        """The program outputs' (layouts, meshes), asked once (layouts_of)."""
        return layouts_of(self.program.outputs)

    # -- execution ----------------------------------------------------------
    def _execute(self, inputs: Sequence[np.ndarray]) -> dict[int, dict[TensorView, np.ndarray]]:
        with self.backend.guard():
            self._launch_plans()
            if not self._blas_spread:
                return self._execute_unguarded(inputs)
            with self.threads.one_blas_thread():  # library launches on the threads
                return self._execute_unguarded(inputs)

    def _execute_unguarded(
        self, inputs: Sequence[np.ndarray]
    ) -> dict[int, dict[TensorView, np.ndarray]]:
        arrays = check_inputs(self.program, inputs)
        hosted = self.backend.hosted(self.devices)
        values: dict[int, dict[TensorView, np.ndarray]] = {d: {} for d in hosted}
        self._wholes = {}  # program outputs whose launch made their global array
        for tv, array in zip(self.program.inputs, arrays):
            for d, where in self._input_slices.get(tv, ()):
                values[d][tv] = array[where]
        given = dict(zip(self.program.inputs, arrays))  # a launch reads shards' addresses here
        del arrays
        steps = self._steps
        launches = self._launch_plans()
        posted: dict[int, Posted] = {}  # by step index: communications in flight
        rows: dict = {}  # launches' output stacks of this run (launch.rows_of), while live
        total, done = self._counted, 0
        for i, (step, dead) in enumerate(zip(steps, self._dead)):
            if self.progress is not None and not isinstance(step, Await):
                self.progress(STEPS, done, total, describe_step(step))
                done += 1
            launch = launches.get(i) or self._library_launches.get(i)
            if launch is not None:
                launch.run(values, given, self._pooled, self._wholes, rows)
            elif isinstance(step, Kernel):
                self._run_kernel(step, values)
            elif isinstance(step, ChunkView):  # a host loop's chunk of a tensor
                run_view(step, values)
            elif isinstance(step, Post):
                self.backend.begin_step(step.index, step.comm)
                posted[step.index] = self._post_communication(step.comm, values)
            else:  # the watchdog names the step a stalled wait belongs to
                self.backend.begin_step(step.index, step.comm)
                for d, array in self.backend.wait(posted.pop(step.index)).items():
                    values[d][step.comm.output] = array
            if dead:  # most steps free nothing
                for local in values.values():
                    _forget(local, dead)
                _forget(rows, dead)
        if self.progress is not None:
            self.progress(STEPS, total, total, "")
        return values

    @functools.cached_property
    def _counted(self) -> int:
        """The steps a Progress counts: kernels, views and communications (not awaits)."""
        return sum(not isinstance(s, Await) for s in self._steps)

    def _launch_plans(self) -> dict[int, KernelLaunch]:
        """Step index -> the launch plan of each compiled kernel (runtime/launch.py), made
        at the first run (after the kernels are built) and kept: the program never changes;
        the sim backend's collectives are planned with them (runtime/collectives.py)."""
        if self._launches is None:
            launches = {}
            if isinstance(self._kernels, CompiledKernels):
                for i, step in enumerate(self._steps):
                    if isinstance(step, Kernel) and step.scheduled:
                        mesh = step.mesh or SINGLE_DEVICE
                        hosted = self.backend.hosted(mesh.devices)
                        launch = self._kernels.launch(
                            step, mesh, hosted, self._output_shapes, self.threads
                        )
                        if launch is not None:
                            launches[i] = launch
            self._collectives = {  # by the Communication: a plan holds no buffers
                id(step.comm): plan
                for step in self._steps
                if isinstance(step, Post)
                and (plan := collective_plan(step.comm, self.backend)) is not None
            }
            # Library launches use the threads, BLAS held to one thread meanwhile (one
            # level of parallelism: runtime/threads.py).
            given = frozenset(self.program.inputs)
            self._library_launches = {  # unscheduled kernels: library calls, reshapes
                i: launch
                for i, step in enumerate(self._steps)
                if self._library is not None
                and isinstance(step, Kernel)
                and not step.scheduled
                and (
                    launch := library_launch(
                        step,
                        self._library,
                        self._hosted(step),
                        self._output_shapes,
                        self.threads,
                        given,
                    )
                )
                is not None
            }
            # A LibraryLaunch reads its operands only while it runs (its outputs are new
            # arrays, its casts in its plan's buffers): a launch output it reads may be pooled.
            readers = {i for i, x in self._library_launches.items() if isinstance(x, LibraryLaunch)}
            keep = set(self.program.outputs)
            self._pooled = plan_launches(self._steps, self._dead, launches, keep, readers)
            self._blas_spread = any(
                isinstance(launch, LibraryLaunch) and launch.threads is not None
                for launch in self._library_launches.values()
            )
            self._launches = launches
        return self._launches

    def _hosted(self, kernel: Kernel) -> list[int]:
        return self.backend.hosted((kernel.mesh or SINGLE_DEVICE).devices)

    def _run_kernel(self, kernel: Kernel, values) -> None:
        mesh = kernel.mesh or SINGLE_DEVICE
        for d in self.backend.hosted(mesh.devices):
            local = values[d]
            missing = [t.name for t in kernel.inputs if t not in local]
            if missing:
                raise ExecutionError(
                    f"device {d}: a kernel reads {', '.join(missing)}, which this device does not hold"
                )
            if kernel.scheduled and self._kernels is not None:
                local.update(self._run_scheduled(kernel, local, mesh, d))
                continue
            if self._library is not None and kernel in self._library:
                local.update(self._library.run(kernel, local, d))
                continue
            for e, dead in zip(kernel.exprs, self._dead_in_kernel[id(kernel)]):
                operands = [local[t] for t in e.inputs]
                shapes = [device_shape(t, d) for t in e.outputs]
                op = definition(e)
                start = shard_start(e.output, d) if op is not None and op.indexed else None
                made = eval_outputs(e, operands, shapes, start=start)
                local.update(zip(e.outputs, made))
                _forget(local, dead)
            for t in kernel.outputs:  # computed in the compute dtype, stored in their own
                local[t] = store(t, local[t])

    def _run_scheduled(self, kernel: Kernel, local, mesh: DeviceMesh, device: int) -> dict:
        """A scheduled kernel on one device. Its buffers are allocated as the IR says,
        ceil(n/d) rows of an uneven axis: a short chunk is padded in and its rows taken
        out, the kernel's predicates (the device's mesh coordinates) guarding the rest;
        a device whose chunks are empty runs nothing."""
        shapes = self._output_shapes(kernel, device)
        if all(0 in s for s in shapes):
            return {t: np.empty(s, t.dtype.numpy) for t, s in zip(kernel.outputs, shapes)}
        inputs = {t: pad_to(local[t], local_shape(t)) for t in kernel.inputs}
        out = self._kernels.run(kernel, inputs, device_coordinates(mesh, device))
        return {
            t: a if a.shape == s else a[tuple(slice(0, n) for n in s)]
            for t, s in zip(kernel.outputs, shapes)
            for a in (out[t],)
        }

    def _output_shapes(self, kernel: Kernel, device: int) -> list[tuple[int, ...]]:
        """device_shape of each output of a kernel: their layouts are asked once for every
        device and run (the lowered program never changes), a mesh's index of the
        device once per mesh."""
        layouts = self._layouts.get(id(kernel))
        if layouts is None:
            layouts = self._layouts[id(kernel)] = layouts_of(kernel.outputs)
        index: dict[int, int] = {}
        shapes = []
        for parts, mesh in layouts:
            k = index.get(id(mesh))
            if k is None:
                k = index[id(mesh)] = 0 if mesh is None else mesh.index(device)
            shapes.append(parts.shapes[k])
        return shapes

    def _post_communication(self, comm: Communication, values) -> Posted:
        """Start `comm` on the hosted devices' buffers; its Await writes its output."""
        collective = self._collectives.get(id(comm))
        if collective is not None:  # planned once (runtime/collectives.py): done at once
            return self.backend.post(ready(collective.run(values, self.threads)))
        bufs = {d: values[d][comm.input] for d in values if comm.input in values[d]}
        return post_communication(comm, self.backend, bufs)


def _lowered(fusion: Fusion, pipeline: Pipeline) -> Program:
    """The Program `pipeline` makes of `fusion`; it must reach the program level."""
    if pipeline.output_level is not Level.program:
        raise ExecutionError(
            f"the pipeline leaves a {pipeline.output_level.value}, not a program; it must run "
            "segment and lower-communications (fl.Pipeline.default() does)"
        )
    return pipeline.run(fusion)


def _reads(step: Kernel | Communication | Post | Await | Expr) -> list[TensorView]:
    return action_reads(step)


def _writes(step: Kernel | Communication | Post | Await | Expr) -> list[TensorView]:
    return action_writes(step)


STEPS = "kernels/communications"  # the executor's phase, as a Progress sees it


def describe_step(step: Kernel | Communication) -> str:
    """`kernel linear on 2 devices`, `scheduled kernel of 6 ops on 2 devices` or
    `Allgather T3 -> T4`, for a progress display."""
    if isinstance(step, (Post, Await)):
        step = step.comm
    if isinstance(step, Communication):
        return f"{step.kind.value} {step.input.name} -> {step.output.name}"
    if isinstance(step, ChunkView):
        return f"chunk {step.number} of {step.view.whole.name}"
    ops = step.exprs[0].op_name if len(step.exprs) == 1 else f"of {len(step.exprs)} ops"
    where = (step.mesh or SINGLE_DEVICE).size
    return f"{'scheduled kernel' if step.scheduled else 'kernel'} {ops} on {where} device(s)"


def kernel_io(kernel: Kernel) -> set[TensorView]:
    """A kernel's inputs and outputs: values that outlive its expressions."""
    return {*kernel.inputs, *kernel.outputs}


def _forget(local: dict[TensorView, np.ndarray], dead: list[TensorView]) -> None:
    """Drop dead values (their memory goes with the last reference)."""
    for tv in dead:
        local.pop(tv, None)
