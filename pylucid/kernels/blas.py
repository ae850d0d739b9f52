"""Matrix products from compiled code, through the BLAS that NumPy itself calls.

``np.matmul`` of two float32 (float64) matrices ends in one ``cblas_sgemm`` (``dgemm``) call
of the OpenBLAS that NumPy's wheels bundle (``scipy-openblas``, 64-bit integers: the symbols
``scipy_cblas_sgemm64_`` and ``scipy_cblas_dgemm64_``). Around that call a small product
pays for the ufunc machinery and, since OpenBLAS raises the IEEE flags of ``inf * 0``, for
the ``np.errstate`` that keeps NumPy from warning: (32, 128) @ (128, 10) float32 took 8.7 us
under ``np.errstate`` and 4.7 us through :func:`gemm` (Intel Xeon, Sapphire Rapids). A
compiled loop checks no flags, so no ``errstate`` is needed.

:func:`gemm` makes the call NumPy's ``@TYPE@_matmul`` makes (NumPy 2,
``numpy/_core/src/umath/matmul.c.src``) for the operands it takes, so that the bits are
NumPy's: row-major order, each operand without a transpose where its rows are contiguous
(``NoTrans``, the leading dimension its row stride) and with one where its columns are
(``Trans``), into a new C-ordered output. It declines (returns False, and the caller runs
``np.matmul``) where NumPy would do something else: a dimension of 1 (NumPy's ``dot``,
``gemv`` or its own loop), no elements, operands that neither rows nor columns lay out
contiguously (NumPy copies them first), and a matrix times its own transpose (NumPy's
``syrk``, which computes half the product and mirrors it).

Threads: OpenBLAS runs each call on its own pool, whose threads spin and then sleep between
calls. Beside a busy process a product split over both cores waits for a thread the
scheduler has parked (a product of 0.1-0.9 ms took 8-276 ms), so :func:`product_threads`
gives a product more than one thread only where its work reaches :data:`PARALLEL_FLOPS`, up to
:func:`pylucid.get_num_threads` - the rule the kernels' loops follow (split only where the
work pays for the wake-up), for the BLAS pool too. Compiled steps (:mod:`pylucid.compiler`)
call :func:`product`, the same rule and the same :func:`gemm` from compiled code, sharing
with :func:`product_threads` the count last given to the pool (:data:`THREADS`): one BLAS,
one pool, and a compiled product's bits are eager's.

:func:`blocked_product` runs a product as blocks on the kernels' own pool, each block one
single-threaded call: for skinny products below :data:`PARALLEL_FLOPS` that still pay for
two threads (convolution's), with bits that do not depend on the thread count.

The library is the one NumPy loaded: found beside NumPy's package (``numpy.libs`` on Linux
and Windows, ``numpy/.dylibs`` on macOS) when NumPy reports ``scipy-openblas`` with 64-bit
integers, and made known to LLVM (``load_library_permanently``) so that the compiled calls,
which name the symbols, link and can be cached. Where it is not found (a NumPy built with
another BLAS), :data:`AVAILABLE` is False and every product stays with ``np.matmul``.
"""

from __future__ import annotations

import ctypes
import glob
import os

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from numba import types
from numba.extending import register_jitable

from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import get_num_threads

__all__ = [
    "AVAILABLE",
    "PARALLEL_FLOPS",
    "blocked_product",
    "THREADS",
    "gemm",
    "library_path",
    "product",
    "product_threads",
]

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
#: OpenBLAS's setter of its pool's thread count (``openblas_set_num_threads``).
_THREADS_SYMBOL = "scipy_openblas_set_num_threads64_"


