"""Row kernels of cross entropy with class-index targets: the loss of each row and its
gradient, each in one pass over the logits (plus the pass that finds the row's maximum).

A row is the ``C`` logits ``x`` of one example, its target class ``t`` and a label smoothing
``e``; the smoothed target distribution is ``q_j = (1 - e) [j = t] + e / C``. With
``lse = log sum_j exp(x_j)`` (formed as ``m + log sum_j exp(x_j - m)``, ``m`` the row's
maximum, or 0 where that is -inf; NaN for a row holding +inf, whose softmax is NaN; the
terms are evaluated on ``x - m``):

- loss ``= sum_j q_j (lse - x_j) = (1 - e)(lse - x_t) + e (lse - mean_j x_j)``;
- gradient ``d loss / d x_j = softmax_j - q_j``, the softmax as ``exp(x_j - m) / sum``.

A row whose target is ``ignore_index`` has loss 0 and gradient 0. ``exp`` and ``log`` are
those of :mod:`pylucid.kernels.simd_math` (within 1 ULP); float32 rows compute in float64
and are rounded once. Targets are checked by :func:`check_targets` before these run.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba.extending import register_jitable

from pylucid.kernels import simd_math
from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold
from pylucid.kernels.reduction import _max, _sum

__all__ = [
    "PARALLEL_THRESHOLD_LOSS",
    "check_targets",
    "cross_entropy_backward_rows",
    "cross_entropy_rows",
]

#: Element count of the logits from which the row loops run in parallel (row-kernel cost).
PARALLEL_THRESHOLD_LOSS = parallel_threshold("row")

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


@njit(**_JIT)
def check_targets(target: np.ndarray, classes: int, ignore_index: int) -> tuple[int, int]:
    """(the number of targets that are not ``ignore_index``, the position of the first one
    outside ``[0, classes)``, or -1)."""
    count = 0
    for i in range(target.size):
        t = target[i]
        if t == ignore_index:
            continue
        if t < 0 or t >= classes:
            return count, i
        count += 1
    return count, -1


@register_jitable
def _shift(x):
    """The row's maximum, or 0 where that is -inf; NaN for a row holding +inf (its softmax
    is NaN, so are its loss and gradient, as in PyTorch)."""
    m = float(_max(x))
    if m == math.inf:
        return math.nan
    return m if math.isfinite(m) else 0.0


@register_jitable
def _log_sum_exp_shifted(x, m, scratch):
    """``log sum_j exp(x_j - m)``; the exponentials go through ``scratch`` (a float64 row)
    so that their loop vectorises (a running sum would chain them one by one: 6x slower)."""
    for j in range(x.size):
        scratch[j] = simd_math.exp(x[j] - m)
    return simd_math.log(_sum(scratch))


@register_jitable
def _row_loss(x, t, ignore_index, smoothing, scratch):
    """``lse + sum_j q_j (m - x_j)`` on the shifted logits, as PyTorch's log_softmax
    (``m + log 3`` would round ``log 3`` away in a row of three ``max``). Each term is
    ``q_j (m - x_j) >= 0``, so no partial sum exceeds the loss; where ``m - x_j`` itself
    overflows, the term is ``q_j m - q_j x_j``."""
    if t == ignore_index:
        return 0.0
    m = _shift(x)
    loss = _log_sum_exp_shifted(x, m, scratch)
    share = smoothing / x.size
    for j in range(x.size):
        q = share + (1.0 - smoothing) if j == t else share
        if q == 0.0:
            continue
        d = m - x[j]
        loss += q * d if d < math.inf else q * m - q * x[j]
    return loss


@register_jitable
def _row_grad(x, t, g, ignore_index, smoothing, scratch, out):
    if t == ignore_index:
        for j in range(x.size):
            out[j] = 0.0
        return
    m = _shift(x)
    for j in range(x.size):  # the softmax as exp(x - m) / sum: one exponential per element
        scratch[j] = simd_math.exp(x[j] - m)
    inverse = 1.0 / _sum(scratch)
    spread = smoothing / x.size
    for j in range(x.size):
        q = spread + (1.0 - smoothing) if j == t else spread
        out[j] = g * (scratch[j] * inverse - q)


def _loss_loop(x, target, ignore_index, smoothing, out):
    scratch = np.empty(x.shape[1])
    for r in range(x.shape[0]):
        out[r] = _row_loss(x[r], target[r], ignore_index, smoothing, scratch)


def _loss_loop_parallel(x, target, ignore_index, smoothing, out):
    scratch = np.empty(x.shape)
    for r in numba.prange(x.shape[0]):
        out[r] = _row_loss(x[r], target[r], ignore_index, smoothing, scratch[r])


def _grad_loop(x, target, g, ignore_index, smoothing, out):
    scratch = np.empty(x.shape[1])
    for r in range(x.shape[0]):
        _row_grad(x[r], target[r], g[r], ignore_index, smoothing, scratch, out[r])


def _grad_loop_parallel(x, target, g, ignore_index, smoothing, out):
    scratch = np.empty(x.shape)
    for r in numba.prange(x.shape[0]):
        _row_grad(x[r], target[r], g[r], ignore_index, smoothing, scratch[r], out[r])


#: Rows of at most this many classes take the column-wise kernels (:func:`_short_block`).
SHORT_ROW = 32
#: Rows per block of the column-wise kernels.
_BLOCK = 64


@register_jitable
def _short_block(x, target, first, last, ignore_index, smoothing, columns, shift, total):
    """The rows ``[first, last)`` of short rows, the loops running across the rows so that
    they vectorise (a row of 10 classes is too short to: 14 ns per logit row by row).

    Fills ``columns`` (``(C, n)``, the block transposed, float64), ``shift`` (each row's
    :func:`_shift`) and ``total`` (``sum_j exp(x_j - shift)``); the same values as the row
    kernels, up to the order of the float64 sum over the classes."""
    n, classes = last - first, x.shape[1]
    for i in range(n):
        for j in range(classes):
            columns[j, i] = x[first + i, j]
    for i in range(n):
        shift[i] = columns[0, i]
    for j in range(1, classes):
        for i in range(n):
            v = columns[j, i]
            shift[i] = v if v > shift[i] else shift[i]
    for i in range(n):
        m = shift[i]
        shift[i] = math.nan if m == math.inf else (m if math.isfinite(m) else 0.0)
        total[i] = 0.0
    for j in range(classes):
        for i in range(n):
            total[i] += simd_math.exp(columns[j, i] - shift[i])


@register_jitable
def _short_losses(x, target, first, last, ignore_index, smoothing, out, scratch):
    columns, shift, total = scratch[0], scratch[1], scratch[2]
    _short_block(x, target, first, last, ignore_index, smoothing, columns, shift, total)
    n, classes = last - first, x.shape[1]
    share = smoothing / classes
    hot = scratch[3]  # the class as a float (see _short_grads)
    for i in range(n):
        total[i] = simd_math.log(total[i])  # the log-sum-exp of the shifted row
        hot[i] = target[first + i]
    for j in range(classes):
        for i in range(n):
            q = share + ((1.0 - smoothing) if hot[i] == j else 0.0)
            m, v = shift[i], columns[j, i]
            d = m - v
            term = q * d if d < math.inf else q * m - q * v
            total[i] += term if q != 0.0 else 0.0
    for i in range(n):
        out[first + i] = 0.0 if target[first + i] == ignore_index else total[i]


@register_jitable
def _short_grads(x, target, g, first, last, ignore_index, smoothing, out, scratch):
    columns, shift, total = scratch[0], scratch[1], scratch[2]
    _short_block(x, target, first, last, ignore_index, smoothing, columns, shift, total)
    n, classes = last - first, x.shape[1]
    spread = smoothing / classes
    # per row, in float64 lanes like the logits' (an int64 target beside them stops the
    # loop over the rows from vectorising): g / sum, the class as a float, g q's two parts
    hot, spread_g, hot_g = scratch[3], scratch[4], scratch[5]
    for i in range(n):
        total[i] = g[first + i] / total[i]
        hot[i] = target[first + i]
        spread_g[i] = spread * g[first + i]
        hot_g[i] = (1.0 - smoothing) * g[first + i]
    for j in range(classes):  # across the rows, in the transposed block
        for i in range(n):
            q_g = spread_g[i] + (hot_g[i] if hot[i] == j else 0.0)
            columns[j, i] = simd_math.exp(columns[j, i] - shift[i]) * total[i] - q_g
    for i in range(n):
        keep = target[first + i] != ignore_index  # (an ignored row: 0, even from nan logits)
        for j in range(classes):
            out[first + i, j] = columns[j, i] if keep else 0.0


def _short_scratch(classes):
    rows = (
        np.empty(_BLOCK),
        np.empty(_BLOCK),
        np.empty(_BLOCK),
        np.empty(_BLOCK),
        np.empty(_BLOCK),
    )
    return (np.empty((classes, _BLOCK)), *rows)


def _short_loss_loop(x, target, ignore_index, smoothing, out):
    scratch = _short_scratch(x.shape[1])
    for first in range(0, x.shape[0], _BLOCK):
        last = min(first + _BLOCK, x.shape[0])
        _short_losses(x, target, first, last, ignore_index, smoothing, out, scratch)


def _short_loss_loop_parallel(x, target, ignore_index, smoothing, out):
    for block in numba.prange((x.shape[0] + _BLOCK - 1) // _BLOCK):
        first = block * _BLOCK
        last = min(first + _BLOCK, x.shape[0])
        scratch = _short_scratch(x.shape[1])
        _short_losses(x, target, first, last, ignore_index, smoothing, out, scratch)


def _short_grad_loop(x, target, g, ignore_index, smoothing, out):
    scratch = _short_scratch(x.shape[1])
    for first in range(0, x.shape[0], _BLOCK):
        last = min(first + _BLOCK, x.shape[0])
        _short_grads(x, target, g, first, last, ignore_index, smoothing, out, scratch)


def _short_grad_loop_parallel(x, target, g, ignore_index, smoothing, out):
    for block in numba.prange((x.shape[0] + _BLOCK - 1) // _BLOCK):
        first = block * _BLOCK
        last = min(first + _BLOCK, x.shape[0])
        scratch = _short_scratch(x.shape[1])
        _short_grads(x, target, g, first, last, ignore_index, smoothing, out, scratch)


_short_scratch = register_jitable(_short_scratch)
_SHORT_LOSS = (
    njit(**_JIT)(_short_loss_loop),
    njit(parallel=True, **_JIT)(_short_loss_loop_parallel),
)
_SHORT_GRAD = (
    njit(**_JIT)(_short_grad_loop),
    njit(parallel=True, **_JIT)(_short_grad_loop_parallel),
)
_LOSS = (njit(**_JIT)(_loss_loop), njit(parallel=True, **_JIT)(_loss_loop_parallel))
_GRAD = (njit(**_JIT)(_grad_loop), njit(parallel=True, **_JIT)(_grad_loop_parallel))


def cross_entropy_loops(shape: tuple[int, int], backward: bool) -> Any:
    """The compiled loop :func:`cross_entropy_rows` (or, ``backward``,
    :func:`cross_entropy_backward_rows`) runs for logits of ``shape``: called as they call
    it, from generated code (:mod:`pylucid.compiler`)."""
    rows, columns = shape
    if backward:
        loops = _SHORT_GRAD if columns <= SHORT_ROW else _GRAD
    else:
        loops = _SHORT_LOSS if columns <= SHORT_ROW else _LOSS
    return loops[rows * columns >= PARALLEL_THRESHOLD_LOSS and rows > 1]


def cross_entropy_rows(
    x: np.ndarray, target: np.ndarray, ignore_index: int, smoothing: float, out: np.ndarray
) -> np.ndarray:
    """The loss of each row of the C-contiguous ``(rows, C)`` logits ``x`` into ``out``
    (``(rows,)``, of ``x``'s dtype); ``target`` holds ``rows`` checked class indices."""
    loop = cross_entropy_loops(x.shape, backward=False)
    loop(x, target, np.int64(ignore_index), np.float64(smoothing), out)
    return out


def cross_entropy_backward_rows(
    x: np.ndarray,
    target: np.ndarray,
    g: np.ndarray,
    ignore_index: int,
    smoothing: float,
    out: np.ndarray,
) -> np.ndarray:
    """``g[r] (softmax(x[r]) - q[r])`` for each row into ``out`` (``x``'s shape and dtype);
    ``g`` holds one float64 gradient per row."""
    loop = cross_entropy_loops(x.shape, backward=True)
    loop(x, target, g, np.int64(ignore_index), np.float64(smoothing), out)
    return out
