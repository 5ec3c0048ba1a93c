"""numpy_ops.gemm_rows: a matmul's row has the same bits however many rows are
computed with it (numpy's BLAS picks its kernel by the call's shape and rounds by it),
so a Stream loop's chunk, or a device's block, of a product is that part of the whole."""

from __future__ import annotations

import numpy as np
import pytest

from fuserlite.reference.numpy_ops import (
    GEMM_ROWS,
    NUMPY,
    SHORT_GEMM_ROWS,
    _matmul,
    gemm_rows,
    rows_per_call,
)

SHAPES = [(1, 1), (3, 5), (8, 6), (16, 1), (32, 16), (64, 48), (100, 33), (512, 64), (4096, 64)]
CUTS = [(0, 1), (0, 2), (5, 9), (17, 80), (64, 128), (3, 300), (150, 300), (299, 300)]


@pytest.mark.parametrize("transposed", [False, True], ids=["matmul", "linear"])
@pytest.mark.parametrize("k,n", SHAPES)
def test_a_row_has_the_same_bits_in_any_number_of_rows(k: int, n: int, transposed: bool) -> None:
    rng = np.random.default_rng(k * n)
    a = rng.standard_normal((300, k)).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32).T if transposed else None
    b = rng.standard_normal((k, n)).astype(np.float32) if b is None else b
    whole = gemm_rows(a, b)
    np.testing.assert_allclose(whole, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    for lo, hi in CUTS:
        assert np.array_equal(gemm_rows(a[lo:hi], b), whole[lo:hi]), (lo, hi)
    out = np.full((300, n), np.nan, np.float32)
    assert gemm_rows(a, b, out=out) is out and np.array_equal(out, whole)


def test_shapes_cover_short_and_long_rows() -> None:
    """The shapes above take both call sizes, and a product with long rows cut below 256
    rows (a device's block, a chunk) still makes 256-row calls."""
    assert {rows_per_call(k, n) for k, n in SHAPES} == {GEMM_ROWS, SHORT_GEMM_ROWS}
    rng = np.random.default_rng(1)
    a = rng.standard_normal((600, 512)).astype(np.float32)
    b = rng.standard_normal((512, 64)).astype(np.float32)
    whole = gemm_rows(a, b)
    for lo, hi in [(0, 3), (250, 262), (300, 600), (511, 513)]:
        assert np.array_equal(gemm_rows(a[lo:hi], b), whole[lo:hi]), (lo, hi)


def test_every_form_of_matmul_cuts_its_rows_alike() -> None:
    """A stack of rows, a batch of products (b 3-D), a vector b and a linear's w^T: each
    equals numpy's product within rounding and a cut of its rows has the whole's bits."""
    rng = np.random.default_rng(0)
    f = np.float32
    a = rng.standard_normal((2, 3, GEMM_ROWS + 40, 64)).astype(f)
    forms = {
        "stack of rows": (a, rng.standard_normal((64, 48)).astype(f)),
        "batch of products": (a, rng.standard_normal((3, 64, 48)).astype(f)),
        "vector b": (a, rng.standard_normal(64).astype(f)),
    }
    for name, (x, y) in forms.items():
        whole = _matmul(x, y)
        np.testing.assert_allclose(whole, np.matmul(x, y), rtol=1e-4, atol=1e-3, err_msg=name)
        rows = (slice(None),) * 2 + (slice(7, 90),)
        assert np.array_equal(_matmul(x[rows], y), whole[rows]), name
    for b in (forms["stack of rows"][1], forms["batch of products"][1]):  # a vector a
        assert np.array_equal(_matmul(a[0, 0, 0], b), _matmul(a[0, 0], b)[..., 0, :])
    w = rng.standard_normal((48, 64)).astype(f)
    linear = NUMPY["linear"](None, [a, w], None)
    assert np.array_equal(NUMPY["linear"](None, [a[:, :, 5:6], w], None), linear[:, :, 5:6])


def test_empty_products() -> None:
    a = np.zeros((0, 8), np.float32)
    assert gemm_rows(a, np.ones((8, 3), np.float32)).shape == (0, 3)
    out = gemm_rows(np.ones((5, 0), np.float32), np.ones((0, 3), np.float32))
    assert np.array_equal(out, np.zeros((5, 3), np.float32))


@pytest.mark.parametrize("transposed", [False, True], ids=["matmul", "linear"])
@pytest.mark.parametrize("m,k,n", [(300, 64, 48), (512, 64, 512), (40, 8, 8), (0, 5, 3)])
def test_leading_axes_make_each_products_own_calls(m: int, k: int, n: int, transposed) -> None:
    """gemm_rows over leading axes (a stack of products, b shared or one per product,
    out with an axis more than the operands'): each product has the bits of the 2-D
    gemm_rows on it alone (the very calls, whole blocks and a padded tail)."""
    rng = np.random.default_rng(m + k + n)

    def weights(*lead):
        if transposed:  # a linear's w[n, k] as its view [k, n]
            return np.swapaxes(rng.standard_normal((*lead, n, k)).astype(np.float32), -1, -2)
        return rng.standard_normal((*lead, k, n)).astype(np.float32)

    a = rng.standard_normal((3, m, k)).astype(np.float32)
    for b in (weights(), weights(3)):
        got = gemm_rows(a, b)
        assert got.shape == (3, m, n)
        for r in range(3):
            assert np.array_equal(got[r], gemm_rows(a[r], b if b.ndim == 2 else b[r])), r
    one, b = a[0], weights(3)  # one a every product reads
    got = gemm_rows(one, b)
    for r in range(3):
        assert np.array_equal(got[r], gemm_rows(one, b[r]))
    shared = weights()
    out = np.full((4, m, n), np.nan, np.float32)  # an axis more: each gets the product
    assert gemm_rows(one, shared, out) is out
    for r in range(4):
        assert np.array_equal(out[r], gemm_rows(one, shared))
    b = weights(3)  # _matmul's batch of products: gemm_rows'
    got = _matmul(a, b)
    for r in range(3):
        assert np.array_equal(got[r], gemm_rows(a[r], b[r]))