def library_path() -> str | None:
    """The file of the OpenBLAS NumPy calls, or None where NumPy uses another BLAS or the
    file is not beside NumPy."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except (KeyError, TypeError):
        return None
    if blas.get("name") != "scipy-openblas" or "USE64BITINT" not in blas.get(
        "openblas configuration", ""
    ):
        return None
    package = os.path.dirname(np.__file__)
    beside = os.path.join(package, os.pardir, "numpy.libs")  # (Linux and Windows wheels)
    for folder in (beside, os.path.join(package, ".dylibs")):  # (macOS wheels)
        found = sorted(glob.glob(os.path.join(folder, "*scipy_openblas64_*")))
        if found:
            return os.path.realpath(found[0])
    return None


def _load() -> bool:
    path = library_path()
    if path is None:
        return False
    try:
        llvm_binding.load_library_permanently(path)
    except RuntimeError:
        return False
    return all(
        llvm_binding.address_of_symbol(name)
        for name in ("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", _THREADS_SYMBOL)
    )


#: Whether :func:`gemm` may be called: NumPy's OpenBLAS was found and loaded.
AVAILABLE = _load()

#: Floating-point operations (``2 m k n``) from which a float32 product runs on more than one
#: OpenBLAS thread: ~2 ms of one core (about 100 GFLOP/s in float32 on AVX-512 and AVX2
#: machines alike), where waking a second thread - or waiting a time slice for it beside a
#: busy process - costs a fraction of the work; float64 products split at half of it.
PARALLEL_FLOPS = 2e8


def _thread_setter() -> ctypes._CFuncPtr | None:
    path = library_path()
    if path is None:
        return None
    try:
        setter = getattr(ctypes.CDLL(path), _THREADS_SYMBOL)
    except (OSError, AttributeError):
        return None
    setter.argtypes, setter.restype = [ctypes.c_int], None
    return setter


_SET_THREADS = _thread_setter()
#: Shared by :func:`product_threads` and the compiled :func:`product`: ``[0]`` the thread
#: count last given to OpenBLAS (0: not set by pylucid yet), ``[1]`` the count a product of
#: :data:`PARALLEL_FLOPS` or more gets in compiled code (:func:`pylucid.get_num_threads`,
#: written by a compiled step's replay before its products run).
THREADS = np.zeros(2, np.int64)
_threads = THREADS[:1]


def product_threads(m: int, k: int, n: int, itemsize: int) -> None:
    """Give OpenBLAS the threads a product ``(m, k) @ (k, n)`` of ``itemsize``-byte floats
    earns: one below :data:`PARALLEL_FLOPS` (half of it for float64), else
    :func:`pylucid.get_num_threads`; nothing where NumPy's OpenBLAS was not found."""
    if _SET_THREADS is None:
        return
    work = 2.0 * m * k * n * (2 if itemsize == 8 else 1)
    threads = get_num_threads() if work >= PARALLEL_FLOPS else 1
    if threads != _threads[0]:
        _SET_THREADS(threads)
        _threads[0] = threads


def _gemm_symbol(name: str, scalar: types.Float) -> types.ExternalFunction:
    integer, pointer = types.int64, types.voidptr
    return types.ExternalFunction(
        name,
        types.void(
            types.intc, types.intc, types.intc, integer, integer, integer, scalar,
            pointer, integer, pointer, integer, scalar, pointer, integer,
        ),  # fmt: skip
    )


_SGEMM = _gemm_symbol("scipy_cblas_sgemm64_", types.float32)
_DGEMM = _gemm_symbol("scipy_cblas_dgemm64_", types.float64)
_SET_POOL = types.ExternalFunction(_THREADS_SYMBOL, types.void(types.intc))


@njit(cache=True, nogil=True)
def _layout(stride_rows, stride_columns, rows, columns, itemsize):  # noqa: ANN001, ANN202
    """NumPy's choice for one operand (``is_blasable2d``, rows first, then columns): the
    transpose flag and leading dimension, or (0, 0) where neither is contiguous."""
    if stride_columns == itemsize and stride_rows % itemsize == 0:
        if stride_rows // itemsize >= columns:
            return _NO_TRANS, stride_rows // itemsize
    if stride_rows == itemsize and stride_columns % itemsize == 0:
        if stride_columns // itemsize >= rows:
            return _TRANS, stride_columns // itemsize
    return 0, 0


