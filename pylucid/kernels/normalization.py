"""Row kernels of layer normalisation: the forward and the gradients, each in few passes.

A row is the ``D`` values ``x`` normalised together. With ``mean`` and the biased
``var`` of the row (two passes, in float64), ``rstd = 1 / sqrt(var + eps)`` and
``xhat = (x - mean) rstd``:

- forward ``y = xhat w + b``;
- input gradient, with ``h = g w``: ``dx = rstd (h - mean(h) - xhat mean(h xhat))``;
- weight and bias gradients, summed over the rows: ``dw = sum_r g xhat``, ``db = sum_r g``.

The sums (mean, variance, those of ``h``) accumulate in float64; the values of each row
pass (``xhat``, the output, the input gradient) are formed in the row's arithmetic from the
float64 statistics rounded to it, the mean split in two so that ``x - mean`` is exact near
the mean (float32: 16 lanes; within 2 ULP of the float64 formula, where the old kernel
computed every value in float64 and rounded once, at 2-2.5x the time). The backward reads
each row once from memory: its pass of the gradient also adds the row into the column sums
of ``dw`` and ``db`` (in float64), so no second sweep of ``x`` and ``g`` follows. The row
loops run in parallel over blocks of rows, each block with its own column sums, added up
at the end.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.core import types
from numba.extending import overload, register_jitable

from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold
from pylucid.kernels.simd_math import _fma

__all__ = ["PARALLEL_THRESHOLD_NORM", "layer_norm_backward_rows", "layer_norm_rows"]

#: Element count from which the loops run in parallel (row-kernel cost).
PARALLEL_THRESHOLD_NORM = parallel_threshold("row")

#: Blocks of rows per thread of the parallel backward, each with its own column sums.
_BLOCKS_PER_THREAD = 4

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


def _split(v, like):
    """``(hi, lo)`` in ``like``'s dtype with ``hi + lo`` = the float64 ``v`` to 2**-48
    (float32) or ``(v, 0)`` (float64)."""


@overload(_split, inline="always")
def _split_typed(v, like):
    if like.dtype == types.float32:

        def split(v, like):
            hi = np.float32(v)
            return hi, np.float32(v - hi)

        return split
    return lambda v, like: (v, 0.0)


#: The bound under which a row's values are formed in its arithmetic (below float32's
#: largest finite, 3.4e38, with a margin): beyond, in float64 as before.
_ROW_ARITHMETIC_LIMIT = 1e37


@register_jitable(inline="always")
def _normalise_row(x, w, b, eps, out, affine_bound):
    """``(x - mean) r w + b``. Where nothing can overflow (``unit`` 1, every ``|x - mean|``
    and ``affine_bound`` = ``sqrt(D) max|w| + max|b|`` below :data:`_ROW_ARITHMETIC_LIMIT`),
    in the row's arithmetic: ``x - mean`` as ``(x - hi) - lo`` with the float64 mean split
    in two (:func:`_split`: exact for the values near the mean by Sterbenz, so a mean far
    from 0 costs nothing) and one FMA; float32: within 2 ULP of the float64 formula (16
    lanes). Otherwise in float64, rounded once."""
    mean, r, unit, _ = _moments(x, eps)
    spread = math.sqrt(x.size) / r  # >= every |x - mean|
    if unit == 1.0 and spread < _ROW_ARITHMETIC_LIMIT and affine_bound < _ROW_ARITHMETIC_LIMIT:
        hi, lo = _split(mean, x)
        rr = _split(r, x)[0]
        for j in range(x.size):
            out[j] = _fma(((x[j] - hi) - lo) * rr, w[j], b[j])
        return
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
    """``(sum (x - mean)^2, sum g w, sum g w (x - mean), sum g^2)`` in one pass."""
    square, h_total, hd_total, g_square = 0.0, 0.0, 0.0, 0.0
    for j in range(x.size):
        d = x[j] - mean
        gj = np.float64(g[j])
        h = gj * w[j]  # (not float32 * float32)
        square += d * d
        h_total += h
        hd_total += h * d
        g_square += gj * gj
    return square, h_total, hd_total, g_square


@register_jitable
def _largest(a):
    """The largest magnitude of a vector (0 for none; nan is skipped)."""
    largest = 0.0
    for j in range(a.size):
        largest = max(largest, abs(np.float64(a[j])))
    return largest


@register_jitable(inline="always")
def _input_grad_row(x, w, g, eps, out, dw, db, w_max):
    """``rstd (h - mean(h) - xhat mean(h xhat))``, ``h = g w``, into ``out``, and the row's
    ``g xhat`` and ``g`` added into the float64 column sums ``dw`` and ``db`` in the same
    pass (one read of the row from memory for everything). Three passes over the row: the
    mean; the variance and both sums of ``h`` together; the gradient and the column sums,
    in the row's arithmetic as :func:`_normalise_row` (float32: ``xhat`` and ``h`` within
    2 ULP, the gradient one FMA more; the sums in float64) where nothing can overflow it
    (``w_max`` is ``max|w|``). Otherwise the general path in float64: the moments of
    :func:`_moments`, and ``h`` formed from ``g`` and ``w`` times powers of two
    (:func:`_unit`) where a sum overflows, taken out of the result again."""
    n = x.size
    mean = _sum(x) / n
    square, h_total, hd_total, g_square = _deviation_sums(x, w, g, mean)
    r = 1.0 / math.sqrt(square / n + eps)
    # every |x - mean| <= sqrt(square), |g w| <= sqrt(g_square) w_max, and |dx| at most
    # r (2 + sqrt(n)) times the latter: below the limit, nothing overflows the row's dtype
    bound = max(math.sqrt(square), math.sqrt(g_square) * w_max * r * (2.0 + math.sqrt(n)))
    if bound < _ROW_ARITHMETIC_LIMIT and math.isfinite(h_total) and math.isfinite(hd_total):
        hi, lo = _split(mean, x)
        rr = _split(r, x)[0]
        h_mean = _split(h_total / n, x)[0]
        hx_mean = _split(hd_total * r / n, x)[0]
        for j in range(n):
            xhat = ((x[j] - hi) - lo) * rr
            gj = g[j]
            out[j] = rr * _fma(-xhat, hx_mean, gj * w[j] - h_mean)
            dw[j] += np.float64(gj * xhat)
            db[j] += np.float64(gj)
        return
    mean, r, unit, rstd = _moments(x, eps)
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
        dw[j] += g[j] * xhat
        db[j] += g[j]


def _forward(x, w, b, eps, out):
    bound = math.sqrt(x.shape[1]) * _largest(w) + _largest(b)
    for r in range(x.shape[0]):
        _normalise_row(x[r], w, b, eps, out[r], bound)


def _forward_parallel(x, w, b, eps, out):
    bound = math.sqrt(x.shape[1]) * _largest(w) + _largest(b)
    for r in numba.prange(x.shape[0]):
        _normalise_row(x[r], w, b, eps, out[r], bound)


def _backward(x, w, g, eps, dx, dw, db):
    dw[:] = 0.0
    db[:] = 0.0
    w_max = _largest(w)
    for r in range(x.shape[0]):
        _input_grad_row(x[r], w, g[r], eps, dx[r], dw, db, w_max)


def _backward_parallel(x, w, g, eps, dx, dw, db, sums):
    rows, blocks = x.shape[0], sums.shape[0]
    sums[:] = 0.0
    w_max = _largest(w)
    for block in numba.prange(blocks):
        for r in range(block * rows // blocks, (block + 1) * rows // blocks):
            _input_grad_row(x[r], w, g[r], eps, dx[r], sums[block, 0], sums[block, 1], w_max)
    dw[:] = 0.0
    db[:] = 0.0
    for block in range(blocks):
        for j in range(x.shape[1]):
            dw[j] += sums[block, 0, j]
            db[j] += sums[block, 1, j]


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
    dw, db = np.empty(x.shape[1]), np.empty(x.shape[1])
    if x.size >= PARALLEL_THRESHOLD_NORM and x.shape[0] > 1:
        blocks = min(x.shape[0], _BLOCKS_PER_THREAD * numba.get_num_threads())
        sums = np.empty((blocks, 2, x.shape[1]))  # (each block's own column sums)
        _BACKWARD[1](x, w, g, np.float64(eps), dx, dw, db, sums)
    else:
        _BACKWARD[0](x, w, g, np.float64(eps), dx, dw, db)
    return dx, dw, db
