"""Row kernels of layer normalisation: the forward and the gradients, each in few passes.

A row is the ``D`` values ``x`` normalised together. With ``mean`` and the biased
``var`` of the row (two passes, in float64), ``rstd = 1 / sqrt(var + eps)`` and
``xhat = (x - mean) rstd``:

- forward ``y = xhat w + b``;
- input gradient, with ``h = g w``: ``dx = rstd (h - mean(h) - xhat mean(h xhat))``;
- weight and bias gradients, summed over the rows: ``dw = sum_r g xhat``, ``db = sum_r g``.

float32 rows compute in float64 and are rounded once. The row loops run in parallel over
the rows; the column sums of ``dw`` and ``db`` in parallel over blocks of columns, each
block reading every row (no two threads write one sum).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.extending import register_jitable

from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold
from pylucid.kernels.reduction import _dot, _sum, _sum_sq_dev

__all__ = ["PARALLEL_THRESHOLD_NORM", "layer_norm_backward_rows", "layer_norm_rows"]

#: Element count from which the loops run in parallel (row-kernel cost).
PARALLEL_THRESHOLD_NORM = parallel_threshold("row")

#: Columns per block of the parallel column sums.
_BLOCK = 64

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


@register_jitable
def _unit(x):
    """The power of two that brings the largest finite magnitude of ``x`` into ``[1, 4)``,
    or 1 where that is below 2."""
    largest = 0.0
    for j in range(x.size):
        if math.isfinite(x[j]):
            largest = max(largest, abs(x[j]))
    return 1.0 if largest < 2.0 else 2.0 ** -(math.floor(math.log2(largest)) - 1)


@register_jitable
def _moments(x, eps):
    """``(mean, r, unit, rstd)`` of the row ``x``, such that ``xhat = (x unit - mean) r``
    and ``rstd = 1 / sqrt(var + eps)`` (var biased, two passes in float64).

    ``unit`` is 1 unless the variance overflows (deviations beyond 1.3e154, or a sum near
    the float64 maximum): then the row is taken times a power of two ``unit`` that brings
    its largest finite magnitude into ``[1, 4)`` - exact - with ``eps unit^2`` for ``eps``.
    Where that underflows for a constant row, ``xhat`` is 0 and ``rstd`` is
    ``1 / sqrt(eps)``."""
    mean = _sum(x) / x.size
    var = _sum_sq_dev(x, mean) / x.size
    if math.isfinite(var):
        rstd = 1.0 / math.sqrt(var + eps)
        return mean, rstd, 1.0, rstd
    unit = _unit(x)
    total = 0.0
    for j in range(x.size):
        total += x[j] * unit
    mean = total / x.size
    square = 0.0
    for j in range(x.size):
        d = x[j] * unit - mean
        square += d * d
    denominator = square / x.size + eps * unit * unit
    if denominator == 0.0:
        return mean, 0.0, unit, 1.0 / math.sqrt(eps)
    r = 1.0 / math.sqrt(denominator)
    return mean, r, unit, r * unit


@register_jitable
def _normalise_row(x, w, b, eps, out):
    mean, r, unit, _ = _moments(x, eps)
    for j in range(x.size):
        out[j] = (x[j] * unit - mean) * r * w[j] + b[j]


@register_jitable
def _input_grad_row(x, w, g, eps, out, stats):
    """``rstd (h - mean(h) - xhat mean(h xhat))``, ``h = g w``; the row's ``(mean, r,
    unit)`` into ``stats``. Where ``h`` overflows, it is formed from ``g`` and ``w`` times
    powers of two (:func:`_unit`), divided out of the result."""
    mean, r, unit, rstd = _moments(x, eps)
    stats[0], stats[1], stats[2] = mean, r, unit
    xhat, h = np.empty(x.size), np.empty(x.size)
    for j in range(x.size):
        xhat[j] = (x[j] * unit - mean) * r
        h[j] = np.float64(g[j]) * w[j]  # (float32 * float32 would round, and overflow)
    g_unit, w_unit = 1.0, 1.0
    if not math.isfinite(_sum(h)):
        g_unit, w_unit = _unit(g), _unit(w)
        for j in range(x.size):
            h[j] = (g[j] * g_unit) * (w[j] * w_unit)
    h_mean, hx_mean = _sum(h) / x.size, _dot(h, xhat) / x.size
    for j in range(x.size):
        out[j] = rstd * (h[j] - h_mean - xhat[j] * hx_mean) / g_unit / w_unit


@register_jitable
def _column_sums(x, g, stats, first, last, dw, db):
    for j in range(first, last):
        dw[j], db[j] = 0.0, 0.0
    for row in range(x.shape[0]):
        mean, r, unit = stats[row, 0], stats[row, 1], stats[row, 2]
        for j in range(first, last):
            dw[j] += g[row, j] * ((x[row, j] * unit - mean) * r)
            db[j] += g[row, j]


def _forward(x, w, b, eps, out):
    for r in range(x.shape[0]):
        _normalise_row(x[r], w, b, eps, out[r])


def _forward_parallel(x, w, b, eps, out):
    for r in numba.prange(x.shape[0]):
        _normalise_row(x[r], w, b, eps, out[r])


def _backward(x, w, g, eps, dx, stats, dw, db):
    for r in range(x.shape[0]):
        _input_grad_row(x[r], w, g[r], eps, dx[r], stats[r])
    _column_sums(x, g, stats, 0, x.shape[1], dw, db)


def _backward_parallel(x, w, g, eps, dx, stats, dw, db):
    for r in numba.prange(x.shape[0]):
        _input_grad_row(x[r], w, g[r], eps, dx[r], stats[r])
    blocks = (x.shape[1] + _BLOCK - 1) // _BLOCK
    for block in numba.prange(blocks):
        first = block * _BLOCK
        _column_sums(x, g, stats, first, min(first + _BLOCK, x.shape[1]), dw, db)


_FORWARD = (njit(**_JIT)(_forward), njit(parallel=True, **_JIT)(_forward_parallel))
_BACKWARD = (njit(**_JIT)(_backward), njit(parallel=True, **_JIT)(_backward_parallel))


def layer_norm_rows(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """``(x - mean) rstd w + b`` for each row of the C-contiguous ``(R, D)`` ``x``, with
    ``(D,)`` ``w`` and ``b``; in ``x``'s dtype."""
    out = np.empty(x.shape, x.dtype)
    _FORWARD[x.size >= PARALLEL_THRESHOLD_NORM and x.shape[0] > 1](x, w, b, np.float64(eps), out)
    return out


def layer_norm_backward_rows(
    x: np.ndarray, w: np.ndarray, g: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gradients ``(dx, dw, db)`` of :func:`layer_norm_rows` from ``g`` (``x``'s
    shape); ``dw`` and ``db`` in float64, ``dx`` in ``x``'s dtype."""
    dx = np.empty(x.shape, x.dtype)
    stats = np.empty((x.shape[0], 3))
    dw, db = np.empty(x.shape[1]), np.empty(x.shape[1])
    _BACKWARD[x.size >= PARALLEL_THRESHOLD_NORM and x.shape[0] > 1](
        x, w, g, np.float64(eps), dx, stats, dw, db
    )
    return dx, dw, db
