"""Launch plans: a compiled kernel run on every device of its mesh in one native call.

    launches = plan_launches(steps, dead, kernels, hosted, keep)   # once per executor
    launches[i].run(values, inputs)    # step i on every hosted device: one C++ call

The plan of a compiled kernel is made once, at the executor's first run, and holds
what every run would otherwise work out per device: the devices that run it (a
device whose chunks are all empty runs nothing), the table of buffer addresses
(one row per device, as the kernel's entry point takes them, its device indices
written once at the end of each row), each output's buffer and each device's view
of it. A run fills in only the addresses that change and calls `fuserlite_launch` (in the
CPU prelude), which calls the kernel once per row.

Outputs are allocated for all devices at once, one array of a row per device
(poisoned, as the kernel runner's outputs start; above 32 MiB a buffer per row). An output that only compiled
kernels read and that is not a program output is *pooled*: its buffer is made at
planning and kept across runs, and shared with a later kernel's output of the same
shape and dtype once the program's liveness has freed it (such a shared buffer is
poisoned again before each write, so an element no grid point writes reads as it
would in a fresh one). Nothing but compiled kernels, which copy nothing into their
outputs, reads a pooled buffer, so no view of one outlives its run. A kernel input
read from a pooled buffer is recognised by identity and costs nothing; a program
input's address comes from the global array and its static offsets; a launch's
output stack of this run (`rows`: a fresh stack of a compiled kernel's, a library
launch's, a reshaped one of a view launch's) is recognised by the identity of each
device's row (rows_of) and its rows' addresses follow from the stack's; any other
array (a collective's output) is checked (shape, dtype, contiguity) once per
device and padded where a short chunk must be. A library launch's operands are
found the same way, a program input's where its shards are consecutive blocks of
the global array (decided at planning; a run's global array must be C-contiguous,
else the devices' arrays are stacked as any others).
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from operator import is_

import numpy as np

from fuserlite.ir.errors import ExecutionError
from fuserlite.ir.mesh import DeviceMesh
from fuserlite.ir.sharding import local_shape
from fuserlite.ir.tensor import TensorView
from fuserlite.kernel.indexing import device_indices
from fuserlite.kernel.library import NumpyCasts
from fuserlite.kernel.memory import poison
from fuserlite.kernel.runner import device_coordinates, device_values
from fuserlite.program.host import ChunkView
from fuserlite.program.program import Kernel
from fuserlite.program.shards import is_sharded, layout
from fuserlite.runtime.communicator import pad_to

Launcher = Callable[[int, int, int, int], None]  # fuserlite_launch(kernel, table, rows, stride)


# glibc's malloc serves a block of up to 32 MiB from its heap, reused run after run; a
# larger one is a fresh mmap every run, each of its pages faulted in and zeroed again
# (the tensor-parallel MLP's 128 MiB output stack filled 4x slower than its 16 MiB rows
# apart: benchmarks/executor_overhead.py). A stack that large is made a row at a time.
ONE_BLOCK_BYTES = 32 << 20


def shard_offsets(tv: TensorView, devices: list[int]) -> np.ndarray | None:
    """Byte offsets of each of `devices`' shard of `tv` in its global C-contiguous array;
    None where some shard is not such a block (a short chunk, an inner axis cut)."""
    shape, want = tuple(tv.shape), local_shape(tv)
    if not is_sharded(tv):
        return np.zeros(len(devices), np.uintp) if shape == want else None
    if layout(tv).boxes is None or not all(d in tv.mesh.devices for d in devices):
        return None  # a cyclic shard: rows r, r + d, ..., no block of the global array
    boxes = layout(tv).boxes
    starts = []
    for d in devices:
        box = boxes[tv.mesh.index(d)]
        sizes = tuple(stop - start for start, stop in box)
        # Contiguous in C order: one row of every axis before the first one of
        # several rows, every axis after it whole.
        k = next((i for i, n in enumerate(sizes) if n != 1), len(sizes))
        if sizes != want or 0 in sizes or sizes[k + 1 :] != shape[k + 1 :]:
            return None
        starts.append(np.ravel_multi_index([s for s, _ in box], shape))
    return np.array(starts, np.uintp) * np.uintp(np.dtype(tv.dtype.numpy).itemsize)


def rows_of(arrays: list, made: tuple[np.ndarray, list[np.ndarray]] | None) -> np.ndarray | None:
    """The stack `arrays` (each device's array of a tensor) are the rows of, where `made`
    (a launch's (stack, its rows) of this run, from `rows`) says so: the same objects, in
    order (identity: no address asked); else None."""
    if made is None or len(made[1]) != len(arrays) or not all(map(is_, arrays, made[1])):
        return None
    return made[0]


class _Output:
    """One kernel output: its buffer (pooled) or how to make one (fresh per run), and
    each device's view of it."""

    def __init__(self, tv: TensorView, rows: int, shapes: list[tuple[int, ...]]) -> None:
        self.tv = tv
        self.local = local_shape(tv)
        self.dtype = np.dtype(tv.dtype.numpy)
        self.poison = poison(tv.dtype.numpy)
        self.stack_shape = (rows, *self.local)
        self.row_bytes = math.prod(self.local) * self.dtype.itemsize
        # A device's view: the whole row, or its own rows of a short chunk.
        self.cuts = [None if s == self.local else tuple(slice(0, n) for n in s) for s in shapes]
        self.uncut = all(cut is None for cut in self.cuts)  # each view its whole row
        self.buffer: np.ndarray | None = None  # pooled: set by plan_launches
        self.shared = False  # pooled and shared with another output: poisoned each run
        self.views: list[np.ndarray] = []  # pooled: each running device's view, kept

    def pool(self, buffer: np.ndarray, shared: bool) -> None:
        self.buffer, self.shared = buffer, shared
        self.views = self._views(buffer)

    def _views(self, stack: np.ndarray) -> list[np.ndarray]:
        # stack[r, ...]: a view even of a 0-d row (iterating the stack gives scalars, copies)
        rows = [stack[r, ...] for r in range(len(self.cuts))] if not self.local else list(stack)
        return [row if cut is None else row[cut] for row, cut in zip(rows, self.cuts)]

    def fresh(self) -> tuple[np.ndarray | None, list[np.ndarray]]:
        """A new poisoned buffer: one stack of the rows (returned with the views), or, for
        a stack above ONE_BLOCK_BYTES, a buffer per row (the stack None)."""
        if self.row_bytes * len(self.cuts) <= ONE_BLOCK_BYTES:
            stack = np.full(self.stack_shape, self.poison, self.dtype)
            return stack, self._views(stack)
        rows = [np.full(self.local, self.poison, self.dtype) for _ in self.cuts]
        return None, [row if cut is None else row[cut] for row, cut in zip(rows, self.cuts)]


class KernelLaunch:
    """A compiled kernel on every hosted device of its mesh, as one call of fuserlite_launch."""

    def __init__(
        self,
        kernel: Kernel,
        function: Callable,
        launcher: Launcher,
        mesh: DeviceMesh,
        hosted: list[int],
        output_shapes: Callable[[Kernel, int], list[tuple[int, ...]]],
    ) -> None:
        self.kernel = kernel
        self.hosted = hosted
        shapes = {d: output_shapes(kernel, d) for d in hosted}
        # A device whose chunks are all empty runs nothing: its outputs are empty arrays.
        self.devices = [d for d in hosted if not all(0 in s for s in shapes[d])]
        self.empty = {
            d: [np.empty(s, t.dtype.numpy) for t, s in zip(kernel.outputs, shapes[d])]
            for d in hosted
            if d not in self.devices
        }
        rows = len(self.devices)
        self.inputs = [(t, local_shape(t), np.dtype(t.dtype.numpy)) for t in kernel.inputs]
        self.outputs = [
            _Output(t, rows, [shapes[d][j] for d in self.devices])
            for j, t in enumerate(kernel.outputs)
        ]
        names = device_indices(kernel.tensors)
        self.stride = len(self.inputs) + len(self.outputs) + len(names)
        self.table = np.zeros((rows, self.stride), np.uintp)
        first = len(self.inputs) + len(self.outputs)
        for r, d in enumerate(self.devices):
            # A device index travels as the integer in its address slot (cpu_parts.from_address).
            found = device_values(kernel, names, device_coordinates(mesh, d))
            self.table[r, first:] = list(found.values())
        self._address = self.table.ctypes.data
        self._function = ctypes.cast(function, ctypes.c_void_p).value
        self._launcher = launcher
        # Program inputs: the byte offset of each device's shard in the global array, where
        # every running device's shard is a whole, contiguous block of it.
        self._offsets: dict[int, np.ndarray | None] = {}
        self._row_offsets = np.arange(rows, dtype=np.uintp)
        # Per input, the pooled views whose addresses the table holds (None: none yet).
        self._known: list[list[np.ndarray] | None] = [None] * len(self.inputs)
        self._whole: dict[int, bool] = {}  # per output: _is_whole, found at its first run
        self.keep: set[TensorView] = set()  # the program's outputs (plan_launches)
        self.threads = None  # a DeviceThreads that runs ranges of the rows at once (spread)

    def spread(self, threads) -> None:
        """Run ranges of the devices on `threads` (runtime/threads.py) where the launch's
        work (grid points x expressions over its devices) is large enough."""
        points = max((math.prod(o.local) for o in self.outputs), default=0)
        work = len(self.devices) * points * len(self.kernel.exprs)
        self.threads = threads if threads.spreads(work, len(self.devices)) else None

    def offsets_of(self, tv: TensorView) -> np.ndarray | None:
        """shard_offsets of `tv` on the running devices (asked once per tensor)."""
        if id(tv) not in self._offsets:
            self._offsets[id(tv)] = shard_offsets(tv, self.devices)
        return self._offsets[id(tv)]

    def row_addresses(self, stack: np.ndarray, row_bytes: int) -> np.ndarray:
        """The address of each row of a buffer of a row per running device."""
        return np.uintp(stack.ctypes.data) + self._row_offsets * np.uintp(row_bytes)

    def _is_whole(self, out: _Output) -> bool:
        """True if the rows of `out`'s buffer, in order, are its global array: every device
        of its mesh runs and holds the next block of it."""
        whole = self._whole.get(id(out))
        if whole is None:
            tv = out.tv
            offsets = self.offsets_of(tv)
            whole = self._whole[id(out)] = (
                tv in self.keep
                and offsets is not None
                and tv.mesh is not None
                and self.devices == list(tv.mesh.devices)
                and np.array_equal(offsets, self._row_offsets * np.uintp(out.row_bytes))
            )
        return whole

    def run(
        self,
        values: dict[int, dict[TensorView, np.ndarray]],
        inputs: dict[TensorView, np.ndarray],
        pooled: dict[TensorView, list[np.ndarray]],
        wholes: dict[TensorView, tuple[np.ndarray, list[np.ndarray]]],
        rows: dict[TensorView, tuple[np.ndarray, list[np.ndarray]]],
    ) -> None:
        """Run the kernel on every hosted device: its outputs join `values`. `inputs`: the
        run's global arrays of the program inputs; `pooled`: the views of pooled buffers;
        `wholes` is given (global array, the devices' views of it) for each fresh output
        whose rows, in order, are its global array (no copy to assemble it); `rows`: this
        run's launch output stacks (stack, the devices' rows of it), read where an input
        is such rows (their addresses from the stack's) and given this launch's own."""
        table, devices = self.table, self.devices
        keep = []  # padded copies, alive until the call returns
        for c, (tv, shape, dtype) in enumerate(self.inputs):
            known = self._known[c]
            if known is not None and all(map(is_, [values[d].get(tv) for d in devices], known)):
                continue  # views of a pooled buffer, whose addresses are in the table
            whole = inputs.get(tv)
            offsets = None if whole is None else self.offsets_of(tv)
            if offsets is not None and whole.flags.c_contiguous:
                table[:, c] = np.uintp(whole.ctypes.data) + offsets
                continue
            stack = None if whole is not None else rows.get(tv)
            if stack is not None:
                stack = rows_of([values[d].get(tv) for d in self.devices], stack)
            if (
                stack is not None
                and stack.dtype == dtype
                and stack.shape[1:] == shape
                and stack.flags.c_contiguous
            ):
                table[:, c] = self.row_addresses(stack, stack.strides[0])
                continue
            last, address, padded = None, 0, len(keep)
            for r, d in enumerate(self.devices):
                a = values[d].get(tv)
                if a is None:
                    raise ExecutionError(
                        f"device {d}: a kernel reads {tv.name}, which this device does not hold"
                    )
                if a is not last:
                    last = a
                    if (
                        not isinstance(a, np.ndarray)  # a numpy scalar of an op run by numpy
                        or a.shape != shape
                        or a.dtype != dtype
                        or not a.flags.c_contiguous
                    ):
                        a = pad_to(np.asarray(a, dtype), shape)
                        keep.append(a)
                    address = a.ctypes.data
                table[r, c] = address
            if tv in pooled and padded == len(keep):  # kept views, the same next run
                self._known[c] = [values[d][tv] for d in self.devices]
        fresh = []
        base = len(self.inputs)
        for c, out in enumerate(self.outputs, base):
            if out.buffer is not None:
                if out.shared:
                    out.buffer.fill(out.poison)
                if out.uncut:  # a library launch reads its rows from the buffer
                    rows[out.tv] = (out.buffer, out.views)
                continue
            stack, views = out.fresh()
            if stack is None:  # a buffer per row: each view starts at its row's start
                table[:, c] = [v.ctypes.data for v in views]
            else:
                table[:, c] = self.row_addresses(stack, out.row_bytes)
            fresh.append(views)
            if stack is not None and out.uncut:
                rows[out.tv] = (stack, views)
            if stack is not None and self._is_whole(out):
                wholes[out.tv] = (stack.reshape(out.tv.shape), views)
        if self.threads is not None:
            self.threads.run(self._launch_rows, len(self.devices))
        elif self.devices:
            self._launcher(self._function, self._address, len(self.devices), self.stride)
        del keep
        made = iter(fresh)
        for out in self.outputs:
            views = out.views if out.buffer is not None else next(made)
            tv = out.tv
            for d, v in zip(self.devices, views):
                values[d][tv] = v
        for d, arrays in self.empty.items():
            values[d].update(zip(self.kernel.outputs, arrays))

    def _launch_rows(self, start: int, stop: int) -> None:
        """The kernel on rows [start, stop) of the address table: one native call."""
        at = self._address + start * self.stride * self.table.itemsize
        self._launcher(self._function, at, stop - start, self.stride)


def plan_launches(
    steps: Sequence,
    dead: Sequence[Sequence[TensorView]],
    launches: dict[int, KernelLaunch],
    keep: set[TensorView],
    readers: set[int] = frozenset(),
) -> dict[TensorView, list[np.ndarray]]:
    """Pool the outputs of `launches` (step index -> its plan) that only launched kernels
    and the steps `readers` (library launches, which hold no operand after they run)
    read and that are not in `keep` (the program's outputs), sharing a buffer between
    outputs whose lives do not overlap; returns each pooled tensor's device views."""
    safe = set(launches) | set(readers)
    for launch in launches.values():
        launch.keep = keep
    read_by: dict[TensorView, list[int]] = {}
    for i, step in enumerate(steps):
        for tv in step.inputs if isinstance(step, (Kernel, ChunkView)) else [step.input]:
            read_by.setdefault(tv, []).append(i)
    free: dict[tuple, list[int]] = {}  # spare buffers by (shape, dtype): their numbers
    buffers: list[tuple[np.ndarray, list[_Output]]] = []  # each with the outputs given it
    holder: dict[TensorView, tuple[tuple, int]] = {}
    for i in range(len(steps)):
        launch = launches.get(i)
        if launch is not None:
            for out in launch.outputs:
                tv = out.tv
                if tv in keep or not all(r in safe for r in read_by.get(tv, [])):
                    continue
                key = (out.stack_shape, out.dtype.str)
                spare = free.get(key)
                if spare:
                    n = spare.pop()
                else:
                    n = len(buffers)
                    buffers.append((np.full(out.stack_shape, out.poison, out.dtype), []))
                buffers[n][1].append(out)
                holder[tv] = (key, n)
        for tv in dead[i]:
            if tv in holder:
                key, n = holder.pop(tv)
                free.setdefault(key, []).append(n)
    for buffer, outs in buffers:
        for out in outs:
            # Another output's values are in a shared buffer when its kernel runs: poison it.
            out.pool(buffer, shared=len(outs) > 1)
    pooled = {}
    for launch in launches.values():
        for c, out in enumerate(launch.outputs, len(launch.inputs)):
            if out.buffer is not None:
                launch.table[:, c] = launch.row_addresses(out.buffer, out.row_bytes)
                pooled[out.tv] = out.views
    return pooled


def stacked(arrays: list[np.ndarray], dtype: np.dtype | None = None) -> tuple[np.ndarray, bool]:
    """Each device's array of one tensor as what run_stacked takes, in `dtype` (None: as
    they are): (the one
    array, True) where every device holds the same one (a replicated collective's
    output), else (a stack of a row per device, False): the buffer they are consecutive
    rows of where they are (a launch's output stack, the shards of a program input split
    on its outer axis), no copy before the cast, else a new stack."""
    first = arrays[0]
    if all(a is first for a in arrays):
        return _cast(first, dtype), True
    root = first
    while isinstance(root.base, np.ndarray):
        root = root.base
    size, nbytes = first.size, first.nbytes
    if root.flags.c_contiguous and root.dtype == first.dtype and nbytes:
        start = first.ctypes.data - root.ctypes.data
        if (
            start >= 0
            and start % first.itemsize == 0
            and start + nbytes * len(arrays) <= root.nbytes
            and all(
                a.shape == first.shape
                and a.dtype == first.dtype
                and a.flags.c_contiguous
                and a.ctypes.data == first.ctypes.data + r * nbytes
                for r, a in enumerate(arrays)
            )
        ):
            at = start // first.itemsize
            rows = root.reshape(-1)[at : at + size * len(arrays)]
            return _cast(rows.reshape(len(arrays), *first.shape), dtype), False
    return _cast(np.stack(arrays), dtype), False


def _cast(array: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    return array if dtype is None else array.astype(dtype, copy=False)


class LibraryLaunch:
    """A library kernel (kernel/library.py: one matmul, linear or sdpa) on every hosted
    device at once (`_Plan.run_stacked`): each operand stacked, each output stored as a
    stack whose rows are the devices' arrays; ranges of the rows on `threads` where the
    launch's work is large enough (runtime/threads.py). Made where every hosted device
    runs a call of one shape (library_launch); else the executor calls the library per
    device."""

    def __init__(
        self,
        kernel: Kernel,
        plan,
        devices: list[int],
        dropout,
        library=None,
        threads=None,
        given: frozenset[TensorView] = frozenset(),
    ) -> None:
        self.kernel = kernel
        self.library = library  # the per-device path, for operands of differing shapes
        self.plan = plan
        self.devices = devices
        self.dropout = dropout
        self.casts = library.casts if library is not None else NumpyCasts
        self.gemm = library.gemm if library is not None else None
        spread = threads is not None and threads.spreads(plan.work(devices), len(devices))
        self.threads = threads if spread else None  # None: every row on the calling thread
        # Per operand, where a program input's devices' shards are one block each of its
        # global array, in the devices' order: one array (replicated), or the elements
        # [first, first + size * rows) (its stack); None: found at run time (stacked).
        # `given`: the program's inputs.
        self.blocks = [self._block(tv) if tv in given else None for tv in plan.expr.inputs]

    def _block(self, tv: TensorView) -> tuple[bool, int, tuple[int, ...]] | None:
        offsets = shard_offsets(tv, self.devices)
        if offsets is None:
            return None
        if not is_sharded(tv):
            return True, 0, ()
        itemsize = np.dtype(tv.dtype.numpy).itemsize
        local = local_shape(tv)
        step = math.prod(local) * itemsize
        if not np.array_equal(offsets, offsets[0] + np.arange(len(offsets), dtype=np.uintp) * step):
            return None  # blocks, but not consecutive in the devices' order
        return False, int(offsets[0]) // itemsize, local

    def run(
        self, values: dict[int, dict[TensorView, np.ndarray]], inputs, _pooled, _wholes, rows
    ) -> None:
        """The kernel on every device: its outputs join `values` and their stacks `rows`
        (KernelLaunch.run's arguments). An operand is a stack `rows` gives (the devices'
        arrays its rows), a program input's global array (its shards consecutive blocks
        of it), or else the devices' arrays as stacked() finds them."""
        expr = self.plan.expr
        operands = []
        for tv, block in zip(expr.inputs, self.blocks):
            arrays = []
            for d in self.devices:
                a = values[d].get(tv)
                if a is None:
                    raise ExecutionError(
                        f"device {d}: a kernel reads {tv.name}, which this device does not hold"
                    )
                arrays.append(a)
            stack = rows_of(arrays, rows.get(tv))
            if stack is not None:
                operands.append((stack, False))
                continue
            whole = inputs.get(tv) if block is not None else None
            if whole is not None and whole.flags.c_contiguous:  # the shards' global array
                one, first, local = block
                if one:
                    operands.append((whole, True))
                else:
                    size = math.prod(local) * len(arrays)
                    flat = whole.reshape(-1)[first : first + size]
                    operands.append((flat.reshape(len(arrays), *local), False))
                continue
            arrays = [np.asarray(a) for a in arrays]
            if any(a.shape != arrays[0].shape for a in arrays):
                # An uneven operand (a device holds fewer rows of the contraction): the
                # devices' calls differ in shape, so each runs its own.
                for d in self.devices:
                    values[d].update(self.library.run(self.kernel, values[d], d))
                return
            operands.append(stacked(arrays))
        outputs = self.plan.run_stacked(
            operands, self.devices, self.dropout, self.threads, self.casts, self.gemm
        )
        for tv, stack in zip(expr.outputs, outputs):
            views = [stack[r, ...] for r in range(len(self.devices))]
            for d, v in zip(self.devices, views):
                values[d][tv] = v
            rows[tv] = (stack, views)


class ViewLaunch:
    """A kernel of one reshape on every hosted device: each device's array reshaped to
    its output's local shape, a view where numpy can make one (no cast to the compute
    dtype and back, which the op-by-op path makes: the same bits, NaN payloads kept)."""

    def __init__(self, kernel: Kernel, shapes: dict[int, tuple[int, ...]]) -> None:
        self.kernel = kernel
        (self.expr,) = kernel.exprs
        self.shapes = shapes
        # The one output shape of every device (None: they differ), for a stack's reshape.
        self.same = next(iter(shapes.values())) if len(set(shapes.values())) == 1 else None

    def run(
        self, values: dict[int, dict[TensorView, np.ndarray]], _inputs, _pooled, _wholes, rows
    ) -> None:
        """The reshape on every device: its output joins `values`; where the devices'
        arrays are the rows of a stack in `rows` (KernelLaunch.run's), the stack is
        reshaped (a view: the same rows) and given there too."""
        (tv,), out = self.expr.inputs, self.expr.output
        made = rows.get(tv)
        if made is not None and self.same is not None:
            devices = list(self.shapes)
            stack = rows_of([values[d].get(tv) for d in devices], made)
            if stack is not None:
                stack = stack.reshape(len(devices), *self.same)
                views = [stack[r, ...] for r in range(len(devices))]
                for d, v in zip(devices, views):
                    values[d][out] = v
                rows[out] = (stack, views)
                return
        for d, shape in self.shapes.items():
            a = values[d].get(tv)
            if a is None:
                raise ExecutionError(
                    f"device {d}: a kernel reads {tv.name}, which this device does not hold"
                )
            values[d][out] = np.asarray(a).reshape(shape)


def library_launch(
    kernel: Kernel,
    library,
    hosted: list[int],
    output_shapes: Callable[[Kernel, int], list[tuple[int, ...]]],
    threads=None,
    given: frozenset[TensorView] = frozenset(),
) -> LibraryLaunch | ViewLaunch | None:
    """The launch of an unscheduled kernel on the `hosted` devices: a library kernel of
    one call shape on every device (LibraryLaunch), a kernel of one reshape (ViewLaunch);
    None for any other (the executor runs it per device). `library`: the program's
    kernel.library.LibraryKernels; `threads`: the executor's DeviceThreads (None: none);
    `given`: the program's inputs (a library launch reads their global arrays)."""
    if len(kernel.exprs) == 1 and kernel.exprs[0].op_name == "reshape":
        (tv,) = kernel.outputs
        if tv.dtype is not kernel.exprs[0].inputs[0].dtype:
            return None
        return ViewLaunch(kernel, {d: output_shapes(kernel, d)[0] for d in hosted})
    if kernel not in library or not hosted:
        return None
    plan = library.plan(kernel)
    if not plan.same_rows(hosted):
        return None
    return LibraryLaunch(kernel, plan, hosted, library.dropout, library, threads, given)
