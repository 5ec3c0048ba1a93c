"""Library kernels (fuserlite.kernel.library): a kernel of one matmul, linear or sdpa runs
numpy's BLAS through a plan made once, and sdpa's dropout draws Philox in C at each
element's global index, bit for bit the numbers numpy's keep_mask draws."""

from __future__ import annotations

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models
from fuserlite.ir.errors import ExecutionError
from fuserlite.kernel.library import CompiledDropout, library_expr
from fuserlite.numerics import attention
from fuserlite.numerics.philox import Block, apply_dropout
from fuserlite.runtime.compute import default_compiler

BLOCKS = [  # (global shape, start, local shape)
    ((37,), (5,), (30,)),
    ((2, 3, 16, 16), (1, 0, 0, 0), (1, 3, 16, 16)),
    ((2, 8, 16, 16), (0, 3, 4, 0), (2, 2, 9, 16)),
    ((3, 5, 7), (2, 4, 6), (1, 1, 1)),
    ((4, 0, 3), (0, 0, 0), (4, 0, 3)),
    # rows longer than one batch of philox calls (64 groups), starting off a group of 4
    ((3, 523), (0, 0), (3, 523)),
    ((2, 5, 700), (1, 1, 3), (1, 3, 697)),
]


@pytest.fixture(scope="module")
def dropout() -> CompiledDropout:
    return CompiledDropout(default_compiler())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_compiled_dropout_is_numpys_bit_for_bit(dropout, dtype, p: float) -> None:
    rng = np.random.default_rng(7)
    for seed, offset in ((0, 0), (3, 5), (2**64 - 1, 2**40 + 3)):
        for shape, start, local in BLOCKS:
            values = rng.standard_normal(local).astype(dtype)
            block = Block(shape, start)
            want = apply_dropout(values, p, seed, offset, block)
            got = dropout(values.copy(), p, seed, offset, block)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_compiled_dropout_of_zeros_is_numpys_bit_for_bit(dropout, dtype, p: float) -> None:
    """The compiled dropout draws no number for a +0 (it comes out +0 either way): runs of
    +0 at a row's ends (a causal mask's), lone ones in partial groups, +0 among other
    values and -0 (dropped it becomes +0, kept it stays -0) give numpy's bits."""
    rng = np.random.default_rng(11)
    for shape, start, local in BLOCKS + [((4, 256, 256), (1, 0, 0), (2, 256, 256))]:
        values = rng.standard_normal(local).astype(dtype)
        if values.ndim >= 2:  # a causal row's zeros after its diagonal, a few -0 and +0
            rows, cols = np.indices(values.shape[-2:])
            values[..., cols > rows + 3] = 0.0
        flat = values.reshape(-1)
        flat[rng.random(flat.size) < 0.1] = -0.0
        flat[rng.random(flat.size) < 0.1] = 0.0
        flat[: min(5, flat.size)] = 0.0  # the head's partial group
        block = Block(shape, start)
        for seed, offset in ((0, 0), (3, 5)):
            want = apply_dropout(values, p, seed, offset, block)
            got = dropout(values.copy(), p, seed, offset, block)
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_compiled_dropout_copies_what_it_cannot_write_in_place(dropout) -> None:
    values = np.arange(64, dtype=np.float32).reshape(8, 8).T  # not C-contiguous
    block = Block((8, 8), (0, 0))
    got = dropout(values, 0.5, 1, 2, block)
    assert got is not values
    np.testing.assert_array_equal(got, apply_dropout(values, 0.5, 1, 2, block))
    assert values[0, 1] == 8  # the caller's array is left alone


@pytest.mark.parametrize(
    "args, message",
    [
        ((0.5, 0, 0, Block((4,), (2,))), "outside"),
        ((1.5, 0, 0, Block((4,), (0,))), "probability"),
        ((0.5, -1, 0, Block((4,), (0,))), "seed"),
    ],
)
def test_compiled_dropout_rejects_what_numpy_rejects(dropout, args, message: str) -> None:
    with pytest.raises(ExecutionError, match=message):
        dropout(np.ones(4, np.float32), *args)


