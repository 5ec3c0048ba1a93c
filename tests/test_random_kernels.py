"""rand_like and dropout inside pointwise kernels: each element's Philox number is drawn
at its global linear index (its shard's offset included) by the kernel body itself, on
every compute path, bit for bit the reference's numbers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from three_way import bits_differ, precompile, run_three_ways

import fuserlite as fl
from fuserlite.kernel.cuda import cuda_source
from fuserlite.kernel.indexing import evaluate, shard_start
from fuserlite.kernel.runner import device_coordinates
from fuserlite.program.shards import device_box, device_shape
from fuserlite.schedule.shard import shard_axis

DIDx, DIDy = fl.ParallelType.DIDx, fl.ParallelType.DIDy
DTYPES = ("float32", "bfloat16", "float16", "float64")
# name: (shape, mesh shape, [(logical axis, parallel type), ...] in nesting order)
SHARDINGS = {
    "unsharded": ((8, 12), None, []),
    "even": ((8, 12), [4], [(1, DIDx)]),
    "uneven": ((9, 12), [5], [(0, DIDx)]),  # chunks of 2: 2 2 2 2 1
    "whole": ((8, 12), [8], [(0, DIDx)]),  # the axis parallelized whole: ideviceIdx.x{8}
    "2x4": ((8, 12), [2, 4], [(0, DIDy), (1, DIDx)]),
    "2x4 uneven": ((9, 10), [2, 4], [(0, DIDy), (1, DIDx)]),
}
# One axis split over both mesh axes: 9 rows as 2 2 1 0 | 2 2 0 0. schedule-pointwise
# leaves such kernels unscheduled (it cannot propagate nested shardings), so only
# the shard offsets' index expressions are checked on it.
NESTED = {"2x4 nested uneven": ((9, 12), [2, 4], [(0, DIDy), (0, DIDx)])}


def random_chain(dtype: str, sharding: str) -> fl.Fusion:
    """A bias-gelu-dropout-residual chain and a bare rand_like, sharded as named."""
    shape, mesh_shape, splits = {**SHARDINGS, **NESTED}[sharding]
    with fl.Fusion() as f:
        x, b = fl.tensor(shape, dtype, name="x"), fl.tensor(shape, dtype, name="b")
        f.add_input(x)
        f.add_input(b)
        if mesh_shape is not None:
            mesh = fl.DeviceMesh.for_shape(mesh_shape)
            for tv in (x, b):
                for axis, pt in splits:
                    whole = sum(a == axis for a, _ in splits) == 1
                    shard_axis(tv, axis, mesh, pt, whole=whole)
        f.add_output(x + fl.dropout(fl.relu(x * b), 0.25, seed=11, offset=3))
        f.add_output(fl.rand_like(b, seed=5, offset=1))
    return f


def test_dropout_in_a_kernel_is_the_reference_bit_for_bit_on_every_path() -> None:
    """Sharded evenly, unevenly, parallelized whole and nested on a 2x4 mesh, in every
    float dtype: rand_like is computed inside one scheduled kernel with the rest of
    the chain, and every compute path stores exactly the reference's bits."""
    cases = [(d, s, random_chain(d, s)) for d in DTYPES for s in SHARDINGS]
    lowered = {(d, s): fl.FusionExecutor(f, compute="compiled") for d, s, f in cases}
    precompile(lowered.values())  # one compiler launch for every case
    for dtype, sharding, fusion in cases:
        program = lowered[dtype, sharding].program
        (kernel,) = [k for k in program.kernels if any(e.op_name == "rand_like" for e in k.exprs)]
        assert kernel.scheduled and any(e.op_name == "mul" for e in kernel.exprs), sharding
        inputs = fl.random_inputs(fusion, seed=7)
        want = fl.evaluate(fusion, inputs)
        runs = run_three_ways(fusion, inputs, executor=lowered[dtype, sharding])
        for compute, outputs in runs.items():
            diffs = [bits_differ(got, ref) for got, ref in zip(outputs, want)]
            assert diffs == [None, None], (dtype, sharding, compute, diffs)


def test_a_transformer_block_like_chain_is_two_kernels() -> None:
    """linear, then bias + gelu + dropout + residual: the segmenter puts the dropout's
    rand_like inside the pointwise kernel (it was a kernel of its own between two
    pointwise kernels: four kernels)."""
    with fl.Fusion() as f:
        x, w, bias = fl.tensor([16, 32]), fl.tensor([32, 32]), fl.tensor([32])
        for t in (x, w, bias):
            f.add_input(t)
        mesh = fl.DeviceMesh.for_num_devices(4)
        shard_axis(x, 0, mesh)  # sequence-parallel rows
        h = fl.gelu(fl.linear(x, w) + bias)
        f.add_output(x + fl.dropout(h, 0.1, seed=2))
    program = fl.lower(f)
    assert [k.scheduled for k in program.kernels] == [False, True]
    assert "rand_like" in [e.op_name for e in program.kernels[1].exprs]
    inputs = fl.random_inputs(f, seed=3)
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))


