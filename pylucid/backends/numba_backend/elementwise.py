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
parameters, which no plan binds - go through :func:`direct` first: a runner per call
signature that calls the compiled loop itself where the operands need no conversion,
skipping ``_nary``'s checks and Numba's type dispatch (the result is the same loop's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from pylucid import memory
from pylucid.backends.base import Shape
from pylucid.backends.half import handles_halves
from pylucid.backends.numba_backend.core import _operand, compute_dtype, elementwise_primitive
from pylucid.dtypes import DType
from pylucid.kernels import elementwise_math as k
from pylucid.kernels.loops import ElementwiseKernel, elementwise

#: (kernel, shape, dtype) -> the runner of :func:`direct` for that call signature; emptied
#: when it reaches :data:`DIRECT_CACHE_SIZE` entries (a program's signatures are few).
_DIRECT: dict[tuple, Callable[[tuple, tuple], np.ndarray | None]] = {}
DIRECT_CACHE_SIZE = 4096


def direct(
    kernel: ElementwiseKernel,
    operands: tuple[np.ndarray, ...],
    shape: Shape,
    dtype: DType,
    extra: tuple = (),
) -> np.ndarray | None:
    """What ``kernel`` over ``operands`` gives through the general path (``_nary``, or
    ``kernel(*operands, *extra, ...)`` after ``_operand``), straight from its compiled serial
    loop; None where the call needs that path.

    For the primitives that are one such call, backward ones mostly: unlike a forward, they
    are called by grad formulas, not through a :class:`~pylucid.ops.base.DispatchPlan`, so
    no runner is bound to them ahead of time. This one is made per (kernel, shape, dtype)
    on first use and cached.

    Parameters
    ----------
    kernel : ElementwiseKernel
        The kernel the general path runs.
    operands : tuple of numpy.ndarray
        The array operands. The runner takes those of ``dtype`` that are C-contiguous,
        aligned and writeable (``flags.carray``) and of ``shape``, or of one element (given
        to the loop as a scalar, as ``_operand`` does); anything else - a half array, a
        broadcast, a view, a read-only array, a Python number - returns None.
    shape : tuple of int
        The output's shape.
    dtype : DType
        The compute and output dtype; None is returned for the half dtypes.
    extra : tuple
        Kernel arguments after the operands, exactly as the general path passes them (its
        ``compute.type(s)`` scalars, or a ``_fused`` parameter tuple). Their types must be
        fixed by the kernel and dtype: the loop is called through the entry point of the
        overload compiled for the first call's types.

    Returns
    -------
    numpy.ndarray or None
        The output (bit for bit the general path's), or None.
    """
    key = (kernel, shape, dtype)
    runner = _DIRECT.get(key)
    if runner is None:
        if len(_DIRECT) >= DIRECT_CACHE_SIZE:
            _DIRECT.clear()
        runner = _DIRECT[key] = _direct_runner(kernel, shape, dtype)
    return runner(operands, extra)


def _general_path(operands: tuple, extra: tuple) -> None:
    """The runner of the signatures :func:`direct` leaves to the general path."""
    return None


def _direct_runner(
    kernel: ElementwiseKernel, shape: Shape, dtype: DType
) -> Callable[[tuple, tuple], np.ndarray | None]:
    """The runner of :func:`direct` for one (kernel, shape, dtype): :func:`_general_path`
    for the half dtypes (the general path reads them through ``uint16`` views), no elements,
    and outputs large enough for the parallel loop (there the call's overhead is noise)."""
    numpy_dtype = dtype.numpy
    count = math.prod(shape)
    if dtype.is_half or numpy_dtype.itemsize == 2 or not 0 < count < kernel.parallel_threshold:
        return _general_path
    loop = kernel._serial
    small = count < memory._SMALL_COUNT
    flat = len(shape) == 1
    #: Which operands go as scalars (a bit each) -> the entry point of the compiled overload:
    #: Numba's dispatcher resolves the argument types at every call, fixed here by the
    #: signature and that pattern.
    entries: dict[int, Callable[..., None]] = {}

    def run(operands: tuple, extra: tuple) -> np.ndarray | None:
        args = []  # (a loop, not a comprehension: this runs for every op, a frame is dear)
        scalars = 0
        for a in operands:
            if type(a) is not np.ndarray or a.dtype is not numpy_dtype:
                return None
            scalars += scalars
            if a.size == 1:  # (as _operand gives it: a scalar, whatever its shape)
                args.append(a[()] if a.ndim == 0 else a[0] if a.ndim == 1 else a.reshape(-1)[0])
                scalars += 1
            elif a.shape == shape and a.flags.carray:
                args.append(a if flat else a.reshape(-1))
            else:
                return None
        args += extra
        out = np.empty(shape, numpy_dtype) if small else memory.empty(shape, numpy_dtype)
        args.append(out if flat else out.reshape(-1))
        entry = entries.get(scalars)
        if entry is not None:
            entry(*args)
            return out
        loop(*args)  # (compiles, or loads from the cache, this overload on its first call)
        overload = loop.overloads.get(tuple([numba.typeof(a) for a in args]))
        if overload is not None:
            entries[scalars] = overload.entry_point
        return out

    return run


def nary(
    backend: Any,
    kernel: ElementwiseKernel,
    operands: tuple[np.ndarray, ...],
    shape: Shape,
    dtype: DType,
    *scalars: float,
) -> np.ndarray:
    """``backend._nary(kernel, operands, shape, dtype, *scalars)``, through :func:`direct`
    where it takes the call (``scalars`` cast to the dtype, as ``_nary`` casts them)."""
    extra = tuple([dtype.numpy.type(s) for s in scalars]) if scalars else ()
    out = direct(kernel, operands, shape, dtype, extra)
    return out if out is not None else backend._nary(kernel, operands, shape, dtype, *scalars)


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
_LEAKY_RELU = elementwise(k.leaky_relu, arity=2)
_LEAKY_RELU_GRAD = elementwise(k.leaky_relu_grad, arity=3)
_ELU = elementwise(k.elu, arity=2, heavy=True)
_ELU_GRAD = elementwise(k.elu_grad, arity=3, heavy=True)
_SOFTPLUS = elementwise(k.softplus, arity=3, heavy=True)
_SOFTPLUS_GRAD = elementwise(k.softplus_grad, arity=3, heavy=True)
_GELU = {"none": elementwise(k.gelu, heavy=True), "tanh": elementwise(k.gelu_tanh, heavy=True)}
_GELU_GRAD = {
    "none": elementwise(k.gelu_grad, arity=2, heavy=True),
    "tanh": elementwise(k.gelu_tanh_grad, arity=2, heavy=True),
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
        operands = (v, g)  # (direct, inline: the hottest caller of nary's two steps)
        out = direct(kernel, operands, shape, dtype)
        return out if out is not None else self._nary(kernel, operands, shape, dtype)

    primitive.__name__ = primitive.__qualname__ = f"{name}_backward"
    primitive.__doc__ = f"Fused gradient of ``{name}`` (loop of ``{kernel.name}``)."
    return handles_halves(primitive)


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
    def log_base_backward(self, x, g, ln_base: float, ln_base_lo: float, shape, dtype):
        """Fused ``g / (x ln b)`` with ln b = ``ln_base + ln_base_lo`` (float64 high and low
        parts), correctly rounded: float64 by an FMA-compensated float64 quotient, float32
        (and the half dtypes, computed in float32) by a float32 quotient and one Markstein
        correction (see :func:`pylucid.kernels.elementwise_math.log_base_grad`)."""
        ln_b = _LN_PAIRS.get((ln_base, ln_base_lo))
        if ln_b is None:
            ln_b = _LN_PAIRS[ln_base, ln_base_lo] = (np.float64(ln_base), np.float64(ln_base_lo))
        return self._fused(_LOG_BASE_GRAD, x, g, ln_b, shape, dtype)

    @handles_halves
    def leaky_relu(self, a, negative_slope: float, shape, dtype):
        """Elementwise ``x if x > 0 else negative_slope * x``."""
        return nary(self, _LEAKY_RELU, (a,), shape, dtype, negative_slope)

    @handles_halves
    def leaky_relu_backward(self, x, g, negative_slope: float, shape, dtype):
        """Fused ``g if x > 0 else negative_slope * g``."""
        return nary(self, _LEAKY_RELU_GRAD, (x, g), shape, dtype, negative_slope)

    @handles_halves
    def elu(self, a, alpha: float, shape, dtype):
        """Elementwise ``x if x > 0 else alpha * expm1(x)``."""
        return nary(self, _ELU, (a,), shape, dtype, alpha)

    @handles_halves
    def elu_backward(self, x, g, alpha: float, shape, dtype):
        """Fused ``g if x > 0 else g * alpha * exp(x)``."""
        return nary(self, _ELU_GRAD, (x, g), shape, dtype, alpha)

    @handles_halves
    def softplus(self, a, beta: float, threshold: float, shape, dtype):
        """Elementwise ``log1p(exp(beta x)) / beta`` (``x`` where ``beta x > threshold``)."""
        return nary(self, _SOFTPLUS, (a,), shape, dtype, beta, threshold)

    @handles_halves
    def softplus_backward(self, x, g, beta: float, threshold: float, shape, dtype):
        """Fused ``g * sigmoid(beta x)`` (``g`` where ``beta x > threshold``)."""
        compute = compute_dtype(dtype).numpy
        params = (compute.type(beta), compute.type(threshold))
        return self._fused(_SOFTPLUS_GRAD, x, g, params, shape, dtype)

    @handles_halves
    def gelu(self, a, approximate: str, shape, dtype):
        """Elementwise GELU, exact (``"none"``) or its tanh approximation (``"tanh"``)."""
        return nary(self, _GELU[approximate], (a,), shape, dtype)

    @handles_halves
    def gelu_backward(self, x, g, approximate: str, shape, dtype):
        """Fused gradient of :meth:`gelu`."""
        return nary(self, _GELU_GRAD[approximate], (x, g), shape, dtype)

    @handles_halves
    def clamp(self, a, low: float | None, high: float | None, shape, dtype):
        """Elementwise ``min(max(x, low), high)``; a None bound is no bound."""
        compute = compute_dtype(dtype)
        low_, high_ = _bound(low, -np.inf, compute), _bound(high, np.inf, compute)
        return nary(self, _CLAMP, (a,), shape, dtype, low_, high_)

    @handles_halves
    def clamp_backward(self, x, g, low: float | None, high: float | None, shape, dtype):
        """Fused ``g where low <= x <= high else 0``."""
        compute = compute_dtype(dtype)
        bounds = (_bound(low, -np.inf, compute), _bound(high, np.inf, compute))
        return self._fused(_CLAMP_GRAD, x, g, bounds, shape, dtype)
