"""Scalar math of the elementwise math ops and activations: one jitable function per forward
and one fused gradient per backward.

Conventions (as in :mod:`pylucid.kernels.scalar`): each function is generic over float32 and
float64 (the integer-preserving ops ``relu``, ``absolute``, ``sign``, ``square``, ``clamp``
also over int32 and int64); Python float literals are float64 in Numba, so float32 inputs are
computed in float64 wherever a literal appears and rounded once when stored. Each forward is
a single function calling ``math.<fn>`` once, so that a SIMD implementation
(:mod:`pylucid.kernels.simd_math`) can be swapped in per op. A gradient takes the one value
its op saved (the input ``x`` or the result ``y``) and the upstream gradient ``g`` - plus the
op's scalar parameters - and returns the input gradient in one expression, so its loop reads
each array once and writes once. Two parameters of a gradient travel as one tuple operand
(``ln_base`` of ``log_base_grad``, ``params`` of ``softplus_grad``, ``bounds`` of
``clamp_grad``): the loop generator stops at three operands and passes a non-array operand
through unchanged.

Special values follow C99 / NumPy (``log(0) = -inf``, ``sqrt(-1) = nan``, ``rsqrt(0) = inf``)
and NaN propagates through every forward; with ``error_model="numpy"`` nothing raises.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.core import types
from numba.extending import overload, register_jitable

from pylucid.kernels import simd_math
from pylucid.kernels.scalar import LN2, fma

#: ln 10 and 2/sqrt(pi) to 21 significant digits.
LN10 = 2.30258509299404568402
TWO_OVER_SQRTPI = 1.12837916709551257390


# -- exponentials and logarithms -------------------------------------------------------------
@register_jitable
def exp(x):
    """y = e^x."""
    return simd_math.exp(x)


@register_jitable
def exp_grad(y, g):
    """dL/dx = g y for y = e^x."""
    return g * y


@register_jitable
def exp2(x):
    """y = 2^x."""
    return simd_math.exp2(x)


@register_jitable
def exp2_grad(y, g):
    """dL/dx = g (y ln 2) for y = 2^x: ``y ln 2 < y`` cannot overflow where ``g y`` could
    (``g`` up to 1 / ln 2 times the largest finite over y), and it rounds once in float64."""
    return g * (y * LN2)


@register_jitable
def expm1(x):
    """y = e^x - 1."""
    return simd_math.expm1(x)


@register_jitable
def expm1_grad(y, g):
    """dL/dx = g (y + 1) for y = e^x - 1."""
    return g * (y + 1.0)


@register_jitable
def log(x):
    """y = ln x."""
    return simd_math.log(x)


@register_jitable
def log10(x):
    """y = log10 x."""
    return simd_math.log10(x)


def log_base_grad(x, g, ln_base):
    """dL/dx = g / (x ln b) for y = log_b x: ``ln_base`` is the pair ``(hi, lo)`` of float64s
    with hi + lo = ln b to 106 bits. float64 operands: :func:`_log_base_grad_f64`, correctly
    rounded; float32 ones: :func:`_log_base_grad_f32`, correctly rounded but for rare
    near-ties. The plain ``g / (x * ln b)`` rounds twice and is up to 1.7 ULP off (measured,
    b = 2)."""


@overload(log_base_grad, jit_options={"error_model": "numpy"})
def _log_base_grad_typed(x, g, ln_base):
    if x == types.float32 and g == types.float32:
        return _log_base_grad_f32
    return _log_base_grad_f64


#: Beyond these magnitudes ``x ln b`` of a float64 ``x`` can overflow (x > 7.8e307 for
#: b = 10) or lose bits as a subnormal (b = 2): x is scaled by 2**-64 or 2**64 first.
_HUGE_F64 = 2.0**960
_SMALL_F64 = 2.0**-960


@register_jitable
def _log_base_grad_f64(x, g, ln_base):
    """g / (x ln b) correctly rounded in float64: ``x ln b`` is carried as ``p + e`` (an FMA
    and the low part), and the quotient ``q = g / p`` is corrected by its FMA residual. Where
    the correction is not finite (x = ±0, ±inf, nan, or an overflowing quotient) the plain
    quotient is the IEEE answer. ``x`` beyond 2**±960 is scaled by a power of two and the
    quotient scaled back: without it, log10's gradient at x = 1e308 (exact 1.4e-309) was 0
    because ``x ln 10`` overflowed."""
    xd = numba.float64(x)
    gd = numba.float64(g)
    scale = 2.0**-64 if abs(xd) > _HUGE_F64 else (2.0**64 if abs(xd) < _SMALL_F64 else 1.0)
    xs = xd * scale
    hi, lo = ln_base
    p = xs * hi
    e = fma(xs, hi, -p) + xs * lo
    q = gd / p
    corrected = q + (fma(-q, p, gd) - q * e) / p
    return (corrected if math.isfinite(corrected) else q) * scale


#: 2**64 and the float32 below which 1 / x overflows float32 if not scaled by it.
_TWO64_F32 = numba.float32(2.0**64)
_TINY_F32 = numba.float32(2.0**-64)


@register_jitable
def _log_base_grad_f32(x, g, ln_base):
    """g / (x ln b) in float32 arithmetic, without a float64 division (one float32 division
    does 8 or 16 lanes per instruction, a float64 one 4: the float64 quotient was 4x slower).

    With ``a = g / ln b`` as a float32 pair ``a_hi + a_lo`` (an FMA gives the product's
    error) and ``r = 1 / x`` rounded, ``y0 = a_hi r`` is within an ULP of ``a / x`` and one
    Markstein step ``y = y0 + r (a - y0 x)`` - the residual exact by an FMA - rounds to the
    nearest float32 except where ``a / x`` is within ~2**-20 ULP of a tie. ``x`` below
    2**-64 is scaled by 2**64 first (``1 / x`` would overflow). Where the residual is not
    finite (x = ±0, ±inf, nan, g = ±inf, or an overflowing quotient) ``y0`` is already the
    IEEE answer."""
    hi, lo = ln_base
    inv = 1.0 / hi
    inv = inv - inv * inv * lo  # 1 / (hi + lo) to ~2**-100: the loop hoists it
    c_hi = numba.float32(inv)
    c_lo = numba.float32(inv - c_hi)
    scale = _TWO64_F32 if abs(x) < _TINY_F32 else numba.float32(1.0)
    xs = x * scale
    r = numba.float32(1.0) / xs
    a_hi = g * c_hi
    a_lo = fma(g, c_hi, -a_hi) + g * c_lo
    y0 = a_hi * r
    residual = fma(-y0, xs, a_hi) + a_lo
    y = fma(residual, r, y0) if residual - residual == 0 else y0
    return y * scale


@register_jitable
def log1p(x):
    """y = ln(1 + x)."""
    return simd_math.log1p(x)


@register_jitable
def log1p_grad(x, g):
    """dL/dx = g / (1 + x) for y = ln(1 + x)."""
    return g / (1.0 + x)


@register_jitable
def sqrt(x):
    """y = sqrt(x)."""
    return math.sqrt(x)


@register_jitable
def sqrt_grad(y, g):
    """dL/dx = g / (2 y) for y = sqrt(x) (inf at x = 0)."""
    return g / (2.0 * y)


@register_jitable
def rsqrt(x):
    """y = 1 / sqrt(x)."""
    return 1.0 / math.sqrt(x)


@register_jitable
def rsqrt_grad(y, g):
    """dL/dx = -g y^3 / 2 for y = 1 / sqrt(x)."""
    return -0.5 * g * y * y * y


@register_jitable
def square(x):
    """y = x^2."""
    return x * x


@register_jitable
def square_grad(x, g):
    """dL/dx = 2 g x for y = x^2."""
    return 2.0 * g * x


@register_jitable
def reciprocal(x):
    """y = 1 / x."""
    return 1.0 / x


@register_jitable
def reciprocal_grad(y, g):
    """dL/dx = -g y^2 for y = 1 / x."""
    return -g * y * y


# -- trigonometric and hyperbolic -------------------------------------------------------------
@register_jitable
def sin(x):
    """y = sin x."""
    return math.sin(x)


@register_jitable
def sin_grad(x, g):
    """dL/dx = g cos x."""
    return g * math.cos(x)


@register_jitable
def cos(x):
    """y = cos x."""
    return math.cos(x)


@register_jitable
def cos_grad(x, g):
    """dL/dx = -g sin x."""
    return -g * math.sin(x)


@register_jitable
def tan(x):
    """y = tan x."""
    return math.tan(x)


@register_jitable
def tan_grad(y, g):
    """dL/dx = g (1 + y^2) for y = tan x."""
    return g * (1.0 + y * y)


@register_jitable
def asin(x):
    """y = arcsin x."""
    return math.asin(x)


@register_jitable
def asin_grad(x, g):
    """dL/dx = g / sqrt(1 - x^2) (inf at |x| = 1)."""
    return g / math.sqrt(1.0 - x * x)


@register_jitable
def acos(x):
    """y = arccos x."""
    return math.acos(x)


@register_jitable
def acos_grad(x, g):
    """dL/dx = -g / sqrt(1 - x^2) (-inf at |x| = 1)."""
    return -g / math.sqrt(1.0 - x * x)


@register_jitable
def atan(x):
    """y = arctan x."""
    return math.atan(x)


@register_jitable
def atan_grad(x, g):
    """dL/dx = g / (1 + x^2), written (g / x) / (x + 1 / x) for |x| > 1, where x^2 would
    overflow while the gradient is still a (subnormal) number: float64 |x| from 1.3e154 to
    4.5e161, float32 from 1.8e19 to 2.7e22 (the plain form gave 0 there). Within 2 ULP."""
    return g / (1.0 + x * x) if abs(x) <= 1.0 else (g / x) / (x + 1.0 / x)


@register_jitable
def asinh(x):
    """y = arsinh x."""
    return math.asinh(x)


@register_jitable
def asinh_grad(x, g):
    """dL/dx = g / sqrt(1 + x^2), written g / (|x| sqrt(1 + (1/x)^2)) for |x| > 1, where
    x^2 would overflow while the gradient (about 1/|x|) is a number."""
    if abs(x) <= 1.0:
        return g / math.sqrt(1.0 + x * x)
    r = 1.0 / x
    return g / (abs(x) * math.sqrt(1.0 + r * r))


@register_jitable
def acosh(x):
    """y = arcosh x (nan below 1)."""
    return math.acosh(x)


@register_jitable
def acosh_grad(x, g):
    """dL/dx = g / sqrt(x^2 - 1), written g / (sqrt|x - 1| sqrt|x + 1|): no overflow, and
    accurate next to +-1, where x^2 - 1 cancels; inf at +-1, nan between them. For x < -1,
    outside the domain, the formula's value, as PyTorch gives."""
    if -1.0 < x < 1.0:
        return math.nan
    return g / (math.sqrt(abs(x - 1.0)) * math.sqrt(abs(x + 1.0)))