@njit(cache=True, nogil=True)
def gemm(a, b, out):  # noqa: ANN001, ANN201
    """``out = a @ b`` for 2-d float32 (float64) ``a`` (m, n) and ``b`` (n, p) of any
    strides and the C-contiguous ``out`` (m, p), by the ``gemm`` call NumPy makes; returns
    False, with ``out`` untouched, where NumPy would not make that call (see the module)."""
    m, n = a.shape
    p = b.shape[1]
    if m <= 1 or n <= 1 or p <= 1:
        return False
    itemsize = a.itemsize
    trans_a, lda = _layout(a.strides[0], a.strides[1], m, n, itemsize)
    trans_b, ldb = _layout(b.strides[0], b.strides[1], n, p, itemsize)
    if trans_a == 0 or trans_b == 0:
        return False
    if (
        a.ctypes.data == b.ctypes.data
        and m == p
        and a.strides[0] == b.strides[1]
        and a.strides[1] == b.strides[0]
        and trans_a != trans_b
    ):
        return False  # a matrix times its transpose: NumPy's syrk
    _call(a, b, out, trans_a, lda, trans_b, ldb)
    return True


@register_jitable
def _call(a, b, out, trans_a, lda, trans_b, ldb):  # noqa: ANN001, ANN202
    """The ``gemm`` call ``out = a @ b``; ``out``'s rows may be strided (its row stride is
    the leading dimension), its columns contiguous."""
    m, n = a.shape
    p = b.shape[1]
    ldc = out.strides[0] // out.itemsize
    if a.itemsize == 4:
        _SGEMM(_ROW_MAJOR, trans_a, trans_b, m, p, n, np.float32(1.0), a.ctypes, lda,
               b.ctypes, ldb, np.float32(0.0), out.ctypes, ldc)  # fmt: skip
    else:
        _DGEMM(_ROW_MAJOR, trans_a, trans_b, m, p, n, 1.0, a.ctypes, lda,
               b.ctypes, ldb, 0.0, out.ctypes, ldc)  # fmt: skip


@njit(cache=True, nogil=True)
def product(a, b, out, threads):  # noqa: ANN001, ANN201
    """:func:`gemm` after :func:`product_threads`'s rule, from compiled code: the pool gets
    ``threads[1]`` threads for a product of :data:`PARALLEL_FLOPS` or more (half of it in
    float64), one below, set only where that differs from ``threads[0]`` (the count last
    given, updated: pass :data:`THREADS`). Returns :func:`gemm`'s answer."""
    m, k = a.shape
    n = b.shape[1]
    work = 2.0 * m * k * n * (2.0 if a.itemsize == 8 else 1.0)
    wanted = threads[1] if work >= PARALLEL_FLOPS else 1
    if wanted != threads[0]:
        _SET_POOL(np.intc(wanted))
        threads[0] = wanted
    return gemm(a, b, out)


# -- products in blocks on the kernels' pool ---------------------------------------------------
#: A block of :func:`blocked_product` spans this many columns (or summed rows) at least, so
#: that its call is worth its packing; a product has at most :data:`MOST_BLOCKS` blocks.
BLOCK_COLUMNS, MOST_BLOCKS = 512, 16
#: Work (``2 m k n``) from which the blocks run on the kernels' pool (~0.2 ms of one core).
PARALLEL_BLOCK_FLOPS = 2e7


@register_jitable
def _call_any(a, b, out):  # noqa: ANN001, ANN202
    """The ``gemm`` call ``out = a @ b`` for operands whose rows or columns are contiguous
    (checked by the caller)."""
    trans_a, lda = _layout(a.strides[0], a.strides[1], a.shape[0], a.shape[1], a.itemsize)
    trans_b, ldb = _layout(b.strides[0], b.strides[1], b.shape[0], b.shape[1], b.itemsize)
    _call(a, b, out, trans_a, lda, trans_b, ldb)


