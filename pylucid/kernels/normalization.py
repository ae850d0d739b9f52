"""Row kernels of layer normalisation: the forward and the gradients, each in few passes.

A row is the ``D`` values ``x`` normalised together. With ``mean`` and the biased
``var`` of the row, ``rstd = 1 / sqrt(var + eps)`` and ``xhat = (x - mean) rstd``:

- forward ``y = xhat w + b``;
- input gradient, with ``h = g w``: ``dx = rstd (h - mean(h) - xhat mean(h xhat))``;
- weight and bias gradients, summed over the rows: ``dw = sum_r g xhat``, ``db = sum_r g``.

Forward: the statistics in float64 (two passes); the values in the row's arithmetic from
the float64 statistics rounded to it, the mean split in two so that ``x - mean`` is exact
near the mean (float32: 16 lanes; within 2 ULP of the float64 formula).

Backward (:func:`_backward_rows`): every sum in the row's own arithmetic (float32: 16
lanes), and the mean's rounding taken out as in the corrected two-pass algorithm: ``m``,
the row's sum rounded, then the sums of ``d = x - m`` (exact near the mean), ``d^2``,
``g w`` and ``g w d``, with ``mean = m + sum d / D``. The row is read once from memory;
its gradient pass also adds ``g xhat`` and ``g`` into column sums (in the row's arithmetic
over at most 16 rows, then in float64), so no second sweep of ``x`` and ``g`` follows.
Float64 rows of 128 values and more go row by row instead, the same sums in one loop
(:func:`_float64_grad_row`). Bound: ``|dx - dx_exact| <= 12 u rstd (|h| + mean|h| +
|xhat| mean|h xhat|)`` elementwise (``u`` the unit roundoff of the row's dtype, 2**-24 for
float32; a bound relative to the terms, since ``dx`` itself may cancel to 0), and
``|dw - dw_exact| <= 12 u sum_r |g xhat|``, ``|db - db_exact| <= 12 u sum_r |g|``. Measured
against an x87 extended-precision reference on random rows and adversarial ones (means of
1e4-1e6 with standard deviations down to the values' ULP, outliers, constant rows, eps 0;
D 64 to 1000; ``tests/test_layer_norm_accuracy.py``): float32 at most 4.5 u (dx) and 3.9 u
(dw), where the float64 sums gave 2.8 u and 1.7 u; float64 at most 9.0 u and 9.5 u (an
outlier row whose dx cancels to 1e-17 of its terms), where the old kernel, which took the
mean as rounded, was up to 2.6e6 u off (rows of mean 1e4 and deviation 1e-3).
Rows with inf or nan, or near overflow or underflow, take a float64 path. The row loops
run in parallel over blocks of rows, each block with its own column sums, added up at the
end.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba.core import types
from numba.extending import overload, register_jitable

from pylucid import memory
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


@register_jitable
def _largest(a):
    """The largest magnitude of a vector (0 for none; nan is skipped)."""
    largest = 0.0
    for j in range(a.size):
        largest = max(largest, abs(np.float64(a[j])))
    return largest


def _zero(like):
    """0 in ``like``'s dtype (float32 for a float32 array, else float64)."""


@overload(_zero, inline="always")
def _zero_typed(like):
    if like.dtype == types.float32:
        return lambda like: np.float32(0.0)
    return lambda like: 0.0


@njit(**_SUMS)
def _row_sum(x, r):
    """The sum of row ``r`` of ``x`` in its own arithmetic (reassociated: 16 float32 lanes,
    4 chains). (Rows by index, not by view: a view costs two atomic reference counts.)"""
    total = _zero(x)
    for j in range(x.shape[1]):
        total += x[r, j]
    return total


@njit(**_SUMS)
def _centred_sums(x, r, m):
    """``(sum d, sum d^2)`` over row ``r`` of ``x``, ``d = x - m``, in the row's arithmetic
    (reassociated)."""
    sd, sdd = _zero(x), _zero(x)
    for j in range(x.shape[1]):
        d = x[r, j] - m
        sd += d
        sdd += d * d
    return sd, sdd