def test_attention_with_the_compiled_dropout_is_numpys(dropout) -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 6, 4)).astype(np.float32) for _ in range(3))
    block = Block((2, 3, 6, 6), (0, 0, 0, 0))
    flags = {"dropout_p": 0.3, "is_causal": True, "seed": 4, "offset": 9, "block": block}
    want = attention.sdpa_fwd(q, k, v, **flags)
    got = attention.sdpa_fwd(q, k, v, **flags, dropout=dropout)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_blocks_library_kernels_are_the_op_by_op_path_bit_for_bit(
    dtype: str, monkeypatch
) -> None:
    """The six linears and the sdpa of the GPT block run as library kernels, compiled and
    interpreted, and give the bits they give run op by op (compiled pointwise kernels
    round float32's tanh otherwise than numpy, so each path is compared with itself with
    its library kernels run op by op); compiled, no dropout mask is drawn."""
    fusion = models.transformer_block(8, dtype)
    inputs = fl.random_inputs(fusion, seed=4)
    for compute in ("interpret", "compiled"):
        executor = fl.FusionExecutor(fusion, compute=compute)
        library = [library_expr(k) for k in executor.program.kernels]
        assert sorted(e.op_name for e in library if e is not None) == ["linear"] * 6 + ["sdpa"]
        op_by_op = fl.FusionExecutor(fusion, compute=compute)
        op_by_op._library = None
        (want,) = op_by_op.run(inputs)
        with monkeypatch.context() as patched:
            if compute == "compiled":
                patched.setattr(attention, "keep_mask", _no_mask)
            (got,) = executor.run(inputs)
        np.testing.assert_array_equal(got, want)
    fl.validate(fusion, inputs, [got])


def _no_mask(*args, **kwargs):
    raise AssertionError("the compiled path drew a dropout mask in numpy")


@pytest.mark.parametrize("compute", ["compiled", "interpret"])
def test_library_and_reshape_kernels_run_all_devices_at_once(compute: str) -> None:
    """The block's six linears and sdpa are LibraryLaunches (every device's call at once,
    each operand cast once) and its four reshapes ViewLaunches; the bits are the op-by-op
    path's."""
    from fuserlite.runtime.launch import LibraryLaunch, ViewLaunch

    fusion = models.transformer_block(8, "bfloat16")
    inputs = fl.random_inputs(fusion, seed=5)
    executor = fl.FusionExecutor(fusion, compute=compute)
    op_by_op = fl.FusionExecutor(fusion, compute=compute)
    op_by_op._library = None
    (got,), (want,) = executor.run(inputs), op_by_op.run(inputs)
    kinds = sorted(type(x).__name__ for x in executor._library_launches.values())
    assert kinds == [LibraryLaunch.__name__] * 7 + [ViewLaunch.__name__] * 4
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_stacked_finds_rows_of_one_buffer_and_shared_arrays() -> None:
    from fuserlite.runtime.launch import stacked

    whole = np.arange(24, dtype=np.float32).reshape(4, 6)
    rows = [whole[r] for r in range(4)]
    got, one = stacked(rows, np.dtype(np.float32))
    assert not one and np.shares_memory(got, whole)
    got, one = stacked([whole] * 3, np.dtype(np.float32))
    assert one and got is whole
    apart = [whole[r].copy() for r in (0, 2)]
    got, one = stacked(apart, np.dtype(np.float32))
    assert not one and not np.shares_memory(got, whole)
    np.testing.assert_array_equal(got, whole[[0, 2]])