@register_jitable
def atanh(x):
    """y = artanh x (nan outside [-1, 1], +-inf at +-1)."""
    return math.atanh(x)


@register_jitable
def atanh_grad(x, g):
    """dL/dx = g / (1 - x^2), written (g / (1 - x)) / (1 + x): accurate next to +-1, where
    1 - x^2 cancels, and a number where x^2 overflows (two quotients: within 1.5 ULP)."""
    return (g / (1.0 - x)) / (1.0 + x)


@register_jitable
def sinh(x):
    """y = sinh x."""
    return math.sinh(x)


@register_jitable
def sinh_grad(x, g):
    """dL/dx = g cosh x."""
    return g * math.cosh(x)


@register_jitable
def cosh(x):
    """y = cosh x."""
    return math.cosh(x)


@register_jitable
def cosh_grad(x, g):
    """dL/dx = g sinh x."""
    return g * math.sinh(x)


def tanh(x):
    """y = tanh x = sign(x) (-u) / (2 + u) with u = expm1(-2|x|), in float64 (a float32
    input is widened, the result rounded once), so that the loop vectorises: libm's tanh is a
    scalar call (float32 at 1e6, one thread: 17.8 ns per element; this: 4.4). expm1 is
    within 0.6 ULP and u is in (-1, 0], so 2 + u and the division add a rounding each:
    within 2.2 ULP in float64 (2.0 measured against mpmath on 80 000 samples, mean 0.33).
    A float32 input takes float32's expm1 before its rounding
    (:func:`~pylucid.kernels.simd_math.expm1_for_float32`: a few 2**-53 relative, a third
    of the float64 expm1's work - 4096 elements: 2.6 us instead of 8.0 on the Intel
    machine), then the same float64 formula rounded once: within 0.5 + 2**-20 ULP in
    float32. -2|x| is exact; tanh(+-inf) = +-1 (u = -1), tanh(+-0) = +-0, nan stays nan."""


