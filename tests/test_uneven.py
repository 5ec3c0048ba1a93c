"""Uneven sharding with torch.chunk semantics: extents a mesh does not divide.

Device i of d holds rows [i*c, min((i+1)*c, n)), c = ceil(n/d): 13 over 4 is
4 4 4 1, 5 over 4 is 2 2 1 0 (an empty device), 3 over 4 is 1 1 1 0. Every case
is checked against the reference; the MPI side is tests/test_mpi.py's job.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from three_way import HAVE_COMPILER

import fuserlite as fl
from fuserlite import cli, models
from fuserlite.kernel.cuda import cuda_source
from fuserlite.kernel.runner import run_kernel
from fuserlite.passes.chunking import uneven_bytes
from fuserlite.pipeline import default_pass_names
from fuserlite.plan.blocks import axis_rows, blocks
from fuserlite.plan.placement import Placement
from fuserlite.program.communication import Sizing
from fuserlite.program.parser import parse_printed
from fuserlite.runtime.compute import CompiledKernels, default_compiler
from fuserlite.schedule.shard import shard_axis

D = 4
EXTENTS = [13, 14, 15, 17, 5, 3]  # 5: device 3 holds nothing; 3: more devices than rows
COMPUTE = ["interpret", "numpy", *(["compiled"] if HAVE_COMPILER else [])]
CHUNKS = ["padded", "variable", "cheaper"]


def pipeline(chunks: str) -> fl.Pipeline:
    """The default pipeline, lower-communications moving uneven chunks as `chunks` says."""
    return fl.Pipeline(default_pass_names(**{"lower-communications": f"chunks={chunks}"}))


def pointwise(n: int, d: int = D) -> fl.Fusion:
    """exp(x) + y, x and y [n, 3] row-sharded over d devices."""
    with fl.Fusion() as f:
        x, y = fl.tensor([n, 3]), fl.tensor([n, 3])
        f.add_input(x)
        f.add_input(y)
        f.add_output(fl.add(fl.exp(x), y))
        for t in (x, y):
            shard_axis(t, 0, fl.DeviceMesh.for_num_devices(d))
    return f


def test_chunks_are_torch_chunks() -> None:
    assert axis_rows(10, 4) == [3, 3, 3, 1]
    assert axis_rows(5, 4) == [2, 2, 1, 0]
    assert axis_rows(3, 4) == [1, 1, 1, 0]
    assert axis_rows(13, 4) == [4, 4, 4, 1]


@pytest.mark.parametrize("compute", COMPUTE)
@pytest.mark.parametrize("n", EXTENTS)
def test_each_device_computes_its_own_rows(n: int, compute: str) -> None:
    f = pointwise(n)
    ex = fl.FusionExecutor(f, compute=compute)
    inputs = fl.random_inputs(f, seed=n)
    fl.validate(f, inputs, ex.run(inputs))
    shapes = [outs[0].shape for outs in ex.run_per_device(inputs).values()]
    assert shapes == [(r, 3) for r in axis_rows(n, D)]


def test_the_split_prints_as_nvfuser_prints_a_non_divisible_outer_split() -> None:
    f = pointwise(13)
    text = f.print_transforms()
    assert "Outer split: iS0{13} by factor 4 -> ideviceIdx.x8{4}, iS9{( ceilDiv(13, 4) )}" in text
    fus = fl.to_fus(f)
    assert "place T0 on m0 (S0)" in fus  # the outer split by 4 fl.distribute writes
    again = fl.parse(fus)
    assert again.print_transforms() == text and fl.to_fus(again) == fus


def test_a_short_chunk_writes_only_its_rows() -> None:
    """The predicate `didx * 4 + row < 13`: device 3 of 13 rows over 4 holds one row; its
    buffer of 4 rows (as every device allocates) gets only that row written."""
    f = pointwise(13)
    program = fl.lower(f)
    (kernel,) = program.kernels
    x, y = (np.ones((4, 3), np.float32) for _ in range(2))
    (out,) = run_kernel(kernel, dict(zip(kernel.inputs, (x, y))), device={"didx": 3}).values()
    np.testing.assert_allclose(out[:1], np.e + 1, rtol=1e-6)
    assert np.isnan(out[1:]).all()  # past the chunk: never written (poison)
    (full,) = run_kernel(kernel, dict(zip(kernel.inputs, (x, y))), device={"didx": 2}).values()
    np.testing.assert_allclose(full, np.e + 1, rtol=1e-6)
    source = cuda_source(program)
    assert "const long long didx)" in source and "((didx * 4) + " in source


@pytest.mark.parametrize("compute", ["interpret", "compiled"])
def test_a_kernel_reading_the_device_index_needs_it(compute: str) -> None:
    """Without `device`, a kernel over uneven chunks once ran as device 0 (its rows, not
    the caller's): now an ExecutionError saying what to pass."""
    f = pointwise(13)
    program = fl.lower(f)
    (kernel,) = program.kernels
    inputs = {t: np.ones((4, 3), np.float32) for t in kernel.inputs}
    if compute == "compiled" and not HAVE_COMPILER:
        pytest.skip("no C++ compiler")
    run = (
        CompiledKernels([kernel], default_compiler()).run
        if compute == "compiled"
        else (lambda k, i, device=None: run_kernel(k, i, device=device))
    )
    with pytest.raises(fl.ExecutionError, match="reads the device index didx.*pass device="):
        run(kernel, inputs)
    (out,) = run(kernel, inputs, device={"didx": 3}).values()
    np.testing.assert_allclose(out[:1], np.e + 1, rtol=1e-6)


def test_an_even_sharding_has_no_device_predicate() -> None:
    assert "didx" not in cuda_source(fl.lower(pointwise(16)))


def test_a_device_with_an_empty_chunk_runs_nothing() -> None:
    f = pointwise(5)
    ex = fl.FusionExecutor(f, compute="interpret")
    inputs = fl.random_inputs(f)
    per_device = ex.run_per_device(inputs)
    assert per_device[3][0].shape == (0, 3)
    assert len(ex.grids) == 1  # planned and run for devices 0..2 only


# -- every communication kind on uneven extents ----------------------------------------
def kinds(n: int) -> list[models.ReshardingCase]:
    """Every §5 row on x[n, n + 2] over 4 devices (both axes uneven for most n)."""
    return [c for c in models.resharding_cases(D, n, n + 2) if c.kind is not None]


@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("n", EXTENTS)
def test_every_communication_kind_moves_uneven_chunks(n: int, chunks: str) -> None:
    for case in kinds(n):
        f = case.build()
        ex = fl.FusionExecutor(f, pipeline=pipeline(chunks))
        inputs = fl.random_inputs(f, seed=n)
        fl.validate(f, inputs, ex.run(inputs))
        comms = [c for c in ex.communications if c.kind.value == case.kind]
        assert len(comms) == 1, (case.name, ex.communications)
        comm = comms[0]
        both = uneven_bytes(comm.kind, comm.input, comm.output)
        if both is None:  # nothing chunked: the table's formula, an Allreduce's ring over
            # padded chunks of the flat buffer at most D - 1 elements more per step
            assert comm.sizing is Sizing.even, case.name
            pad = 2 * (D - 1) * (D - 1) * f.inputs[0].dtype.itemsize
            assert case.bytes_per_device <= comm.bytes_per_device <= case.bytes_per_device + pad
            continue
        padded, variable = both
        assert comm.sizing is not Sizing.even and f"chunks={comm.sizing.value}" in str(ex.program)
        if chunks != "cheaper":
            assert comm.sizing.value == chunks, case.name
        assert comm.bytes_per_device == (padded if comm.sizing is Sizing.padded else variable)
        # variable moves exactly the rows: the even bound; padded at most the padding more
        assert variable <= case.bytes_per_device <= padded, case.name
        a = comm.in_axis if comm.in_axis is not None else comm.out_axis
        pad = D * -(-f.inputs[0].shape[a] // D) - f.inputs[0].shape[a]
        row = f.inputs[0].nbytes // f.inputs[0].shape[a]
        assert padded <= case.bytes_per_device + pad * row, case.name


def test_the_cheaper_plan_pads_small_tensors_and_not_large_ones() -> None:
    small = fl.FusionExecutor(models.resharding_cases(D, 13, 3)[2].build()).communications
    large = fl.FusionExecutor(models.resharding_cases(D, 13, 300)[2].build()).communications
    assert [c.kind.value for c in small] == [c.kind.value for c in large] == ["Allgather"]
    assert small[0].sizing is Sizing.padded and large[0].sizing is Sizing.variable


# -- reductions over an uneven sharded axis ---------------------------------------------
@pytest.mark.parametrize("chunks", CHUNKS)
@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("n", EXTENTS)
def test_a_reduction_over_an_uneven_axis_never_sees_padding(n: int, op: str, chunks: str) -> None:
    """All values negative: a pad of 0 in a max, or a pad of anything in a sum, shows."""
    for out_sharded in (False, True):
        mesh = fl.DeviceMesh.for_num_devices(D)
        with fl.Fusion() as f:
            x = fl.tensor([n, n + 2])
            f.add_input(x)
            shard_axis(x, 0, mesh)
            y = (fl.sum if op == "sum" else fl.max)(x, [0])
            y.set_device_mesh(mesh)
            if out_sharded:
                shard_axis(y, 1, mesh)
            f.add_output(y)
        inputs = [-1.0 - np.random.default_rng(n).random((n, n + 2), dtype=np.float32)]
        ex = fl.FusionExecutor(f, pipeline=pipeline(chunks))
        out = ex.run(inputs)
        fl.validate(f, inputs, out)
        assert (out[0] < 0).all()


@pytest.mark.parametrize("devices", [3, 5, 6])
@pytest.mark.parametrize("model", ["tp", "sp"])
def test_mlps_on_device_counts_that_do_not_divide(devices: int, model: str) -> None:
    f = models.tensor_parallel_mlp(devices, sequence_parallel=model == "sp")
    inputs = fl.random_inputs(f, seed=devices)
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))


