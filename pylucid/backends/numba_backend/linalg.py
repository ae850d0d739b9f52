"""Numba primitives of the ``linalg`` op family.

``matmul`` is NumPy's, which hands float32/float64 products to the BLAS NumPy is built with
(OpenBLAS for the PyPI wheels: ``np.show_config()``); a hand-written Numba loop would be an
order of magnitude slower than a tuned GEMM. Integer products use NumPy's own loops.
"""

from __future__ import annotations

import numpy as np

from pylucid.backends.base import Shape
from pylucid.dtypes import DType


class NumbaLinalg:
    """Primitives of the ``linalg`` family on the numba backend."""

    def matmul(self, a: np.ndarray, b: np.ndarray, shape: Shape, dtype: DType) -> np.ndarray:
        """NumPy's ``a @ b`` (1-d operands promoted, batch dimensions broadcast).

        Its own loops (small or integer products) raise the IEEE flags, for ``inf * 0`` say;
        the result's nan/inf tell the story, so no RuntimeWarning is emitted.
        """
        with np.errstate(all="ignore"):
            return np.asarray(np.matmul(a, b, dtype=dtype.numpy))
