"""MLX primitives of the reduction and softmax families.

Forwards map to ``mlx.core`` reductions; backwards are short compositions of MLX ops on
the input and the reduced-shape operands (``g``, ``result``), which arrive with the reduced
axes kept as size 1 so that they broadcast against the input. Every call passes
``stream=self._stream(dtype)``, so float64 runs on MLX's CPU stream.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pylucid.backends.base import Axes, Shape
from pylucid.backends.ordering import stable_argsort
from pylucid.dtypes import DType, float64
from pylucid.kernels import scan


class MLXReduction:
    """Primitives of the reduction and softmax families on the mlx backend."""

    # -- reductions -------------------------------------------------------------------------
    def prod(self, a: Any, axes: Axes, keepdims: bool, dtype: DType) -> Any:
        """Integers by MLX; floats by the numba backend's kernel on host copies, whose running
        product keeps its exponent apart (MLX's tree of products gave nan for a row of inf
        and 1e-30s, where the product is inf)."""
        if not dtype.is_floating_point:
            return self.mx.prod(
                self.cast(a, dtype), axis=list(axes), keepdims=keepdims, stream=self._stream(dtype)
            )
        return self.from_numpy(self._host().prod(self.to_numpy(a), axes, keepdims, dtype), dtype)

    def prod_backward(self, x: Any, g: Any, axes: Axes, dtype: DType) -> Any:
        """``g`` times the product of the other elements, by the numba backend's kernel on
        host copies: its running products keep their exponents apart (frexp), so none over-
        or underflows where the exact gradient does not; MLX's ``cumprod`` cannot renormalise
        as it goes. A backward of ``prod`` is rare enough for one host round trip."""
        out = self._host().prod_backward(self.to_numpy(x), self.to_numpy(g), axes, dtype)
        return self.from_numpy(out, dtype)

    @staticmethod
    def _host() -> Any:
        from pylucid import backends  # the numba backend is always there

        return backends.get("numba")

    def amax(self, a: Any, axes: Axes, keepdims: bool, dtype: DType) -> Any:
        return self.mx.max(a, axis=list(axes), keepdims=keepdims, stream=self._stream(dtype))

    def amin(self, a: Any, axes: Axes, keepdims: bool, dtype: DType) -> Any:
        return self.mx.min(a, axis=list(axes), keepdims=keepdims, stream=self._stream(dtype))

    def extremum_backward(self, x: Any, result: Any, g: Any, axes: Axes, dtype: DType) -> Any:
        """``g`` shared equally by the elements equal to ``result`` (NaN ones if it is NaN)."""
        mx, s = self.mx, self._stream(dtype)
        x, result, g = self._operands(dtype, x, result, g)
        both_nan = mx.logical_and(mx.isnan(x, stream=s), mx.isnan(result, stream=s), stream=s)
        chosen = mx.logical_or(mx.equal(x, result, stream=s), both_nan, stream=s)
        count = mx.sum(chosen, axis=list(axes), keepdims=True, stream=s).astype(x.dtype, stream=s)
        share = mx.divide(g, count, stream=s)
        return mx.where(chosen, share, mx.zeros_like(x, stream=s), stream=s)

    def argmax(self, a: Any, axis: int | None, keepdims: bool, dtype: DType) -> Any:
        return self._arg_extremum(self.mx.argmax, a, axis, keepdims, dtype)

    def argmin(self, a: Any, axis: int | None, keepdims: bool, dtype: DType) -> Any:
        return self._arg_extremum(self.mx.argmin, a, axis, keepdims, dtype)

    def _arg_extremum(self, fn: Any, a: Any, axis: int | None, keepdims: bool, dtype: DType) -> Any:
        mx, s = self.mx, self._stream(dtype)
        if a.size == 0:  # MLX refuses even when the reduced axis itself is not empty
            return mx.zeros(_reduced_shape(a.shape, (axis,), keepdims), dtype=mx.int64)
        index = fn(a, axis=axis, keepdims=keepdims, stream=s)
        return index.astype(mx.int64, stream=s)  # MLX gives uint32

    def var(self, a: Any, axes: Axes, keepdims: bool, correction: float, dtype: DType) -> Any:
        """``sum((a - mean)**2) / max(0, n - correction)``, two-pass."""
        mx, s = self.mx, self._stream(dtype)
        a = self.cast(a, dtype)
        divisor = max(0.0, math.prod(a.shape[i] for i in axes) - correction)
        centered = mx.subtract(a, self._mean(a, axes, dtype), stream=s)
        squares = mx.sum(
            mx.square(centered, stream=s), axis=list(axes), keepdims=keepdims, stream=s
        )
        return mx.divide(squares, mx.array(divisor, dtype=a.dtype), stream=s)

    def std(self, a: Any, axes: Axes, keepdims: bool, correction: float, dtype: DType) -> Any:
        """``2 (s sqrt(sum(((a/2 - mean/2) / s)**2) / (n - correction)))`` with ``s`` the
        largest half deviation (``sqrt(var)`` where s is 0), so that neither the deviations
        nor their squares leave float32's range where the result does not: float32 [1e20, 1,
        2, 3] has a variance beyond float32 but a deviation of 5e19, [1e-30, 0, 0, 0] one that
        underflows, [max, -max, ...] deviations beyond max. (The numba backend computes
        float32 in float64 and scales only where float64 overflows.)"""
        mx, s = self.mx, self._stream(dtype)
        a = self.cast(a, dtype)
        plain = mx.sqrt(self.var(a, axes, True, correction, dtype), stream=s)
        if a.size:
            divisor = max(0.0, math.prod(a.shape[i] for i in axes) - correction)
            mean = self._mean(a, axes, dtype)
            halves = mx.subtract(mx.divide(a, 2, stream=s), mx.divide(mean, 2, stream=s), stream=s)
            scale = mx.max(mx.abs(halves, stream=s), axis=list(axes), keepdims=True, stream=s)
            ratios = mx.divide(halves, scale, stream=s)
            squares = mx.sum(mx.square(ratios, stream=s), axis=list(axes), keepdims=True, stream=s)
            root = mx.sqrt(mx.divide(squares, divisor, stream=s), stream=s)
            scaled = mx.multiply(mx.multiply(scale, root, stream=s), 2, stream=s)
            plain = mx.where(mx.equal(scale, 0, stream=s), plain, scaled, stream=s)
        return plain if keepdims else mx.squeeze(plain, axis=list(axes), stream=s)

    def var_backward(self, x: Any, g: Any, axes: Axes, correction: float, dtype: DType) -> Any:
        """``2 g (x - mean) / (n - correction)``."""
        mx, s = self.mx, self._stream(dtype)
        x, g = self._operands(dtype, x, g)
        divisor = max(0.0, math.prod(x.shape[i] for i in axes) - correction)
        k = mx.divide(mx.multiply(g, 2.0, stream=s), mx.array(divisor, dtype=x.dtype), stream=s)
        return self._centered(x, k, axes, dtype)

    def std_backward(
        self, x: Any, result: Any, g: Any, axes: Axes, correction: float, dtype: DType
    ) -> Any:
        """``g (x - mean) / ((n - correction) std)``, 0 where std = 0; divided in two steps,
        as ``(n - correction) std`` overflows where the largest std does."""
        mx, s = self.mx, self._stream(dtype)
        x, result, g = self._operands(dtype, x, result, g)
        divisor = max(0.0, math.prod(x.shape[i] for i in axes) - correction)
        k = mx.divide(mx.divide(g, divisor, stream=s), result, stream=s)
        k = mx.where(mx.equal(result, 0, stream=s), mx.zeros_like(k, stream=s), k, stream=s)
        return self._centered(x, k, axes, dtype)

    def _centered(self, x: Any, k: Any, axes: Axes, dtype: DType) -> Any:
        """``k (x - mean)``; from halves, ``2 (k (x/2 - mean/2))``, where ``x - mean``
        overflows though both are finite ([max, -max, -max, -max])."""
        mx, s = self.mx, self._stream(dtype)
        mean = self._mean(x, axes, dtype)
        plain = mx.multiply(k, mx.subtract(x, mean, stream=s), stream=s)
        halves = mx.subtract(mx.divide(x, 2, stream=s), mx.divide(mean, 2, stream=s), stream=s)
        halved = mx.multiply(mx.multiply(k, halves, stream=s), 2, stream=s)
        overflowed = mx.logical_and(
            mx.isinf(mx.subtract(x, mean, stream=s), stream=s),
            mx.logical_and(mx.isfinite(x, stream=s), mx.isfinite(mean, stream=s), stream=s),
            stream=s,
        )
        return mx.where(overflowed, halved, plain, stream=s)

    def _mean(self, x: Any, axes: Axes, dtype: DType) -> Any:
        """The mean over ``axes`` (kept). Where the sum overflows (1e38s in float32): the
        largest element plus the mean of the differences from it (exact for a constant
        slice), or failing that the sum of ``x / n`` (slices of max and -max)."""
        mx, s = self.mx, self._stream(dtype)
        keep = {"axis": list(axes), "keepdims": True, "stream": s}
        n = math.prod(x.shape[i] for i in axes)
        mean = mx.mean(x, **keep)
        if not x.size:
            return mean
        top = mx.max(x, **keep)
        shifted = mx.add(top, mx.mean(mx.subtract(x, top, stream=s), **keep), stream=s)
        scaled = mx.sum(mx.divide(x, n, stream=s), **keep)
        fallback = mx.where(mx.isfinite(shifted, stream=s), shifted, scaled, stream=s)
        return mx.where(mx.isfinite(mean, stream=s), mean, fallback, stream=s)

    # -- softmax family ---------------------------------------------------------------------
    # MLX's float64 ``exp`` (and so its float64 ``softmax`` and ``logsumexp``) is accurate
    # only to about 5e-7 relative on its CPU stream (mlx 0.32), while ``power`` is accurate
    # to a few ULP: float64 work uses ``e ** x`` (relative error 4e-14 at |x| = 700) and
    # max-shifted compositions; float32 keeps MLX's fused kernels.
    def _exp(self, x: Any, dtype: DType) -> Any:
        mx, s = self.mx, self._stream(dtype)
        if dtype is float64:
            return mx.power(mx.array(math.e, dtype=mx.float64), x, stream=s)
        return mx.exp(x, stream=s)

    def logsumexp(self, a: Any, axes: Axes, keepdims: bool, dtype: DType) -> Any:
        """``s + log(sum(exp(a - s)))`` with ``s`` the max, or 0 where the max is ±inf (-inf
        rows give -inf, +inf rows +inf); -inf for no elements."""
        mx, s = self.mx, self._stream(dtype)
        a = self.cast(a, dtype)
        if a.size == 0:  # mx.logsumexp refuses empty arrays; log of an empty sum is -inf
            return mx.full(_reduced_shape(a.shape, axes, keepdims), -math.inf, a.dtype, stream=s)
        if dtype is not float64:
            return mx.logsumexp(a, axis=list(axes), keepdims=keepdims, stream=s)
        m = mx.max(a, axis=list(axes), keepdims=True, stream=s)
        shift = mx.where(mx.isinf(m, stream=s), mx.zeros_like(m, stream=s), m, stream=s)
        shifted = mx.subtract(a, shift, stream=s)
        total = mx.sum(self._exp(shifted, dtype), axis=list(axes), keepdims=True, stream=s)
        result = mx.add(mx.log(total, stream=s), shift, stream=s)
        return result if keepdims else mx.squeeze(result, axis=list(axes), stream=s)

    def logsumexp_backward(self, x: Any, result: Any, g: Any, axes: Axes, dtype: DType) -> Any:
        """``g exp(x - result)``."""
        mx, s = self.mx, self._stream(dtype)
        x, result, g = self._operands(dtype, x, result, g)
        return mx.multiply(g, self._exp(mx.subtract(x, result, stream=s), dtype), stream=s)

    def softmax(self, a: Any, axes: Axes, dtype: DType) -> Any:
        """``exp(a - m) / sum(exp(a - m))`` with ``m`` the max (MLX's kernel in float32)."""
        mx, s = self.mx, self._stream(dtype)
        a = self.cast(a, dtype)
        if not axes:  # a 0-d tensor: the softmax of its one element, as a 1-element axis
            one = self.softmax(mx.reshape(a, (1,), stream=s), (0,), dtype)
            return mx.reshape(one, (), stream=s)
        if a.size == 0:
            return a
        if dtype is not float64:
            return mx.softmax(a, axis=list(axes), stream=s)
        m = mx.max(a, axis=list(axes), keepdims=True, stream=s)
        e = self._exp(mx.subtract(a, m, stream=s), dtype)
        return mx.divide(e, mx.sum(e, axis=list(axes), keepdims=True, stream=s), stream=s)

    def log_softmax(self, a: Any, axes: Axes, dtype: DType) -> Any:
        """``(a - m) - log(sum(exp(a - m)))`` with ``m`` the max."""
        mx, s = self.mx, self._stream(dtype)
        a = self.cast(a, dtype)
        if not axes:  # a 0-d tensor, as a 1-element axis
            one = self.log_softmax(mx.reshape(a, (1,), stream=s), (0,), dtype)
            return mx.reshape(one, (), stream=s)
        if a.size == 0:
            return a
        shifted = mx.subtract(a, mx.max(a, axis=list(axes), keepdims=True, stream=s), stream=s)
        total = mx.sum(self._exp(shifted, dtype), axis=list(axes), keepdims=True, stream=s)
        return mx.subtract(shifted, mx.log(total, stream=s), stream=s)

    def softmax_backward(self, y: Any, g: Any, axes: Axes, dtype: DType) -> Any:
        """``y (g - sum(g y))``."""
        mx, s = self.mx, self._stream(dtype)
        y, g = self._operands(dtype, y, g)
        dot = mx.sum(mx.multiply(g, y, stream=s), axis=list(axes), keepdims=True, stream=s)
        return mx.multiply(y, mx.subtract(g, dot, stream=s), stream=s)

    def log_softmax_backward(self, y: Any, g: Any, axes: Axes, dtype: DType) -> Any:
        """``g - exp(y) sum(g)``."""
        mx, s = self.mx, self._stream(dtype)
        y, g = self._operands(dtype, y, g)
        total = mx.sum(g, axis=list(axes), keepdims=True, stream=s)
        return mx.subtract(g, mx.multiply(self._exp(y, dtype), total, stream=s), stream=s)

    # -- losses -----------------------------------------------------------------------------
    def check_targets(self, target: Any, classes: int, ignore_index: int) -> tuple[int, int]:
        return self._host().check_targets(self.to_numpy(target), classes, ignore_index)

    def _shifted_rows(self, x: Any, dtype: DType) -> tuple[Any, Any, Any]:
        """``m`` (the row's max, 0 where that is -inf), ``x - m`` for ``(rows, C)`` logits
        and ``log sum exp(x - m)`` (``m`` and the log kept as ``(rows, 1)``; the log NaN for
        a row holding +inf, whose softmax is NaN), as the numba kernel's. Working on the
        shifted logits, as PyTorch's log_softmax, keeps ``log 3`` in a row of three ``max``
        values (``m + log 3`` would round it away)."""
        mx, s = self.mx, self._stream(dtype)
        m = mx.max(x, axis=1, keepdims=True, stream=s)
        shift = mx.where(mx.isinf(m, stream=s), mx.zeros_like(m, stream=s), m, stream=s)
        shifted = mx.subtract(x, shift, stream=s)
        total = mx.sum(self._exp(shifted, dtype), axis=1, keepdims=True, stream=s)
        nan = mx.full(total.shape, math.nan, dtype=total.dtype, stream=s)
        lse = mx.where(mx.equal(m, math.inf, stream=s), nan, mx.log(total, stream=s), stream=s)
        return shift, shifted, lse

    def _smoothed_targets(
        self, target: Any, classes: int, label_smoothing: float, mx_dtype: Any, dtype: DType
    ) -> Any:
        """``q = (1 - e) onehot(target) + e / C``, ``(rows, C)``."""
        mx, s = self.mx, self._stream(dtype)
        hot = mx.equal(
            mx.arange(classes, stream=s)[None, :], mx.expand_dims(target, 1, stream=s), stream=s
        )
        return mx.add(
            mx.multiply(hot.astype(mx_dtype, stream=s), 1.0 - label_smoothing, stream=s),
            label_smoothing / classes,
            stream=s,
        )

    def cumsum(self, a: Any, axis: int, dtype: DType) -> Any:
        """``mx.cumsum``, plus 0 for floats: a sum starts from +0, so a leading -0 is +0."""
        mx, s = self.mx, self._stream(dtype)
        out = mx.cumsum(self.cast(a, dtype), axis=axis, stream=s)
        return mx.add(out, 0.0, stream=s) if dtype.is_floating_point else out

    def cumprod(self, a: Any, axis: int, dtype: DType) -> Any:
        return self.mx.cumprod(self.cast(a, dtype), axis=axis, stream=self._stream(dtype))

    def cumprod_backward(self, x: Any, g: Any, axis: int, dtype: DType) -> Any:
        """On the host, with the numba backend's kernel (:mod:`pylucid.kernels.scan`): the
        division-free gradient is two sequential recurrences per row."""
        wide = dtype.numpy if dtype.name in ("float32", "float64") else np.float32
        host = scan.cumprod_backward(
            self.to_numpy(x).astype(wide), self.to_numpy(g).astype(wide), axis
        )
        return self.from_numpy(host, dtype)

    def argsort(self, a: Any, axis: int, descending: bool, dtype: DType) -> Any:
        """On the host (:mod:`pylucid.backends.ordering`): MLX's sort is not said to be stable."""
        order = stable_argsort(self.to_numpy(a), axis, descending)
        return self.mx.array(order, dtype=self.mx.int64)

    def cross_entropy(
        self,
        x: Any,
        target: Any,
        ignore_index: int,
        label_smoothing: float,
        divisor: float | None,
        dtype: DType,
    ) -> Any:
        """``(1 - e)(lse - x_t) + e (lse - mean x)`` per row, on the shifted logits, 0 on
        ignored rows (the formulas of :mod:`pylucid.kernels.losses`); their sum over
        ``divisor`` where it is given."""
        losses = self._cross_entropy_rows(x, target, ignore_index, label_smoothing, dtype)
        if divisor is None:
            return losses
        mx, s = self.mx, self._stream(dtype)
        return mx.divide(mx.sum(losses, stream=s), divisor, stream=s)

    def _cross_entropy_rows(
        self, x: Any, target: Any, ignore_index: int, label_smoothing: float, dtype: DType
    ) -> Any:
        mx, s = self.mx, self._stream(dtype)
        x = self.cast(x, dtype)
        rows, classes = x.shape
        if rows == 0 or classes == 0:
            return mx.zeros((rows,), dtype=self._mx_dtype(dtype), stream=s)
        keep = mx.not_equal(target, ignore_index, stream=s)
        shift, _, lse = self._shifted_rows(x, dtype)
        q = self._smoothed_targets(target, classes, label_smoothing, x.dtype, dtype)
        d = mx.subtract(shift, x, stream=s)
        wide = mx.subtract(mx.multiply(q, shift, stream=s), mx.multiply(q, x, stream=s), stream=s)
        terms = mx.where(mx.isinf(d, stream=s), wide, mx.multiply(q, d, stream=s), stream=s)
        terms = mx.where(mx.equal(q, 0, stream=s), mx.zeros_like(terms, stream=s), terms, stream=s)
        loss = mx.add(lse[:, 0], mx.sum(terms, axis=1, stream=s), stream=s)
        return mx.where(keep, loss, mx.zeros_like(loss, stream=s), stream=s)

    def cross_entropy_backward(
        self,
        x: Any,
        target: Any,
        g: Any,
        ignore_index: int,
        label_smoothing: float,
        divisor: float | None,
        dtype: DType,
    ) -> Any:
        """``g_r (exp(x - lse) - q)``, ``q = (1 - e) onehot(t) + e / C``, 0 on ignored rows;
        ``g_r = g / divisor`` where ``divisor`` is given."""
        mx, s = self.mx, self._stream(dtype)
        x = self.cast(x, dtype)
        rows, classes = x.shape
        if rows == 0 or classes == 0:
            return mx.zeros(x.shape, dtype=self._mx_dtype(dtype), stream=s)
        keep = mx.expand_dims(mx.not_equal(target, ignore_index, stream=s), 1, stream=s)
        q = self._smoothed_targets(target, classes, label_smoothing, x.dtype, dtype)
        _, shifted, lse = self._shifted_rows(x, dtype)
        p = self._exp(mx.subtract(shifted, lse, stream=s), dtype)
        g = self.cast(g, dtype)
        if divisor is not None:
            g = mx.divide(g, divisor, stream=s)
        per_row = mx.broadcast_to(g, (rows,), stream=s)[:, None]
        out = mx.multiply(per_row, mx.subtract(p, q, stream=s), stream=s)
        return mx.where(keep, out, mx.zeros_like(out, stream=s), stream=s)

def _reduced_shape(shape: Shape, axes: Axes, keepdims: bool) -> Shape:
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)
