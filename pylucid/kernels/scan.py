"""Scans along an axis: the cumulative sum and product, and the gradient of the product.

Every kernel takes its array as ``(outer, n, inner)`` (C-contiguous; the scanned axis in
the middle) and runs down the ``n`` positions with one float64 accumulator per ``inner``
position, so the loop over ``inner`` vectorises where the scanned axis is not the last one
(the last axis, ``inner = 1``, is a chain of dependent adds, as in any scan). float32 is
accumulated in float64 and each output rounded once, as PyTorch's CPU scans do. The loops
run in parallel over ``outer``.

The gradient of ``y = cumprod(x)`` is, for each position ``i`` of a scanned row,
``sum_{k >= i} g_k prod_{j <= k, j != i} x_j = P_i S_i``: the product of the elements
before ``i`` times ``S_i = sum_{k >= i} g_k prod_{i < j <= k} x_j``, which satisfies
``S_i = g_i + x_{i+1} S_{i+1}``. Two passes, and no division: exact where the row holds
zeros (PyTorch's ``sum g_k y_k / x_i`` needs a special case for them), and finite where an
element is infinite but the products that reach ``i`` are not.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.extending import register_jitable

from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold

__all__ = ["PARALLEL_THRESHOLD_SCAN", "cumprod", "cumprod_backward", "cumsum"]

#: Element count from which the scans run in parallel over ``outer`` (an add per element).
PARALLEL_THRESHOLD_SCAN = parallel_threshold("memory")

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


@register_jitable
def _scan_block(x, o, out, product):
    inner = x.shape[2]
    acc = np.full(inner, 1.0 if product else 0.0)
    for i in range(x.shape[1]):
        row, target = x[o, i], out[o, i]
        for k in range(inner):
            acc[k] = acc[k] * row[k] if product else acc[k] + row[k]
            target[k] = acc[k]


def _scan(x, out, product):
    for o in range(x.shape[0]):
        _scan_block(x, o, out, product)


def _scan_parallel(x, out, product):
    for o in numba.prange(x.shape[0]):
        _scan_block(x, o, out, product)


#: The recurrences keep their running values between 2^-512 and 2^512 and count the
#: powers of two apart, so that no intermediate overflows or underflows when the result
#: does not (a row of 1e300 after a 0 or a 1e-300: each S_i alone overflows float64).
_RANGE = 2.0**512


@register_jitable
def _normalised(value, exponent):
    """``value 2^exponent`` as ``(m, e)`` with ``|m|`` in ``[0.5, 1)`` where ``value`` left
    :data:`_RANGE`; unchanged otherwise (and for 0, inf and nan)."""
    magnitude = abs(value)
    if (magnitude > _RANGE or 0.0 < magnitude < 1.0 / _RANGE) and math.isfinite(value):
        mantissa, shift = math.frexp(value)
        return mantissa, exponent + shift
    return value, exponent


@register_jitable
def _cumprod_grad_row(x, g, out, exponents):
    """The gradient of one scanned row (1-d float64 views): ``P_i S_i`` with the exclusive
    prefix product ``P_i = prod_{j < i} x_j`` and ``S_i = g_i + x_{i+1} S_{i+1}`` (see the
    module), each kept as a value times a power of two (:func:`_normalised`)."""
    n = x.size
    suffix, exponent = 0.0, 0
    for i in range(n - 1, -1, -1):
        carried = x[i + 1] * suffix if i + 1 < n else 0.0
        suffix, exponent = _normalised(math.ldexp(g[i], -exponent) + carried, exponent)
        out[i], exponents[i] = suffix, exponent
    prefix, prefix_exponent = 1.0, 0
    for i in range(n):
        out[i] = math.ldexp(prefix * out[i], prefix_exponent + exponents[i])
        prefix, prefix_exponent = _normalised(prefix * x[i], prefix_exponent)


@register_jitable
def _cumprod_grad_block(x, g, o, out):
    n = x.shape[1]
    row_x, row_g, row_out = np.empty(n), np.empty(n), np.empty(n)
    exponents = np.empty(n, np.int64)
    # (a float64 copy of each strided row: the recurrences run in float64)
    for k in range(x.shape[2]):
        for i in range(n):
            row_x[i], row_g[i] = x[o, i, k], g[o, i, k]
        _cumprod_grad_row(row_x, row_g, row_out, exponents)
        for i in range(x.shape[1]):
            out[o, i, k] = row_out[i]


def _cumprod_grad(x, g, out):
    for o in range(x.shape[0]):
        _cumprod_grad_block(x, g, o, out)


def _cumprod_grad_parallel(x, g, out):
    for o in numba.prange(x.shape[0]):
        _cumprod_grad_block(x, g, o, out)


_SCAN = (njit(**_JIT)(_scan), njit(parallel=True, **_JIT)(_scan_parallel))
_CUMPROD_GRAD = (njit(**_JIT)(_cumprod_grad), njit(parallel=True, **_JIT)(_cumprod_grad_parallel))


def _parallel(x: np.ndarray) -> bool:
    return x.size >= PARALLEL_THRESHOLD_SCAN and x.shape[0] > 1


def _around(a: np.ndarray, axis: int) -> np.ndarray:
    """``a`` as a C-contiguous ``(outer, n, inner)`` array around ``axis``."""
    shape = a.shape if a.ndim else (1,)
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1 :])
    return np.ascontiguousarray(a).reshape(outer, shape[axis], inner)


def cumsum(x: np.ndarray, axis: int) -> np.ndarray:
    """The cumulative sum of the float array ``x`` along ``axis``, in ``x``'s dtype."""
    x3 = _around(x, axis)
    out = np.empty(x3.shape, x.dtype)
    _SCAN[_parallel(x3)](x3, out, False)
    return out.reshape(x.shape)


def cumprod(x: np.ndarray, axis: int) -> np.ndarray:
    """The cumulative product of the float array ``x`` along ``axis``, in ``x``'s dtype."""
    x3 = _around(x, axis)
    out = np.empty(x3.shape, x.dtype)
    _SCAN[_parallel(x3)](x3, out, True)
    return out.reshape(x.shape)


def cumprod_backward(x: np.ndarray, g: np.ndarray, axis: int) -> np.ndarray:
    """The gradient of :func:`cumprod` along ``axis`` from ``g`` (float arrays of one shape
    and dtype), in that dtype."""
    x3, g3 = _around(x, axis), _around(g, axis)
    out = np.empty(x3.shape, x.dtype)
    _CUMPROD_GRAD[_parallel(x3)](x3, g3, out)
    return out.reshape(x.shape)