def _columns(a, b, out, blocks):  # noqa: ANN001, ANN202
    p = b.shape[1]
    for i in range(blocks):
        start, stop = p * i // blocks, p * (i + 1) // blocks
        _call_any(a, b[:, start:stop], out[:, start:stop])


def _columns_parallel(a, b, out, blocks):  # noqa: ANN001, ANN202
    p = b.shape[1]
    for i in numba.prange(blocks):
        start, stop = p * i // blocks, p * (i + 1) // blocks
        _call_any(a, b[:, start:stop], out[:, start:stop])


def _sums(a, b, out):  # noqa: ANN001, ANN202
    n, blocks = a.shape[1], out.shape[0]
    for i in range(blocks):
        start, stop = n * i // blocks, n * (i + 1) // blocks
        _call_any(a[:, start:stop], b[start:stop], out[i])


def _sums_parallel(a, b, out):  # noqa: ANN001, ANN202
    n, blocks = a.shape[1], out.shape[0]
    for i in numba.prange(blocks):
        start, stop = n * i // blocks, n * (i + 1) // blocks
        _call_any(a[:, start:stop], b[start:stop], out[i])


_COLUMNS = (njit(cache=True, nogil=True)(_columns),
            njit(parallel=True, cache=True, nogil=True)(_columns_parallel))  # fmt: skip
_SUMS = (njit(cache=True, nogil=True)(_sums),
         njit(parallel=True, cache=True, nogil=True)(_sums_parallel))  # fmt: skip


def _laid_out(a: np.ndarray) -> bool:
    """Whether :func:`gemm` takes the matrix ``a`` as it is (:func:`_layout`'s rule)."""
    rows, columns = a.shape
    return _layout(a.strides[0], a.strides[1], rows, columns, a.itemsize)[0] != 0


def blocked_product(a: np.ndarray, b: np.ndarray, out: np.ndarray, sum_blocks: bool) -> bool:
    """``out = a @ b`` for float32 (float64) matrices, cut into blocks that the kernels'
    pool runs (``prange``), each one single-threaded ``gemm`` call: the columns of ``b`` and
    ``out`` cut apart, or with ``sum_blocks`` the summed dimension, whose partial products
    are then added in block order. Returns False (``out`` untouched) where it cannot: a
    dimension of 1, another dtype, operands laid out neither by rows nor by columns, or no
    OpenBLAS.

    The blocks are a function of the shape alone, so the bits do not depend on the thread
    count; they are not those of one ``gemm`` call of the whole (OpenBLAS rounds an element
    by its place in its tiles). One pool and no OpenBLAS threads: products split over
    OpenBLAS's own pool beside a busy process waited for a parked thread (see the module),
    while the kernels' pool shares out its blocks.
    """
    m, k = a.shape
    n = b.shape[1]
    dtype = a.dtype
    if not AVAILABLE or dtype != b.dtype or dtype not in (np.float32, np.float64):
        return False
    if min(m, k, n) <= 1 or not (_laid_out(a) and _laid_out(b)):
        return False
    blocks = max(1, min(MOST_BLOCKS, (k if sum_blocks else n) // BLOCK_COLUMNS))
    work = 2.0 * m * k * n * (2 if dtype == np.float64 else 1)
    parallel = blocks > 1 and work >= PARALLEL_BLOCK_FLOPS and get_num_threads() > 1
    if _SET_THREADS is not None and _threads[0] != 1:
        _SET_THREADS(1)
        _threads[0] = 1
    if sum_blocks:
        parts = np.empty((blocks, m, n), dtype)
        _SUMS[parallel](a, b, parts)
        np.add.reduce(parts, axis=0, out=out)  # (in block order: one sum after another)
    else:
        _COLUMNS[parallel](a, b, out, blocks)
    return True
