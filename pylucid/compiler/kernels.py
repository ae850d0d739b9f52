"""Compiled helpers that generated code calls, cached on disk with the package's kernels.

A call of ``np.dot`` written into generated code costs Numba about a second to type and
lower in every new graph (its BLAS binding is generated per call site); a call of this
module's cached :func:`matmul_into` costs a lookup of the overload compiled once per pair
of layouts, in any process.
"""

import numpy as np

from pylucid.kernels.jit import njit


@njit(cache=True, nogil=True)
def matmul_into(a, b, out):  # noqa: ANN001, ANN201
    """``out[...] = a @ b`` for 2-d float arrays, C- or Fortran-contiguous (BLAS gemm)."""
    np.dot(a, b, out)
