"""Scalar math of the elementwise ops: one jitable function per forward or gradient.

Each function is generic over float32 and float64; the loop generator
(:mod:`pylucid.kernels.loops`) turns it into contiguous serial and parallel loops. Gradient
functions are fused: they take the forward's inputs and the upstream gradient ``g`` and return
the input gradient in one expression, so their loops read each array once and write once.
Python float literals are float64 in Numba, so a float32 gradient such as ``log2_grad`` is
computed in float64 and rounded once when stored.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload, register_jitable

from pylucid.kernels import simd_math

#: ln 2 as the float64 nearest to it (the literal PyTorch's derivatives.yaml writes as
#: ``0.6931471805599453``; equal to ``math.log(2.0)``).
LN2 = 0.69314718055994530942


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` with one rounding (LLVM's ``llvm.fma``; vectorises to vfmadd): in float32
    when all three operands are float32, else in float64."""
    if not all(isinstance(t, types.Float) for t in (a, b, c)):
        return None
    single = all(t == types.float32 for t in (a, b, c))
    result = types.float32 if single else types.float64
    sig = result(result, result, result)

    def codegen(context, builder, signature, args):
        args = [context.cast(builder, v, t, result) for v, t in zip(args, signature.args)]
        real = ir.FloatType() if single else ir.DoubleType()
        fnty = ir.FunctionType(real, [real, real, real])
        fn = builder.module.declare_intrinsic("llvm.fma", [real], fnty)
        return builder.call(fn, args)

    return sig, codegen


@register_jitable
def log2(x):
    """y = log2(x)."""
    return simd_math.log2(x)


@register_jitable
def neg(x):
    """y = -x."""
    return -x


@register_jitable
def add(a, b):
    """y = a + b."""
    return a + b


@register_jitable
def sub(a, b):
    """y = a - b."""
    return a - b


@register_jitable
def mul(a, b):
    """y = a * b."""
    return a * b


@register_jitable
def div(a, b):
    """y = a / b."""
    return a / b


def div_grad_b(a, b, g):
    """dL/db = -g a / b^2 for y = a / b, in range wherever the exact value is: float32
    operands: :func:`_div_grad_b_f32`, float64 ones: :func:`_div_grad_b_f64`. (The plain
    ``-g * a / (b * b)`` gave -inf for float32 a = b = 1e-24, exact -1e24: b^2 underflowed,
    and -0.0 for a = b = 1e20, exact -1e-20: b^2 overflowed.)"""


@overload(div_grad_b, jit_options={"error_model": "numpy"})
def _div_grad_b_typed(a, b, g):
    if a == types.float32 and b == types.float32 and g == types.float32:
        return _div_grad_b_f32
    return _div_grad_b_f64


@register_jitable
def _div_grad_b_f32(a, b, g):
    """-(g a) / (b b) in float64: the products of float32s are exact and lie within
    1e-90..1e77, so nothing overflows or underflows, and the quotient rounds once before the
    float32 store (correctly rounded but for double-rounding ties, 2**-29 ULP apart)."""
    wb = numba.float64(b)
    return -(numba.float64(g) * numba.float64(a)) / (wb * wb)


@register_jitable
def _div_grad_b_f64(a, b, g):
    """-g ((a / b) / b), as PyTorch: within 1.5 ULP, and in range wherever a / b^2 is (with
    g = 1: a / b overflows only where |b| < 1, where a / b^2 is larger still, and underflows
    only where |b| > 1, where it is smaller), so b^2 is never formed."""
    return -g * ((a / b) / b)


@register_jitable
def pow_scalar(x, p):
    """y = x ** p for a scalar exponent p."""
    return x**p


@register_jitable
def pow_scalar_grad(x, g, p):
    """dL/dx = g p x^(p-1) for y = x ** p; 0 where p == 0 (so 0 ** 0 has gradient 0)."""
    return g * p * x ** (p - 1) if p != 0 else 0 * g