def test_compiled_casts_are_ml_dtypes_bit_for_bit() -> None:
    """Every bfloat16 to float32, and float32 bit patterns (NaN payloads, infinities,
    subnormals, halfway cases) to bfloat16, as ml_dtypes converts them; arrays that are
    not C-contiguous and other dtypes go through numpy."""
    import ml_dtypes

    from fuserlite.kernel.library import CompiledCasts

    casts = CompiledCasts(default_compiler())
    bf16 = np.dtype(ml_dtypes.bfloat16)
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(bf16)
    got = casts.cast(every, np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), every.astype(np.float32).view(np.uint32))
    rng = np.random.default_rng(3)
    bits = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    special = [0x7F800001, 0xFFC00001, 0x7FFFFFFF, 0x7F800000, 0x00000001, 0x3F808000, 0x3F818000]
    values = np.concatenate([bits, np.array(special, np.uint32)]).view(np.float32)
    out = np.empty(values.shape, bf16)
    casts.store(out, values)
    with np.errstate(invalid="ignore"):  # numpy warns of the NaNs
        want = values.astype(bf16)
    np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(casts.cast(values, bf16).view(np.uint16), want.view(np.uint16))
    strided = values[: 7 * 1024].reshape(-1, 7)[:, ::2]  # not C-contiguous: numpy's cast
    with np.errstate(invalid="ignore"):
        want = strided.astype(bf16).view(np.uint16)  # bits: NaNs compare as patterns
        np.testing.assert_array_equal(casts.cast(strided, bf16).view(np.uint16), want)
    halves = np.arange(64, dtype=np.float16)
    assert casts.cast(halves, np.float32).dtype == np.float32


def test_library_operands_come_from_stacks_and_input_blocks_without_a_search(monkeypatch) -> None:
    """A library launch's operand that an earlier launch made is that launch's output stack,
    and a program input sharded in consecutive blocks is its global array's rows: only the
    block's two row-parallel weights (S1: no block of rows) are stacked from the devices'
    arrays. Inputs laid out otherwise (Fortran order: no rows of the global array) are
    stacked instead, with the same bits."""
    from fuserlite.runtime import launch

    fusion = models.transformer_block(8, "bfloat16")
    inputs = fl.random_inputs(fusion, seed=5)
    executor = fl.FusionExecutor(fusion, compute="compiled")
    op_by_op = fl.FusionExecutor(fusion, compute="compiled")
    op_by_op._library = None
    (want,) = op_by_op.run(inputs)
    calls = []

    def counted(arrays, dtype=None):
        if any(a is not arrays[0] for a in arrays):  # not a replicated Allgather's output
            calls.append(arrays[0].shape)
        return stacked(arrays, dtype)

    stacked = launch.stacked
    monkeypatch.setattr(launch, "stacked", counted)
    (got,) = executor.run(inputs)
    assert sorted(calls) == [(64, 8), (64, 32)]  # wo, w2: a column block per device
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    calls.clear()
    fortran = [np.asfortranarray(a) if a.ndim > 1 else a for a in inputs]
    (got,) = executor.run(fortran)
    assert sorted(calls) == [(8, 64)] * 3 + [(32, 64), (64, 8), (64, 32)]  # the 2-d weights
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_rows_of_is_a_stack_only_for_its_own_rows() -> None:
    """rows_of: the stack where the devices' arrays are its rows (identity, in order);
    None for a copy of one, another order or another count."""
    from fuserlite.runtime.launch import rows_of

    stack = np.zeros((3, 4), np.float32)
    views = [stack[r, ...] for r in range(3)]
    assert rows_of(list(views), (stack, views)) is stack
    assert rows_of([views[0], views[1].copy(), views[2]], (stack, views)) is None
    assert rows_of(views[::-1], (stack, views)) is None
    assert rows_of(views[:2], (stack, views)) is None
    assert rows_of(views, None) is None


