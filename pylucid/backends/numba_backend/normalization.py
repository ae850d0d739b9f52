"""Numba primitives of the ``normalization`` op family: layer and batch normalisation.

Layer normalisation views the input as ``(rows, D)`` (the row kernels of
:mod:`pylucid.kernels.normalization`); batch normalisation as ``(N, C, S)``, the trailing
axes flattened (the channel kernels of :mod:`pylucid.kernels.batch_norm`), with its
per-channel statistics, weight and bias in float64.
"""

from __future__ import annotations

import math

import numpy as np

from pylucid.dtypes import DType
from pylucid.kernels import batch_norm, normalization


def _rows(x: np.ndarray, size: int, dtype: DType) -> np.ndarray:
    rows = x.size // size if size else 0  # (an empty normalised shape: no rows to normalise)
    return np.ascontiguousarray(x, dtype.numpy).reshape(rows, size)


def _vector(w: np.ndarray, size: int, dtype: DType) -> np.ndarray:
    return np.ascontiguousarray(w, dtype.numpy).reshape(size)


def _channels(x: np.ndarray, dtype: DType) -> np.ndarray:
    """``(N, C, ...)`` ``x`` as the C-contiguous ``(N, C, S)`` of ``dtype``."""
    n, c = x.shape[:2]
    return np.ascontiguousarray(x, dtype.numpy).reshape(n, c, math.prod(x.shape[2:]))


def _per_channel(v: np.ndarray, channels: int) -> np.ndarray:
    """A ``(C,)`` or 0-d (one value for every channel) array as ``(C,)`` float64."""
    return np.full(channels, float(v)) if v.ndim == 0 else np.ascontiguousarray(v, np.float64)


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

    def batch_norm_stats(self, x: np.ndarray, dtype: DType) -> np.ndarray:
        return batch_norm.batch_norm_stats(_channels(x, dtype))

    def batch_norm(
        self, x: np.ndarray, w: np.ndarray, b: np.ndarray, stats: np.ndarray, eps: float,
        dtype: DType,
    ) -> np.ndarray:  # fmt: skip
        channels = x.shape[1]
        mean, var = np.asarray(stats, np.float64)
        out = batch_norm.batch_norm_forward(
            _channels(x, dtype), mean, var, _per_channel(w, channels),
            _per_channel(b, channels), eps,
        )  # fmt: skip
        return out.reshape(x.shape)

    def batch_norm_backward(
        self, x: np.ndarray, w: np.ndarray, stats: np.ndarray, g: np.ndarray, eps: float,
        training: bool, input_grad: bool, affine_grads: bool, dtype: DType,
    ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:  # fmt: skip
        channels = x.shape[1]
        mean, var = np.asarray(stats, np.float64)
        dx, dw, db = batch_norm.batch_norm_backward(
            _channels(x, dtype), _channels(g, dtype), mean, var, _per_channel(w, channels),
            eps, training, input_grad, affine_grads,
        )  # fmt: skip
        dx = None if dx is None else dx.reshape(x.shape)
        return dx, dw.astype(dtype.numpy), db.astype(dtype.numpy)