def test_a_device_with_no_rows_of_the_contraction_adds_nothing() -> None:
    """k = 3 over 4 devices: device 3's [2, 0] @ [0, 5] is zeros (numpy cannot infer
    the -1 of reshape(-1, 0))."""
    mesh = fl.DeviceMesh.for_num_devices(D)
    with fl.Fusion() as f:
        x, w = fl.tensor([2, 3]), fl.tensor([5, 3])
        f.add_input(x)
        f.add_input(w)
        shard_axis(x, 1, mesh)
        shard_axis(w, 1, mesh)
        y = fl.linear(fl.broadcast(x, [True, False, False]), w)
        y.set_device_mesh(mesh)
        f.add_output(y)
    inputs = fl.random_inputs(f)
    fl.validate(f, inputs, fl.FusionExecutor(f).run(inputs))


@pytest.mark.parametrize("example", ["tp_mlp", "sp_mlp"])
def test_run_on_three_devices_validates_and_names_the_chunking(capsys, example: str) -> None:
    path = Path(__file__).resolve().parents[1] / "examples" / f"{example}.fus"
    assert cli.main(["run", str(path), "--devices", "3"]) == 0
    out = capsys.readouterr().out
    assert "validation: ok" in out
    if example == "sp_mlp":  # 8 positions over 3 devices: 3 3 2
        assert out.count("(variable)") == 2  # the Allgather and the ReduceScatter
    else:  # one Allreduce of whole partial sums: nothing is chunked
        assert "Allreduce " in out and "(padded)" not in out and "(variable)" not in out


