"""Scalar math of the binary elementwise ops: pow, atan2, maximum/minimum, where, comparisons.

Each function is a ``numba.extending.register_jitable`` function of two or three numbers,
turned into loops by :func:`pylucid.kernels.loops.elementwise`. Forward functions are generic
over the dtypes their op accepts (``power``, ``atan2`` and the gradients: float32 and float64;
``maximum``, ``minimum``, ``where`` and the comparisons also integers and bool; ``ipow``
integers). Gradient functions are fused: they take what the forward saved and the upstream
gradient ``g`` and return one input's gradient in one expression.

Python float literals are float64 in Numba, so a float32 gradient that mixes in a literal
(``b - 1``, ``g * 0.5``, ``a * 1.0``) is computed in float64 and rounded once when stored.
"""

from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from pylucid.kernels import simd_math


# -- pow ---------------------------------------------------------------------------------------
@register_jitable
def power(a, b):
    """y = a ** b for floats (C99 ``pow``: pow(x, 0) = 1, pow(1, y) = 1, pow(-8, 1/3) = nan)."""
    return a**b


@register_jitable
def ipow(a, b):
    """y = a ** b for integers, by squaring; wraps on overflow like the integer product.

    A negative exponent follows PyTorch: ``1 ** b = 1``, ``(-1) ** b = -1`` for odd ``b`` and
    1 for even ``b``, every other base gives 0 (``0 ** -1`` too: no error).
    """
    if b < 0:
        if a == 1:
            return 1
        if a == -1:
            return -1 if b & 1 else 1
        return 0
    result = 1
    base = a
    e = b
    while e > 0:
        if e & 1:
            result *= base
        base *= base
        e >>= 1
    return result


@register_jitable
def pow_grad_a(a, b, g):
    """dL/da = g b a^(b-1) for y = a ** b; 0 where b == 0 (PyTorch's ``pow_backward_self``).

    Where b a^(b-1) is not finite but (b / a) a^b is (a^(b-1) overflows for a subnormal a
    and a tiny b: float64 a = b = 5e-324 gave inf, exact 1), the latter is the gradient;
    the second ``**`` runs only there. Where a^b is nan (a < 0 finite, b not an integer) so
    is the gradient (b - 1 can round to an integer: a = -1e-45, b = 1e-45 gave -inf)."""
    if b == 0:
        return 0.0
    if a < 0 and b != np.floor(b) and math.isfinite(a):
        return math.nan
    slope = b * a ** (b - 1)
    if not math.isfinite(slope):
        other = (b / a) * a**b
        slope = other if math.isfinite(other) else slope
    return g * slope


@register_jitable
def pow_grad_b(a, y, g):
    """dL/db = g y ln a for y = a ** b; g * 0 where a == 0 and b >= 0.

    PyTorch masks where ``a == 0 and b >= 0`` (``pow_backward_exponent``). For ``a == ±0``,
    ``y = pow(±0, b)`` is finite exactly when ``b >= 0`` (0 or 1; inf for b < 0, nan for a nan
    b), so the mask is read from ``y`` and the kernel needs only ``a``, ``y`` and ``g``.
    """
    return g * (0.0 if a == 0 and math.isfinite(y) else y * simd_math.log(a))


# -- logaddexp ---------------------------------------------------------------------------------
@register_jitable
def logaddexp(a, b):
    """y = log(e^a + e^b) = max(a, b) + log1p(e^-|a - b|), which overflows only where y
    does; a == b (infinities included) is a + ln 2, and nan propagates."""
    if a == b:
        return a + 0.6931471805599453
    m = a if a > b else b
    return m + math.log1p(simd_math.exp(-abs(a - b)))


@register_jitable
def logaddexp_grad(a, b, g):
    """dL/da = g sigmoid(a - b) = g / (1 + e^(b - a)): the limit 1 where only a is +inf,
    nan where both are infinite of one sign (no direction). dL/db is the same with a and
    b swapped."""
    return g / (1.0 + simd_math.exp(b - a))


# -- remainder, floor_divide, hypot ------------------------------------------------------------
@register_jitable
def remainder(a, b):
    """PyTorch's remainder, with the divisor's sign: ``m = fmod(a, b)``, plus ``b`` where
    ``m`` is non-zero and of the other sign (a zero keeps ``a``'s sign, as ``fmod``'s)."""
    m = np.fmod(a, b)
    return m + b if m != 0 and (b < 0) != (m < 0) else m


@register_jitable
def remainder_grad_b(a, b, g):
    """dL/db of ``remainder(a, b) = a - floor_divide(a, b) b``: ``-floor_divide(a, b) g``
    (dL/da is ``g``)."""
    return -floor_divide(a, b) * g


