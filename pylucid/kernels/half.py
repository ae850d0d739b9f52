"""Half-precision conversions on 16-bit patterns, for loops that read and write float16 and
bfloat16 arrays through ``uint16`` views (Numba has no 16-bit float type or arithmetic).

Four ``register_jitable`` scalar functions, each exact or correctly rounded:

``f16_to_f32(h)``
    float16 bits -> float32, exact: normals, subnormals, +-0, +-inf; a NaN stays a NaN of
    the same sign with its payload (as ``np.float16 -> np.float32``).
``f32_to_f16(x)``
    float32 -> float16 bits, rounded to nearest even: values from 65520 up overflow to inf,
    values below 2**-14 round to subnormals (or +-0), a NaN becomes a quiet NaN of the same
    sign keeping the top of its payload (what F16C's ``vcvtps2ph`` gives).
``bf16_to_f32(h)``
    bfloat16 bits -> float32: a 16-bit shift, exact.
``f32_to_bf16(x)``
    float32 -> bfloat16 bits, rounded to nearest even (overflow to inf, subnormals kept); a
    NaN becomes a quiet NaN of the same sign (top of its payload kept).

A float64 argument of the ``f32_to`` functions is first rounded to float32: a kernel that
computes in float64 (a float32 gradient with a float64 literal) stores what its float32 loop
would store, rounded once more to the half type - bit for bit what the float32 kernel
followed by ``astype`` gives.

All four are branch-free (integer operations and ``select``), so a loop over contiguous
arrays calling them vectorises; :func:`half_dtype_code` names the conversion pair of a
NumPy dtype for the loop generator (:mod:`pylucid.kernels.loops`).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, register_jitable

__all__ = [
    "FLOAT16",
    "bf16_to_f32",
    "f16_to_f32",
    "f32_to_bf16",
    "f32_to_f16",
    "half_dtype_code",
]

#: NumPy's float16 dtype.
FLOAT16 = np.dtype(np.float16)


def half_dtype_code(dtype: np.dtype) -> str | None:
    """``"f16"``, ``"bf16"`` or None (not a half dtype). bfloat16 is ``ml_dtypes``'
    (recognised by name, so this module does not import ml_dtypes: a program that never
    makes a bfloat16 array never loads it)."""
    if dtype == FLOAT16:
        return "f16"
    if dtype.name == "bfloat16":
        return "bf16"
    return None


# -- LLVM IR of the conversions ----------------------------------------------------------------
# Written as IR rather than Numba Python: Numba widens uint32 arithmetic to 64 bits, which
# halves the SIMD lanes of the loops; here every integer operation is i32 and every choice a
# ``select``, so a loop of them vectorises with 8 (AVX2) or 16 (AVX-512) lanes.
_I32 = ir.IntType(32)
_F32 = ir.FloatType()


def _i32(value: int) -> ir.Constant:
    return ir.Constant(_I32, value)


def _int_arg_as_i32(context, builder, value, from_type):
    """An integer argument (uint16 from an array, or any other width) as i32 bits."""
    return context.cast(builder, value, from_type, types.uint32)


def _float_arg_as_i32(context, builder, value, from_type):
    """A float argument rounded to float32 (a no-op for float32), as its i32 bit pattern."""
    return builder.bitcast(context.cast(builder, value, from_type, types.float32), _I32)


def _f16_to_f32_ir(context, builder, signature, args):
    b = builder
    h = _int_arg_as_i32(context, b, args[0], signature.args[0])
    sign = b.shl(b.and_(h, _i32(0x8000)), _i32(16))
    em = b.and_(h, _i32(0x7FFF))  # exponent and mantissa
    shifted = b.shl(em, _i32(13))
    normal = b.add(shifted, _i32((127 - 15) << 23))  # rebias the exponent
    special = b.or_(shifted, _i32(0x7F800000))  # inf, NaN (payload kept)
    # zero and subnormals: em * 2**-24, exact (em < 2**10)
    tiny = b.fmul(b.sitofp(em, _F32), ir.Constant(_F32, 2.0**-24))
    subnormal = b.bitcast(tiny, _I32)
    bits = b.select(b.icmp_unsigned("<", em, _i32(0x0400)), subnormal, normal)
    bits = b.select(b.icmp_unsigned(">=", em, _i32(0x7C00)), special, bits)
    return b.bitcast(b.or_(bits, sign), _F32)


def _f32_to_f16_ir(context, builder, signature, args):
    b = builder
    u = _float_arg_as_i32(context, b, args[0], signature.args[0])
    sign = b.and_(b.lshr(u, _i32(16)), _i32(0x8000))
    a = b.and_(u, _i32(0x7FFFFFFF))
    # normal: rebias the exponent and round the mantissa from 23 to 10 bits to nearest even
    # (a carry into the exponent is right, up to inf from 65520 on)
    lsb = b.and_(b.lshr(a, _i32(13)), _i32(1))
    normal = b.add(b.sub(a, _i32((127 - 15) << 23)), b.add(_i32(0x0FFF), lsb))
    normal = b.lshr(normal, _i32(13))
    # below 2**-14: |x| + 0.5 rounds |x| to a multiple of 2**-24 (the ulp of 0.5) to nearest
    # even in hardware; the low bits of the sum are the float16 bits (0x400: the smallest
    # normal, when it rounds up to it)
    summed = b.fadd(b.bitcast(a, _F32), ir.Constant(_F32, 0.5))
    subnormal = b.sub(b.bitcast(summed, _I32), _i32(0x3F000000))
    # NaN: quiet (bit 9 set), the top 9 bits of the payload kept
    nan = b.or_(b.and_(b.lshr(a, _i32(13)), _i32(0x03FF)), _i32(0x7E00))
    bits = b.select(b.icmp_unsigned("<", a, _i32(0x38800000)), subnormal, normal)
    bits = b.select(b.icmp_unsigned(">=", a, _i32(0x477FF000)), _i32(0x7C00), bits)
    bits = b.select(b.icmp_unsigned(">", a, _i32(0x7F800000)), nan, bits)
    return b.trunc(b.or_(bits, sign), ir.IntType(16))


def _bf16_to_f32_ir(context, builder, signature, args):
    h = _int_arg_as_i32(context, builder, args[0], signature.args[0])
    return builder.bitcast(builder.shl(h, _i32(16)), _F32)


def _f32_to_bf16_ir(context, builder, signature, args):
    b = builder
    u = _float_arg_as_i32(context, b, args[0], signature.args[0])
    high = b.lshr(u, _i32(16))
    # round to nearest even: add 0x7fff plus the lowest kept bit, then drop 16 bits
    rounded = b.lshr(b.add(u, b.add(_i32(0x7FFF), b.and_(high, _i32(1)))), _i32(16))
    nan = b.or_(high, _i32(0x0040))  # quiet, sign and top of the payload kept
    is_nan = b.icmp_unsigned(">", b.and_(u, _i32(0x7FFFFFFF)), _i32(0x7F800000))
    return b.trunc(b.select(is_nan, nan, rounded), ir.IntType(16))


@intrinsic
def _f16_to_f32(typingctx, h):
    if isinstance(h, types.Integer):
        return types.float32(h), _f16_to_f32_ir
    return None


@intrinsic
def _f32_to_f16(typingctx, x):
    if isinstance(x, types.Float):
        return types.uint16(x), _f32_to_f16_ir
    return None


@intrinsic
def _bf16_to_f32(typingctx, h):
    if isinstance(h, types.Integer):
        return types.float32(h), _bf16_to_f32_ir
    return None


@intrinsic
def _f32_to_bf16(typingctx, x):
    if isinstance(x, types.Float):
        return types.uint16(x), _f32_to_bf16_ir
    return None


# -- the scalar functions the loop generator composes ----------------------------------------
@register_jitable
def f16_to_f32(h):
    """float16 bits (an integer) -> float32, exact."""
    return _f16_to_f32(h)


@register_jitable
def f32_to_f16(x):
    """float32 (a float64 is first rounded to float32) -> float16 bits, to nearest even."""
    return _f32_to_f16(x)


@register_jitable
def bf16_to_f32(h):
    """bfloat16 bits (an integer) -> float32, exact (the top half of the float32 bits)."""
    return _bf16_to_f32(h)


@register_jitable
def f32_to_bf16(x):
    """float32 (a float64 is first rounded to float32) -> bfloat16 bits, to nearest even."""
    return _f32_to_bf16(x)
