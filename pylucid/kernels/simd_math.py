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

__all__ = ["exp", "exp2", "expm1", "log", "log10", "log1p", "log2"]

FloatT = TypeVar("FloatT", float, np.floating)

_JIT_OPTIONS = {"error_model": "numpy"}
_jitable = register_jitable(**_JIT_OPTIONS)

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
    """Fused ``a * b + c`` with a single rounding (``llvm.fma.f64``)."""
    if not all(isinstance(types.unliteral(t), types.Float) for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):  # noqa: ARG001
        return builder.fma(*args)

    return types.float64(types.float64, types.float64, types.float64), codegen


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
    """``exp(r + rlo)`` for ``|r| <= ln(2)/2`` and tiny ``rlo``, error ~0.502 ULP."""
    h, small = _expm1_parts64(r)
    s1 = 1.0 + r
    e1 = (1.0 - s1) + r
    s2 = s1 + h
    e2 = (s1 - s2) + h
    return s2 + (((e1 + e2) + small) + rlo * s2)


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


def _register(stub: Callable, impl32: Callable, impl64: Callable) -> None:
    """Attach a Numba overload to ``stub`` that dispatches on float32/float64."""

    @overload(stub, jit_options=_JIT_OPTIONS)
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


_register(log2, _log2_f32, _log2_f64)
_register(log, _log_f32, _log_f64_impl)
_register(log10, _log10_f32, _log10_f64)
_register(log1p, _log1p_f32, _log1p_f64)
_register(exp, _exp_f32, _exp_f64)
_register(exp2, _exp2_f32, _exp2_f64)
_register(expm1, _expm1_f32, _expm1_f64)
