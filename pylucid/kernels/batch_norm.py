"""Per-channel kernels of batch normalisation: the statistics, the forward and the gradients.

The input is viewed as ``(N, C, S)``, C-contiguous (``S`` the product of the spatial axes,
1 for an ``(N, C)`` input): channel ``c`` is the ``N`` planes ``x[n, c, :]`` of ``S``
contiguous values, ``count = N S`` values in all. With the channel's ``mean``, its biased
``var``, ``rstd = 1 / sqrt(var + eps)`` and ``xhat = (x - mean) rstd``:

- statistics (:func:`batch_norm_stats`): ``m``, the sum over the channel in float64 divided
  by ``count``; then ``sum d`` and ``sum d^2`` of ``d = x - m`` in float64, with
  ``mean = m + sum d / count`` and ``var = sum d^2 / count - (sum d / count)^2`` (the
  corrected two-pass algorithm: ``m``'s rounding taken out; exact to float64 rounding for
  data of any mean, 1e6 with a deviation of 1e-3 included);
- forward (:func:`batch_norm_forward`): ``y = ((x - hi) - lo) a + b'`` in the input's
  arithmetic and one FMA, with the float64 mean split into ``hi + lo`` in the input's dtype
  (``x - hi`` is exact for the values near the mean, by Sterbenz, so a large mean costs no
  accuracy), ``a = rstd w`` and ``b' = b`` rounded once: float32 within 2 ULP of the
  float64 formula, relative to ``|xhat w| + |b|``;
- backward (:func:`batch_norm_backward`), two passes over ``x`` and ``g``: (1) ``sum g``
  and ``sum g d``, ``d = x - mean``, in float64; (2) in training
  ``dx = w rstd (g - mean(g) - xhat mean(g xhat)) = A g + B d + C0`` with
  ``A = w rstd``, ``B = -w rstd^3 sum(g d) / count``, ``C0 = -w rstd sum(g) / count``
  rounded to the input's dtype (``d`` as ``(x - hi) - lo``, two FMAs); in evaluation the
  statistics are constants and ``dx = w rstd g``. ``dw = rstd sum(g d)``, ``db = sum g``
  (float64). Error of ``dx``: a few units of the input's roundoff ``u`` relative to the
  terms ``|A g| + |B d| + |C0|`` (``dx`` itself may cancel to 0), with ``A, B, C0``
  rounded once from float64.

Planes of ``S >= 16`` values are reduced in place (channel by channel, the inner loop over
a plane vectorised: float64 sums reassociated by LLVM); shorter planes - ``(N, C)`` and
``(N, C, L)`` inputs of BatchNorm1d - as rows of ``C S`` columns, each column with its own
float64 sums, folded per channel at the end, so that the inner loop still runs over
contiguous memory. Above :data:`PARALLEL_THRESHOLD_BATCH_NORM` elements the channels are
split over the threads in blocks (``numba.prange``), each block computed as the serial code
computes it: the results do not depend on the number of threads.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.extending import register_jitable

from pylucid.kernels.jit import njit
from pylucid.kernels.normalization import _split
from pylucid.kernels.parallel import parallel_threshold
from pylucid.kernels.reduction import _as_dtype
from pylucid.kernels.simd_math import _fma

__all__ = [
    "PARALLEL_THRESHOLD_BATCH_NORM",
    "batch_norm_backward",
    "batch_norm_forward",
    "batch_norm_stats",
]

#: Element count from which the channels are split over the threads (row-kernel cost).
PARALLEL_THRESHOLD_BATCH_NORM = parallel_threshold("row")
#: Blocks of channels per thread of a parallel kernel.
_BLOCKS_PER_THREAD = 4
#: Planes from this length are reduced in place; shorter ones as columns of rows.
_PLANE_MIN = 16

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}
#: The float64 sums may be reassociated - and so vectorised - by LLVM: their rounding in
#: any order is far below float32's ("reassoc" only: inf and nan are kept).
_SUMS = {**_JIT, "fastmath": {"reassoc"}}


# -- planes: S >= _PLANE_MIN -------------------------------------------------------------------
@njit(**_SUMS)
def _plane_sum(x, c):
    total = 0.0
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            total += x[n, c, s]
    return total


@njit(**_SUMS)
def _plane_centred_sums(x, c, m):
    """``(sum d, sum d^2)`` of ``d = x - m`` over channel ``c``, in float64."""
    sd, sdd = 0.0, 0.0
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            d = x[n, c, s] - m
            sd += d
            sdd += d * d
    return sd, sdd


@njit(**_SUMS)
def _plane_gradient_sums(x, g, c, mean):
    """``(sum g, sum g d)`` of ``d = x - mean`` over channel ``c``, in float64."""
    sg, sgd = 0.0, 0.0
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            gj = np.float64(g[n, c, s])
            sg += gj
            sgd += gj * (x[n, c, s] - mean)
    return sg, sgd


@njit(**_JIT)
def _plane_affine(x, c, hi, lo, a, b, out):
    """``out = ((x - hi) - lo) a + b`` over channel ``c``."""
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            out[n, c, s] = _fma((x[n, c, s] - hi) - lo, a, b)


@njit(**_JIT)
def _plane_input_grad(x, g, c, hi, lo, a, b, c0, dx):
    """``dx = a (g + c0 + b ((x - hi) - lo))`` over channel ``c``."""
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            dx[n, c, s] = a * _fma(b, (x[n, c, s] - hi) - lo, g[n, c, s] + c0)


@njit(**_JIT)
def _plane_scaled(g, c, a, dx):
    """``dx = a g`` over channel ``c``."""
    for n in range(g.shape[0]):
        for s in range(g.shape[2]):
            dx[n, c, s] = a * g[n, c, s]


@njit(**_JIT)
def _wide_scaled(g, c, rstd, w, dx):
    """``dx = g rstd w`` over channel ``c`` in float64, rounded once."""
    for n in range(g.shape[0]):
        for s in range(g.shape[2]):
            dx[n, c, s] = np.float64(g[n, c, s]) * rstd * w


@njit(**_JIT)
def _wide_affine(x, c, mean, rstd, w, b, out):
    """``out = (x - mean) rstd w + b`` over channel ``c`` in float64, rounded once (the
    products in that order: ``rstd w`` may overflow where the result does not). ``rstd``
    0 (a variance beyond float64's range): ``b``, the limit (not ``inf * 0``)."""
    if rstd == 0.0:
        x, mean = np.zeros_like(x), 0.0  # (xhat 0 exactly)
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            out[n, c, s] = (x[n, c, s] - mean) * rstd * w + b


@njit(**_JIT)
def _wide_input_grad(x, g, c, mean, rstd, w, b, c0, dx):
    """``dx = (g + c0 + b (x - mean)) rstd w`` over channel ``c`` in float64, rounded
    once; 0 where ``rstd`` is 0."""
    if rstd == 0.0:
        for n in range(x.shape[0]):
            for s in range(x.shape[2]):
                dx[n, c, s] = 0.0
        return
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            dx[n, c, s] = (np.float64(g[n, c, s]) + c0 + b * (x[n, c, s] - mean)) * rstd * w


# -- columns: S < _PLANE_MIN, channels c0:c1 as the columns c0 S : c1 S of (N, C S) rows -------
@register_jitable
def _fold(columns, per, out):
    """``out[k] = sum columns[k per : (k + 1) per]``."""
    for k in range(out.size):
        total = 0.0
        for j in range(k * per, (k + 1) * per):
            total += columns[j]
        out[k] = total


@register_jitable
def _spread_columns(values, per, out):
    """``out[j] = values[j // per]`` (a per-channel value for each of its columns)."""
    for j in range(out.size):
        out[j] = values[j // per]


@njit(**_SUMS)
def _column_sums(x, lo, hi, out):
    """``out[j - lo] = sum_n x[n, j]`` for the columns ``lo:hi``, in float64."""
    out[:] = 0.0
    for n in range(x.shape[0]):
        for j in range(lo, hi):
            out[j - lo] += x[n, j]


@njit(**_SUMS)
def _column_centred_sums(x, lo, hi, m, sd, sdd):
    """``sum d`` and ``sum d^2`` per column, ``d = x - m`` (``m`` per column), in float64."""
    sd[:] = 0.0
    sdd[:] = 0.0
    for n in range(x.shape[0]):
        for j in range(lo, hi):
            d = x[n, j] - m[j - lo]
            sd[j - lo] += d
            sdd[j - lo] += d * d


@njit(**_SUMS)
def _column_gradient_sums(x, g, lo, hi, mean, sg, sgd):
    """``sum g`` and ``sum g d`` per column, ``d = x - mean`` (per column), in float64."""
    sg[:] = 0.0
    sgd[:] = 0.0
    for n in range(x.shape[0]):
        for j in range(lo, hi):
            gj = np.float64(g[n, j])
            sg[j - lo] += gj
            sgd[j - lo] += gj * (x[n, j] - mean[j - lo])


# -- the kernels over a block of channels ------------------------------------------------------
@register_jitable
def _moments(m, sd, sdd, count):
    """``(mean, var)`` from ``m`` and the sums of ``d = x - m`` and ``d^2`` (a variance
    beyond float64's range is inf, not ``inf - inf``)."""
    delta = sd / count
    square = sdd / count
    return m + delta, max(square - delta * delta, 0.0) if math.isfinite(square) else square


@register_jitable
def _rescaled_stats(x, c, stats):
    """Where channel ``c``'s mean came out inf or nan from finite values (a float64 sum
    beyond 1.8e308), its statistics again from ``x u``, ``u`` the power of two that brings
    its largest magnitude into ``[1, 4)`` (exact), scaled back (a variance beyond float64's
    range is inf)."""
    if math.isfinite(stats[0, c]):
        return
    largest = 0.0
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            largest = max(largest, abs(np.float64(x[n, c, s])))
    if not math.isfinite(largest):  # (inf or nan among the values: their statistics)
        return
    unit = 2.0 ** -(math.floor(math.log2(largest)) - 1)
    count = x.shape[0] * x.shape[2]
    total = 0.0
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            total += x[n, c, s] * unit
    m, sd, sdd = total / count, 0.0, 0.0
    for n in range(x.shape[0]):
        for s in range(x.shape[2]):
            d = x[n, c, s] * unit - m
            sd += d
            sdd += d * d
    mean, var = _moments(m, sd, sdd, count)
    stats[0, c], stats[1, c] = mean / unit, var / unit / unit


@njit(**_JIT)
def _stats_range(x, c0, c1, stats):
    """``stats[0, c]``, ``stats[1, c]``: the mean and biased variance of channels
    ``c0:c1`` of the ``(N, C, S)`` ``x``."""
    n, channels, per = x.shape
    count = n * per
    if per >= _PLANE_MIN:
        for c in range(c0, c1):
            m = _plane_sum(x, c) / count
            sd, sdd = _plane_centred_sums(x, c, m)
            stats[0, c], stats[1, c] = _moments(m, sd, sdd, count)
            _rescaled_stats(x, c, stats)
        return
    rows = x.reshape(n, channels * per)
    lo, hi, width = c0 * per, c1 * per, (c1 - c0) * per
    first, second, spread = np.empty(width), np.empty(width), np.empty(width)
    m, sd, sdd = np.empty(c1 - c0), np.empty(c1 - c0), np.empty(c1 - c0)
    _column_sums(rows, lo, hi, first)
    _fold(first, per, m)
    m /= count
    _spread_columns(m, per, spread)
    _column_centred_sums(rows, lo, hi, spread, first, second)
    _fold(first, per, sd)
    _fold(second, per, sdd)
    for k in range(c1 - c0):
        stats[0, c0 + k], stats[1, c0 + k] = _moments(m[k], sd[k], sdd[k], count)
        _rescaled_stats(x, c0 + k, stats)


#: The bound under which a channel's values are formed in its arithmetic (below float32's
#: largest finite, 3.4e38, with a margin): beyond, in float64, rounded once.
_ARITHMETIC_LIMIT = 1e37


@register_jitable
def _spread(var, count):
    """``sqrt(count var)``: no ``|x - mean|`` of the channel exceeds it."""
    return math.sqrt(var * count)


@njit(**_JIT)
def _forward_range(x, mean, var, w, b, eps, c0, c1, out):
    """``out``: channels ``c0:c1`` of ``x`` normalised by ``mean`` and ``var``, then
    ``* w + b`` (all ``(C,)`` float64). A channel whose deviations or values could
    overflow the input's dtype (:data:`_ARITHMETIC_LIMIT`) is computed in float64."""
    n, channels, per = x.shape
    width = (c1 - c0) * per
    coef = np.empty((4, width if per < _PLANE_MIN else 0), x.dtype)
    wide = np.empty(c1 - c0, np.bool_)
    for c in range(c0, c1):
        a = w[c] / math.sqrt(var[c] + eps)
        spread = _spread(var[c], n * per)
        wide[c - c0] = not (
            spread < _ARITHMETIC_LIMIT and spread * abs(a) + abs(b[c]) < _ARITHMETIC_LIMIT
        )
        hi, lo = _split(mean[c], x)
        if per >= _PLANE_MIN:
            if not wide[c - c0]:
                _plane_affine(x, c, hi, lo, _as_dtype(a, x), _as_dtype(b[c], x), out)
            continue
        for j in range((c - c0) * per, (c - c0 + 1) * per):
            coef[0, j], coef[1, j], coef[2, j], coef[3, j] = hi, lo, a, b[c]
    if per < _PLANE_MIN:
        rows, outs = x.reshape(n, channels * per), out.reshape(n, channels * per)
        for i in range(n):
            for k in range(width):
                j = c0 * per + k
                outs[i, j] = _fma((rows[i, j] - coef[0, k]) - coef[1, k], coef[2, k], coef[3, k])
    for c in range(c0, c1):
        if wide[c - c0]:
            _wide_affine(x, c, mean[c], 1.0 / math.sqrt(var[c] + eps), w[c], b[c], out)


@njit(**_JIT)
def _backward_range(x, g, mean, var, w, eps, training, sums, c0, c1, dx, dw, db):
    """Channels ``c0:c1``: ``dw``, ``db`` (where ``sums``, which training needs for ``dx``
    too) and ``dx`` (where it is not empty); ``dx = A (g + C0 + B d)`` with ``A = w rstd``
    (so that an infinite weight gives an infinite gradient, not ``inf - inf``), ``B =
    -rstd^2 sum(g d) / count`` and ``C0 = -sum(g) / count``; float64 where the terms could
    overflow the input's dtype."""
    n, channels, per = x.shape
    count = n * per
    width = (c1 - c0) * per
    sg, sgd = np.zeros(c1 - c0), np.zeros(c1 - c0)
    if sums and per >= _PLANE_MIN:
        for c in range(c0, c1):
            sg[c - c0], sgd[c - c0] = _plane_gradient_sums(x, g, c, mean[c])
    elif sums:
        rows, grads = x.reshape(n, channels * per), g.reshape(n, channels * per)
        first, second, spread = np.empty(width), np.empty(width), np.empty(width)
        _spread_columns(mean[c0:c1], per, spread)
        _column_gradient_sums(rows, grads, c0 * per, c1 * per, spread, first, second)
        _fold(first, per, sg)
        _fold(second, per, sgd)
    coef = np.empty((5, width if per < _PLANE_MIN else 0), x.dtype)
    wide = np.zeros(c1 - c0, np.bool_)
    scales = np.empty((3, c1 - c0))
    for c in range(c0, c1):
        k = c - c0
        rstd = 1.0 / math.sqrt(var[c] + eps)
        # (an empty batch: sums of nothing; rstd 0, a variance beyond range: the limit)
        dw[c] = rstd * sgd[k] if count and rstd != 0.0 else 0.0
        db[c] = sg[k]
        a, b, c_0 = w[c] * rstd, 0.0, 0.0
        wide[k] = not abs(a) < _ARITHMETIC_LIMIT
        if training:
            b, c_0 = -rstd * rstd * sgd[k] / count, -sg[k] / count
            spread = _spread(var[c], count)
            wide[k] |= not (
                spread < _ARITHMETIC_LIMIT and spread * abs(b) + abs(c_0) < _ARITHMETIC_LIMIT
            )
        scales[0, k], scales[1, k], scales[2, k] = rstd, b, c_0
        if not dx.size or wide[k]:
            continue
        hi, lo = _split(mean[c], x)
        ar, br, cr = _as_dtype(a, x), _as_dtype(b, x), _as_dtype(c_0, x)
        if per >= _PLANE_MIN:
            if training:
                _plane_input_grad(x, g, c, hi, lo, ar, br, cr, dx)
            else:
                _plane_scaled(g, c, ar, dx)
            continue
        for j in range(k * per, (k + 1) * per):
            coef[0, j], coef[1, j], coef[2, j], coef[3, j], coef[4, j] = hi, lo, ar, br, cr
    if not dx.size:
        return
    if per < _PLANE_MIN:
        rows, grads = x.reshape(n, channels * per), g.reshape(n, channels * per)
        dxs = dx.reshape(n, channels * per)
        for i in range(n):
            if not training:
                for k in range(width):
                    dxs[i, c0 * per + k] = coef[2, k] * grads[i, c0 * per + k]
                continue
            for k in range(width):
                j = c0 * per + k
                d = (rows[i, j] - coef[0, k]) - coef[1, k]
                dxs[i, j] = coef[2, k] * _fma(coef[3, k], d, grads[i, j] + coef[4, k])
    for c in range(c0, c1):
        rstd, b, c_0 = scales[0, c - c0], scales[1, c - c0], scales[2, c - c0]
        if wide[c - c0] and training:
            _wide_input_grad(x, g, c, mean[c], rstd, w[c], b, c_0, dx)
        elif wide[c - c0]:
            _wide_scaled(g, c, rstd, w[c], dx)


# -- serial and parallel drivers ---------------------------------------------------------------
def _stats(x, stats, blocks):
    _stats_range(x, 0, x.shape[1], stats)


def _stats_parallel(x, stats, blocks):
    channels = x.shape[1]
    for k in numba.prange(blocks):
        _stats_range(x, k * channels // blocks, (k + 1) * channels // blocks, stats)


def _forward(x, mean, var, w, b, eps, out, blocks):
    _forward_range(x, mean, var, w, b, eps, 0, x.shape[1], out)


def _forward_parallel(x, mean, var, w, b, eps, out, blocks):
    channels = x.shape[1]
    for k in numba.prange(blocks):
        c0, c1 = k * channels // blocks, (k + 1) * channels // blocks
        _forward_range(x, mean, var, w, b, eps, c0, c1, out)


def _backward(x, g, mean, var, w, eps, training, sums, dx, dw, db, blocks):
    _backward_range(x, g, mean, var, w, eps, training, sums, 0, x.shape[1], dx, dw, db)


def _backward_parallel(x, g, mean, var, w, eps, training, sums, dx, dw, db, blocks):
    channels = x.shape[1]
    for k in numba.prange(blocks):
        c0, c1 = k * channels // blocks, (k + 1) * channels // blocks
        _backward_range(x, g, mean, var, w, eps, training, sums, c0, c1, dx, dw, db)


_STATS = (njit(**_JIT)(_stats), njit(parallel=True, **_JIT)(_stats_parallel))
_FORWARD = (njit(**_JIT)(_forward), njit(parallel=True, **_JIT)(_forward_parallel))
_BACKWARD = (njit(**_JIT)(_backward), njit(parallel=True, **_JIT)(_backward_parallel))


def _blocks(x: np.ndarray) -> tuple[int, int]:
    """(whether to run in parallel, into how many blocks of channels)."""
    parallel = x.size >= PARALLEL_THRESHOLD_BATCH_NORM and x.shape[1] > 1
    threads = numba.get_num_threads() if parallel else 1
    return int(parallel and threads > 1), min(x.shape[1], _BLOCKS_PER_THREAD * threads)


def batch_norm_stats(x: np.ndarray) -> np.ndarray:
    """The ``(2, C)`` float64 mean and biased variance of each channel of the C-contiguous
    ``(N, C, S)`` ``x`` (nan for a channel without values)."""
    stats = np.empty((2, x.shape[1]))
    parallel, blocks = _blocks(x)
    _STATS[parallel](x, stats, blocks)
    return stats


def batch_norm_forward(
    x: np.ndarray, mean: np.ndarray, var: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float
) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * w + b`` per channel of the C-contiguous
    ``(N, C, S)`` ``x``, with ``(C,)`` float64 ``mean``, ``var``, ``w`` and ``b``; in
    ``x``'s dtype."""
    out = np.empty(x.shape, x.dtype)
    parallel, blocks = _blocks(x)
    _FORWARD[parallel](x, mean, var, w, b, np.float64(eps), out, blocks)
    return out


def batch_norm_backward(
    x: np.ndarray,
    g: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    w: np.ndarray,
    eps: float,
    training: bool,
    input_grad: bool,
    affine_grads: bool,
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """The gradients ``(dx, dw, db)`` of :func:`batch_norm_forward` from ``g`` (``x``'s
    shape), with the statistics of the batch (``training``: they depend on ``x``) or
    constant ones. ``dx`` in ``x``'s dtype (None unless ``input_grad``), ``dw`` and ``db``
    ``(C,)`` float64 (zeros in evaluation unless ``affine_grads``: training computes
    them for ``dx`` anyway)."""
    sums = training or affine_grads
    dx = np.empty(x.shape if input_grad else (0, 0, 0), x.dtype)
    dw, db = np.empty(x.shape[1]), np.empty(x.shape[1])
    parallel, blocks = _blocks(x)
    _BACKWARD[parallel](x, g, mean, var, w, np.float64(eps), training, sums, dx, dw, db, blocks)
    return (dx if input_grad else None), dw, db
