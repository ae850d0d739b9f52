"""Matrix products through NumPy's own OpenBLAS from compiled code (``pylucid.kernels.blas``):
bit for bit ``np.matmul``'s, on every layout it takes, handing the others back to NumPy."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import pylucid as pl
from pylucid.backends.numba_backend import linalg
from pylucid.kernels import blas
from pylucid.ops.base import dispatch_plan
from pylucid.ops.linalg import MatmulBackward

pytestmark = pytest.mark.skipif(
    not blas.AVAILABLE, reason="NumPy's scipy-openblas (64-bit) was not found beside NumPy"
)

SHAPES = [(32, 64, 128), (32, 128, 10), (2, 2, 2), (257, 33, 65), (7, 300, 3)]


def _layouts(x):
    """``x`` C-ordered, Fortran-ordered, as the transpose of a C array, and as a view of
    every other row of a larger array (rows contiguous, a row stride beyond the width)."""
    wide = np.zeros((x.shape[0] * 2, x.shape[1] + 3), x.dtype)
    wide[::2, : x.shape[1]] = x
    return [x, np.asfortranarray(x), np.ascontiguousarray(x.T).T, wide[::2, : x.shape[1]]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_gemm_gives_numpys_bits_on_every_layout(dtype, m, k, n):
    rng = np.random.default_rng(m * k + n)
    a = (rng.standard_normal((m, k)) * 3).astype(dtype)
    b = (rng.standard_normal((k, n)) * 3).astype(dtype)
    for left in _layouts(a):
        for right in _layouts(b):
            out = np.empty((m, n), dtype)
            assert linalg._gemm(np.dtype(dtype))(left, right, out)  # (taken: every layout)
            expected = np.matmul(left, right)
            assert out.tobytes() == expected.tobytes()
            product = pl.from_numpy(left) @ pl.from_numpy(right)
            assert product.numpy().tobytes() == expected.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gemm_declines_what_numpy_does_not_give_gemm(dtype):
    """Dimensions of 1 (NumPy's dot / gemv / own loop), a matrix times its own transpose
    (NumPy's syrk), operands neither rows nor columns lay out contiguously (NumPy copies
    them), stride-0 broadcasts: declined, and the product is still np.matmul's."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((16, 8)).astype(dtype)
    gemm = linalg._gemm(np.dtype(dtype))
    cases = [
        (x[:1], x.T),  # a row
        (x, x.T[:, :1]),  # a column
        (x[:, :1], x[:1]),  # an inner dimension of 1
        (x, x.T),  # syrk
        (x.T, x),  # syrk, the other way
        (x[::2, ::2], x[::2, ::2].T),  # neither layout
        (np.broadcast_to(x[:1], (16, 8)), x.T),  # a stride-0 broadcast
    ]
    for left, right in cases:
        out = np.full((left.shape[0], right.shape[1]), 7, dtype)
        assert not gemm(left, right, out)
        assert (out == 7).all()  # (untouched)
        expected = np.matmul(left, right)
        product = pl.from_numpy(left) @ pl.from_numpy(right)
        assert product.numpy().tobytes() == expected.tobytes()


def test_plans_bind_float_matrix_products_only():
    f32 = pl.tensor(np.ones((4, 3), np.float32))
    g32 = pl.tensor(np.ones((3, 5), np.float32))
    assert dispatch_plan(MatmulBackward, (f32, g32), {}).run is not None
    vector = pl.tensor(np.ones(3, np.float32))
    batch = pl.tensor(np.ones((2, 4, 3), np.float32))
    integers = pl.tensor(np.ones((3, 5), np.int64))
    row = pl.tensor(np.ones((1, 3), np.float32))
    for a, b in [(f32, vector), (batch, g32), (integers.T, integers), (row, g32)]:
        assert dispatch_plan(MatmulBackward, (a, b), {}).run is None
    # (an integer operand is cast to float32 before the product: bound)
    assert dispatch_plan(MatmulBackward, (f32, integers), {}).run is not None
    np.testing.assert_array_equal((f32 @ integers).numpy(), np.full((4, 5), 3.0, np.float32))


def test_special_values_propagate_without_warnings():
    """inf * 0 raises the IEEE invalid flag inside OpenBLAS; nothing checks it: no
    RuntimeWarning, and the nan is in the result, as in np.matmul under np.errstate."""
    inf = pl.tensor(np.full((4, 4), np.inf, np.float32))
    zero = pl.tensor(np.zeros((4, 4), np.float32))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan((inf @ zero).numpy()).all()
        np.testing.assert_array_equal((inf @ (zero + 1.0)).numpy(), np.full((4, 4), np.inf))


def test_gradients_through_the_bound_product_match_numpy():
    """Both backward products take transposed views of the saved operands (Trans flags)."""
    rng = np.random.default_rng(3)
    a_np = rng.standard_normal((32, 64)).astype(np.float32)
    b_np = rng.standard_normal((64, 10)).astype(np.float32)
    a, b = pl.tensor(a_np, requires_grad=True), pl.tensor(b_np, requires_grad=True)
    g_np = rng.standard_normal((32, 10)).astype(np.float32)
    (a @ b).backward(pl.tensor(g_np))
    assert a.grad.numpy().tobytes() == np.matmul(g_np, b_np.T).tobytes()
    assert b.grad.numpy().tobytes() == np.matmul(a_np.T, g_np).tobytes()


def test_without_the_library_products_stay_with_numpy(monkeypatch):
    monkeypatch.setattr(blas, "AVAILABLE", False)
    a = pl.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4))
    b = pl.tensor(np.arange(8.0, dtype=np.float32).reshape(4, 2))
    plan = dispatch_plan(MatmulBackward, (a, b), {})
    fresh = type(plan)(MatmulBackward, (a, b), {})  # (planned again, with the library off)
    assert fresh.run is None
    expected = np.matmul(a.numpy(), b.numpy())
    assert a._backend.matmul(a._storage, b._storage, (3, 2), pl.float32).tobytes() == (
        expected.tobytes()
    )


