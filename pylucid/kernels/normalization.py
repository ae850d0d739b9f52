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

__all__ = ["PARALLEL_THRESHOLD_NORM", "layer_norm_backward_rows", "layer_norm_rows"]

#: Element count from which the loops run in parallel (row-kernel cost).
PARALLEL_THRESHOLD_NORM = parallel_threshold("row")

#: Columns per block of the parallel column sums.
_BLOCK = 64

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}
#: The row sums may be reassociated - and so vectorised - by LLVM: they accumulate in
#: float64, whose rounding in any order is far below float32's, and which keeps inf and
#: nan ("reassoc" only). Measured on (256, 512) float32: the forward 65 us serial instead of
#: 168 us with eight scalar partial sums (:func:`pylucid.kernels.reduction._sum`).
_SUMS = {**_JIT, "fastmath": {"reassoc"}}


@njit(**_SUMS)
def _sum(x):
    total = 0.0
    for j in range(x.size):
        total += x[j]
    return total


@njit(**_SUMS)
def _sum_sq_dev(x, mean):
    total = 0.0
    for j in range(x.size):
        d = x[j] - mean
        total += d * d
    return total


@njit(**_SUMS)
def _dot(a, b):
    total = 0.0
    for j in range(a.size):
        total += a[j] * b[j]
    return total


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


@njit(**_SUMS)
def _gradient_sums(x, w, g, unit, mean, r, g_unit, w_unit):
    """``(sum h, sum h xhat)`` with ``h = (g g_unit)(w w_unit)``, ``xhat = (x unit - mean) r``."""
    h_total, hx_total = 0.0, 0.0
    for j in range(x.size):
        h = (np.float64(g[j]) * g_unit) * (w[j] * w_unit)  # (not float32 * float32)
        h_total += h
        hx_total += h * ((x[j] * unit - mean) * r)
    return h_total, hx_total


@njit(**_SUMS)
def _deviation_sums(x, w, g, mean):
    """``(sum (x - mean)^2, sum g w, sum g w (x - mean))`` in one pass."""
    square, h_total, hd_total = 0.0, 0.0, 0.0
    for j in range(x.size):
        d = x[j] - mean
        h = np.float64(g[j]) * w[j]  # (not float32 * float32)
        square += d * d
        h_total += h
        hd_total += h * d
    return square, h_total, hd_total


@register_jitable
def _input_grad_row(x, w, g, eps, out, stats):
    """``rstd (h - mean(h) - xhat mean(h xhat))``, ``h = g w``; the row's ``(mean, r,
    unit)`` into ``stats``. Three passes: the mean; the variance and both sums of ``h``
    together; the gradient. Where a sum overflows, the general path: the moments of
    :func:`_moments`, and ``h`` formed from ``g`` and ``w`` times powers of two
    (:func:`_unit`), taken out of the result again."""
    n = x.size
    mean = _sum(x) / n
    square, h_total, hd_total = _deviation_sums(x, w, g, mean)
    if math.isfinite(square) and math.isfinite(h_total) and math.isfinite(hd_total):
        r = 1.0 / math.sqrt(square / n + eps)
        stats[0], stats[1], stats[2] = mean, r, 1.0
        h_mean, hx_mean = h_total / n, hd_total * r / n
        for j in range(n):
            xhat = (x[j] - mean) * r
            out[j] = r * (np.float64(g[j]) * w[j] - h_mean - xhat * hx_mean)
        return
    mean, r, unit, rstd = _moments(x, eps)
    stats[0], stats[1], stats[2] = mean, r, unit
    g_unit, w_unit = 1.0, 1.0
    h_total, hx_total = _gradient_sums(x, w, g, unit, mean, r, g_unit, w_unit)
    if not (math.isfinite(h_total) and math.isfinite(hx_total)):
        g_unit, w_unit = _unit(g), _unit(w)
        h_total, hx_total = _gradient_sums(x, w, g, unit, mean, r, g_unit, w_unit)
    h_mean, hx_mean = h_total / n, hx_total / n
    g_back, w_back = 1.0 / g_unit, 1.0 / w_unit  # (powers of two: exact)
    for j in range(n):
        h = (np.float64(g[j]) * g_unit) * (w[j] * w_unit)
        xhat = (x[j] * unit - mean) * r
        out[j] = rstd * (h - h_mean - xhat * hx_mean) * g_back * w_back


@register_jitable
def _column_sums(x, g, stats, first, last, dw, db):
    """``dw`` and ``db`` over the columns ``[first, last)``. The loops index slices from 0:
    over ``range(first, last)`` LLVM keeps the negative-index wraparound and does not
    vectorise (4x slower, 195 us against 52 us for (256, 512) float32)."""
    dw_block, db_block = dw[first:last], db[first:last]
    dw_block[:] = 0.0
    db_block[:] = 0.0
    for row in range(x.shape[0]):
        mean, r, unit = stats[row, 0], stats[row, 1], stats[row, 2]
        x_block, g_block = x[row, first:last], g[row, first:last]
        for j in range(x_block.size):
            dw_block[j] += g_block[j] * ((x_block[j] * unit - mean) * r)
            db_block[j] += g_block[j]


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
