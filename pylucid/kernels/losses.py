"""Row kernels of cross entropy with class-index targets: the loss of each row and its
gradient, each in one pass over the logits (plus the pass that finds the row's maximum).

A row is the ``C`` logits ``x`` of one example, its target class ``t`` and a label smoothing
``e``; the smoothed target distribution is ``q_j = (1 - e) [j = t] + e / C``. With
``lse = log sum_j exp(x_j)`` (formed as ``m + log sum_j exp(x_j - m)``, ``m`` the row's
maximum, or 0 where that is -inf; NaN for a row holding +inf, whose softmax is NaN; the
terms are evaluated on ``x - m``):

- loss ``= sum_j q_j (lse - x_j) = (1 - e)(lse - x_t) + e (lse - mean_j x_j)``;
- gradient ``d loss / d x_j = softmax_j - q_j``, the softmax as ``exp(x_j - m) / sum``.

A row whose target is ``ignore_index`` has loss 0 and gradient 0. Rows of more than
:data:`SHORT_ROW` classes go row by row, in passes over a row in the cache: its maximum
(vectorised), its exponentials (float32 rows in float32 arithmetic,
:func:`~pylucid.kernels.simd_math.expf_shifted`, within 1 ULP; float64 rows
:func:`~pylucid.kernels.simd_math.exp`) and their float64 sum; the loss is then formed in
float64 (libm's log, once per row), the gradient by one FMA per value in the row's
arithmetic (float32: within 2 ULP of ``g softmax_j``, then ``g q_j`` subtracted). Shorter
rows go in column-wise blocks, in float64. Targets are checked by :func:`check_targets`
before these run.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
from numba.extending import overload, register_jitable

from pylucid.kernels import simd_math
from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold
from pylucid.kernels.reduction import _as_dtype, _scale_of, _shifted_mean, row_exp_sum, row_max
from pylucid.kernels.simd_math import _fma

__all__ = [
    "PARALLEL_THRESHOLD_LOSS",
    "check_targets",
    "cross_entropy_backward_rows",
    "cross_entropy_rows",
]

#: Element count of the logits from which the row loops run in parallel (row-kernel cost).
PARALLEL_THRESHOLD_LOSS = parallel_threshold("row")

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}
#: Rows per block of the column-wise kernels and of the row kernels' parallel loops.
_BLOCK = 64


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


def _shift(m):
    """The shift of a row whose maximum is ``m``, in its dtype: ``m``, or 0 where that is
    -inf; NaN for a row holding +inf (its softmax is NaN, so are its loss and gradient, as
    in PyTorch)."""


@overload(_shift, inline="always")
def _shift_typed(m):
    kind = np.dtype(str(m))
    zero, nan = kind.type(0.0), kind.type(math.nan)

    def shift(m):
        if m == math.inf:
            return nan
        return m if m > -math.inf else zero  # (nan stays nan)

    return shift


@register_jitable
def _loss_block(x, target, first, last, ignore_index, smoothing, scratch, shift, total, out):
    """The losses of the rows ``[first, last)`` into ``out``: ``log sum_j e^(x_j - m) +
    (1 - e)(m - x_t) + e mean_j (m - x_j)`` in float64, as PyTorch's log_softmax (``m +
    log 3`` would round ``log 3`` away in a row of three ``max``): every term is ``>= 0``,
    so no partial sum exceeds the loss. Pass by pass over the block (the rows' maxima, then
    their exponentials, through ``scratch``, and sums, then the logarithms in one
    vectorised loop), so that the short dependency chains of consecutive rows overlap (row
    by row, a row of 65 float32 took 40 ns, 20 of them waiting). Where ``m - x_t``
    overflows (float64 rows), its term is ``(1 - e) m - (1 - e) x_t``."""
    n = last - first
    for i in range(n):
        shift[i] = _shift(row_max(x[first + i]))
    for i in range(n):
        total[i] = row_exp_sum(x[first + i], shift[i], scratch)
    for i in range(n):
        total[i] = simd_math.log(total[i])
    keep = 1.0 - smoothing
    for i in range(n):
        r = first + i
        t = target[r]
        if t == ignore_index:
            out[r] = 0.0
            continue
        md, xt = np.float64(shift[i]), np.float64(x[r, t])
        d = md - xt
        loss = total[i] + (keep * d if d < math.inf else keep * md - keep * xt)
        if smoothing != 0.0:
            loss += smoothing * _shifted_mean(x[r], md)
        out[r] = loss


@register_jitable
def _grad_block(x, target, g, first, last, ignore_index, smoothing, shift, total, out):
    """``g (softmax_j - q_j)`` of the rows ``[first, last)`` into ``out``, pass by pass
    over the block as :func:`_loss_block`: the maxima; the exponentials into ``out`` and
    their sums; ``g / sum`` for every row in one loop; then one FMA per value in the row's
    arithmetic (``g / sum`` rounded to it), the target's ``g (1 - e)`` taken off after.
    ``g`` holds float64s. An ignored row gets 0, whatever its logits."""
    n = last - first
    for i in range(n):
        shift[i] = _shift(row_max(x[first + i]))
    for i in range(n):
        total[i] = row_exp_sum(x[first + i], shift[i], out[first + i]) * _scale_of(x)
    for i in range(n):
        total[i] = g[first + i] / total[i]
    keep = 1.0 - smoothing
    for i in range(n):
        r = first + i
        t, row = target[r], out[r]
        if t == ignore_index:
            for j in range(row.size):
                row[j] = 0.0
            continue
        scale = _as_dtype(total[i], x)
        spread = _as_dtype(g[r] * (smoothing / row.size), x)
        for j in range(row.size):
            row[j] = _fma(row[j], scale, -spread)
        row[t] = row[t] - _as_dtype(g[r] * keep, x)


@register_jitable
def _block_scratch(x):
    """A row of ``x``'s dtype, and the shift and sum of each row of a block."""
    return np.empty(x.shape[1], x.dtype), np.empty(_BLOCK, x.dtype), np.empty(_BLOCK)


def _loss_loop(x, target, ignore_index, smoothing, out):
    scratch, shift, total = _block_scratch(x)
    for first in range(0, x.shape[0], _BLOCK):
        last = min(first + _BLOCK, x.shape[0])
        _loss_block(x, target, first, last, ignore_index, smoothing, scratch, shift, total, out)


def _loss_loop_parallel(x, target, ignore_index, smoothing, out):
    for block in numba.prange((x.shape[0] + _BLOCK - 1) // _BLOCK):
        scratch, shift, total = _block_scratch(x)
        first = block * _BLOCK
        last = min(first + _BLOCK, x.shape[0])
        _loss_block(x, target, first, last, ignore_index, smoothing, scratch, shift, total, out)


def _grad_loop(x, target, g, ignore_index, smoothing, out):
    _, shift, total = _block_scratch(x)
    for first in range(0, x.shape[0], _BLOCK):
        last = min(first + _BLOCK, x.shape[0])
        _grad_block(x, target, g, first, last, ignore_index, smoothing, shift, total, out)


def _grad_loop_parallel(x, target, g, ignore_index, smoothing, out):
    for block in numba.prange((x.shape[0] + _BLOCK - 1) // _BLOCK):
        _, shift, total = _block_scratch(x)
        first = block * _BLOCK
        last = min(first + _BLOCK, x.shape[0])
        _grad_block(x, target, g, first, last, ignore_index, smoothing, shift, total, out)


#: Rows of at most this many classes take the column-wise kernels (:func:`_short_block`).
SHORT_ROW = 32


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