@register_jitable
def _tanh_f32(x):
    u = simd_math.expm1_for_float32(-2.0 * abs(np.float64(x)))
    return math.copysign(-u / (2.0 + u), np.float64(x))


@register_jitable
def _tanh_wide(x):
    u = simd_math.expm1(-2.0 * abs(x * 1.0))
    return math.copysign(-u / (2.0 + u), x)


@overload(tanh, jit_options={"error_model": "numpy"})
def _tanh_typed(x):
    return _tanh_f32 if x == types.float32 else _tanh_wide


@register_jitable
def tanh_grad(y, g):
    """dL/dx = g (1 - y^2) for y = tanh x, as g ((1 - y)(1 + y)): 1 - y is exact where y
    nears 1, so the factor is the exact 1 - y^2 of the saved y but for one rounding (float32:
    exact in float64). ``1 - y * y`` rounded y^2 first: 232 float32 ULP off at x = 4."""
    return g * ((1.0 - y) * (1.0 + y))


# -- activations ------------------------------------------------------------------------------
@register_jitable
def relu(x):
    """y = max(x, 0); NaN stays NaN."""
    return 0 if x <= 0 else x


@register_jitable
def relu_grad(y, g):
    """dL/dx = g where y > 0, else 0 (0 at x = 0, as PyTorch's threshold_backward)."""
    return 0 if y <= 0 else g