@pytest.mark.parametrize("m", [64, 48, 512])  # whole calls of 32 rows, a padded tail, 256 rows
def test_every_devices_gemm_in_one_matmul_has_gemm_rows_bits(m: int) -> None:
    """_Plan._gemm's one np.matmul over (device, block of rows) gives each device's row the
    bits of gemm_rows on that device alone: shared or stacked x and w."""
    from fuserlite.reference.numpy_ops import gemm_rows
    from fuserlite.runtime.launch import LibraryLaunch

    fusion = models.transformer_block(8, "bfloat16")
    executor = fl.FusionExecutor(fusion, compute="compiled")
    executor.run(fl.random_inputs(fusion, seed=1))
    plan = next(
        x.plan
        for x in executor._library_launches.values()
        if isinstance(x, LibraryLaunch) and x.plan.expr.op_name == "linear"
    )
    rng = np.random.default_rng(3)
    rows, k, n = 3, 96 if m != 512 else 256, 40 if m != 512 else 128
    for x_one in (False, True):
        for w_one in (False, True):
            x = rng.standard_normal((m, k) if x_one else (rows, m, k)).astype(np.float32)
            w = rng.standard_normal((n, k) if w_one else (rows, n, k)).astype(np.float32)
            got = plan._gemm([(x, x_one), (w, w_one)], rows)
            for r in range(rows):
                want = gemm_rows(x if x_one else x[r], (w if w_one else w[r]).T)
                np.testing.assert_array_equal(got[r], want)


@pytest.mark.parametrize("threads", [1, 2])
def test_library_scratch_is_made_once_and_no_output_is_overwritten(threads: int) -> None:
    """A library launch's casts and its GEMMs' float32 result are written into buffers of
    its plan, made at the first run and written again by the next (no fresh pages each
    step); the outputs are fresh arrays, so what a run returned keeps its values after a
    later run on other inputs, and each run's values are the op-by-op path's."""
    from fuserlite.runtime.launch import LibraryLaunch

    fusion = models.transformer_block(8, "bfloat16")
    executor = fl.FusionExecutor(fusion, compute="compiled", threads=threads)
    op_by_op = fl.FusionExecutor(fusion, compute="compiled")
    op_by_op._library = None
    first_inputs, second_inputs = fl.random_inputs(fusion, seed=6), fl.random_inputs(fusion, seed=7)
    (first,) = executor.run(first_inputs)
    kept = first.copy()
    plans = [x.plan for x in executor._library_launches.values() if isinstance(x, LibraryLaunch)]
    buffers = {id(p): dict(p._buffers) for p in plans}
    assert any(buffers.values())  # bfloat16 operands: cast into the plans' buffers
    (second,) = executor.run(second_inputs)
    for p in plans:  # the same arrays, not new ones
        assert p._buffers.keys() == buffers[id(p)].keys()
        assert all(p._buffers[k] is b for k, b in buffers[id(p)].items())
    np.testing.assert_array_equal(first.view(np.uint16), kept.view(np.uint16))
    for got, inputs in ((first, first_inputs), (second, second_inputs)):
        (want,) = op_by_op.run(inputs)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert not np.array_equal(first.view(np.uint16), second.view(np.uint16))


def test_a_launch_output_only_library_launches_read_is_pooled() -> None:
    """The block's gelu output and its permuted q, k, v are read by library launches
    alone (a linear, the sdpa), which hold no operand after they run: their buffers are
    pooled (made once, no poisoned stack per step), and two runs on other inputs still
    give the op-by-op path's bits."""
    from fuserlite.runtime.launch import LibraryLaunch

    fusion = models.transformer_block(8, "bfloat16")
    executor = fl.FusionExecutor(fusion, compute="compiled")
    op_by_op = fl.FusionExecutor(fusion, compute="compiled")
    op_by_op._library = None
    for seed in (8, 9):
        inputs = fl.random_inputs(fusion, seed=seed)
        (got,), (want,) = executor.run(inputs), op_by_op.run(inputs)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    library = [x for x in executor._library_launches.values() if isinstance(x, LibraryLaunch)]
    read = {t for x in library for t in x.kernel.inputs}
    pooled = read & set(executor._pooled)
    ops = sorted(
        next(e.op_name for e in k.exprs if e.op_name in ("gelu", "permute"))
        for k in executor.program.kernels
        if set(k.outputs) & pooled
    )
    assert ops == ["gelu", "permute", "permute", "permute"], ops
