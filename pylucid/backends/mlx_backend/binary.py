"""MLX primitives of the binary elementwise ops: pow, atan2, logaddexp, maximum/minimum,
where and the comparisons. Every call passes ``stream=self._stream(dtype)`` (float64 runs on
MLX's CPU stream)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pylucid.dtypes import DType, float64


class MLXBinary:
    """Primitives of the binary family on the mlx backend (on top of ``MLXCore``)."""

    def _binary_compare(self, name: str, a: Any, b: Any, dtype: DType) -> Any:
        """``mlx.core.<name>`` of ``a`` and ``b`` cast to ``dtype``: a bool array."""
        return getattr(self.mx, name)(*self._operands(dtype, a, b), stream=self._stream(dtype))

    def _binary_tie_split(self, x: Any, other: Any, g: Any, dtype: DType, losing: str) -> Any:
        """``g`` where ``x`` wins, ``g / 2`` at a tie, 0 where ``x <losing> other``."""
        mx, s = self.mx, self._stream(dtype)
        x, other, g = self._operands(dtype, x, other, g)
        zero = mx.array(0, dtype=g.dtype)
        share = mx.where(mx.equal(x, other, stream=s), mx.multiply(g, 0.5, stream=s), g, stream=s)
        return mx.where(getattr(mx, losing)(x, other, stream=s), zero, share, stream=s)

    def pow(self, a, b, shape, dtype):
        mx, s = self.mx, self._stream(dtype)
        a, b = self._operands(dtype, a, b)
        if dtype.is_floating_point:
            return mx.power(a, b, stream=s)
        # Integers: MLX gives 0 for every negative exponent; PyTorch keeps 1 ** b = 1 and
        # (-1) ** b = -1 or 1 (see pylucid.kernels.binary_math.ipow).
        positive = mx.power(a, mx.maximum(b, 0, stream=s), stream=s)
        odd = mx.equal(mx.bitwise_and(b, 1, stream=s), 1, stream=s)
        minus_one = mx.where(odd, -1, 1, stream=s)
        negative = mx.where(
            mx.equal(a, 1, stream=s),
            1,
            mx.where(mx.equal(a, -1, stream=s), minus_one, 0, stream=s),
            stream=s,
        )
        return mx.where(
            mx.less(b, 0, stream=s), negative.astype(a.dtype, stream=s), positive, stream=s
        )

    def pow_backward_a(self, a, b, g, shape, dtype):
        """g b a^(b-1), 0 where b == 0, g (b / a) a^b where only that is finite, and nan
        where a^b is (see ``pylucid.kernels.binary_math.pow_grad_a``)."""
        mx = self.mx
        a, b, g = self._operands(dtype, a, b, g)
        with mx.stream(self._stream(dtype)):
            slope = b * mx.power(a, b - 1)
            other = (b / a) * mx.power(a, b)
            usable = mx.logical_not(mx.isfinite(slope)) & mx.isfinite(other)
            undefined = (a < 0) & (b != mx.floor(b)) & mx.isfinite(a)
            slope = mx.where(undefined, math.nan, slope)
            grad = g * mx.where(usable, other, slope)
            return mx.where(b == 0, mx.array(0, dtype=g.dtype), grad)

    def pow_backward_b(self, a, result, g, shape, dtype):
        mx, s = self.mx, self._stream(dtype)
        a, result, g = self._operands(dtype, a, result, g)
        # a == 0 and b >= 0 is a == 0 and a finite result: see binary_math.pow_grad_b.
        masked = mx.logical_and(mx.equal(a, 0, stream=s), mx.isfinite(result, stream=s), stream=s)
        slope = mx.multiply(result, mx.log(a, stream=s), stream=s)
        slope = mx.where(masked, mx.array(0, dtype=g.dtype), slope, stream=s)
        return mx.multiply(g, slope, stream=s)

    def atan2(self, a, b, shape, dtype):
        return self.mx.arctan2(*self._operands(dtype, a, b), stream=self._stream(dtype))

    def _binary_atan2_scale(self, a, b, g, dtype):
        """``(a / m, b / m, q, m)`` of ``pylucid.kernels.binary_math._atan2_scale``: ``m``
        the larger of a, b in magnitude, ``q = g / (1 + r^2)`` with ``r`` the smaller over
        ``m``; the gradients are ``±((a or b) / m) q / m``. a^2 + b^2 is never formed (it
        overflows and underflows where the gradients are numbers)."""
        mx = self.mx
        a, b, g = self._operands(dtype, a, b, g)
        with mx.stream(self._stream(dtype)):
            a_larger = mx.abs(a) >= mx.abs(b)
            m = mx.where(a_larger, a, b)
            ra, rb = a / m, b / m
            r = mx.where(a_larger, rb, ra)
            return ra, rb, g / (1 + r * r), m

    def atan2_backward_a(self, a, b, g, shape, dtype):
        ra, rb, q, m = self._binary_atan2_scale(a, b, g, dtype)
        with self.mx.stream(self._stream(dtype)):
            return (rb * q) / m

    def atan2_backward_b(self, a, b, g, shape, dtype):
        ra, rb, q, m = self._binary_atan2_scale(a, b, g, dtype)
        with self.mx.stream(self._stream(dtype)):
            return -((ra * q) / m)

    def logaddexp(self, a, b, shape, dtype):
        mx, s = self.mx, self._stream(dtype)
        a, b = self._operands(dtype, a, b)
        if dtype is not float64:  # (+ 0: MLX gives -0 for (-0, -inf); a log is never -0)
            return mx.add(mx.logaddexp(a, b, stream=s), 0.0, stream=s)
        with mx.stream(s):  # (float64: max + log1p(e^-|a - b|), with MLX's exp of float64)
            m = mx.maximum(a, b)
            y = m + mx.log1p(mx.power(mx.array(math.e, dtype=mx.float64), -mx.abs(a - b)))
            return mx.where(a == b, a + math.log(2.0), y)

    def _logaddexp_sigmoid(self, x, y, g, dtype):
        """``g / (1 + e^(y - x))``: the gradient of ``logaddexp`` with respect to ``x``."""
        mx, s = self.mx, self._stream(dtype)
        x, y, g = self._operands(dtype, x, y, g)
        with mx.stream(s):
            if dtype is float64:  # (MLX's exp of float64, as the reduction family's)
                return g / (1 + mx.power(mx.array(math.e, dtype=mx.float64), y - x))
            return g / (1 + mx.exp(y - x))

    def logaddexp_backward_a(self, a, b, g, shape, dtype):
        return self._logaddexp_sigmoid(a, b, g, dtype)

    def logaddexp_backward_b(self, a, b, g, shape, dtype):
        return self._logaddexp_sigmoid(b, a, g, dtype)

    def _host_pair(self, a, b, dtype):
        """``a`` and ``b`` as NumPy arrays of ``dtype`` (float16 and bfloat16 in float32)."""
        wide = np.float32 if dtype.is_half else dtype.numpy

        def host(x):
            return np.asarray(self.to_numpy(x) if isinstance(x, self.mx.array) else x, wide)

        return host(a), host(b)

    def _host_floor_divide(self, a, b, dtype):
        a, b = self._host_pair(a, b, dtype)
        with np.errstate(all="ignore"):  # (inf and nan tell the story)
            return np.floor_divide(a, b)

    def remainder(self, a, b, shape, dtype):
        """On the host (NumPy's exact ``fmod``; MLX has none, and its remainder of a tiny
        ``a`` by a negative ``b`` rounds to ``b``): ``fmod(a, b)``, plus ``b`` where
        non-zero and of the other sign, as :func:`pylucid.kernels.binary_math.remainder`."""
        if not dtype.is_floating_point:
            return self.mx.remainder(*self._operands(dtype, a, b), stream=self._stream(dtype))
        a, b = self._host_pair(a, b, dtype)
        with np.errstate(all="ignore"):
            m = np.fmod(a, b)
            out = np.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)
        return self.from_numpy(np.broadcast_to(out, shape), dtype)

    def remainder_backward_b(self, a, b, g, shape, dtype):
        mx, s = self.mx, self._stream(dtype)
        quotient = self.from_numpy(
            np.broadcast_to(self._host_floor_divide(a, b, dtype), shape), dtype
        )
        return mx.negative(mx.multiply(quotient, self.cast(g, dtype), stream=s), stream=s)

    def floor_divide(self, a, b, shape, dtype):
        """On the host: NumPy's ``floor_divide`` is PyTorch's algorithm (``1 // 0.1`` is 9,
        from ``fmod``; ``mx.floor_divide`` of floats floors the rounded quotient: 10)."""
        if not dtype.is_floating_point:
            return self.mx.floor_divide(*self._operands(dtype, a, b), stream=self._stream(dtype))
        out = self._host_floor_divide(a, b, dtype)
        return self.from_numpy(np.broadcast_to(out, shape), dtype)

    def hypot(self, a, b, shape, dtype):
        """``m sqrt(1 + (s / m)^2)`` with ``m`` the larger magnitude (no overflow of the
        squares); inf where either is infinite, as C's hypot."""
        mx, s = self.mx, self._stream(dtype)
        a, b = self._operands(dtype, a, b)
        with mx.stream(s):
            big = mx.maximum(mx.abs(a), mx.abs(b))
            small = mx.minimum(mx.abs(a), mx.abs(b))
            ratio = mx.where(big == 0, mx.zeros_like(big), small / big)
            out = big * mx.sqrt(1 + ratio * ratio)
            infinite = mx.logical_or(mx.isinf(a), mx.isinf(b))
            return mx.where(infinite, mx.full(out.shape, math.inf, dtype=out.dtype), out)

    def hypot_backward(self, x, result, g, shape, dtype):
        mx, s = self.mx, self._stream(dtype)
        x, result, g = self._operands(dtype, x, result, g)
        return mx.multiply(g, mx.divide(x, result, stream=s), stream=s)

    def maximum(self, a, b, shape, dtype):
        return self.mx.maximum(*self._operands(dtype, a, b), stream=self._stream(dtype))

    def minimum(self, a, b, shape, dtype):
        return self.mx.minimum(*self._operands(dtype, a, b), stream=self._stream(dtype))

    def maximum_backward(self, x, other, g, shape, dtype):
        return self._binary_tie_split(x, other, g, dtype, losing="less")

    def minimum_backward(self, x, other, g, shape, dtype):
        return self._binary_tie_split(x, other, g, dtype, losing="greater")

    def where(self, condition, a, b, shape, dtype):
        mx = self.mx
        a, b = self._operands(dtype, a, b)
        return mx.where(condition, a, b, stream=self._stream(dtype))

    def eq(self, a, b, shape, dtype):
        return self._binary_compare("equal", a, b, dtype)

    def ne(self, a, b, shape, dtype):
        return self._binary_compare("not_equal", a, b, dtype)

    def lt(self, a, b, shape, dtype):
        return self._binary_compare("less", a, b, dtype)

    def le(self, a, b, shape, dtype):
        return self._binary_compare("less_equal", a, b, dtype)

    def gt(self, a, b, shape, dtype):
        return self._binary_compare("greater", a, b, dtype)

    def ge(self, a, b, shape, dtype):
        return self._binary_compare("greater_equal", a, b, dtype)
