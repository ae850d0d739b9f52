"""Numba primitives of the elementwise math ops and activations.

Most primitives follow one pattern - ``name(a, shape, dtype)`` runs the loop of the scalar
forward, ``name_backward(v, g, shape, dtype)`` the loop of the fused gradient, where ``v`` is
what the op saved - so they are generated from :data:`UNARY_KERNELS`. The ops with scalar
parameters (the log family's base, ``leaky_relu``, ``elu``, ``softplus``, ``gelu``,
``clamp``) are written out below. Every primitive here computes float16 and bfloat16 in
float32 inside its kernel (see :mod:`pylucid.backends.numba_backend.core`).

The forward primitives of :data:`UNARY_KERNELS` are marked with
:func:`~pylucid.backends.numba_backend.core.elementwise_primitive`, so that a dispatch plan
binds their loops. The others - the backward ones, which grad formulas call, and those with
parameters, which no plan binds - go through ``_nary``, which takes the
:func:`~pylucid.backends.numba_backend.runners.direct` runner of their call signature where
the operands need no conversion (the result is the same loop's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.backends.base import Shape
from pylucid.backends.half import handles_halves
from pylucid.backends.numba_backend.core import _operand, compute_dtype, elementwise_primitive
from pylucid.backends.numba_backend.runners import bindable, bound_loop, direct
from pylucid.dtypes import DType
from pylucid.kernels import elementwise_math as k
from pylucid.kernels.loops import ElementwiseKernel, elementwise

#: Primitive name -> (forward scalar function, fused gradient (v, g) -> dL/dx, or None where
#: the op has another backward: ``log``/``log10`` share ``log_base_backward``, ``sign`` and
#: the roundings have a zero gradient).
UNARY_KERNELS: dict[str, tuple[Callable, Callable | None]] = {
    "exp": (k.exp, k.exp_grad),
    "exp2": (k.exp2, k.exp2_grad),
    "expm1": (k.expm1, k.expm1_grad),
    "log": (k.log, None),
    "log10": (k.log10, None),
    "log1p": (k.log1p, k.log1p_grad),
    "sqrt": (k.sqrt, k.sqrt_grad),
    "rsqrt": (k.rsqrt, k.rsqrt_grad),
    "square": (k.square, k.square_grad),
    "reciprocal": (k.reciprocal, k.reciprocal_grad),
    "sin": (k.sin, k.sin_grad),
    "cos": (k.cos, k.cos_grad),
    "tan": (k.tan, k.tan_grad),
    "asin": (k.asin, k.asin_grad),
    "acos": (k.acos, k.acos_grad),
    "atan": (k.atan, k.atan_grad),
    "asinh": (k.asinh, k.asinh_grad),
    "acosh": (k.acosh, k.acosh_grad),
    "atanh": (k.atanh, k.atanh_grad),
    "sinh": (k.sinh, k.sinh_grad),
    "cosh": (k.cosh, k.cosh_grad),
    "tanh": (k.tanh, k.tanh_grad),
    "relu": (k.relu, k.relu_grad),
    "sigmoid": (k.sigmoid, k.sigmoid_grad),
    "silu": (k.silu, k.silu_grad),
    "erf": (k.erf, k.erf_grad),
    "abs": (k.absolute, k.absolute_grad),
    "sign": (k.sign, None),
    "floor": (k.floor, None),
    "ceil": (k.ceil, None),
    "trunc": (k.trunc, None),
    "round": (k.round_half_even, None),
}

_LOG_BASE_GRAD = elementwise(k.log_base_grad, arity=3, heavy=True)
#: (ln b, its float64 remainder) -> the pair as float64 scalars, the kernel's operand.
_LN_PAIRS: dict[tuple[float, float], tuple[np.float64, np.float64]] = {}


def _ln_pair(ln_base: float, ln_base_lo: float) -> tuple[np.float64, np.float64]:
    pair = _LN_PAIRS.get((ln_base, ln_base_lo))
    if pair is None:
        pair = _LN_PAIRS[ln_base, ln_base_lo] = (np.float64(ln_base), np.float64(ln_base_lo))
    return pair


def _bind_log_base_backward(
    input_shapes: tuple[Shape, ...],
    input_dtypes: tuple[DType, ...],
    shape: Shape,
    dtype: DType,
    ln_base: float,
    ln_base_lo: float,
) -> Callable[[np.ndarray, np.ndarray], np.ndarray | None] | None:
    """``log_base_backward``'s loop bound to a signature, its ln b pair fixed (a grad
    formula binds it through :meth:`~pylucid.ops.base.Op.run_primitive`)."""
    param = _ln_pair(ln_base, ln_base_lo)
    return bound_loop(_LOG_BASE_GRAD, input_shapes, input_dtypes, shape, dtype, param)
_LEAKY_RELU = elementwise(k.leaky_relu, arity=2)
_DROPOUT = elementwise(k.dropout, arity=3)
_LEAKY_RELU_GRAD = elementwise(k.leaky_relu_grad, arity=3)
_ELU = elementwise(k.elu, arity=2, heavy=True)
_ELU_GRAD = elementwise(k.elu_grad, arity=3, heavy=True)
_SOFTPLUS = elementwise(k.softplus, arity=3, heavy=True)
_SOFTPLUS_GRAD = elementwise(k.softplus_grad, arity=3, heavy=True)
#: gelu's loops split across threads from the memory-bound threshold: float32, the dtype
#: of the steps that use them, costs 0.22-0.36 ns per element (float64: 1-2 ns).
_GELU = {"none": elementwise(k.gelu), "tanh": elementwise(k.gelu_tanh)}
_GELU_GRAD = {
    "none": elementwise(k.gelu_grad, arity=2),
    "tanh": elementwise(k.gelu_tanh_grad, arity=2),
}
_CLAMP = elementwise(k.clamp, arity=3)
_CLAMP_GRAD = elementwise(k.clamp_grad, arity=3)


def _forward(name: str, kernel: ElementwiseKernel) -> Callable[..., np.ndarray]:
    def primitive(self: Any, a: np.ndarray, shape: Shape, dtype: DType) -> np.ndarray:
        return self._unary(kernel, a, shape, dtype)

    primitive.__name__ = primitive.__qualname__ = name
    primitive.__doc__ = f"Elementwise ``{name}`` (loop of ``{kernel.name}``)."
    return elementwise_primitive(kernel)(primitive)  # (a plan binds its loop: NumbaCore._bind)


def _backward(name: str, kernel: ElementwiseKernel) -> Callable[..., np.ndarray]:
    def primitive(self: Any, v: np.ndarray, g: np.ndarray, shape: Shape, dtype: DType):
        return self._nary(kernel, (v, g), shape, dtype)

    primitive.__name__ = primitive.__qualname__ = f"{name}_backward"
    primitive.__doc__ = f"Fused gradient of ``{name}`` (loop of ``{kernel.name}``)."
    return elementwise_primitive(kernel)(primitive)  # (grad formulas bind its loop too)


#: The pointwise ops that cost under a nanosecond per element (memory-bound loops); the
#: others are transcendental and go parallel sooner (kernels.loops.PARALLEL_THRESHOLD_HEAVY).
_CHEAP = frozenset(
    {"abs", "relu", "sign", "square", "reciprocal", "sqrt", "rsqrt"}
    | {"floor", "ceil", "trunc", "round"}
)


def _with_unary_kernels(cls: type) -> type:
    """Add the ``name`` / ``name_backward`` primitives of :data:`UNARY_KERNELS` to ``cls``."""
    for name, (forward, backward) in UNARY_KERNELS.items():
        heavy = name not in _CHEAP
        setattr(cls, name, _forward(name, elementwise(forward, heavy=heavy)))
        if backward is not None:
            kernel = elementwise(backward, arity=2, heavy=heavy)
            setattr(cls, f"{name}_backward", _backward(name, kernel))
    return cls


def _bound(value: float | None, default: float, dtype: DType) -> np.generic:
    """A clamp bound as a ``dtype`` scalar: ``default`` (+-inf, or the integer type's limit)
    for None, and an integer bound beyond the type's range saturated to its limit."""
    if dtype.is_floating_point:
        return dtype.numpy.type(default if value is None else value)
    info = np.iinfo(dtype.numpy)
    limit = info.min if default < 0 else info.max
    return dtype.numpy.type(limit if value is None else min(max(value, info.min), info.max))


@_with_unary_kernels
class NumbaElementwise:
    """Primitives of the elementwise math ops and activations on the numba backend."""

    def _fused(
        self,
        kernel: ElementwiseKernel,
        x: np.ndarray,
        g: np.ndarray,
        param: Any,
        shape: Shape,
        dtype: DType,
    ) -> np.ndarray:
        # ``param`` goes to the kernel as given (a tuple of scalars), not cast as _nary does.
        out = direct(kernel, (x, g), shape, dtype, (param,))
        if out is not None:
            return out
        compute = compute_dtype(dtype).numpy
        return kernel(
            _operand(x, shape, compute),
            _operand(g, shape, compute),
            param,
            shape=shape,
            out_dtype=dtype.numpy,
        )

    @handles_halves
    @bindable(_bind_log_base_backward)
    def log_base_backward(self, x, g, ln_base: float, ln_base_lo: float, shape, dtype):
        """Fused ``g / (x ln b)`` with ln b = ``ln_base + ln_base_lo`` (float64 high and low
        parts), correctly rounded: float64 by an FMA-compensated float64 quotient, float32
        (and the half dtypes, computed in float32) by a float32 quotient and one Markstein
        correction (see :func:`pylucid.kernels.elementwise_math.log_base_grad`)."""
        return self._fused(_LOG_BASE_GRAD, x, g, _ln_pair(ln_base, ln_base_lo), shape, dtype)

    def dropout(self, x, u, p: float, shape, dtype):
        """Fused ``x / (1 - p)`` where the uniform draw ``u >= p``, else 0 (``p`` and
        ``1 - p`` rounded to the compute dtype, as the comparison and the quotient of a
        Python number take them): dropout's forward, and with the gradient for ``x`` its
        backward, one pass each."""
        compute = compute_dtype(dtype).numpy
        return self._fused(_DROPOUT, x, u, (compute.type(p), compute.type(1.0 - p)), shape, dtype)

    @handles_halves
    def leaky_relu(self, a, negative_slope: float, shape, dtype):
        """Elementwise ``x if x > 0 else negative_slope * x``."""
        return self._nary(_LEAKY_RELU, (a,), shape, dtype, negative_slope)

    @handles_halves
    def leaky_relu_backward(self, x, g, negative_slope: float, shape, dtype):
        """Fused ``g if x > 0 else negative_slope * g``."""
        return self._nary(_LEAKY_RELU_GRAD, (x, g), shape, dtype, negative_slope)

    @handles_halves
    def elu(self, a, alpha: float, shape, dtype):
        """Elementwise ``x if x > 0 else alpha * expm1(x)``."""
        return self._nary(_ELU, (a,), shape, dtype, alpha)

    @handles_halves
    def elu_backward(self, x, g, alpha: float, shape, dtype):
        """Fused ``g if x > 0 else g * alpha * exp(x)``."""
        return self._nary(_ELU_GRAD, (x, g), shape, dtype, alpha)

    @handles_halves
    def softplus(self, a, beta: float, threshold: float, shape, dtype):
        """Elementwise ``log1p(exp(beta x)) / beta`` (``x`` where ``beta x > threshold``)."""
        return self._nary(_SOFTPLUS, (a,), shape, dtype, beta, threshold)

    @handles_halves
    def softplus_backward(self, x, g, beta: float, threshold: float, shape, dtype):
        """Fused ``g * sigmoid(beta x)`` (``g`` where ``beta x > threshold``)."""
        compute = compute_dtype(dtype).numpy
        params = (compute.type(beta), compute.type(threshold))
        return self._fused(_SOFTPLUS_GRAD, x, g, params, shape, dtype)

    @handles_halves
    def gelu(self, a, approximate: str, shape, dtype):
        """Elementwise GELU, exact (``"none"``) or its tanh approximation (``"tanh"``)."""
        return self._nary(_GELU[approximate], (a,), shape, dtype)

    @handles_halves
    def gelu_backward(self, x, g, approximate: str, shape, dtype):
        """Fused gradient of :meth:`gelu`."""
        return self._nary(_GELU_GRAD[approximate], (x, g), shape, dtype)

    @handles_halves
    def clamp(self, a, low: float | None, high: float | None, shape, dtype):
        """Elementwise ``min(max(x, low), high)``; a None bound is no bound."""
        compute = compute_dtype(dtype)
        low_, high_ = _bound(low, -np.inf, compute), _bound(high, np.inf, compute)
        return self._nary(_CLAMP, (a,), shape, dtype, low_, high_)

    @handles_halves
    def clamp_backward(self, x, g, low: float | None, high: float | None, shape, dtype):
        """Fused ``g where low <= x <= high else 0``."""
        compute = compute_dtype(dtype)
        bounds = (_bound(low, -np.inf, compute), _bound(high, np.inf, compute))
        return self._fused(_CLAMP_GRAD, x, g, bounds, shape, dtype)