@register_jitable
def leaky_relu(x, slope):
    """y = x if x > 0 else slope x."""
    return x if x > 0 else x * slope


@register_jitable
def leaky_relu_grad(x, g, slope):
    """dL/dx = g if x > 0 else slope g."""
    return g if x > 0 else g * slope


@register_jitable
def dropout(x, u, ps):
    """``x / s`` where the draw ``u >= p``, else +0, with ``ps = (p, s)`` (``s = 1 - p``)
    in ``x``'s dtype: dropout's forward (``x`` the input) and backward (``g``) in one pass,
    bit for bit ``where(u >= p, x / (1 - p), 0)``."""
    return x / ps[1] if u >= ps[0] else ps[1] - ps[1]


@register_jitable
def elu(x, alpha):
    """y = x if x > 0 else alpha (e^x - 1)."""
    return x if x > 0 else alpha * simd_math.expm1(x)


@register_jitable
def elu_grad(x, g, alpha):
    """dL/dx = g if x > 0 else g alpha e^x."""
    return g if x > 0 else g * alpha * simd_math.exp(x)


@register_jitable
def _sigmoid(x):
    """1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below, from e = e^-|x| <= 1: nothing
    overflows, and for x << 0 the result is e^x itself down to the subnormals (the plain
    ``1 / (1 + e^-x)`` gave 0 once e^-x overflowed: float32 x < -88.7, float64 x < -709.8,
    where the exact value is still a number). Within 2 ULP."""
    e = simd_math.exp(-abs(x))
    return (1.0 if x >= 0 else e) / (1.0 + e)


@register_jitable
def sigmoid(x):
    """y = 1 / (1 + e^-x), computed by :func:`_sigmoid`."""
    return _sigmoid(x)


@register_jitable
def sigmoid_grad(y, g):
    """dL/dx = g (y (1 - y)) for y = sigmoid(x); ``1 - y`` is exact where y nears 1."""
    return g * (y * (1.0 - y))


@register_jitable
def softplus(x, beta, threshold):
    """y = ln(1 + e^(beta x)) / beta, written max(z, 0) + ln(1 + e^-|z|) with z = beta x so
    that nothing overflows; y = x where z > threshold (PyTorch's linear regime)."""
    z = x * beta
    if z > threshold:
        return x
    return ((z if z > 0 else 0.0) + simd_math.log1p(simd_math.exp(-abs(z)))) / beta


@register_jitable
def softplus_grad(x, g, params):
    """dL/dx = g sigmoid(beta x) (:func:`_sigmoid`: no overflow of e^-z), and g where
    beta x > threshold; ``params`` is ``(beta, threshold)``."""
    z = x * params[0]
    return g if z > params[1] else g * _sigmoid(z)


@register_jitable
def silu(x):
    """y = x sigmoid(x) from h = e^(-|x|/2) and e = h^2: x / (1 + e) for x >= 0 and
    (x h) h / (1 + e) below, so that x e^x stays a number where e^x alone has underflowed
    (float32 x = -104.3: -5.3e-44); ``x / (1 + e^-x)`` gave -0 once e^-x overflowed (float32
    x < -88.7, where the exact x e^x is still a normal number). One exp, no branch (the
    loop vectorises); within 4 ULP. ``float32(0.5)`` keeps a float32 exp for float32 x."""
    h = simd_math.exp(-abs(x) * numba.float32(0.5))
    return (x if x >= 0 else (x * h) * h) / (1.0 + h * h)