@njit(**_SUMS)
def _gradient_row_sums(x, w, g, r, m):
    """``(sum h, sum h d, sum g^2)`` over row ``r``, ``h = g w``, ``d = x - m``, in the row's
    arithmetic (reassociated; a separate loop from :func:`_centred_sums`: five sums in one
    loop run slower than two loops over the row, which is in the L1 cache)."""
    sh, shd, sgg = _zero(x), _zero(x), _zero(x)
    for j in range(x.shape[1]):
        gj = g[r, j]
        h = gj * w[j]
        sh += h
        shd += h * (x[r, j] - m)
        sgg += gj * gj
    return sh, shd, sgg


#: Rows of the backward taken together pass by pass (so that consecutive rows' scalar
#: chains - the sums' last additions, a square root, divisions - overlap), and over which
#: the weight and bias column sums accumulate in the row's arithmetic before they are added
#: to the float64 totals: at most this many, and at most ``_BLOCK_ELEMENTS`` values.
_BLOCK_ROWS = 16
_BLOCK_ELEMENTS = 4096
#: Below this ``sum (x - m)^2 / D`` (with ``eps`` below ``_TINY_EPS``) float32 squares may
#: have underflowed: such rows take the float64 path.
_TINY_VARIANCE = 2.0**-100
#: float64 rows from this length go row by row (:func:`_float64_grad_row`); shorter ones,
#: and float32 rows, in blocks (:func:`_backward_rows`), which measured faster there.
_ROWWISE_FLOAT64 = 128
_TINY_EPS = 2.0**-60


@register_jitable
def _general_grad_row(x, w, g, eps, out, dw, db):
    """The row's gradient in float64 arithmetic, rounded once, and its ``g xhat`` and ``g``
    added into ``dw`` and ``db``: the moments of :func:`_moments`, and ``h`` formed from
    ``g`` and ``w`` times powers of two (:func:`_unit`) where a sum overflows, taken out of
    the result again. For rows with inf or nan, or near the overflow or underflow limits."""
    n = x.size
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


@register_jitable
def _backward_rows(x, w, g, eps, dx, dw, db, w_max, start, stop, shift, coef, fast, aw, ab):
    """The input gradient of rows ``start:stop`` into ``dx``, their ``g xhat`` and ``g``
    added into the float64 ``dw`` and ``db``; ``shift`` (block,), ``coef`` ((4, block), in
    the rows' dtype), ``fast`` (block,) and ``aw``, ``ab`` (D,) are scratch.

    Rows go in blocks of ``len(fast)``, pass by pass: (1) ``m``, the row's sum in its own
    arithmetic over D, rounded to it; (2) with ``d = x - m`` (exact for the values near the
    mean, by Sterbenz), the sums of ``d``, ``d^2``, ``h = g w``, ``h d`` and ``g^2`` in the
    row's arithmetic; then in float64 the mean's remainder ``delta = sum d / D`` (so the
    mean is ``m + delta``: ``m``'s own rounding error is taken out, as in the corrected
    two-pass algorithm), ``var = sum d^2 / D - delta^2``, ``r = 1 / sqrt(var + eps)``,
    ``mean(h)`` and ``mean(h xhat) = (sum h d - delta sum h) r / D``; (3) ``xhat = ((x - m) -
    delta) r`` and ``dx = r (h - mean(h) - xhat mean(h xhat))`` in the row's arithmetic,
    ``g xhat`` and ``g`` added into column sums in the row's arithmetic, which are added to
    the float64 ``dw``, ``db`` after each block (at most 16 rows). A row whose sums are not
    all finite, whose ``delta^2`` exceeds ``var + eps`` (``m`` too far from the mean for
    the cancellation in ``var`` to stay within a factor 2), whose values could overflow
    (``w_max`` is ``max|w|``) or whose squares could underflow (a variance below 2**-100
    with ``eps`` below 2**-60) takes :func:`_general_grad_row` instead."""
    n = x.shape[1]
    block = fast.size
    inv_n = 1.0 / n
    # the overflow bounds, squared (one square root and one division a row)
    limit2 = _ROW_ARITHMETIC_LIMIT * _ROW_ARITHMETIC_LIMIT
    grad2 = w_max * w_max * (2.0 + math.sqrt(n)) ** 2
    for b0 in range(start, stop, block):
        b1 = min(stop, b0 + block)
        for r in range(b0, b1):
            shift[r - b0] = _split(_row_sum(x, r) * inv_n, x)[0]
        for r in range(b0, b1):
            i = r - b0
            sd, sdd = _centred_sums(x, r, shift[i])
            sh, shd, sgg = _gradient_row_sums(x, w, g, r, shift[i])
            delta = np.float64(sd) * inv_n
            square = np.float64(sdd)
            var = max(square * inv_n - delta * delta, 0.0)
            rs = 1.0 / math.sqrt(var + eps)
            h_total = np.float64(sh)
            hd_total = np.float64(shd) - delta * h_total
            fast[i] = (
                delta * delta <= var + eps
                and (square >= n * _TINY_VARIANCE or eps >= _TINY_EPS)
                and square < limit2
                and np.float64(sgg) * grad2 * (rs * rs) < limit2
                and math.isfinite(h_total)
                and math.isfinite(hd_total)
            )
            coef[0, i] = _split(delta, x)[0]
            coef[1, i] = _split(rs, x)[0]
            coef[2, i] = _split(h_total * inv_n, x)[0]
            coef[3, i] = _split(hd_total * rs * inv_n, x)[0]
        aw[:] = 0.0
        ab[:] = 0.0
        for r in range(b0, b1):
            i = r - b0
            if not fast[i]:
                _general_grad_row(x[r], w, g[r], eps, dx[r], dw, db)
                continue
            m, dl, rr, h_mean, hx_mean = shift[i], coef[0, i], coef[1, i], coef[2, i], coef[3, i]
            for j in range(n):
                xhat = ((x[r, j] - m) - dl) * rr
                gj = g[r, j]
                dx[r, j] = rr * _fma(-xhat, hx_mean, gj * w[j] - h_mean)
                aw[j] += gj * xhat
                ab[j] += gj
        for j in range(n):
            dw[j] += aw[j]
            db[j] += ab[j]


