"""MLX primitives of the ``normalization`` op family: layer and batch normalisation, as
compositions of ``mlx.core`` ops, layer normalisation over ``(rows, D)`` (the formulas of
:mod:`pylucid.kernels.normalization`), batch normalisation over ``(N, C, S)`` (those of
:mod:`pylucid.kernels.batch_norm`: the statistics by the corrected two-pass algorithm, in
the compute dtype here, kept as float64 on MLX's CPU stream; the mean split in two where
the input is centred).

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

import numpy as np

from pylucid.dtypes import DType, float64


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

    def _channel_view(self, a: Any, dtype: DType) -> Any:
        """``(N, C, ...)`` ``a`` as ``(N, C, S)``."""
        n, c = a.shape[:2]
        size = 1
        for extent in a.shape[2:]:
            size *= extent
        return self.mx.reshape(a, (n, c, size), stream=self._stream(dtype))

    def _channel_scale(self, rows: Any, dtype: DType) -> Any:
        """Per channel of ``(N, C, S)`` ``rows``, as ``(1, C, 1)``, the power of two of
        :meth:`_row_scale` (the channel's largest finite magnitude brought into ``[1, 4)``)."""
        mx, s = self.mx, self._stream(dtype)
        channels = mx.reshape(mx.moveaxis(rows, 1, 0, stream=s), (rows.shape[1], -1), stream=s)
        return mx.reshape(self._row_scale(channels, dtype), (1, -1, 1), stream=s)

    def _normalised_channels(self, rows: Any, stats: Any, eps: float, dtype: DType) -> Any:
        """``xhat = (x - mean) / sqrt(var + eps)`` of ``(N, C, S)`` ``rows`` from the
        float64 ``stats``, as ``((x / s - hi) - lo) (rstd s)`` with the channel's scale
        ``s`` and ``hi + lo = mean / s`` (float32: to 2**-48): the coefficients in float64
        on the CPU stream (MLX's only one with float64), so that neither the deviations nor
        ``rstd`` overflow where the normalised values do not."""
        mx, s, target = self.mx, self._stream(dtype), self._mx_dtype(dtype)
        cpu = mx.cpu
        scale = self._channel_scale(rows, dtype)
        wide = stats.astype(mx.float64, stream=cpu)
        unit = mx.reshape(scale.astype(mx.float64, stream=cpu), (-1,), stream=cpu)
        shifted = mx.divide(wide[0], unit, stream=cpu)
        hi = shifted.astype(target, stream=cpu)
        lo = mx.subtract(shifted, hi.astype(mx.float64, stream=cpu), stream=cpu)
        rstd = mx.divide(unit, mx.sqrt(mx.add(wide[1], eps, stream=cpu), stream=cpu), stream=cpu)
        # (beyond the dtype's largest only for a constant channel of huge values, whose
        # deviations are 0: the largest finite keeps their product 0, not 0 * inf)
        rstd = mx.minimum(rstd, float(np.finfo(np.dtype(dtype.numpy)).max), stream=cpu)
        hi, lo, rstd = (
            mx.reshape(a.astype(target, stream=cpu), (1, -1, 1), stream=cpu) for a in (hi, lo, rstd)
        )
        centred = mx.subtract(
            mx.subtract(mx.divide(rows, scale, stream=s), hi, stream=s), lo, stream=s
        )
        return mx.multiply(centred, rstd, stream=s)

    def batch_norm_stats(self, x: Any, dtype: DType) -> Any:
        """By the corrected two-pass algorithm on ``x / s`` (:meth:`_channel_scale`), the
        scale taken back out in float64."""
        mx, s = self.mx, self._stream(dtype)
        (x,) = self._operands(dtype, x)
        channels = x.shape[1]
        if x.size == 0:  # (no values: no statistics)
            return mx.full((2, channels), float("nan"), dtype=mx.float64, stream=mx.cpu)
        rows = self._channel_view(x, dtype)
        scale = self._channel_scale(rows, dtype)
        scaled = mx.divide(rows, scale, stream=s)
        shift = mx.mean(scaled, axis=(0, 2), keepdims=True, stream=s)
        d = mx.subtract(scaled, shift, stream=s)
        delta = mx.mean(d, axis=(0, 2), stream=s)
        square = mx.mean(mx.square(d, stream=s), axis=(0, 2), stream=s)
        var = mx.maximum(mx.subtract(square, mx.square(delta, stream=s), stream=s), 0, stream=s)
        shift = mx.reshape(shift, (channels,), stream=s)
        parts = self.cast(mx.stack([shift, delta, var], stream=s), float64)
        unit = self.cast(mx.reshape(scale, (channels,), stream=s), float64)
        cpu = mx.cpu  # (float64: the mean's two parts added without rounding to float32, the
        mean = mx.multiply(mx.add(parts[0], parts[1], stream=cpu), unit, stream=cpu)
        variance = mx.multiply(mx.multiply(parts[2], unit, stream=cpu), unit, stream=cpu)
        return mx.stack([mean, variance], stream=cpu)  # variance times unit twice: 0 stays 0)

    def batch_norm(self, x: Any, w: Any, b: Any, stats: Any, eps: float, dtype: DType) -> Any:
        mx, s = self.mx, self._stream(dtype)
        x, w, b = self._operands(dtype, x, w, b)
        if x.size == 0:
            return mx.zeros(x.shape, dtype=x.dtype, stream=s)
        xhat = self._normalised_channels(self._channel_view(x, dtype), stats, eps, dtype)
        weight, bias = self._per_channel(w, dtype), self._per_channel(b, dtype)
        out = mx.add(mx.multiply(xhat, weight, stream=s), bias, stream=s)
        return mx.reshape(out, x.shape, stream=s)

    def _per_channel(self, a: Any, dtype: DType) -> Any:
        """A ``(C,)`` or 0-d ``a`` broadcastable against ``(N, C, S)``."""
        return a if a.ndim == 0 else self.mx.reshape(a, (1, -1, 1), stream=self._stream(dtype))

    def batch_norm_backward(
        self, x: Any, w: Any, stats: Any, g: Any, eps: float, training: bool, input_grad: bool,
        affine_grads: bool, dtype: DType,
    ) -> tuple[Any, Any, Any]:  # fmt: skip
        """``dx = w rstd (g - mean(g) - xhat mean(g xhat))`` (``w rstd g`` with constant
        statistics), ``dw = sum g xhat``, ``db = sum g`` over each channel."""
        mx, s = self.mx, self._stream(dtype)
        x, w, g = self._operands(dtype, x, w, g)
        channels = x.shape[1]
        if x.size == 0:  # (sums of nothing)
            zeros = mx.zeros((channels,), dtype=x.dtype, stream=s)
            return mx.zeros(x.shape, dtype=x.dtype, stream=s) if input_grad else None, zeros, zeros
        rows, grads = self._channel_view(x, dtype), self._channel_view(g, dtype)
        xhat = self._normalised_channels(rows, stats, eps, dtype)
        db = mx.sum(grads, axis=(0, 2), stream=s)
        dw = mx.sum(mx.multiply(grads, xhat, stream=s), axis=(0, 2), stream=s)
        if not input_grad:
            return None, dw, db
        wide = stats.astype(mx.float64, stream=mx.cpu)
        rstd = mx.rsqrt(mx.add(wide[1], eps, stream=mx.cpu), stream=mx.cpu)
        rstd = mx.reshape(rstd.astype(x.dtype, stream=mx.cpu), (1, -1, 1), stream=s)
        if training:
            count = rows.shape[0] * rows.shape[2]
            g_mean = mx.reshape(mx.divide(db, count, stream=s), (1, -1, 1), stream=s)
            gx_mean = mx.reshape(mx.divide(dw, count, stream=s), (1, -1, 1), stream=s)
            inner = mx.subtract(grads, g_mean, stream=s)
            grads = mx.subtract(inner, mx.multiply(xhat, gx_mean, stream=s), stream=s)
        dx = mx.multiply(mx.multiply(grads, rstd, stream=s), self._per_channel(w, dtype), stream=s)
        dx = mx.reshape(dx, x.shape, stream=s)
        return dx, dw, db
