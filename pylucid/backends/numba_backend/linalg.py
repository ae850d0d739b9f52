"""Numba primitives of the ``linalg`` op family.

``matmul`` is NumPy's, which hands float32/float64 products to the BLAS NumPy is built with
(OpenBLAS for the PyPI wheels: ``np.show_config()``); a hand-written Numba loop would be an
order of magnitude slower than a tuned GEMM. A stack of matrices times one matrix is one
product of the stacked rows (PyTorch's fold), not one call per matrix. Integer products use
NumPy's own loops. Products of two matrices of float32 (float64) call that BLAS's ``gemm``
from compiled code where NumPy would make the same call (:mod:`pylucid.kernels.blas`:
NumPy's bits, without its ufunc call and ``np.errstate``); a plan binds them
(:func:`bound_matmul`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from pylucid import memory
from pylucid.backends.base import Shape
from pylucid.backends.numba_backend.runners import bindable
from pylucid.dtypes import DType
from pylucid.kernels import blas
from pylucid.kernels.jit import entry_point

_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)
#: NumPy's BLAS_MAXSIZE with 32-bit BLAS integers (the smallest it is).
_BLAS_MAX_SIZE = 2**31 - 1


#: numpy dtype -> the entry point of :func:`blas.gemm` for it (operands of any strides).
_GEMM: dict[np.dtype, Callable[[np.ndarray, np.ndarray, np.ndarray], bool]] = {}


def _gemm(numpy_dtype: np.dtype) -> Callable[[np.ndarray, np.ndarray, np.ndarray], bool]:
    """:func:`blas.gemm`'s entry point for two matrices of ``numpy_dtype`` of any layout
    (Numba's ``A``) and a C-contiguous output, compiled (or loaded) on first use."""
    call = _GEMM.get(numpy_dtype)
    if call is None:
        strided = np.empty((2, 2), numpy_dtype)[:, ::2]  # (a sample typed with layout A)
        call = entry_point(blas.gemm, (strided, strided, np.empty((1, 1), numpy_dtype)))
        _GEMM[numpy_dtype] = call
    return call


def _blas_product(a: np.ndarray, b: np.ndarray, numpy_dtype: np.dtype) -> np.ndarray | None:
    """``a @ b`` of two matrices of ``numpy_dtype`` through :func:`blas.gemm`, or None
    where it declines (NumPy would not call ``gemm``) or the dtypes are others."""
    if numpy_dtype is not _FLOAT32 and numpy_dtype is not _FLOAT64:
        return None
    if a.dtype is not numpy_dtype or b.dtype is not numpy_dtype:
        return None
    blas.product_threads(a.shape[0], a.shape[1], b.shape[1], numpy_dtype.itemsize)
    out = memory.empty((a.shape[0], b.shape[1]), numpy_dtype)
    return out if _gemm(numpy_dtype)(a, b, out) else None


def bound_matmul(
    input_shapes: Sequence[Shape], input_dtypes: Sequence[DType], shape: Shape, dtype: DType
) -> Callable[[np.ndarray, np.ndarray], np.ndarray | None] | None:
    """The runner of ``matmul`` for two matrices of ``input_shapes`` and ``dtype``
    (float32 or float64, every dimension above 1): :func:`blas.gemm`, whose None for a
    layout it declines sends the call to the general path. None for other signatures, and
    where NumPy's OpenBLAS was not found."""
    numpy_dtype = dtype.numpy
    if not blas.AVAILABLE or (numpy_dtype is not _FLOAT32 and numpy_dtype is not _FLOAT64):
        return None
    if any(d is not dtype for d in input_dtypes) or any(len(s) != 2 for s in input_shapes):
        return None
    if min(*input_shapes[0], *input_shapes[1]) <= 1:
        return None
    call = _gemm(numpy_dtype)
    allocate = np.empty if math.prod(shape) < memory._SMALL_COUNT else memory.empty
    (m, k), n, itemsize = input_shapes[0], input_shapes[1][1], numpy_dtype.itemsize
    threads = blas.product_threads

    def run_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        if a.dtype is not numpy_dtype or b.dtype is not numpy_dtype:
            return None
        threads(m, k, n, itemsize)
        out = allocate(shape, numpy_dtype)
        return out if call(a, b, out) else None

    return run_matmul


class NumbaLinalg:
    """Primitives of the ``linalg`` family on the numba backend."""

    @bindable(bound_matmul)
    def matmul(self, a: np.ndarray, b: np.ndarray, shape: Shape, dtype: DType) -> np.ndarray:
        """NumPy's ``a @ b`` (1-d operands promoted, batch dimensions broadcast); two
        float matrices through :func:`blas.gemm` where it takes them (the same call).

        Its own loops (small or integer products) raise the IEEE flags, for ``inf * 0`` say;
        the result's nan/inf tell the story, so no RuntimeWarning is emitted.
        """
        if a.ndim == 2 and b.ndim == 2 and blas.AVAILABLE:
            out = _blas_product(a, b, dtype.numpy)
            if out is not None:
                return out
        if a.ndim > 2 and b.ndim == 2 and blas.AVAILABLE:
            # A stack of matrices times one matrix (a Linear on a (B, T, C) input): one
            # (B*T, C) product, as PyTorch's at::matmul folds it, instead of NumPy's B calls
            # of gemm - each a wake-up of OpenBLAS's threads. (The rows' sums may round
            # differently from NumPy's per-matrix calls: another blocking of the same sums.)
            rows = a.reshape(-1, a.shape[-1])
            out = _blas_product(rows, b, dtype.numpy)
            if out is not None:
                return out.reshape(shape)
        if a.ndim == 1 and b.ndim == 1 and _plain_vectors(a, b, dtype.numpy):
            # The dot product of two vectors: np.matmul's loop calls the dtype's BLAS dot
            # (``FLOAT_dot`` / ``DOUBLE_dot``) on them, and so does np.vdot, which checks no
            # IEEE flags - so no np.errstate (~2 us) is needed: 5.2 us a call instead of 8.5
            # (64 float32 elements, thread time on a loaded 2-vCPU EPYC). Strided vectors are
            # left to matmul: vdot copies them, and BLAS may sum a copy in another order.
            return np.asarray(np.vdot(a, b))
        if a.ndim >= 2 and b.ndim >= 2:  # (each matrix of a stack: NumPy calls gemm per one)
            blas.product_threads(a.shape[-2], a.shape[-1], b.shape[-1], dtype.itemsize)
            with np.errstate(all="ignore"):  # (into a pooled array: fresh pages would fault)
                return np.matmul(a, b, dtype=dtype.numpy, out=memory.empty(shape, dtype.numpy))
        with np.errstate(all="ignore"):
            return np.asarray(np.matmul(a, b, dtype=dtype.numpy))


def _plain_vectors(a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> bool:
    """Whether 1-d ``a`` and ``b`` are aligned, contiguous float32 or float64 vectors of
    ``dtype``, of fewer elements than 32-bit BLAS takes (np.matmul sums longer ones in its
    own loop): the operands that np.vdot multiplies as np.matmul does."""
    if a.dtype is not dtype or b.dtype is not dtype or a.size >= _BLAS_MAX_SIZE:
        return False
    if dtype is not _FLOAT32 and dtype is not _FLOAT64:
        return False
    a_flags, b_flags = a.flags, b.flags
    return a_flags.c_contiguous and a_flags.aligned and b_flags.c_contiguous and b_flags.aligned
