"""Numba primitives of the ``linalg`` op family.

``matmul`` is NumPy's, which hands float32/float64 products to the BLAS NumPy is built with
(OpenBLAS for the PyPI wheels: ``np.show_config()``); a hand-written Numba loop would be an
order of magnitude slower than a tuned GEMM. Integer products use NumPy's own loops.
"""

from __future__ import annotations

import numpy as np

from pylucid.backends.base import Shape
from pylucid.dtypes import DType

_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)
#: NumPy's BLAS_MAXSIZE with 32-bit BLAS integers (the smallest it is).
_BLAS_MAX_SIZE = 2**31 - 1


class NumbaLinalg:
    """Primitives of the ``linalg`` family on the numba backend."""

    def matmul(self, a: np.ndarray, b: np.ndarray, shape: Shape, dtype: DType) -> np.ndarray:
        """NumPy's ``a @ b`` (1-d operands promoted, batch dimensions broadcast).

        Its own loops (small or integer products) raise the IEEE flags, for ``inf * 0`` say;
        the result's nan/inf tell the story, so no RuntimeWarning is emitted.
        """
        if a.ndim == 1 and b.ndim == 1 and _plain_vectors(a, b, dtype.numpy):
            # The dot product of two vectors: np.matmul's loop calls the dtype's BLAS dot
            # (``FLOAT_dot`` / ``DOUBLE_dot``) on them, and so does np.vdot, which checks no
            # IEEE flags - so no np.errstate (~2 us) is needed: 5.2 us a call instead of 8.5
            # (64 float32 elements, thread time on a loaded 2-vCPU EPYC). Strided vectors are
            # left to matmul: vdot copies them, and BLAS may sum a copy in another order.
            return np.asarray(np.vdot(a, b))
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