@register_jitable
def floor_divide(a, b):
    """``a / b`` rounded towards -inf, as Python's and PyTorch's ``//`` (``1 // 0.1`` is 9:
    from ``fmod``, not from the rounded quotient); ``a / b`` where ``b`` is 0."""
    if b == 0:
        return a / b
    m = np.fmod(a, b)
    quotient = (a - m) / b
    if m != 0 and (b < 0) != (m < 0):
        quotient -= 1.0
    if quotient == 0:
        return math.copysign(0.0, a / b)
    floored = np.floor(quotient)  # (math.floor would return an int: nan would not survive)
    return floored + 1.0 if quotient - floored > 0.5 else floored


@register_jitable
def integer_remainder(a, b):
    """Integers: Python's ``%`` (the divisor was checked for zeros)."""
    return a % b


@register_jitable
def integer_floor_divide(a, b):
    """Integers: Python's ``//`` (the divisor was checked for zeros)."""
    return a // b


@register_jitable
def hypot(a, b):
    """y = sqrt(a^2 + b^2) without overflow or underflow (C's hypot); inf beats nan."""
    return math.hypot(a, b)


@register_jitable
def hypot_grad(a, y, g):
    """dL/da = g a / y (PyTorch's: nan at a = b = 0); dL/db the same with b."""
    return g * (a / y)


# -- atan2 -------------------------------------------------------------------------------------
@register_jitable
def atan2(a, b):
    """y = atan2(a, b), the angle of the point (b, a), in [-pi, pi]."""
    return math.atan2(a, b)


@register_jitable
def _atan2_scale(a, b, g):
    """``(a / m, b / m, q, m)`` with ``m`` the larger of a, b in magnitude (signed), ``r``
    the smaller over it and ``q = g / (1 + r^2)``: then g a / (a^2 + b^2) = (a / m) q / m,
    and the same for b. In float64 (``* 1.0`` widens float32); a^2 + b^2 is never formed: it
    overflowed for float64 |a|, |b| > 1.3e154 (a zero gradient where the exact one is a
    number) and underflowed below 1.5e-154 (inf or nan where it is finite, e.g. 1 / b at
    a = 0, b = 1e-160). The ratio of ``m`` to itself is 1, or nan where it is infinite, as
    ``inf / (inf^2 + b^2)`` in the plain formula (and in the create_graph one)."""
    wa, wb = a * 1.0, b * 1.0
    m = wa if abs(wa) >= abs(wb) else wb
    ra, rb = wa / m, wb / m
    r = rb if abs(wa) >= abs(wb) else ra
    return ra, rb, g / (1.0 + r * r), m


@register_jitable
def atan2_grad_a(a, b, g):
    """dL/da = g b / (a^2 + b^2) for y = atan2(a, b), as ((b / m) q) / m
    (:func:`_atan2_scale`; the ratio multiplies first, so that a zero b gives 0 even where
    q / m overflows): within 3 ULP and in range wherever the gradient is; nan at a = b = 0."""
    ra, rb, q, m = _atan2_scale(a, b, g)
    return (rb * q) / m


@register_jitable
def atan2_grad_b(a, b, g):
    """dL/db = -g a / (a^2 + b^2) for y = atan2(a, b), as -((a / m) q) / m."""
    ra, rb, q, m = _atan2_scale(a, b, g)
    return -(ra * q) / m


# -- maximum, minimum --------------------------------------------------------------------------
@register_jitable
def maximum(a, b):
    """y = max(a, b), nan if either is nan (as ``numpy.maximum`` and ``torch.maximum``)."""
    return a if a >= b or a != a else b


@register_jitable
def minimum(a, b):
    """y = min(a, b), nan if either is nan."""
    return a if a <= b or a != a else b


@register_jitable
def maximum_grad(x, other, g):
    """dL/dx for y = max(x, other): g where x > other, g/2 at a tie, 0 where x < other.

    Where either is nan no comparison holds and ``x`` gets g, as in PyTorch.
    """
    return g * 0.5 if x == other else (0.0 if x < other else g)


@register_jitable
def minimum_grad(x, other, g):
    """dL/dx for y = min(x, other): g where x < other, g/2 at a tie, 0 where x > other."""
    return g * 0.5 if x == other else (0.0 if x > other else g)


# -- where -------------------------------------------------------------------------------------
@register_jitable
def where(c, a, b):
    """y = a where c else b (``c`` a bool, ``a`` and ``b`` of the output's dtype)."""
    return a if c else b


# -- comparisons -------------------------------------------------------------------------------
@register_jitable
def eq(a, b):
    """a == b (false if either is nan)."""
    return a == b


@register_jitable
def ne(a, b):
    """a != b (true if either is nan)."""
    return a != b


@register_jitable
def lt(a, b):
    """a < b."""
    return a < b


@register_jitable
def le(a, b):
    """a <= b."""
    return a <= b


@register_jitable
def gt(a, b):
    """a > b."""
    return a > b


@register_jitable
def ge(a, b):
    """a >= b."""
    return a >= b