@register_jitable
def silu_grad(x, g):
    """dL/dx = g s (1 + x (1 - s)) with s = sigmoid(x), 1 - s = sigmoid(-x), both from
    h = e^(-|x|/2), e = h^2, d = 1 + e (``1 - s`` cancelled for x >> 0: 6 ULP at float32
    x = 6): g (1 + x e / d) / d for x >= 0, g ((h (1 + x / d)) h) / d below (the factor
    e^x taken last, as in :func:`silu`). Within 4 ULP."""
    h = simd_math.exp(-abs(x) * numba.float32(0.5))
    e = h * h
    d = 1.0 + e
    c = (e if x >= 0 else 1.0) / d
    inner = 1.0 + x * c
    return g * (inner if x >= 0 else (h * inner) * h) / d


@register_jitable(inline="always")
def gelu(x):
    """y = x Phi(x): :func:`~pylucid.kernels.simd_math.gelu`, as x Q(|x|) below 0 and
    x - x Q(x) above, Q the Gaussian tail e^(-x^2/2) m(|x|): no ``1 + erf`` cancels, so
    Phi keeps its relative accuracy where it is tiny (float32 x = -10: 7.6e-23, not 0), and
    float32 computes in float32 arithmetic (16 lanes; within 8 ULP), float64 in float64
    (within 8 ULP). (Inlined: the float64 body is too large for LLVM to inline into the
    loop, which would then stay scalar.)"""
    return simd_math.gelu(x)


@register_jitable(inline="always")
def gelu_grad(x, g):
    """dL/dx = g (Phi(x) + x phi(x)), phi(x) = e^(-x^2/2) / sqrt(2 pi):
    :func:`~pylucid.kernels.simd_math.gelu_derivative` (within 8 ULP but near its zero at
    x = -0.75, where it cancels), times g (one more rounding)."""
    return g * simd_math.gelu_derivative(x)


@register_jitable(inline="always")
def gelu_tanh(x):
    """y = x (1 + tanh(u)) / 2 with u = sqrt(2/pi) (x + 0.044715 x^3), as x sigma(2u):
    :func:`~pylucid.kernels.simd_math.gelu_tanh` (no ``1 + tanh`` cancellation for x << 0;
    within 3 ULP)."""
    return simd_math.gelu_tanh(x)


@register_jitable(inline="always")
def gelu_tanh_grad(x, g):
    """dL/dx = g ((1 + t) / 2 + x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2) / 2), t = tanh(u):
    :func:`~pylucid.kernels.simd_math.gelu_tanh_derivative` times g."""
    return g * simd_math.gelu_tanh_derivative(x)


@register_jitable(inline="always")
def erf(x):
    """y = erf(x): :func:`~pylucid.kernels.simd_math.erf` (float32 within 1.5 ULP in float32
    arithmetic, float64 within 1.5 ULP)."""
    return simd_math.erf(x)


@register_jitable
def erf_grad(x, g):
    """dL/dx = g 2 e^(-x^2) / sqrt(pi)."""
    return g * TWO_OVER_SQRTPI * simd_math.exp(-x * x)


@register_jitable
def sign(x):
    """y = -1, 0 or 1 by the sign of x; NaN stays NaN."""
    return x if x != x else (x > 0) - (x < 0)


@register_jitable
def absolute(x):
    """y = |x|."""
    return abs(x)


@register_jitable
def absolute_grad(x, g):
    """dL/dx = g sign(x) (0 at x = 0)."""
    return g * sign(x)


@register_jitable
def clamp(x, low, high):
    """y = min(max(x, low), high): ``high`` where low > high; NaN stays NaN."""
    y = low if x < low else x
    return high if y > high else y


@register_jitable
def clamp_grad(x, g, bounds):
    """dL/dx = g where low <= x <= high, else 0; ``bounds`` is ``(low, high)``."""
    return g if bounds[0] <= x <= bounds[1] else 0


# -- rounding: integers pass unchanged (np.floor of an int64 would round it through float64)
def floor(x):
    """y = floor x, the largest integer <= x (nan, +-inf and -0 kept; integers unchanged)."""


def ceil(x):
    """y = ceil x, the smallest integer >= x (as :func:`floor`)."""


def trunc(x):
    """y = trunc x, x rounded toward zero (as :func:`floor`)."""


def round_half_even(x):
    """y = x rounded to the nearest integer, ties to even (``torch.round``, ``np.rint``)."""


def _rounding(stub, float_fn) -> None:  # noqa: ANN001  (a stub and a NumPy function)
    @overload(stub, inline="always")
    def typed(x):  # noqa: ANN001, ANN202
        if isinstance(x, types.Integer):
            return lambda x: x
        return lambda x: float_fn(x)


_ROUNDINGS = ((floor, np.floor), (ceil, np.ceil), (trunc, np.trunc), (round_half_even, np.rint))
for _stub, _fn in _ROUNDINGS:
    _rounding(_stub, _fn)