@njit(**_SUMS)
def _deviation_sums(x, w, g, mean):
    """``(sum d, sum d^2, sum g w, sum g w d, sum g^2)``, ``d = x - mean``, one pass in
    float64 (reassociated)."""
    sd, square, h_total, hd_total, g_square = 0.0, 0.0, 0.0, 0.0, 0.0
    for j in range(x.size):
        d = x[j] - mean
        gj = np.float64(g[j])
        h = gj * w[j]
        sd += d
        square += d * d
        h_total += h
        hd_total += h * d
        g_square += gj * gj
    return sd, square, h_total, hd_total, g_square


@register_jitable(inline="always")
def _float64_grad_row(x, w, g, eps, out, dw, db, w_max):
    """A float64 row by itself, three passes (the blocks of :func:`_backward_rows` measured
    1.3-1.6x slower for float64 rows of 256 and more): the mean, the five sums of
    :func:`_deviation_sums` about it (the mean's rounding taken out with ``sum d`` as
    there), and the gradient with ``g xhat`` and ``g`` added into ``dw`` and ``db``; the
    same conditions for :func:`_general_grad_row`."""
    n = x.size
    mean = _sum(x) / n
    sd, square, h_total, hd_total, g_square = _deviation_sums(x, w, g, mean)
    delta = sd / n
    var = max(square / n - delta * delta, 0.0)
    r = 1.0 / math.sqrt(var + eps)
    hd_total = hd_total - delta * h_total
    bound = max(math.sqrt(square), math.sqrt(g_square) * w_max * r * (2.0 + math.sqrt(n)))
    if (
        bound < _ROW_ARITHMETIC_LIMIT
        and math.isfinite(h_total)
        and math.isfinite(hd_total)
        and delta * delta <= var + eps
        and (square >= n * _TINY_VARIANCE or eps >= _TINY_EPS)
    ):
        h_mean = h_total / n
        hx_mean = hd_total * r / n
        for j in range(n):
            xhat = ((x[j] - mean) - delta) * r
            gj = g[j]
            out[j] = r * _fma(-xhat, hx_mean, gj * w[j] - h_mean)
            dw[j] += gj * xhat
            db[j] += gj
        return
    _general_grad_row(x, w, g, eps, out, dw, db)