def test_a_collective_over_uneven_chunks_without_a_sizing_is_an_invalid_program() -> None:
    program = fl.lower(models.resharding_cases(D, 13, 3)[2].build())  # the Allgather
    (comm,) = program.communications
    comm.sizing = Sizing.even  # as if a pass forgot: mpi would read 4 rows from everyone
    with pytest.raises(fl.VerifyError, match=r"Allgather T0 -> T1 moves chunks .* sizing is even"):
        fl.FusionExecutor(program)


def test_the_working_set_counts_each_device_s_own_rows() -> None:
    f = pointwise(13)  # x and y [13, 3]: 4 4 4 1 rows, not 4 rows on each of 4 devices
    assert fl.FusionExecutor(f).working_set().inputs == 2 * 13 * 3 * 4


def test_nested_chunks_follow_the_ir_splits() -> None:
    """9 rows over mesh axes 0 (2) then 1 (4): the split of the split's 5 rows by 4 gives
    every outer chunk inner chunks of 2 rows, the short one's cut off at its end."""
    p = Placement(2, ((0, 1),))
    rows = [hi - lo for ((lo, hi),) in blocks((9,), (2, 4), p)]
    assert rows == [2, 2, 1, 0, 2, 2, 0, 0]
    assert [hi - lo for ((lo, hi),) in blocks((16,), (2, 4), p)] == [2] * 8  # even: equal


# -- the printed dialect reads uneven programs back ------------------------------------
@pytest.mark.parametrize("chunks", ["padded", "variable"])
@pytest.mark.parametrize("n", [13, 5])
def test_an_uneven_program_parses_back(n: int, chunks: str) -> None:
    """`( ceilDiv(13, 4) )` extents and a communication's chunks= read back: the same
    text, the same sizing, and the parsed program computes the reference."""
    texts = []
    for case in kinds(n):
        f = case.build()
        program = pipeline(chunks).run(f)
        text = str(program)
        texts.append(text)
        back = parse_printed(text)
        assert str(back) == text, case.name
        assert [c.sizing for c in back.communications] == [c.sizing for c in program.communications]
        inputs = fl.random_inputs(f, seed=n)
        fl.validate(f, inputs, fl.FusionExecutor(back).run(inputs))
    assert sum("ceilDiv" in t for t in texts) >= 4
    assert sum(f"chunks={chunks}" in t for t in texts) >= 4  # Allgather, AllToAll, ...


def test_an_unknown_chunks_value_is_a_parse_error_at_it() -> None:
    program = pipeline("padded").run(models.resharding_cases(D, 13, 3)[2].build())
    text = str(program).replace("chunks=padded", "chunks=ragged")
    with pytest.raises(fl.ParseError, match="unknown chunk sizing 'ragged'; expected one of"):
        parse_printed(text)
