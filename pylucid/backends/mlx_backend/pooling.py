"""MLX primitives of the ``pooling`` op family: max and average pooling over windows.

``mlx.core`` has no pooling primitive (``mlx.nn``'s pools are strided views and a
reduction, without padding choices), so each window is gathered with ``mlx.core.take``
through the table of :func:`~pylucid.backends.windows.window_sources`, into
``(planes, taps, outputs)``; positions outside the plane read one extra element appended
to each plane (-inf for max, 0 for the average). The choice of max pooling's position is
PyTorch's, as on the numba backend: the first largest value of the window, the last NaN
where there is one, the first position inside the plane where every value is -inf. The
gradients add ``g`` at those positions (``at[].add``) and, for the average, are MLX's
vector-Jacobian product of the gather (``mlx.core.vjp``). An input without planes (a batch
of 0, or 0 channels) gives zeros of the result's shape without reaching MLX's gathers and
reductions, which refuse empty arrays (the op checks the planes are not empty).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pylucid.backends.base import Shape
from pylucid.backends.windows import Windows, window_sources
from pylucid.dtypes import DType, int64


class MLXPooling:
    """Primitives of the ``pooling`` family on the mlx backend."""

    def _windows_of(self, x: Any, windows: Windows, fill: float, dtype: DType) -> tuple[Any, Any]:
        """``x``'s windows as ``(P, T, L)``, and whether each tap is inside the plane."""
        mx, s = self.mx, self._stream(dtype)
        n, c, h, w = x.shape
        sources = window_sources(windows)
        taps, outputs = sources.shape
        planes = mx.reshape(x, (n * c, h * w), stream=s)
        extra = mx.full((n * c, 1), fill, dtype=x.dtype, stream=s)
        padded = mx.concatenate([planes, extra], axis=1, stream=s)
        index = mx.array(np.where(sources >= 0, sources, h * w).reshape(-1))
        gathered = mx.take(padded, index, axis=1, stream=s)
        inside = mx.array(sources >= 0)
        return mx.reshape(gathered, (n * c, taps, outputs), stream=s), inside

    def _chosen_taps(self, values: Any, inside: Any, dtype: DType) -> Any:
        """The tap each window's max is taken from (PyTorch's choice), ``(P, L)``."""
        mx, s = self.mx, self._stream(dtype)
        taps = values.shape[1]
        nan = mx.isnan(values, stream=s)
        last_nan = taps - 1 - mx.argmax(nan[:, ::-1, :], axis=1, stream=s)
        first_max = mx.argmax(mx.where(nan, -math.inf, values, stream=s), axis=1, stream=s)
        first_inside = mx.argmax(inside, axis=0, stream=s)[None, :]
        largest = mx.max(values, axis=1, stream=s)
        chosen = mx.where(largest == -math.inf, first_inside, first_max, stream=s)
        return mx.where(mx.any(nan, axis=1, stream=s), last_nan, chosen, stream=s)

    def _positions(self, x: Any, windows: Windows, dtype: DType) -> Any:
        """The plane position each window's max is taken from, ``(P, L)`` int64."""
        mx, s = self.mx, self._stream(dtype)
        values, inside = self._windows_of(x, windows, -math.inf, dtype)
        taps = self._chosen_taps(values, inside, dtype)
        sources = mx.array(window_sources(windows))
        outputs = mx.arange(sources.shape[1], stream=s)[None, :]
        return mx.astype(sources[taps, outputs], mx.int64, stream=s)

    def _zeros(self, shape: Shape, dtype: DType) -> Any:
        """The result of pooling no planes: zeros of ``shape``."""
        return self.mx.zeros(shape, dtype=self._mx_dtype(dtype), stream=self._stream(dtype))

    def max_pool2d(self, x: Any, windows: Windows, shape: Shape, dtype: DType) -> Any:
        if x.size == 0:
            return self._zeros(shape, dtype)
        mx = self.mx
        x = self.cast(x, dtype)
        values, inside = self._windows_of(x, windows, -math.inf, dtype)
        taps = self._chosen_taps(values, inside, dtype)
        chosen = mx.take_along_axis(values, taps[:, None, :], axis=1, stream=self._stream(dtype))
        return mx.reshape(chosen, shape, stream=self._stream(dtype))

    def max_pool2d_positions(self, x: Any, windows: Windows, dtype: DType) -> Any:
        n, c = x.shape[:2]
        if x.size == 0:
            return self._zeros((n, c, *windows.output), int64)
        positions = self._positions(self.cast(x, dtype), windows, dtype)
        return self.mx.reshape(positions, (n, c, *windows.output))

    def max_pool2d_backward(self, x: Any, g: Any, windows: Windows, dtype: DType) -> Any:
        if x.size == 0:
            return self._zeros(x.shape, dtype)
        mx, s = self.mx, self._stream(dtype)
        x, g = self._operands(dtype, x, g)
        n, c, h, w = x.shape
        positions = self._positions(x, windows, dtype)
        rows = mx.arange(n * c, stream=s)[:, None]
        grad = mx.zeros((n * c, h * w), dtype=g.dtype, stream=s)
        grad = grad.at[rows, positions].add(mx.reshape(g, positions.shape, stream=s))
        return mx.reshape(grad, x.shape, stream=s)

    def _average(self, windows: Windows, divisors: Any, dtype: DType) -> Any:
        mx, s = self.mx, self._stream(dtype)
        table = np.outer(np.asarray(divisors[0], np.float64), divisors[1]).reshape(-1)
        divisor = mx.array(table, dtype=self._mx_dtype(dtype))

        def average(x: Any) -> Any:
            values, _ = self._windows_of(x, windows, 0.0, dtype)
            return mx.divide(mx.sum(values, axis=1, stream=s), divisor, stream=s)

        return average

    def avg_pool2d(
        self, x: Any, windows: Windows, divisors: Any, shape: Shape, dtype: DType
    ) -> Any:
        if x.size == 0:
            return self._zeros(shape, dtype)
        x = self.cast(x, dtype)
        return self.mx.reshape(self._average(windows, divisors, dtype)(x), shape)

    def avg_pool2d_backward(
        self, g: Any, windows: Windows, divisors: Any, shape: Shape, dtype: DType
    ) -> Any:
        if g.size == 0:
            return self._zeros(shape, dtype)
        mx = self.mx
        g = self.cast(g, dtype)
        x = mx.zeros(shape, dtype=g.dtype)
        cotangent = mx.reshape(g, (shape[0] * shape[1], -1))
        _, (grad,) = mx.vjp(self._average(windows, divisors, dtype), [x], [cotangent])
        return grad
