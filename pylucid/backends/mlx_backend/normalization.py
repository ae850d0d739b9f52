"""MLX primitives of the ``normalization`` op family: layer normalisation, as compositions of
``mlx.core`` ops over ``(rows, D)`` (the formulas of :mod:`pylucid.kernels.normalization`).

MLX computes float32 in float32 (its GPU has no float64), where the deviations of values
beyond 1.7e38 / 2, their squares beyond 1.8e19 and the products ``g w`` can overflow
although the result does not. So each row (and ``g`` and ``w``) is first divided by a
power of two ``s`` that brings its largest magnitude into ``[1, 4)`` - exact, and the
normalisation is unchanged with ``eps / s^2`` for ``eps`` - and the scales are multiplied
back once at the end: float32 rows then give the values of the numba backend's float64
computation (rounded), as far as float32 holds them.
"""

from __future__ import annotations

from typing import Any

from pylucid.dtypes import DType


class MLXNormalization:
    """Primitives of the ``normalization`` family on the mlx backend."""

    def _row_scale(self, a: Any, dtype: DType) -> Any:
        """Per row of ``a``, the power of two ``s`` that brings its largest finite magnitude
        into ``[1, 4)``, or 1 where that is below 2 (one below the floor of ``log2``: a
        float32 ``log2`` of 3.4e38 rounds up to 128)."""
        mx, s = self.mx, self._stream(dtype)
        magnitude = mx.abs(a, stream=s)
        finite = mx.where(mx.isfinite(a, stream=s), magnitude, 0, stream=s)
        largest = mx.max(finite, axis=-1, keepdims=True, stream=s)
        exponent = mx.subtract(mx.floor(mx.log2(largest, stream=s), stream=s), 1, stream=s)
        scale = mx.power(2.0, exponent, stream=s)
        usable = mx.greater(largest, 2, stream=s)
        return mx.where(usable, scale.astype(a.dtype), mx.ones_like(largest, stream=s), stream=s)

    def _normalised(self, rows: Any, eps: float, dtype: DType) -> tuple[Any, Any]:
        """(xhat, rstd) of ``(rows, D)`` ``rows``, from ``x / s`` with ``eps / s^2``.

        Where ``eps / s^2`` underflows and the row is constant (``var + eps / s^2 = 0``),
        ``xhat`` is 0 and ``rstd`` is ``1 / sqrt(eps)``, their values."""
        mx, s = self.mx, self._stream(dtype)
        scale = self._row_scale(rows, dtype)
        scaled = mx.divide(rows, scale, stream=s)
        centred = mx.subtract(scaled, mx.mean(scaled, axis=1, keepdims=True, stream=s), stream=s)
        var = mx.mean(mx.square(centred, stream=s), axis=1, keepdims=True, stream=s)
        denominator = mx.add(var, mx.divide(eps, mx.square(scale, stream=s), stream=s), stream=s)
        r = mx.rsqrt(denominator, stream=s)
        positive = mx.not_equal(denominator, 0, stream=s)  # (nan stays nan)
        xhat = mx.where(
            positive, mx.multiply(centred, r, stream=s), mx.zeros_like(centred, stream=s), stream=s
        )
        exact = mx.full(r.shape, eps**-0.5, dtype=r.dtype, stream=s)
        rstd = mx.where(positive, mx.divide(r, scale, stream=s), exact, stream=s)
        return xhat, rstd

    def layer_norm(self, x: Any, w: Any, b: Any, size: int, eps: float, dtype: DType) -> Any:
        mx, s = self.mx, self._stream(dtype)
        x, w, b = self._operands(dtype, x, w, b)
        if x.size == 0:
            return mx.zeros(x.shape, dtype=x.dtype, stream=s)
        xhat, _ = self._normalised(mx.reshape(x, (-1, size), stream=s), eps, dtype)
        weight, bias = mx.reshape(w, (size,), stream=s), mx.reshape(b, (size,), stream=s)
        out = mx.add(mx.multiply(xhat, weight, stream=s), bias, stream=s)
        return mx.reshape(out, x.shape, stream=s)

    def layer_norm_backward(
        self, x: Any, w: Any, g: Any, size: int, eps: float, dtype: DType
    ) -> tuple[Any, Any, Any]:
        """``dx = rstd (h - mean(h) - xhat mean(h xhat))`` with ``h = g w`` formed as
        ``(g / s_g)(w / s_w)`` and the scales applied to the result."""
        mx, s = self.mx, self._stream(dtype)
        x, w, g = self._operands(dtype, x, w, g)
        if x.size == 0:  # (no rows, or rows of nothing: dw and db are sums of nothing)
            zeros = mx.zeros((size,), dtype=x.dtype, stream=s)
            return mx.zeros(x.shape, dtype=x.dtype, stream=s), zeros, zeros
        rows = mx.reshape(g, (-1, size), stream=s)
        weight = mx.reshape(w, (1, size), stream=s)
        xhat, rstd = self._normalised(mx.reshape(x, (-1, size), stream=s), eps, dtype)
        g_scale, w_scale = self._row_scale(rows, dtype), self._row_scale(weight, dtype)
        h = mx.multiply(
            mx.divide(rows, g_scale, stream=s), mx.divide(weight, w_scale, stream=s), stream=s
        )
        h_mean = mx.mean(h, axis=1, keepdims=True, stream=s)
        hx_mean = mx.mean(mx.multiply(h, xhat, stream=s), axis=1, keepdims=True, stream=s)
        inner = mx.subtract(
            mx.subtract(h, h_mean, stream=s), mx.multiply(xhat, hx_mean, stream=s), stream=s
        )
        scales = mx.multiply(g_scale, w_scale, stream=s)
        dx = mx.multiply(mx.multiply(inner, rstd, stream=s), scales, stream=s)
        dw = mx.sum(mx.multiply(rows, xhat, stream=s), axis=0, stream=s)
        return dx, dw, mx.sum(rows, axis=0, stream=s)
