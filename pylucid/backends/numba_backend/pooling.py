"""Numba primitives of the ``pooling`` op family: max and average pooling over windows.

The windows (:class:`~pylucid.backends.windows.Windows`) become a table of the positions
each output reads (cached per geometry); the kernels of :mod:`pylucid.kernels.pooling`
gather through it, plane by plane. An input without planes (a batch of 0, or 0 channels)
gives zeros of the result's shape without reaching them (the op checks the planes are not
empty).
"""

from __future__ import annotations

import math

import numpy as np

from pylucid.backends.base import Shape
from pylucid.backends.windows import Windows, window_sources
from pylucid.dtypes import DType
from pylucid.kernels import pooling


def _planes(x: np.ndarray, dtype: DType) -> np.ndarray:
    """``(N, C, H, W)`` ``x`` as C-contiguous ``(N C, H W)`` planes of ``dtype``."""
    n, c, h, w = x.shape
    return np.ascontiguousarray(x, dtype.numpy).reshape(n * c, h * w)


def divisor_table(divisors: tuple[tuple[int, ...], tuple[int, ...]]) -> np.ndarray:
    """The ``(OH OW,)`` float64 divisors of average pooling from their per-axis factors."""
    return np.outer(np.asarray(divisors[0], np.float64), divisors[1]).reshape(-1)


class NumbaPooling:
    """Primitives of the ``pooling`` family on the numba backend."""

    def max_pool2d(self, x: np.ndarray, windows: Windows, shape: Shape, dtype: DType) -> np.ndarray:
        if x.size == 0:
            return np.zeros(shape, dtype.numpy)
        return pooling.max_pool(_planes(x, dtype), window_sources(windows)).reshape(shape)

    def max_pool2d_positions(self, x: np.ndarray, windows: Windows, dtype: DType) -> np.ndarray:
        n, c = x.shape[:2]
        if x.size == 0:
            return np.zeros((n, c, *windows.output), np.int64)
        positions = pooling.max_pool_positions(_planes(x, dtype), window_sources(windows))
        return positions.reshape(n, c, *windows.output)

    def max_pool2d_backward(
        self, x: np.ndarray, g: np.ndarray, windows: Windows, dtype: DType
    ) -> np.ndarray:
        if x.size == 0:
            return np.zeros(x.shape, dtype.numpy)
        n, c = x.shape[:2]
        upstream = np.ascontiguousarray(g, dtype.numpy).reshape(n * c, -1)
        grad = pooling.max_pool_backward(_planes(x, dtype), window_sources(windows), upstream)
        return grad.reshape(x.shape)

    def avg_pool2d(
        self,
        x: np.ndarray,
        windows: Windows,
        divisors: tuple[tuple[int, ...], tuple[int, ...]],
        shape: Shape,
        dtype: DType,
    ) -> np.ndarray:
        if x.size == 0:
            return np.zeros(shape, dtype.numpy)
        sums = pooling.avg_pool(_planes(x, dtype), window_sources(windows), divisor_table(divisors))
        return sums.reshape(shape)

    def avg_pool2d_backward(
        self,
        g: np.ndarray,
        windows: Windows,
        divisors: tuple[tuple[int, ...], tuple[int, ...]],
        shape: Shape,
        dtype: DType,
    ) -> np.ndarray:
        if g.size == 0:
            return np.zeros(shape, dtype.numpy)
        upstream = np.ascontiguousarray(g, dtype.numpy).reshape(shape[0] * shape[1], -1)
        grad = pooling.avg_pool_backward(
            upstream, window_sources(windows), divisor_table(divisors), math.prod(windows.size)
        )
        return grad.reshape(shape)
