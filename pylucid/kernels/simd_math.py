"""Branch-free, SIMD-vectorisable elementary functions for Numba-compiled kernels.

Numba lowers ``math.log2``/``math.exp`` & co. to scalar libm calls, which LLVM
cannot vectorise.  The functions here are written with integer bit manipulation,
``select`` instructions and fused multiply-adds only, so that a plain loop such as
``for i in range(n): out[i] = log2(x[i])`` over contiguous arrays compiles to packed
SIMD code (see ``benchmarks/simd_math_report.md`` for the assembly evidence).

Usage
-----
Each public name is a stub whose Numba typing is provided by
:func:`numba.extending.overload`.  Call it from any ``@njit`` function with a
``float32`` or ``float64`` scalar; the result has the argument's type::

    @njit(cache=True, error_model="numpy")
    def loop(x, out):
        for i in range(x.size):
            out[i] = simd_math.log2(x[i])

Calling a stub from the interpreter also works (through a small jitted trampoline)
and returns a value of the argument's type; that path is for convenience, not speed.

Accuracy
--------
The error of a result is measured in ULPs of the exact value ``y``:
``|result - y| / ulp(y)``, where ``ulp(y) = 2**(max(floor(log2|y|), emin) - p + 1)`` is the
spacing of the result format at ``|y|`` (``p`` = 24, ``emin`` = -126 for float32;
``p`` = 53, ``emin`` = -1022 for float64), so subnormal results are measured against the
subnormal spacing.

float32 functions compute in float64 and round once, so they are correctly rounded except
for a few of the 2**32 inputs, whose exact result lies within ~2**-50 (relative) of a
rounding boundary.  The float32 column is exhaustive (all 2**32 inputs); the float64
column is the maximum over 0.6-1e6 random inputs per function (x87 extended precision,
worst cases re-checked with mpmath; ``benchmarks/ulp_exhaustive.py``) and, in
parentheses, the bound the tests assert on their own samples:

==========  =============================  ===================================
function    float32: max ULP, not CR       float64: measured max (asserted)
==========  =============================  ===================================
``log2``    0.5 + 2**-20, 0 inputs         0.539 (0.55)
``log``     0.5 + 2**-20, 6 inputs         0.517 (0.55)
``log10``   0.5 + 2**-20, 2 inputs         0.525 (0.55)
``log1p``   0.5 + 2**-20, 9 inputs         0.517 (0.55)
``exp``     0.5 + 2**-20, 0 inputs         0.514; 0.750 for subnormal results (0.76)
``exp2``    0.5 + 2**-20, 2 inputs         0.521; 0.750 for subnormal results (0.76)
``expm1``   0.5 + 2**-20, 0 inputs         0.585 (0.6)
==========  =============================  ===================================

The erf family is computed in the argument's own arithmetic (float32: 16 lanes of float32
FMAs, the speed of a memory-bound loop; float64 in float64), so its float32 results are not
correctly rounded; its float32 column is exhaustive too (reference: libm's float64
``erf``/``erfc``/``exp``), its float64 one the maximum over 6000 random inputs against
mpmath at 40 digits (``benchmarks/ulp_exhaustive.py --funcs erf,gelu,...``). The
derivatives cross zero near x = -0.75, where no rounding keeps a relative bound: their
bound holds outside [-1, -0.5], and inside it the absolute error is given:

========================  ==========================  ============================
function                  float32: exhaustive max     float64: sampled max
========================  ==========================  ============================
``erf``                   1.67                        1.35
``gelu``                  6.88                        4.68
``gelu_derivative``       6.28; 6.6e-8 abs in root    5.96; 1.2e-16 abs in root
``gelu_tanh``             3.53                        2.58
``gelu_tanh_derivative``  7.80; 4.5e-8 abs in root    7.03; 8.8e-17 abs in root
========================  ==========================  ============================

The tables come from ``benchmarks/erf_fit.py`` (minimax fits of the relative error, own
derivation). ``gelu`` is ``x Phi(x)`` as ``x Q(|x|)`` or ``x - x Q(x)``, Q the Gaussian tail
``e^(-x^2/2) m(|x|)``, so that no ``1 + erf`` cancels: Phi keeps its relative accuracy where
it is tiny. :func:`expf_scaled` and :func:`expf_shifted` are float32 exponentials (within 1
ULP) for float32 kernels that go on computing in float32 (softmax, cross entropy).

Special values follow C99 Annex F: ``log*(+-0) = -inf``, ``log*(x<0) = nan``
(``log1p(-1) = -inf``, ``log1p(x<-1) = nan``), ``log*(+inf) = +inf``, ``log*(1) = +0``,
``log1p(+-0) = +-0``, ``exp(-inf) = exp2(-inf) = +0``, ``expm1(-inf) = -1``,
``expm1(+-0) = +-0``, overflow gives ``+inf``, underflow gives correctly scaled
subnormals or ``+0``, and ``nan`` propagates.  Nothing raises or warns.

Notes
-----
* Fused multiply-adds are emitted through the ``llvm.fma`` intrinsic (``vfmadd*``),
  never via ``fastmath``; on a CPU without FMA hardware LLVM falls back to a (correct,
  but slow and scalar) libm ``fma`` call.
* Division (``vdivpd``) is used by the float32 log family and by the float64
  ``log``/``log2``/``log10``/``log1p``; implementations are compiled with
  ``error_model="numpy"`` so no zero-division check is inserted, whatever the caller's
  error model is.  Callers should still use ``error_model="numpy"`` for their own
  loops, because the default error model blocks vectorisation of the caller's code.
* Numba's on-disk cache of a caller is not invalidated when this module changes;
  clear the callers' ``__pycache__`` after editing it.
* ``erf`` and the gelu functions are inlined into their caller's Numba IR (their float64
  bodies are too large for LLVM to inline, and a call keeps the caller's loop scalar), so
  they take the caller's ``fastmath`` flags: never call them from a ``fastmath`` function
  (their error-free transformations would be reassociated away).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from llvmlite import ir
from numba import types
from numba.core.extending import intrinsic, overload, register_jitable

from pylucid.kernels.jit import njit

__all__ = [
    "erf",
    "exp",
    "expf_scaled",
    "expf_shifted",
    "exp2",
    "expm1",
    "gelu",
    "gelu_derivative",
    "gelu_tanh",
    "gelu_tanh_derivative",
    "log",
    "log10",
    "log1p",
    "log2",
]

FloatT = TypeVar("FloatT", float, np.floating)

_JIT_OPTIONS = {"error_model": "numpy"}
_jitable = register_jitable(**_JIT_OPTIONS)
#: For the float64 Gaussian tail: inlined by Numba, since LLVM does not inline a function
#: that large into its caller's loop, which then stays scalar (17 ms instead of 2 for 1e6).
_inlined = register_jitable(inline="always", **_JIT_OPTIONS)

_INF = math.inf
_NAN = math.nan

# ---------------------------------------------------------------------------------------
# LLVM-level building blocks
# ---------------------------------------------------------------------------------------


@intrinsic
def _bits(typingctx, x):  # noqa: ARG001  (numba intrinsic protocol)
    """Reinterpret a float64 as its int64 bit pattern (LLVM ``bitcast``)."""
    if x != types.float64:
        return None

    def codegen(context, builder, sig, args):  # noqa: ARG001
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _float(typingctx, i):  # noqa: ARG001
    """Reinterpret an int64 bit pattern as a float64 (LLVM ``bitcast``)."""
    if not isinstance(types.unliteral(i), types.Integer):
        return None

    def codegen(context, builder, sig, args):  # noqa: ARG001
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _fma(typingctx, a, b, c):  # noqa: ARG001
    """Fused ``a * b + c`` with a single rounding: ``llvm.fma.f32`` for three float32
    operands, else ``llvm.fma.f64`` (float32 operands widened)."""
    operands = [types.unliteral(t) for t in (a, b, c)]
    if not all(isinstance(t, types.Float) for t in operands):
        return None
    kind = types.float32 if all(t == types.float32 for t in operands) else types.float64

    def codegen(context, builder, sig, args):  # noqa: ARG001
        return builder.fma(*args)

    return kind(kind, kind, kind), codegen


@intrinsic
def _ldexp_bits32(typingctx, e, t):  # noqa: ARG001
    """``e * 2**k`` for float32s, by an integer add to the exponent field: ``t`` is
    ``1.5 * 2**23 + k`` (a float32 whose low significand bits hold ``k``), and the result the
    float32 of bits ``bits(e) + (bits(t) << 23)``. Exact when the result is a normal number;
    one integer shift and add, no multiply."""
    if e != types.float32 or t != types.float32:
        return None

    def codegen(context, builder, sig, args):  # noqa: ARG001
        i32 = ir.IntType(32)
        shifted = builder.shl(builder.bitcast(args[1], i32), ir.Constant(i32, 23))
        return builder.bitcast(builder.add(builder.bitcast(args[0], i32), shifted), ir.FloatType())

    return types.float32(types.float32, types.float32), codegen


@intrinsic
def _select(typingctx, cond, a, b):  # noqa: ARG001
    """Branch-free ``a if cond else b`` (LLVM ``select``, a blend once vectorised)."""
    ta, tb = types.unliteral(a), types.unliteral(b)
    if cond != types.boolean or ta != tb or not isinstance(ta, types.Number):
        return None

    def codegen(context, builder, sig, args):  # noqa: ARG001
        return builder.select(*args)

    return ta(types.boolean, ta, ta), codegen


# ---------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------

_SHIFT = 6755399441055744.0  # 1.5 * 2**52: x + _SHIFT - _SHIFT rounds x to an integer
_SHIFT_BITS = 0x4338000000000000  # bit pattern of _SHIFT
_TWO54 = 18014398509481984.0
_MIN_NORMAL = 2.2250738585072014e-308

_LN2 = 0.6931471805599453  # double nearest ln 2
_LN2_LO = 2.3190468138462996e-17  # ln 2 - _LN2
_INVLN2 = 1.4426950408889634
_LOG10_2 = 0.30102999566398120
_LOG1P_LO = -0.29289321881345  # just above sqrt(.5) - 1
_LOG1P_HI = 0.41421356237309  # just below sqrt(2) - 1

# Splits with short high parts (fdlibm): k * hi is exact for |k| < 2**12.
_LN2_HI32 = 6.93147180369123816490e-01
_LN2_LO32 = 1.90821492927058770002e-10
_LOG10_2_HI = 3.01029995663611771306e-01  # 40-bit significand
_LOG10_2_LO = 3.69423907715893078616e-13
# double-double 1 / ln 2 and 1 / ln 10
_IVLN2_LO = 2.0355273740931033e-17
_IVLN10 = 0.4342944819032518
_IVLN10_LO = 1.098319650216765e-17

# Minimax (relative error 2**-58.2) of (2 atanh(s) / s - 2) / s**2 in z = s**2, z <= 0.02944.
_Q0 = 0.6666666666666666
_Q1 = 0.4000000000000088
_Q2 = 0.28571428570801544
_Q3 = 0.2222222239214465
_Q4 = 0.1818179559744797
_Q5 = 0.1538624187298482
_Q6 = 0.1326871845483936
_Q7 = 0.13087167223517215

# Minimax (relative error 2**-59.6) of 2 atanh(s) / (s ln 2) in z = s**2, z <= 0.02944.
_R0 = 2.8853900817779268
_R1 = 0.9617966939259899
_R2 = 0.5770780163454642
_R3 = 0.41219858585247704
_R4 = 0.3205985337761211
_R5 = 0.2623344098986783
_R6 = 0.22091164898533758
_R7 = 0.2136730539785736

# Minimax (relative error 2**-55.7) of expm1(r) / r on |r| <= ln(2) / 2.
_E1 = 0.5000000000000006
_E2 = 0.16666666666666563
_E3 = 0.041666666666573836
_E4 = 0.008333333333397886
_E5 = 0.0013888888932284689
_E6 = 0.00019841269707384748
_E7 = 2.480150456930931e-05
_E8 = 2.7557414830706446e-06
_E9 = 2.7626276492184134e-07
_E10 = 2.5052095342217287e-08

# Minimax (relative error 2**-54.2) of (expm1(r) - r - r**2 / 2) / r**3 on |r| <= ln(2) / 2.
_P0 = 0.16666666666666669
_P1 = 0.04166666666666666
_P2 = 0.00833333333333007
_P3 = 0.0013888888888900562
_P4 = 0.000198412698630215
_P5 = 2.4801587275139325e-05
_P6 = 2.7557268502786805e-06
_P7 = 2.7557329605868553e-07
_P8 = 2.5100367682935293e-08
_P9 = 2.0893978865867485e-09


#: |x| beyond which float32 gelu's Gaussian tail is clamped: x Phi(x) and its derivative
#: are below 2**-150 there.
GELU32_CLAMP = np.float32(14.6)
#: |z| below which erf is its odd series z S(z^2); beyond, 1 - erfc(z).
ERF_SMALL = 0.75
#: float64 gelu's clamp (x Phi(x) < 2**-1075 beyond), the p of t = 1 / (1 + p |x|), and the
#: degree of its Chebyshev series in t.
GELU64_CLAMP = 38.7
GELU64_P = 0.3
GELU64_DEGREE = 24


# ---------------------------------------------------------------------------------------
# Shared kernels (all float64)
# ---------------------------------------------------------------------------------------


@_jitable
def _decompose(x):
    """Split a positive normal ``x`` into ``2**k * (1 + f)`` with ``1 + f`` in [sqrt(.5), sqrt(2)).

    Returns ``k << 52`` plus the exponent bias (int64 bits of ``2.0**k``), ``k`` as a float
    and ``f`` (exact).  Any other input yields garbage that callers select away.
    """
    ix = _bits(x)
    # Adding bits(1.0) - bits(sqrt(.5)) carries into the exponent exactly when the
    # significand is >= sqrt(2); the result stays positive for every positive x.
    t = ix + 0x00095F619980C433
    e = t & 0x7FF0000000000000
    kd = _float((t >> 52) | 0x4330000000000000) - 4503599627371519.0  # 2**52 + 1023
    return e, kd, _float(ix - e + 0x3FF0000000000000) - 1.0


@_jitable
def _log2_parts(kd, f):
    """``kd + log2(1 + f)`` for ``1 + f`` in [sqrt(.5), sqrt(2)], relative error ~2**-52."""
    s = f / (2.0 + f)
    z = s * s
    r = _fma(_fma(_fma(_fma(_R7, z, _R6), z, _R5), z, _R4), z, _R3)
    r = _fma(_fma(_fma(r, z, _R2), z, _R1), z, _R0)
    return _fma(s, r, kd)


@_jitable
def _log_fixup(x, y):
    """Replace ``y`` by the IEEE result for ``x`` outside (0, inf) (log, log2, log10)."""
    y = _select(x < _INF, y, x)  # +inf and nan
    return _select(x > 0.0, y, _select(x == 0.0, -_INF, _NAN))


@_jitable
def _log1p_fixup(x, y):
    """Replace ``y`` by the IEEE result for ``x`` outside (-1, inf) or ``x == +-0``."""
    y = _select(x < _INF, y, x)  # +inf and nan
    y = _select(x > -1.0, y, _select(x == -1.0, -_INF, _NAN))
    return _select(x == 0.0, x, y)


@_jitable
def _log1p_dd(f):
    """``log(1 + f) = hi + lo`` for ``1 + f`` in [sqrt(.5), sqrt(2)], error ~2**-60 |hi|.

    Uses ``log(1 + f) = 2 atanh(s) = f - s f + s**3 Q(s**2)`` with ``s = f / (2 + f)`` carried
    to double-double precision (``1 / (2 + f) = (1 - s) / 2`` gives the correction of the
    quotient without a second division) and ``s f`` formed exactly with an FMA.
    """
    d = 2.0 + f
    dlo = (2.0 - d) + f
    s = f / d
    slo = (_fma(-s, d, f) - s * dlo) * (0.5 - 0.5 * s)
    z = s * s
    q = _fma(_fma(_fma(_fma(_Q7, z, _Q6), z, _Q5), z, _Q4), z, _Q3)
    q = _fma(_fma(_fma(q, z, _Q2), z, _Q1), z, _Q0)
    p = s * f
    plo = _fma(s, f, -p) + slo * f
    hi = f - p
    # s**3 Q(s**2) at s + slo: the correction is slo * d(2 atanh(s) - 2 s)/ds ~ 2 slo s**2.
    lo = (((f - hi) - p) - plo) + _fma(s * z, q, (slo + slo) * z)
    return hi, lo


@_jitable
def _log_f64_core(kd, f, corr, c_hi, c_lo, d_hi, d_lo):
    """``(log(1 + f) + corr) * (c_hi + c_lo) + kd * (d_hi + d_lo)`` to ~0.5 ULP.

    ``kd * d_hi`` must be exact and, for ``kd != 0``, at least as large as the scaled
    logarithm (true for ln 2, 1 and log10(2) splits), so that the final addition is a
    Fast2Sum.  ``corr`` is a tiny additive correction of ``log(1 + f)`` (used by
    ``log1p``); pass ``-0.0`` for none.
    """
    hi, lo = _log1p_dd(f)
    lo = lo + corr
    m_hi = hi * c_hi
    m_lo = _fma(hi, c_hi, -m_hi) + (hi * c_lo + lo * c_hi)
    y = kd * d_hi
    w = y + m_hi
    w_lo = (y - w) + m_hi
    return w + (w_lo + (m_lo + kd * d_lo))


@_jitable
def _log_f64(x, c_hi, c_lo, d_hi, d_lo):
    """Shared float64 body of ``log``, ``log2`` and ``log10`` (see ``_log_f64_core``)."""
    tiny = x < _MIN_NORMAL
    _, kd, f = _decompose(_select(tiny, x * _TWO54, x))
    kd = kd - _select(tiny, 54.0, 0.0)
    return _log_fixup(x, _log_f64_core(kd, f, -0.0, c_hi, c_lo, d_hi, d_lo))


@_jitable
def _expm1_quot32(r):
    """``expm1(r) / r`` for ``|r| <= ln(2)/2``, relative error ~2**-53."""
    q = _fma(_fma(_fma(_fma(_fma(_E10, r, _E9), r, _E8), r, _E7), r, _E6), r, _E5)
    return _fma(_fma(_fma(_fma(_fma(q, r, _E4), r, _E3), r, _E2), r, _E1), r, 1.0)


@_jitable
def _pow2(k):
    """``2.0**k`` for an int64 ``k`` in [-1022, 1023]."""
    return _float((k + 1023) << 52)


@_jitable
def _scale(y, k):
    """``y * 2.0**k`` for ``k`` in [-2044, 2046] with a single rounding (to a subnormal)."""
    k1 = k >> 1
    return y * _pow2(k1) * _pow2(k - k1)


@_jitable
def _reduce_ln2(x):
    """``x = k ln2 + r + rlo`` with ``|r| <= ln2/2``; returns ``k`` (int64), ``r``, ``rlo``.

    Valid for ``|x| <= 1100``; ``rlo`` is ``r``'s rounding error, exact up to ~2**-106.
    """
    t = _fma(x, _INVLN2, _SHIFT)
    kd = t - _SHIFT
    hi = x - kd * _LN2_HI32  # exact: kd * _LN2_HI32 is exact, Sterbenz for the subtraction
    lo = kd * _LN2_LO32
    r = hi - lo
    return _bits(t) - _SHIFT_BITS, r, (hi - r) - lo


@_jitable
def _expm1_parts64(r):
    """``expm1(r) = r + h + small`` for ``|r| <= ln(2)/2``; ``h = fl(r*r)/2`` exactly."""
    r2 = r * r
    p = _fma(_fma(_fma(_fma(_fma(_P9, r, _P8), r, _P7), r, _P6), r, _P5), r, _P4)
    p = _fma(_fma(_fma(_fma(p, r, _P3), r, _P2), r, _P1), r, _P0)
    small = _fma(0.5, _fma(r, r, -r2), r2 * r * p)
    return 0.5 * r2, small


@_jitable
def _exp_reduced64(r, rlo):
    """``exp(r + rlo)`` for ``|r| <= ln(2)/2`` and ``|rlo| <= 2**-40``, error ~0.502 ULP.

    ``rlo`` enters to first order, times ``exp(r)`` itself: times ``1 + r + r^2/2`` alone,
    an ``rlo`` of 1e-13 (gelu's ``x^2`` rounding error) cost 2.4 ULP."""
    h, small = _expm1_parts64(r)
    s1 = 1.0 + r
    e1 = (1.0 - s1) + r
    s2 = s1 + h
    e2 = (s1 - s2) + h
    tail = (e1 + e2) + small
    return s2 + (tail + rlo * (s2 + tail))


# ---------------------------------------------------------------------------------------
# Implementations selected by the overloads
# ---------------------------------------------------------------------------------------


def _log2_f32(x):
    xd = np.float64(x)
    _, kd, f = _decompose(xd)
    return np.float32(_log_fixup(xd, _log2_parts(kd, f)))


def _log_f32(x):
    xd = np.float64(x)
    _, kd, f = _decompose(xd)
    return np.float32(_log_fixup(xd, _log2_parts(kd, f) * _LN2))


def _log10_f32(x):
    xd = np.float64(x)
    _, kd, f = _decompose(xd)
    return np.float32(_log_fixup(xd, _log2_parts(kd, f) * _LOG10_2))


def _log1p_f32(x):
    xd = np.float64(x)
    u = 1.0 + xd
    c = (1.0 - u) + xd  # u + c == 1 + x up to ~2**-53 relative
    e, kd, f = _decompose(u)
    f = _fma(c, _float(0x7FE0000000000000 - e), f)  # log(u + c) = k ln2 + log(1 + f + c 2**-k)
    near = (xd > _LOG1P_LO) & (xd < _LOG1P_HI)  # 1 + x in [sqrt(.5), sqrt(2)]: f = x exactly
    y = _log2_parts(_select(near, 0.0, kd), _select(near, xd, f)) * _LN2
    return np.float32(_log1p_fixup(xd, y))


def _log2_f64(x):
    return _log_f64(x, _INVLN2, _IVLN2_LO, 1.0, 0.0)


def _log_f64_impl(x):
    return _log_f64(x, 1.0, 0.0, _LN2_HI32, _LN2_LO32)


def _log10_f64(x):
    return _log_f64(x, _IVLN10, _IVLN10_LO, _LOG10_2_HI, _LOG10_2_LO)


def _log1p_f64(x):
    u = 1.0 + x
    ux = u - x
    c = (1.0 - ux) + (x - (u - ux))  # exact error of 1 + x (TwoSum)
    _, kd, f = _decompose(u)
    near = (x > _LOG1P_LO) & (x < _LOG1P_HI)  # 1 + x in [sqrt(.5), sqrt(2)]: f = x exactly
    corr = _select(near, -0.0, c / u)  # log(u + c) - log(u), up to ~2**-106 relative
    y = _log_f64_core(
        _select(near, 0.0, kd), _select(near, x, f), corr, 1.0, 0.0, _LN2_HI32, _LN2_LO32
    )
    return _log1p_fixup(x, y)


def _exp_f32(x):
    xd = np.float64(x)
    xd = _select(xd < -110.0, -110.0, _select(xd > 100.0, 100.0, xd))
    t = _fma(xd, _INVLN2, _SHIFT)
    kd = t - _SHIFT
    r = _fma(-kd, _LN2_LO, _fma(-kd, _LN2, xd))
    return np.float32(_fma(r, _expm1_quot32(r), 1.0) * _pow2(_bits(t) - _SHIFT_BITS))


def _exp2_f32(x):
    xd = np.float64(x)
    xd = _select(xd < -160.0, -160.0, _select(xd > 130.0, 130.0, xd))
    t = xd + _SHIFT
    kd = t - _SHIFT
    r = (xd - kd) * _LN2
    return np.float32(_fma(r, _expm1_quot32(r), 1.0) * _pow2(_bits(t) - _SHIFT_BITS))


@_jitable
def expm1_for_float32(xd):
    """``expm1`` of a float64 ``xd`` to float32's needs, in float64: the float32
    :func:`expm1` before its rounding (relative error a few 2**-53; arguments beyond
    [-110, 100] are clamped there: -1 and overflow in float32). For float32 formulas that
    go on computing in float64 (``tanh``)."""
    xc = _select(xd < -110.0, -110.0, _select(xd > 100.0, 100.0, xd))
    t = _fma(xc, _INVLN2, _SHIFT)
    kd = t - _SHIFT
    r = _fma(-kd, _LN2_LO, _fma(-kd, _LN2, xc))
    s = _pow2(_bits(t) - _SHIFT_BITS)
    y = _fma(s, r * _expm1_quot32(r), s - 1.0)
    return _select(xd == 0.0, xd, y)


def _expm1_f32(x):
    return np.float32(expm1_for_float32(np.float64(x)))


def _exp_f64(x):
    xc = _select(x < -746.0, -746.0, _select(x > 710.0, 710.0, x))
    k, r, rlo = _reduce_ln2(xc)
    return _scale(_exp_reduced64(r, rlo), k)


def _exp2_f64(x):
    xc = _select(x < -1080.0, -1080.0, _select(x > 1030.0, 1030.0, x))
    t = xc + _SHIFT
    r = xc - (t - _SHIFT)  # exact, |r| <= 1/2
    u = r * _LN2
    ulo = _fma(r, _LN2, -u) + r * _LN2_LO
    return _scale(_exp_reduced64(u, ulo), _bits(t) - _SHIFT_BITS)


def _expm1_f64(x):
    xc = _select(x < -40.0, -40.0, _select(x > 710.0, 710.0, x))
    k, r, rlo = _reduce_ln2(xc)
    h, small = _expm1_parts64(r)
    # expm1(x) = 2**k * (t + expm1(r)) with t = 1 - 2**-k, summed with error-free steps.
    p = _pow2(-_select(k > 1000, 1000, k))
    t = 1.0 - p
    tp = t - 1.0
    t_lo = (1.0 - (t - tp)) - (p + tp)  # TwoSum: t + t_lo == 1 - p exactly
    s1 = t + r
    e1 = (t - s1) + r  # Fast2Sum: t == 0 or |t| >= 1/2 >= |r|
    s2 = s1 + h
    e2 = (s1 - s2) + h  # Fast2Sum: |s1| >= |h|
    y = s2 + ((((e1 + e2) + t_lo) + small) + _fma(rlo, r, rlo))
    return _select(x == 0.0, x, _scale(y, k))


# ---------------------------------------------------------------------------------------
# The Gaussian tail, erf and gelu (benchmarks/erf_fit.py derives every table below)
# ---------------------------------------------------------------------------------------
#
# For a >= 0 the Gaussian tail is Q(a) = Phi(-a) = erfc(a / sqrt 2) / 2 = e^(-a^2/2) m(a),
# where m(a) = Q(a) e^(a^2/2) falls smoothly from 1/2 to ~1 / (a sqrt(2 pi)). gelu(x) =
# x Phi(x) is x Q(|x|) for x < 0 and x - x Q(x) for x >= 0, so every x takes the same
# branch-free path and no 1 + erf cancels: Q keeps its relative accuracy however small it
# is. e^(-a^2/2) is formed from the exact a^2 = h + l (an FMA gives l), reduced by k ln 2
# exactly; the float32 kernels keep every intermediate a normal number by scaling with
# 2**(k + 64) and multiply by 2**-64 last, so a subnormal result is rounded once.

_F32 = np.float32
_ONE32 = _F32(1.0)
#: m(a) = N(a) / D(a) on [0, 14.7], float32 coefficients (relative error 2**-25.4).
_GELU32_N = (_F32(0.5), _F32(0.4379945397377014), _F32(0.18298590183258057),
             _F32(0.04054143652319908), _F32(0.00410036277025938))  # fmt: skip
_GELU32_D = (_F32(1.0), _F32(1.6738739013671875), _F32(1.2015260457992554),
             _F32(0.46880561113357544), _F32(0.10162876546382904),
             _F32(0.010277965106070042))  # fmt: skip
#: e^(-s/2) on |s| <= 0.7 (relative error 2**-28.2).
_EXP_HALF32 = (_F32(1.0), _F32(-0.5), _F32(0.1249999850988388), _F32(-0.020833145827054977),
               _F32(0.0026042675599455833), _F32(-0.0002615391567815095),
               _F32(2.1595198631985113e-05))  # fmt: skip
#: e^r on |r| <= 0.35 (relative error 2**-28.2).
_EXPF = (_F32(1.0), _F32(1.0), _F32(0.4999999403953552), _F32(0.16666516661643982),
         _F32(0.041668280959129333), _F32(0.008369253017008305),
         _F32(0.0013820927124470472))  # fmt: skip
#: erf(z) / z - 1 = Q(z^2) on |z| <= 0.75, float32 (relative error of 1 + Q: 2**-29.2).
_ERF32_SMALL = (_F32(0.12837916612625122), _F32(-0.3761261999607086),
                _F32(0.11283379048109055), _F32(-0.026834335178136826),
                _F32(0.005113156978040934), _F32(-0.0006737583316862583))  # fmt: skip
#: The same in float64 (2**-55.8).
_ERF64_SMALL = (0.1283791670955126, -0.37612638903184153, 0.11283791670973,
                -0.026866170648146996, 0.0052239776503482434,
                -0.0008548328100858607, 0.00012055354132013304,
                -1.4925561242401929e-05, 1.644829972988767e-06,
                -1.6067065109443925e-07, 1.1864725280967127e-08)  # fmt: skip
#: erfc(z) e^(z^2) = N(z) / D(z) on [0.75, 4], float32 (relative error 2**-27.4).
_ERF32_N = (_F32(0.9998911619186401), _F32(1.038883090019226), _F32(0.4945893883705139),
            _F32(0.10534247010946274))  # fmt: skip
_ERF32_D = (_F32(1.0), _F32(2.1664254665374756), _F32(1.9421358108520508),
            _F32(0.8758960962295532), _F32(0.18674813210964203))  # fmt: skip
#: float64: m(a) / t as a Chebyshev series in t = 1 / (1 + p a) mapped onto [-1, 1], t in
#: [1 / (1 + 38.8 p), 1] (relative error 2**-58.8), and kappa = d ln m / d ln t (2**-12.5),
#: which corrects m for the rounding of t.
_GELU64_CHEB = (0.2752107013991464, 0.1801469629111447, 0.03970244787758296,
                0.00500458704785395, 3.208552995214112e-05,
                -9.290685183565129e-05, -6.142497170386337e-06,
                2.1506726981132994e-06, 1.8275280998984598e-07,
                -6.774846263183633e-08, -3.4828746792200503e-09,
                2.517997952568328e-09, -4.9866151644961906e-11,
                -9.187484226719838e-11, 1.1098837259956453e-11,
                2.5725701620871293e-12, -7.985146003916743e-13,
                -6.338433870803724e-15, 3.7704816594848956e-14,
                -5.611833853882647e-15, -9.043179121711867e-16,
                4.395080460903494e-16, -3.484913317118241e-17,
                -1.6449599585898194e-17, 5.164820858583353e-18)  # fmt: skip
_GELU64_KAPPA = (0.9960838526861319, 1.0873186046217433, 0.1582020767421157, 2.642879600580053,
                 -3.148144430236569, 0.9228132845624912)  # fmt: skip
_GELU64_T_LO = 1.0 / (1.0 + GELU64_P * (GELU64_CLAMP + 0.1))
#: s = _CHEB_A t + _CHEB_B maps [_GELU64_T_LO, 1] onto [-1, 1].
_CHEB_A = 2.0 / (1.0 - _GELU64_T_LO)
_CHEB_B = -(1.0 + _GELU64_T_LO) / (1.0 - _GELU64_T_LO)

_INV_SQRT_2PI = 0.3989422804014327
_INV_SQRT_2PI32 = _F32(_INV_SQRT_2PI)
_SQRT2_32 = _F32(math.sqrt(2.0))
_SQRT2_HI = 1.4142135623730951
_SQRT2_LO = -9.667293313452913e-17
#: 1.5 * 2**23 + 64: ``fma(v, log2 e, _SHIFT32) - _SHIFT32`` rounds v log2 e to an integer
#: k, and the float32's low significand bits hold k + 64 (:func:`_ldexp_bits32`).
_SHIFT32 = _F32(12582912.0 + 64.0)
_SHIFT32_0 = _F32(12582912.0)
_NEG_HALF_LOG2E32 = _F32(-0.5 * 1.4426950408889634)
_LOG2E32 = _F32(1.4426950408889634)
#: 2 ln 2 and ln 2 in float32 halves: the high parts have 12 significant bits, so that
#: k times them is exact for |k| < 2**12.
_TWO_LN2_HI32 = _F32(2.0 * 0.693145751953125)
_TWO_LN2_LO32 = _F32(2.0 * 1.4286068203094173e-06)
_LN2_HI32F = _F32(0.693145751953125)
_LN2_LO32F = _F32(1.4286068203094173e-06)
_TWO_M64_32 = _F32(2.0**-64)
_TWO_M63_32 = _F32(2.0**-63)
_ERF_SMALL32 = _F32(ERF_SMALL)
_INF32 = _F32(_INF)
_NAN32 = _F32(_NAN)
#: Below this, :func:`expf_scaled` returns its value here (2**(k + 64) stays normal).
_EXP32_V_MIN = -131.0
_EXP32_V_MIN32 = _F32(_EXP32_V_MIN)
_ZERO32 = _F32(0.0)
_ERF_TAIL_CLAMP32 = _F32(4.0)


@_jitable
def _exp_neg_half32(h, lo):
    """``e^(-(h + lo)/2) 2**64`` for float32 ``0 <= h <= 211`` and a tiny ``lo`` (the
    rounding error of ``h``): ``h + 2 k ln 2`` is exact, its polynomial relative error is
    2**-28.2, and the scaling by ``2**(k + 64)`` is an exponent add (the result stays
    normal down to ``h = 211``)."""
    t = _fma(h, _NEG_HALF_LOG2E32, _SHIFT32)
    k = t - _SHIFT32
    s = _fma(k, _TWO_LN2_HI32, h) + _fma(k, _TWO_LN2_LO32, lo)
    c = _EXP_HALF32
    e = _fma(_fma(_fma(_fma(c[6], s, c[5]), s, c[4]), s, c[3]), s, c[2])
    e = _fma(_fma(e, s, c[1]), s, c[0])
    return _ldexp_bits32(e, t)


@_jitable
def _gauss_tail32(x):
    """``(a, m, e)`` for a float32 ``x``: ``a = min(|x|, 14.5)``, ``m ~ m(a)`` and
    ``e = e^(-a^2/2) 2**64``, so that ``Q(a) = m e 2**-64``. m is the rational N / D with
    positive coefficients (no cancellation; within 6 ULP, mostly the roundings of its nine
    FMAs)."""
    a = abs(x)
    a = _select(a > GELU32_CLAMP, GELU32_CLAMP, a)  # (nan stays nan)
    n, d = _GELU32_N, _GELU32_D
    num = _fma(_fma(_fma(_fma(n[4], a, n[3]), a, n[2]), a, n[1]), a, n[0])
    den = _fma(_fma(_fma(_fma(_fma(d[5], a, d[4]), a, d[3]), a, d[2]), a, d[1]), a, d[0])
    h = a * a
    return a, num / den, _exp_neg_half32(h, _fma(a, a, -h))


@_jitable
def _gelu_f32(x):
    a, m, e = _gauss_tail32(x)
    q = m * e  # Q(a) 2**64
    negative = (-a * q) * _TWO_M64_32  # x Q(|x|), one rounding into the subnormals
    positive = _fma(-a, q * _TWO_M64_32, x)  # x - x Q(x), one rounding; a = 14.6 for x = inf
    return _select(x > -_INF32, _select(x < 0, negative, positive), x - x)  # -inf: nan


@_jitable
def _gelu_derivative_f32(x):
    a, m, e = _gauss_tail32(x)
    # Phi + x phi: Q(a) - a phi(a) = -phi (a - M) below 0, 1 + phi (a - M) above, where
    # phi(a) = e 2**-64 / sqrt(2 pi) and M = Q / phi = sqrt(2 pi) m: inner = (a - M) phi / e.
    inner = _fma(a, _INV_SQRT_2PI32, -m)
    negative = -(inner * e) * _TWO_M64_32
    positive = _fma(inner, e * _TWO_M64_32, _ONE32)
    return _select(x - x == 0, _select(x < 0, negative, positive), x - x)  # +-inf: nan


@_jitable
def _erf_f32(x):
    z = abs(x)
    w = x * x
    c = _ERF32_SMALL
    q = _fma(_fma(_fma(_fma(_fma(c[5], w, c[4]), w, c[3]), w, c[2]), w, c[1]), w, c[0])
    small = _fma(x, q, x)
    zc = _select(z > _ERF_TAIL_CLAMP32, _ERF_TAIL_CLAMP32, z)  # erf = 1 beyond (nan stays)
    n, d = _ERF32_N, _ERF32_D
    num = _fma(_fma(_fma(n[3], zc, n[2]), zc, n[1]), zc, n[0])
    den = _fma(_fma(_fma(_fma(d[4], zc, d[3]), zc, d[2]), zc, d[1]), zc, d[0])
    h = zc * zc
    e = _exp_neg_half32(h + h, _fma(zc, zc, -h) * _F32(2.0))  # e^(-z^2) 2**64
    large = _fma(num / den, e * -_TWO_M64_32, _ONE32)  # 1 - erfc(z)
    return _select(z < _ERF_SMALL32, small, math.copysign(large, x))


@_inlined
def _clenshaw(s, c):
    """The Chebyshev series ``sum_j c_j T_j(s)`` of the 25-tuple ``c`` by Clenshaw's
    recurrence ``b_j = 2 s b_(j+1) - b_(j+2) + c_j`` (written out: a loop over a tuple
    keeps LLVM from vectorising the caller's loop)."""
    s2 = s + s
    b1, b2 = _fma(s2, c[24], c[23]), c[24]
    b1, b2 = _fma(s2, b1, c[22] - b2), b1
    b1, b2 = _fma(s2, b1, c[21] - b2), b1
    b1, b2 = _fma(s2, b1, c[20] - b2), b1
    b1, b2 = _fma(s2, b1, c[19] - b2), b1
    b1, b2 = _fma(s2, b1, c[18] - b2), b1
    b1, b2 = _fma(s2, b1, c[17] - b2), b1
    b1, b2 = _fma(s2, b1, c[16] - b2), b1
    b1, b2 = _fma(s2, b1, c[15] - b2), b1
    b1, b2 = _fma(s2, b1, c[14] - b2), b1
    b1, b2 = _fma(s2, b1, c[13] - b2), b1
    b1, b2 = _fma(s2, b1, c[12] - b2), b1
    b1, b2 = _fma(s2, b1, c[11] - b2), b1
    b1, b2 = _fma(s2, b1, c[10] - b2), b1
    b1, b2 = _fma(s2, b1, c[9] - b2), b1
    b1, b2 = _fma(s2, b1, c[8] - b2), b1
    b1, b2 = _fma(s2, b1, c[7] - b2), b1
    b1, b2 = _fma(s2, b1, c[6] - b2), b1
    b1, b2 = _fma(s2, b1, c[5] - b2), b1
    b1, b2 = _fma(s2, b1, c[4] - b2), b1
    b1, b2 = _fma(s2, b1, c[3] - b2), b1
    b1, b2 = _fma(s2, b1, c[2] - b2), b1
    b1, b2 = _fma(s2, b1, c[1] - b2), b1
    return _fma(s, b1, c[0] - b2)


@_inlined
def _gauss_tail64(x):
    """``(a, m, r, rlo, k)`` for a float64 ``x``: ``a = min(|x|, 38.6)``, ``m ~ m(a)`` and
    ``e^(-a^2/2) = 2**k e^(r + rlo)``. m is ``t P(t)``, t = 1 / (1 + p a), P a Chebyshev
    series (Clenshaw's recurrence), corrected for the rounding of t by
    ``m kappa(t) (t_true / t - 1)``, the rounding computed exactly with FMAs."""
    a = abs(x)
    a = _select(a > GELU64_CLAMP, GELU64_CLAMP, a)
    d = _fma(GELU64_P, a, 1.0)
    d_lo = _fma(GELU64_P, a, 1.0 - d)  # d + d_lo = 1 + p a (1 - d is exact)
    t = 1.0 / d
    rho = _fma(-t, d, 1.0) - t * d_lo  # t_true = t (1 + rho) to ~2**-104
    s = _fma(_CHEB_A, t, _CHEB_B)
    m = t * _clenshaw(s, _GELU64_CHEB)
    kc = _GELU64_KAPPA
    kappa = _fma(_fma(_fma(_fma(_fma(kc[5], t, kc[4]), t, kc[3]), t, kc[2]), t, kc[1]), t, kc[0])
    m = _fma(m, kappa * rho, m)
    h = a * a
    k, r, rlo = _reduce_ln2(-0.5 * h)
    return a, m, r, rlo - 0.5 * _fma(a, a, -h), k


@_jitable
def _gelu_f64(x):
    a, m, r, rlo, k = _gauss_tail64(x)
    e = _exp_reduced64(r, rlo)
    negative = _scale((-a * m) * e, k)
    positive = _fma(-a, _scale(m * e, k), x)
    return _select(x > -_INF, _select(x < 0, negative, positive), x - x)


@_jitable
def _gelu_derivative_f64(x):
    a, m, r, rlo, k = _gauss_tail64(x)
    e = _exp_reduced64(r, rlo)
    inner = _fma(a, _INV_SQRT_2PI, -m)
    negative = _scale(-inner * e, k)
    positive = _fma(inner, _scale(e, k), 1.0)
    return _select(x - x == 0, _select(x < 0, negative, positive), x - x)


@_jitable
def _erf_f64(x):
    z = abs(x)
    w = x * x
    c = _ERF64_SMALL
    q = _fma(_fma(_fma(_fma(_fma(c[10], w, c[9]), w, c[8]), w, c[7]), w, c[6]), w, c[5])
    q = _fma(_fma(_fma(_fma(_fma(q, w, c[4]), w, c[3]), w, c[2]), w, c[1]), w, c[0])
    small = _fma(x, q, x)
    zc = _select(z > 6.0, 6.0, z)  # erf = 1 beyond 5.93 (nan stays)
    a, m, r, rlo, k = _gauss_tail64(zc * _SQRT2_HI)
    # a + a_lo = z sqrt 2; erfc(z) = 2 Q(a + a_lo) = 2 e^(-a^2/2) (m - a_lo / sqrt(2 pi)) to
    # first order (m' = a m - 1 / sqrt(2 pi)): the rounding of a is undone (4 ULP without).
    a_lo = _fma(zc, _SQRT2_HI, -a) + zc * _SQRT2_LO
    m = _fma(-a_lo, _INV_SQRT_2PI, m)
    large = _fma(-2.0 * m, _scale(_exp_reduced64(r, rlo), k), 1.0)  # 1 - erfc(z)
    return _select(z < ERF_SMALL, small, math.copysign(large, x))


# The tanh form of gelu: x (1 + tanh u) / 2 = x sigma(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
# With E = e^v, v = -2|u| <= 0: x / (1 + E) for x >= 0 and x E / (1 + E) below, so that
# 1 + tanh u never cancels (it gave 0 from x = -5.7 in float32). v is formed in float64 (a
# float32 u would be off by |u| 2**-23, 100s of ULP of e^v where |u| ~ 50); float32 then
# takes e^r, r = v - k ln 2, in float32 arithmetic (16 lanes) and scales by 2**(k + 64) as
# the Gaussian tail does.
_SQRT_2_OVER_PI = 0.7978845608028654
_GELU_KAPPA = 0.044715
#: v is clamped here: e^v x underflows for every x (float32 x is clamped to >= -15 in the
#: negative branch, float64 to >= -40; float32's v at -131, by :func:`expf_scaled`).
_TANH_X_MIN32 = _F32(-15.0)
_TANH_X_MAX32 = _F32(15.0)
_TANH_V_MIN64 = -800.0
_TANH_X_MIN64 = -40.0


@_jitable
def _tanh_gelu_v(xd):
    """``v = -2 sqrt(2/pi) |x| (1 + 0.044715 x^2)`` (float64, within 2**-51 relative)."""
    return (-2.0 * _SQRT_2_OVER_PI) * abs(xd) * _fma(_GELU_KAPPA, xd * xd, 1.0)


@_jitable
def expf_scaled(v):
    """``e^v 2**64`` as a float32, for a float64 ``v <= 0`` (jitable helper for float32
    kernels: softmax, cross entropy, gelu's tanh form).

    ``v`` is reduced in float64 (``r = v - k ln 2``, exact to 2**-53), ``e^r`` is a degree-6
    polynomial in float32 arithmetic (16 lanes; relative error 2**-28.2) and ``2**(k + 64)``
    an exponent add: within 1 ULP of ``e^v 2**64``, and a normal number for every
    ``v >= -131``; below, ``e^-131 2**64``, so that a product with a factor at most 1 taken
    back by 2**-64 is 0, as ``e^v`` is there. Scaling back by 2**-64 in the product that
    rounds the result keeps subnormal results to one rounding. nan stays nan."""
    vc = _select(v < _EXP32_V_MIN, _EXP32_V_MIN, v)
    t = _fma(vc, _INVLN2, _SHIFT)
    k = t - _SHIFT
    r = np.float32(_fma(-k, _LN2_LO, _fma(-k, _LN2, vc)))
    c = _EXPF
    p = _fma(_fma(_fma(_fma(c[6], r, c[5]), r, c[4]), r, c[3]), r, c[2])
    p = _fma(_fma(p, r, c[1]), r, c[0])
    return _select(v == v, _ldexp_bits32(p, np.float32(k) + _SHIFT32), _NAN32)


@_jitable
def expf_shifted(x, m):
    """``e^(x - m) 2**64`` for float32 ``x <= m`` in float32 arithmetic (jitable helper for
    softmax-like float32 kernels, ``m`` their row's maximum, or 0).

    ``x - m`` is formed with its rounding error (Knuth's TwoSum, six additions), so the
    result is within 1 ULP of ``e^(x - m) 2**64`` however far below ``m`` ``x`` is (a
    rounded difference costs ``|x - m|`` ULP: 20 at a probability of 2e-9). Otherwise as
    :func:`expf_scaled` (``x - m < -131`` gives ``e^-131 2**64``; nan stays nan, as do
    ``inf - inf`` and ``-inf - -inf``), all 16 lanes float32: 2.5x faster than that
    function's float64 reduction."""
    d = x - m
    back = d - x
    error = (x - (d - back)) + (-m - back)
    low = d < _EXP32_V_MIN32
    d = _select(low, _EXP32_V_MIN32, d)
    error = _select(low, _ZERO32, error)
    t = _fma(d, _LOG2E32, _SHIFT32)
    k = t - _SHIFT32
    r = _fma(k, -_LN2_HI32F, d) + _fma(k, -_LN2_LO32F, error)  # the first term is exact
    c = _EXPF
    p = _fma(_fma(_fma(_fma(c[6], r, c[5]), r, c[4]), r, c[3]), r, c[2])
    p = _fma(_fma(p, r, c[1]), r, c[0])
    return _select(d == d, _ldexp_bits32(p, t), _NAN32)


@_jitable
def _tanh_gelu_parts32(x):
    """``(e, r)`` for a float32 ``x``: ``e = e^v 2**64`` and ``r = 1 / (1 + e^v)``."""
    e = expf_scaled(_tanh_gelu_v(np.float64(x)))
    return e, _ONE32 / _fma(e, _TWO_M64_32, _ONE32)


@_jitable
def _gelu_tanh_f32(x):
    e, r = _tanh_gelu_parts32(x)
    xc = _select(x < _TANH_X_MIN32, _TANH_X_MIN32, x)
    y = _select(x < 0, ((xc * e) * r) * _TWO_M64_32, x * r)
    return _select(x > -_INF32, y, x - x)


@_jitable
def _gelu_tanh_derivative_f32(x):
    # sigma(2u) + x sigma(2u) (1 - sigma(2u)) 2u', with sigma (1 - sigma) = E / (1 + E)^2:
    # R (1 + w E R) for x >= 0 and E R (1 + w R) below, w = x 2u' = 2 sqrt(2/pi) x (1 +
    # 3 0.044715 x^2), x clamped to [-15, 15] in w (E = 0 beyond, w E would be inf 0).
    e, r = _tanh_gelu_parts32(x)
    xw = _select(x < _TANH_X_MIN32, _TANH_X_MIN32, _select(x > _TANH_X_MAX32, _TANH_X_MAX32, x))
    xw = np.float64(xw)
    w = np.float32((2.0 * _SQRT_2_OVER_PI) * xw * _fma(3.0 * _GELU_KAPPA, xw * xw, 1.0))
    negative = ((e * r) * _fma(w, r, _ONE32)) * _TWO_M64_32
    positive = r * _fma(w, (e * _TWO_M64_32) * r, _ONE32)
    return _select(x - x == 0, _select(x < 0, negative, positive), x - x)


#: -2 sqrt(2/pi) and -2 sqrt(2/pi) 0.044715 as double-doubles.
_TANH_A_HI, _TANH_A_LO = -1.5957691216057308, 9.96930880911092e-17
_TANH_B_HI, _TANH_B_LO = -0.07135481627260025, 6.175149918155315e-19


@_jitable
def _tanh_gelu_v64(x):
    """``v = A |x| + B |x|^3`` as a double-double ``(v, v_lo)`` (error ~2**-100 |v|): e^v
    amplifies an error of v by |v|, up to 800 here (a float64 v gave 280 ULP at x = -12)."""
    a = abs(x)
    h = a * a
    cube = a * h
    cube_lo = _fma(a, h, -cube) + a * _fma(a, a, -h)
    t1 = _TANH_A_HI * a
    t1_lo = _fma(_TANH_A_HI, a, -t1) + _TANH_A_LO * a
    t2 = _TANH_B_HI * cube
    t2_lo = _fma(_TANH_B_HI, cube, -t2) + (_TANH_B_LO * cube + _TANH_B_HI * cube_lo)
    v = t1 + t2
    back = v - t1
    return v, ((t1 - (v - back)) + (t2 - back)) + (t1_lo + t2_lo)


@_jitable
def _tanh_gelu_parts64(x):
    """``(p, k, r)``: ``e^v = 2**k p`` and ``r = 1 / (1 + e^v)`` for a float64 ``x``."""
    v, v_lo = _tanh_gelu_v64(x)
    low = v < _TANH_V_MIN64
    v = _select(low, _TANH_V_MIN64, v)
    k, red, red_lo = _reduce_ln2(v)
    p = _exp_reduced64(red, red_lo + _select(low, 0.0, v_lo))
    return p, k, 1.0 / (1.0 + _scale(p, k))


@_jitable
def _gelu_tanh_f64(x):
    p, k, r = _tanh_gelu_parts64(x)
    xc = _select(x < _TANH_X_MIN64, _TANH_X_MIN64, x)
    y = _select(x < 0, _scale((xc * p) * r, k), x * r)
    return _select(x > -_INF, y, x - x)


@_jitable
def _gelu_tanh_derivative_f64(x):
    p, k, r = _tanh_gelu_parts64(x)
    xw = _select(x < _TANH_X_MIN64, _TANH_X_MIN64, _select(x > -_TANH_X_MIN64, -_TANH_X_MIN64, x))
    w = (2.0 * _SQRT_2_OVER_PI) * xw * _fma(3.0 * _GELU_KAPPA, xw * xw, 1.0)
    negative = _scale((p * r) * _fma(w, r, 1.0), k)
    positive = r * _fma(w, _scale(p, k) * r, 1.0)
    return _select(x - x == 0, _select(x < 0, negative, positive), x - x)


# ---------------------------------------------------------------------------------------
# Public stubs and their overloads
# ---------------------------------------------------------------------------------------

_TRAMPOLINES: dict[Callable, Callable] = {}


def _interpret(fn: Callable, x: FloatT) -> FloatT:
    """Evaluate the stub ``fn`` at ``x`` from the interpreter via a jitted trampoline."""
    trampoline = _TRAMPOLINES.get(fn)
    if trampoline is None:
        trampoline = _TRAMPOLINES[fn] = njit(lambda v: fn(v))
    out = trampoline(x)
    return type(x)(out) if isinstance(x, np.floating) else out


def _register(stub: Callable, impl32: Callable, impl64: Callable, inline: str = "never") -> None:
    """Attach a Numba overload to ``stub`` that dispatches on float32/float64; ``inline``
    "always" inlines it in Numba's IR (for the large float64 ones, which LLVM would leave
    as a call that keeps the caller's loop scalar)."""

    @overload(stub, jit_options=_JIT_OPTIONS, inline=inline)
    def _typer(x):
        if x == types.float32:
            return impl32
        if x == types.float64:
            return impl64
        return None


def log2(x: FloatT) -> FloatT:
    """Base-2 logarithm, ``log2(x)``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including zeros, subnormals, infinities and nan.

    Returns
    -------
    float32 or float64
        ``log2(x)`` in the type of ``x``; float32 correctly rounded but for a few
        inputs (<= 0.5 + 2**-20 ULP), float64 <= 0.55 ULP (see module docstring).
        ``log2(+-0) = -inf``, ``log2(x < 0) = nan``, ``log2(1) = +0``.
    """
    return _interpret(log2, x)


def log(x: FloatT) -> FloatT:
    """Natural logarithm, ``ln(x)``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including zeros, subnormals, infinities and nan.

    Returns
    -------
    float32 or float64
        ``log(x)`` in the type of ``x``; float32 correctly rounded but for a few
        inputs (<= 0.5 + 2**-20 ULP), float64 <= 0.55 ULP (see module docstring).
        ``log(+-0) = -inf``, ``log(x < 0) = nan``, ``log(1) = +0``.
    """
    return _interpret(log, x)


def log10(x: FloatT) -> FloatT:
    """Base-10 logarithm, ``log10(x)``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including zeros, subnormals, infinities and nan.

    Returns
    -------
    float32 or float64
        ``log10(x)`` in the type of ``x``; float32 correctly rounded but for a few
        inputs (<= 0.5 + 2**-20 ULP), float64 <= 0.55 ULP (see module docstring).
        ``log10(+-0) = -inf``, ``log10(x < 0) = nan``, ``log10(1) = +0``.
    """
    return _interpret(log10, x)


def log1p(x: FloatT) -> FloatT:
    """``ln(1 + x)``, accurate for small ``|x|``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including zeros, subnormals, infinities and nan.

    Returns
    -------
    float32 or float64
        ``log1p(x)`` in the type of ``x``; float32 correctly rounded but for a few
        inputs (<= 0.5 + 2**-20 ULP), float64 <= 0.55 ULP (see module docstring).
        ``log1p(+-0) = +-0``, ``log1p(-1) = -inf``, ``log1p(x < -1) = nan``.
    """
    return _interpret(log1p, x)


def exp(x: FloatT) -> FloatT:
    """Natural exponential, ``e**x``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including infinities and nan.

    Returns
    -------
    float32 or float64
        ``exp(x)`` in the type of ``x``; float32 correctly rounded but for a few
        inputs (<= 0.5 + 2**-20 ULP), float64 <= 0.76 ULP (see module docstring).
        Overflow gives ``+inf``, underflow gives subnormals then ``+0``.
    """
    return _interpret(exp, x)


def exp2(x: FloatT) -> FloatT:
    """Base-2 exponential, ``2**x``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including infinities and nan.

    Returns
    -------
    float32 or float64
        ``exp2(x)`` in the type of ``x``; float32 correctly rounded but for a few
        inputs (<= 0.5 + 2**-20 ULP), float64 <= 0.76 ULP (see module docstring).
        Exact for integral ``x`` in range; overflow gives ``+inf``, underflow ``+0``.
    """
    return _interpret(exp2, x)


def expm1(x: FloatT) -> FloatT:
    """``e**x - 1``, accurate for small ``|x|``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including infinities and nan.

    Returns
    -------
    float32 or float64
        ``expm1(x)`` in the type of ``x``; float32 correctly rounded but for a few
        inputs (<= 0.5 + 2**-20 ULP), float64 <= 0.6 ULP (see module docstring).
        ``expm1(+-0) = +-0``, ``expm1(-inf) = -1``, overflow gives ``+inf``.
    """
    return _interpret(expm1, x)


def erf(x: FloatT) -> FloatT:
    """Error function, ``erf(x) = 2 / sqrt(pi) int_0^x e^(-t^2) dt``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including infinities and nan.

    Returns
    -------
    float32 or float64
        ``erf(x)`` in the type of ``x``, computed in its own arithmetic: float32 within
        1.7 ULP (all inputs), float64 within 1.4 ULP (see module docstring).
        ``erf(+-0) = +-0``, ``erf(+-inf) = +-1``.
    """
    return _interpret(erf, x)


def gelu(x: FloatT) -> FloatT:
    """``x Phi(x)``, Phi the standard normal distribution function (exact GELU).

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including infinities and nan.

    Returns
    -------
    float32 or float64
        ``x Phi(x)`` in the type of ``x``, computed in its own arithmetic with Phi's relative
        accuracy kept for x << 0 (no ``1 + erf`` cancellation): float32 within 6.9 ULP
        (all inputs), float64 within 5 ULP (see module docstring). ``gelu(+-0) = +-0``,
        ``gelu(+inf) = +inf``, ``gelu(-inf) = nan`` (the formula's ``-inf * 0``, as
        PyTorch's); underflow keeps the sign of x.
    """
    return _interpret(gelu, x)


def gelu_derivative(x: FloatT) -> FloatT:
    """``Phi(x) + x phi(x)``, the derivative of :func:`gelu` (phi the normal density).

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including infinities and nan.

    Returns
    -------
    float32 or float64
        The derivative in the type of ``x``: within 6.3 ULP (float32, all inputs) and 6
        ULP (float64) outside [-1, -0.5], around its zero at x = -0.7518, where it
        cancels: the absolute error there is below 2**-23 (float32) or 2**-52 (float64)
        (see module docstring). ``gelu_derivative(+-inf) = nan`` (the formula's ``inf *
        0``, as PyTorch's); ``-0`` where it underflows below zero.
    """
    return _interpret(gelu_derivative, x)


def gelu_tanh(x: FloatT) -> FloatT:
    """``x (1 + tanh(u)) / 2``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``: GELU's tanh form.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including infinities and nan.

    Returns
    -------
    float32 or float64
        The value in the type of ``x``, as ``x sigma(2u)`` with no cancellation for x << 0:
        float32 within 3.6 ULP (all inputs), float64 within 3 ULP (see module docstring).
        ``gelu_tanh(+inf) = +inf``, ``gelu_tanh(-inf) = nan`` (as :func:`gelu`).
    """
    return _interpret(gelu_tanh, x)


def gelu_tanh_derivative(x: FloatT) -> FloatT:
    """The derivative of :func:`gelu_tanh`, ``sigma(2u) + x sigma(2u) (1 - sigma(2u)) 2u'``.

    Parameters
    ----------
    x : float32 or float64
        Argument; any value including infinities and nan.

    Returns
    -------
    float32 or float64
        The derivative in the type of ``x``: within 7.8 ULP (float32, all inputs) and 7.5
        ULP (float64) outside [-1, -0.5], around its zero at x = -0.7517, where it cancels
        (absolute error below 2**-23, float64 2**-52) (see module docstring); ``nan`` at
        +-inf.
    """
    return _interpret(gelu_tanh_derivative, x)


_register(log2, _log2_f32, _log2_f64)
_register(log, _log_f32, _log_f64_impl)
_register(log10, _log10_f32, _log10_f64)
_register(log1p, _log1p_f32, _log1p_f64)
_register(exp, _exp_f32, _exp_f64)
_register(exp2, _exp2_f32, _exp2_f64)
_register(expm1, _expm1_f32, _expm1_f64)
_register(erf, _erf_f32, _erf_f64, inline="always")
_register(gelu, _gelu_f32, _gelu_f64, inline="always")
_register(gelu_derivative, _gelu_derivative_f32, _gelu_derivative_f64, inline="always")
_register(gelu_tanh, _gelu_tanh_f32, _gelu_tanh_f64, inline="always")
_register(
    gelu_tanh_derivative, _gelu_tanh_derivative_f32, _gelu_tanh_derivative_f64, inline="always"
)
