"""Numba primitives of the ``normalization`` op family: layer normalisation.

The input is viewed as ``(rows, D)``; the row kernels are :mod:`pylucid.kernels.normalization`.
"""

from __future__ import annotations

import numpy as np

from pylucid.dtypes import DType
from pylucid.kernels import normalization


def _rows(x: np.ndarray, size: int, dtype: DType) -> np.ndarray:
    rows = x.size // size if size else 0  # (an empty normalised shape: no rows to normalise)
    return np.ascontiguousarray(x, dtype.numpy).reshape(rows, size)


def _vector(w: np.ndarray, size: int, dtype: DType) -> np.ndarray:
    return np.ascontiguousarray(w, dtype.numpy).reshape(size)


class NumbaNormalization:
    """Primitives of the ``normalization`` family on the numba backend."""

    def layer_norm(
        self, x: np.ndarray, w: np.ndarray, b: np.ndarray, size: int, eps: float, dtype: DType
    ) -> np.ndarray:
        weight, bias = _vector(w, size, dtype), _vector(b, size, dtype)
        out = normalization.layer_norm_rows(_rows(x, size, dtype), weight, bias, eps)
        return out.reshape(x.shape)

    def layer_norm_backward(
        self, x: np.ndarray, w: np.ndarray, g: np.ndarray, size: int, eps: float, dtype: DType
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        dx, dw, db = normalization.layer_norm_backward_rows(
            _rows(x, size, dtype), _vector(w, size, dtype), _rows(g, size, dtype), eps
        )
        return dx, dw.astype(dtype.numpy), db.astype(dtype.numpy)