def test_the_transformer_block_draws_its_dropout_inside_a_kernel() -> None:
    """No kernel of the GPT block is a rand_like alone."""
    from fuserlite import models

    program = fl.lower(models.transformer_block())
    random = [k for k in program.kernels if any(e.op_name == "rand_like" for e in k.exprs)]
    assert random and all(k.scheduled and len(k.exprs) > 1 for k in random)


@pytest.mark.parametrize("sharding", [*SHARDINGS, *NESTED])
def test_shard_offsets_are_the_executors_block_starts(sharding: str) -> None:
    """The kernels' shard offset of every axis, evaluated at each device's indices, is
    where the executor's shard of that device starts (plan.blocks; an empty chunk, whose
    rows the kernel predicates off, starts anywhere)."""
    fusion = random_chain("float32", sharding)
    x = fusion.inputs[0]
    for device in x.mesh.devices if x.mesh else [0]:
        indices = device_coordinates(x.mesh, device) if x.mesh else {}
        starts = [int(evaluate(ix, indices, {})) for ix in shard_start(x)]
        want = [s for s, _ in device_box(x, device)] if x.mesh else [0, 0]
        empty = [n == 0 for n in device_shape(x, device)]
        assert [s if not e else None for s, e in zip(starts, empty)] == [
            w if not e else None for w, e in zip(want, empty)
        ], (sharding, device)


def test_the_kernel_reads_the_device_index_of_an_even_sharding() -> None:
    """An even sharding needs no predicate, but rand_like's global index reads didx."""
    src = cuda_source(fl.lower(random_chain("float32", "even")))
    assert "const long long didx)" in src
    assert "fl_uniformf(11ULL, 3ULL, static_cast<unsigned long long>(" in src
    assert "didx * 3" in src  # the shard's offset: 12 columns over 4 devices


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_nvcc_compiles_the_random_kernels(tmp_path: Path) -> None:
    """The CUDA of every dtype and sharding above compiles for the device."""
    kernels = [k for d in DTYPES for s in SHARDINGS for k in fl.lower(random_chain(d, s)).kernels]
    cu = tmp_path / "random.cu"
    cu.write_text(cuda_source(kernels))
    proc = subprocess.run(
        ["nvcc", "-ptx", "-o", str(tmp_path / "random.ptx"), str(cu)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "random.ptx").read_text().count(".entry") == len(kernels)


def test_a_rand_like_read_by_index_is_recomputed_at_its_consumers_points() -> None:
    """A rand_like broadcast along a new axis: the broadcast is not inlined (its
    consumer iterates an axis it lacks), so the kernel runner stores it and reads it
    back, and the C body recomputes it, rand_like included, at the coordinates the
    consumer maps to; both at rand_like's own global indices."""
    with fl.Fusion() as f:
        x, z = fl.tensor([10], "bfloat16"), fl.tensor([10, 6], "bfloat16")
        f.add_input(x)
        f.add_input(z)
        mesh = fl.DeviceMesh.for_num_devices(3)  # 10 rows over 3 devices: 4 4 2
        shard_axis(x, 0, mesh)
        shard_axis(z, 0, mesh)
        r = fl.rand_like(x, seed=9)
        f.add_output(fl.broadcast(r, [False, True]) * z)
    program = fl.lower(f)
    (kernel,) = program.kernels
    (b,) = [e.output for e in kernel.exprs if e.op_name == "broadcast"]
    assert kernel.scheduled and b.compute_at_pos == 0
    src = cuda_source(program)  # the row of the consumer's point l2 is l2 / 6
    assert (
        "? fl_uniform_bfloat16(9ULL, 0ULL, static_cast<unsigned long long>(((l2 / 6) + (didx * 4))))"
        in src
    )
    inputs = fl.random_inputs(f, seed=4)
    want = fl.evaluate(f, inputs)
    for compute, outputs in run_three_ways(f, inputs).items():
        assert bits_differ(outputs[0], want[0]) is None, compute


@pytest.mark.parametrize("split", [False, True])
def test_the_cpu_memo_of_philox_calls_gives_the_reference_bits(split, monkeypatch) -> None:
    """On the CPU a block's draws share its philox memo (one call per four neighbours); a
    kernel split into parts draws without it (the file's null memo): the same bits."""
    from fuserlite.kernel import cpu_parts
    from fuserlite.kernel.cpu import MEMO_DECLARATION, cpu_function

    if split:
        monkeypatch.setattr(cpu_parts, "FUNCTION_BYTES", 0)
        monkeypatch.setattr(cpu_parts, "PART_BYTES", 400)
    fusion = random_chain("bfloat16", "uneven")
    ex = fl.FusionExecutor(fusion, compute="compiled")
    (kernel,) = [k for k in ex.program.kernels if any(e.op_name == "rand_like" for e in k.exprs)]
    function = cpu_function(kernel)
    assert (function.parts > 1) == split
    assert (MEMO_DECLARATION[0] in function.source) == (not split)
    inputs = fl.random_inputs(fusion, seed=2)
    want = fl.evaluate(fusion, inputs)
    for compute, outputs in run_three_ways(fusion, inputs, executor=ex).items():
        assert [bits_differ(a, b) for a, b in zip(outputs, want)] == [None, None], compute