def test_integer_matrices_never_reach_gemm():
    """gemm reads float32 or float64 bits: int32 and int64 products (the same itemsizes)
    stay with NumPy's integer loops, exact."""
    for dtype in (np.int32, np.int64):
        a = np.array([[2**20, 3], [1, -2]], dtype)
        b = np.array([[2**9, 0], [1, 5]], dtype)
        out = (pl.tensor(a) @ pl.tensor(b)).numpy()
        assert out.dtype == dtype and out.tolist() == np.matmul(a, b).tolist()


@pytest.mark.skipif(not blas.AVAILABLE, reason="NumPy's OpenBLAS was not found beside NumPy")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_stack_times_a_matrix_is_one_product(monkeypatch, dtype):
    """A Linear on a (B, T, C) input: one gemm of the B*T rows forward and for the input's
    gradient (the weight's gradient folds the rows already), as PyTorch's matmul folds it;
    values within the float tolerance of NumPy's per-matrix products (other blocking of the
    same sums: a few ULP of the k=24 sums)."""
    calls = []
    product = linalg._blas_product

    def counted(a, b, numpy_dtype):
        calls.append(a.shape)
        return product(a, b, numpy_dtype)

    monkeypatch.setattr(linalg, "_blas_product", counted)
    rng = np.random.default_rng(5)
    x_np, w_np = rng.standard_normal((3, 5, 24)), rng.standard_normal((24, 7))
    x = pl.tensor(x_np.astype(dtype), requires_grad=True)
    w = pl.tensor(w_np.astype(dtype), requires_grad=True)
    y = x @ w
    assert calls == [(15, 24)]
    y.backward(pl.ones(3, 5, 7, dtype=x.dtype))
    assert calls[1] == (15, 7) and len(calls) == 3  # (the input's and the weight's gradients)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y.numpy(), np.matmul(x_np, w_np), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(x.grad.numpy(), np.ones((3, 5, 7)) @ w_np.T, rtol=rtol, atol=rtol)


def test_products_get_blas_threads_by_their_work(monkeypatch):
    """OpenBLAS's pool gets one thread for a product below PARALLEL_FLOPS (a busy core would
    stall a split one by a time slice), pylucid's thread count above; set only on a change."""
    calls = []
    monkeypatch.setattr(blas, "_SET_THREADS", calls.append)
    monkeypatch.setattr(blas, "_threads", [0])
    before = pl.get_num_threads()
    pl.set_num_threads(2)
    try:
        blas.product_threads(64, 64, 64, 4)
        blas.product_threads(32, 32, 32, 4)
        blas.product_threads(2048, 256, 1024, 4)
        blas.product_threads(700, 300, 400, 8)  # (float64: the threshold halves)
        pl.set_num_threads(1)
        blas.product_threads(2048, 256, 1024, 4)
        assert calls == [1, 2, 1]
        calls.clear()
        pl.set_num_threads(2)
        _ = pl.ones(2048, 256) @ pl.ones(256, 1024)
        assert calls == [2]
    finally:
        pl.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("sum_blocks", [False, True], ids=["columns", "sums"])
@pytest.mark.parametrize(("m", "k", "n"), [(32, 144, 16384), (16, 16384, 27), (5, 3, 700)])
def test_blocked_product_has_the_same_bits_on_any_threads(dtype, sum_blocks, m, k, n):
    """Products cut into blocks on the kernels' pool (convolution's): within the float
    error bound of a sum of ``k`` products, ``k u sum |a||b|`` (with ``u`` the unit
    roundoff), of the float64 product; on each layout of the operands; and bit for bit the
    same at 1 and 2 threads (the blocks depend on the shape alone)."""
    rng = np.random.default_rng(m + k + n)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = k * np.finfo(dtype).eps * (np.abs(a).astype(np.float64) @ np.abs(b))
    previous = pl.get_num_threads()
    try:
        for left, right in zip(_layouts(a)[:3], _layouts(b)[:3]):
            results = []
            for threads in (1, 2):
                pl.set_num_threads(threads)
                out = np.full((m, n), np.nan, dtype)
                assert blas.blocked_product(left, right, out, sum_blocks)
                results.append(out)
            np.testing.assert_array_equal(results[0], results[1])
            assert np.all(np.abs(results[0] - exact) <= bound)
    finally:
        pl.set_num_threads(previous)


def test_blocked_product_declines_what_gemm_cannot_take():
    out = np.empty((4, 4), np.float32)
    ones = np.ones((4, 4), np.float32)
    assert not blas.blocked_product(ones[:1], ones, out[:1], False)  # a dimension of 1
    assert not blas.blocked_product(ones.astype(np.int64), ones.astype(np.int64), out, False)
    assert not blas.blocked_product(ones, ones.astype(np.float64), out, False)
    strided = np.ones((8, 8), np.float32)[::2, ::2]  # neither rows nor columns contiguous
    assert not blas.blocked_product(strided, ones, out, False)
    broadcast = np.broadcast_to(np.ones(4, np.float32), (4, 4))  # rows 0 bytes apart
    assert not blas.blocked_product(broadcast, ones, out, False)