def _forward(x, w, b, eps, out):
    bound = math.sqrt(x.shape[1]) * _largest(w) + _largest(b)
    for r in range(x.shape[0]):
        _normalise_row(x[r], w, b, eps, out[r], bound)


def _forward_parallel(x, w, b, eps, out):
    bound = math.sqrt(x.shape[1]) * _largest(w) + _largest(b)
    for r in numba.prange(x.shape[0]):
        _normalise_row(x[r], w, b, eps, out[r], bound)


@njit(**_JIT)
def _backward_range(x, w, g, eps, dx, dw, db, w_max, start, stop, rowwise):
    """Rows ``start:stop``: their input gradient into ``dx``, their ``g xhat`` and ``g``
    added into ``dw`` and ``db``. A function of its own, called from the parallel loop too,
    so that it compiles as the serial code does (inlined into the parallel loop's body, the
    rows of 1024 measured 1.45x slower)."""
    n = x.shape[1]
    if rowwise:
        for r in range(start, stop):
            _float64_grad_row(x[r], w, g[r], eps, dx[r], dw, db, w_max)
        return
    block = max(1, min(_BLOCK_ROWS, _BLOCK_ELEMENTS // max(n, 1)))
    shift, coef = np.empty(block, x.dtype), np.empty((4, block), x.dtype)
    fast = np.empty(block, np.bool_)
    aw, ab = np.empty(n, x.dtype), np.empty(n, x.dtype)
    _backward_rows(x, w, g, eps, dx, dw, db, w_max, start, stop, shift, coef, fast, aw, ab)


def _backward(x, w, g, eps, dx, dw, db, rowwise):
    dw[:] = 0.0
    db[:] = 0.0
    _backward_range(x, w, g, eps, dx, dw, db, _largest(w), 0, x.shape[0], rowwise)


def _backward_parallel(x, w, g, eps, dx, dw, db, rowwise, sums):
    rows, blocks, n = x.shape[0], sums.shape[0], x.shape[1]
    sums[:] = 0.0
    w_max = _largest(w)
    for k in numba.prange(blocks):
        start, stop = k * rows // blocks, (k + 1) * rows // blocks
        _backward_range(x, w, g, eps, dx, sums[k, 0], sums[k, 1], w_max, start, stop, rowwise)
    dw[:] = 0.0
    db[:] = 0.0
    for k in range(blocks):
        for j in range(n):
            dw[j] += sums[k, 0, j]
            db[j] += sums[k, 1, j]


_FORWARD = (njit(**_JIT)(_forward), njit(parallel=True, **_JIT)(_forward_parallel))
_BACKWARD = (njit(**_JIT)(_backward), njit(parallel=True, **_JIT)(_backward_parallel))


def layer_norm_rows(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """``(x - mean) rstd w + b`` for each row of the C-contiguous ``(R, D)`` ``x``, with
    ``(D,)`` ``w`` and ``b``; in ``x``'s dtype."""
    out = memory.empty(x.shape, x.dtype)
    _FORWARD[x.size >= PARALLEL_THRESHOLD_NORM and x.shape[0] > 1](x, w, b, np.float64(eps), out)
    return out


def layer_norm_backward_rows(
    x: np.ndarray, w: np.ndarray, g: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gradients ``(dx, dw, db)`` of :func:`layer_norm_rows` from ``g`` (``x``'s
    shape); ``dw`` and ``db`` in float64, ``dx`` in ``x``'s dtype. Within ``12 u`` of the
    exact gradients relative to their terms (see the module's docstring)."""
    dx = memory.empty(x.shape, x.dtype)
    dw, db = np.empty(x.shape[1]), np.empty(x.shape[1])
    rowwise = x.dtype == np.float64 and x.shape[1] >= _ROWWISE_FLOAT64
    if x.size >= PARALLEL_THRESHOLD_NORM and x.shape[0] > 1:
        blocks = min(x.shape[0], _BLOCKS_PER_THREAD * numba.get_num_threads())
        sums = np.empty((blocks, 2, x.shape[1]))  # (each block's own column sums)
        _BACKWARD[1](x, w, g, np.float64(eps), dx, dw, db, rowwise, sums)
    else:
        _BACKWARD[0](x, w, g, np.float64(eps), dx, dw, db, rowwise)
    return dx, dw, db
