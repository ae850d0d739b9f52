"""Row kernels of the reductions and the softmax family.

A reduction or a softmax over some axes is run on a C-contiguous ``(rows, n)`` array whose
rows are the slices being reduced (the backend moves the reduced axes last). Each op is a
jitable function of one row - a 1-D view ``x`` of length ``n``, the per-row values of other
operands (a number each), and for maps the output row - and :func:`row_map` /
:func:`row_reduce` generate its serial loop over rows and its ``prange`` loop, used from
the row kernels' parallel threshold on (:mod:`pylucid.kernels.parallel`). The softmax
family also has column functions, for an axis that is not last (see below).

The row sums (:func:`_sum`, :func:`_dot`, :func:`_sum_sq_dev`) keep eight independent
float64 partial sums, without any fast-math licence: the lanes break the latency chain of
one running sum (a few times faster; LLVM still emits scalar adds) and the error is
that of eight sums of n/8 terms, in float64 even for float32 rows. The maxima keep eight
lanes for the same reason. ``exp`` and ``log`` are those of :mod:`pylucid.kernels.simd_math`
(within 1 ULP, exact special values), evaluated in float64: ``x - max`` of a float32 row
is formed in float64 and float32 results are rounded once.

Special values: a row holding NaN gives NaN in every output (softmax, log_softmax,
logsumexp, var); logsumexp of a row of -inf (or of no elements) is -inf and of a row with
+inf is +inf, softmax of such rows is NaN, as in PyTorch. Nothing raises or warns
(``error_model="numpy"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np
from numba.core import types
from numba.extending import overload, register_jitable

from pylucid.kernels import simd_math
from pylucid.kernels.jit import njit
from pylucid.kernels.parallel import parallel_threshold

__all__ = [
    "PARALLEL_THRESHOLD_ROWS",
    "RowKernel",
    "extremum_backward_row",
    "log_softmax_backward_cols",
    "block_map",
    "log_softmax_backward_rows",
    "log_softmax_cols",
    "log_softmax_rows",
    "logsumexp_backward_row",
    "logsumexp_row",
    "prod_backward_row",
    "prod_row",
    "row_map",
    "row_reduce",
    "softmax_backward_cols",
    "softmax_backward_row",
    "softmax_cols",
    "softmax_row",
    "std_row",
    "var_backward_row",
    "var_row",
]

_JIT = {"cache": True, "error_model": "numpy", "nogil": True}


# -- row helpers ----------------------------------------------------------------------------
@register_jitable
def _sum(a):
    """Sum of a 1-D array in float64, over eight independent partial sums."""
    n = a.size
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    i = 0
    while i + 8 <= n:
        s0 += a[i]
        s1 += a[i + 1]
        s2 += a[i + 2]
        s3 += a[i + 3]
        s4 += a[i + 4]
        s5 += a[i + 5]
        s6 += a[i + 6]
        s7 += a[i + 7]
        i += 8
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    while i < n:
        s += a[i]
        i += 1
    return s


@register_jitable
def _dot(a, b):
    """Sum of ``a * b`` in float64, over eight independent partial sums."""
    n = a.size
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    i = 0
    while i + 8 <= n:
        s0 += float(a[i]) * b[i]
        s1 += float(a[i + 1]) * b[i + 1]
        s2 += float(a[i + 2]) * b[i + 2]
        s3 += float(a[i + 3]) * b[i + 3]
        s4 += float(a[i + 4]) * b[i + 4]
        s5 += float(a[i + 5]) * b[i + 5]
        s6 += float(a[i + 6]) * b[i + 6]
        s7 += float(a[i + 7]) * b[i + 7]
        i += 8
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    while i < n:
        s += float(a[i]) * b[i]
        i += 1
    return s


@register_jitable
def _sum_sq_dev(a, mean):
    """Sum of ``(a - mean)**2`` in float64, over eight independent partial sums."""
    n = a.size
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    i = 0
    while i + 8 <= n:
        d0, d1, d2, d3 = a[i] - mean, a[i + 1] - mean, a[i + 2] - mean, a[i + 3] - mean
        d4, d5, d6, d7 = a[i + 4] - mean, a[i + 5] - mean, a[i + 6] - mean, a[i + 7] - mean
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
        s4 += d4 * d4
        s5 += d5 * d5
        s6 += d6 * d6
        s7 += d7 * d7
        i += 8
    s = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    while i < n:
        d = a[i] - mean
        s += d * d
        i += 1
    return s


@register_jitable
def _max(a):
    """Largest element of a non-empty 1-D array, in its dtype, over eight lanes.

    NaN is not looked for: every caller lets a NaN of the row propagate through its sums.
    """
    n = a.size
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = a[0]
    i = 0
    while i + 8 <= n:
        m0 = a[i] if a[i] > m0 else m0
        m1 = a[i + 1] if a[i + 1] > m1 else m1
        m2 = a[i + 2] if a[i + 2] > m2 else m2
        m3 = a[i + 3] if a[i + 3] > m3 else m3
        m4 = a[i + 4] if a[i + 4] > m4 else m4
        m5 = a[i + 5] if a[i + 5] > m5 else m5
        m6 = a[i + 6] if a[i + 6] > m6 else m6
        m7 = a[i + 7] if a[i + 7] > m7 else m7
        i += 8
    m0 = m0 if m0 > m1 else m1
    m2 = m2 if m2 > m3 else m3
    m4 = m4 if m4 > m5 else m5
    m6 = m6 if m6 > m7 else m7
    m0 = m0 if m0 > m2 else m2
    m4 = m4 if m4 > m6 else m6
    m = m0 if m0 > m4 else m4
    while i < n:
        m = a[i] if a[i] > m else m
        i += 1
    return m


# -- softmax family -------------------------------------------------------------------------
@register_jitable
def softmax_row(x, out):
    """out = exp(x - max x) / sum(exp(x - max x)): no overflow for any finite x."""
    if x.size == 0:
        return
    m = float(_max(x))
    for j in range(x.size):
        out[j] = simd_math.exp(x[j] - m)
    scale = 1.0 / _sum(out)
    for j in range(x.size):
        out[j] = out[j] * scale


@register_jitable
def log_softmax_rows(x, out):
    """out = (x - max x) - log(sum(exp(x - max x))) for every row of the 2-D block ``x``.

    In passes over the whole block, not row by row: a row's own loops are too short for
    ``exp`` and ``log`` to vectorise (a classifier's rows of 10: 142 us for 1797 float64
    rows that way, 92 us this way), one loop over the block's contiguous temporaries does.
    The exponentials are rounded to ``out``'s dtype before they are summed."""
    rows, n = x.shape
    if n == 0:
        return
    shifted = np.empty(rows * n)
    for r in range(rows):
        m = float(_max(x[r]))
        for j in range(n):
            shifted[r * n + j] = x[r, j] - m
    exps = np.empty(rows * n)
    for i in range(rows * n):
        exps[i] = simd_math.exp(shifted[i])
    log_sums = np.empty(rows)
    for r in range(rows):
        for j in range(n):
            out[r, j] = exps[r * n + j]
        log_sums[r] = _sum(out[r])
    for r in range(rows):
        log_sums[r] = simd_math.log(log_sums[r])
    for r in range(rows):
        for j in range(n):
            out[r, j] = shifted[r * n + j] - log_sums[r]


@register_jitable
def logsumexp_row(x):
    """log(sum(exp(x))) = s + log(sum(exp(x - s))) with s = max x, or 0 where max x = ±inf
    (so a row of -inf gives -inf and a row holding +inf gives +inf); -inf for no elements."""
    if x.size == 0:
        return -math.inf
    m = float(_max(x))
    shift = m if math.isfinite(m) else 0.0
    s = 0.0
    for j in range(x.size):
        s += simd_math.exp(x[j] - shift)
    return shift + simd_math.log(s)


@register_jitable
def softmax_backward_row(y, g, out):
    """dx = y * (g - sum(g * y)) for y = softmax(x)."""
    d = _dot(g, y)
    for j in range(y.size):
        out[j] = y[j] * (g[j] - d)


@register_jitable
def log_softmax_backward_rows(y, g, out):
    """dx = g - exp(y) * sum(g) for y = log_softmax(x), every row of the 2-D blocks.

    ``exp(y)`` is taken in float64 (then rounded once with the result) in one loop over a
    contiguous copy of the block, which vectorises; the row loop it replaces took it in
    float32 for float32 rows (Numba's ``float()`` of a float32 is a float32) and was 1 ulp
    off the float64 reference for a fifth of the gradients."""
    rows, n = y.shape
    exps = np.empty(rows * n)
    for r in range(rows):
        for j in range(n):
            exps[r * n + j] = y[r, j]
    for i in range(rows * n):
        exps[i] = simd_math.exp(exps[i])
    for r in range(rows):
        s = _sum(g[r])
        for j in range(n):
            out[r, j] = g[r, j] - exps[r * n + j] * s


@register_jitable
def logsumexp_backward_row(x, result, g, out):
    """dx = g * exp(x - result) for result = logsumexp(x)."""
    for j in range(x.size):
        out[j] = g * simd_math.exp(x[j] - float(result))


# -- softmax family down the columns of (n, inner) slabs ------------------------------------
# For an axis that is not last, a C-contiguous (outer, n, inner) view is used as is: each
# slab x[o] is (n, inner) and the softmax runs down its columns. The loops over a column's
# inner index are independent, so they vectorise, and nothing is transposed.
@register_jitable
def column_max(x):
    """The maximum of each column of a non-empty (n, inner) slab (NaN-free columns)."""
    n, inner = x.shape
    m = np.empty(inner)
    for i in range(inner):
        m[i] = x[0, i]
    for k in range(1, n):
        for i in range(inner):
            m[i] = x[k, i] if x[k, i] > m[i] else m[i]
    return m


@register_jitable
def softmax_cols(x, out):
    """Softmax down each column of an (n, inner) slab (see :func:`softmax_row`)."""
    n, inner = x.shape
    if n == 0:
        return
    m = column_max(x)
    total = np.zeros(inner)
    for k in range(n):
        for i in range(inner):
            e = simd_math.exp(x[k, i] - m[i])
            out[k, i] = e
            total[i] += e
    for i in range(inner):
        total[i] = 1.0 / total[i]
    for k in range(n):
        for i in range(inner):
            out[k, i] = out[k, i] * total[i]


@register_jitable
def log_softmax_cols(x, out):
    """Log-softmax down each column of an (n, inner) slab (see :func:`log_softmax_rows`)."""
    n, inner = x.shape
    if n == 0:
        return
    m = column_max(x)
    total = np.zeros(inner)
    for k in range(n):
        for i in range(inner):
            total[i] += simd_math.exp(x[k, i] - m[i])
    for i in range(inner):
        total[i] = simd_math.log(total[i])
    for k in range(n):
        for i in range(inner):
            out[k, i] = (x[k, i] - m[i]) - total[i]


@register_jitable
def softmax_backward_cols(y, g, out):
    """dx = y * (g - sum(g * y)) down each column of (n, inner) slabs."""
    n, inner = y.shape
    dot = np.zeros(inner)
    for k in range(n):
        for i in range(inner):
            dot[i] += float(g[k, i]) * y[k, i]
    for k in range(n):
        for i in range(inner):
            out[k, i] = y[k, i] * (g[k, i] - dot[i])


@register_jitable
def log_softmax_backward_cols(y, g, out):
    """dx = g - exp(y) * sum(g) down each column of (n, inner) slabs."""
    n, inner = y.shape
    total = np.zeros(inner)
    for k in range(n):
        for i in range(inner):
            total[i] += g[k, i]
    for k in range(n):
        for i in range(inner):
            out[k, i] = g[k, i] - simd_math.exp(float(y[k, i])) * total[i]


# -- other reductions -----------------------------------------------------------------------
@register_jitable
def _frexp_product(m, e, v):
    """``(m, e)`` times ``v`` as a mantissa in [0.5, 1) (or 0, inf, nan) and an exponent."""
    fm, fe = math.frexp(v)
    m, k = math.frexp(m * fm)
    return m, e + fe + k


#: Beyond this binary exponent any product is 0 or inf: ldexp's exponent is clamped to it.
_EXPONENT_LIMIT = 4096


@register_jitable
def prod_row(x):
    """The product of a row, its running product kept as a float64 mantissa and an integer
    exponent (frexp): no partial product over- or underflows where the whole does not
    ([1e30, 1e30, 1e-30, 1e-30] is 1, not inf or nan; inf times tiny numbers stays inf),
    and the one rounding to the output's range happens at the end; 1 for no elements."""
    m, e = 1.0, 0
    for j in range(x.size):
        m, e = _frexp_product(m, e, float(x[j]))
    return math.ldexp(m, min(max(e, -_EXPONENT_LIMIT), _EXPONENT_LIMIT))


@register_jitable
def prod_backward_row(x, g, out):
    """dx_j = g * prod_{i != j} x_i, as an exclusive prefix times an exclusive suffix
    product: no division, so exact with any number of zeros. The running products are kept
    as a float64 mantissa and an integer exponent (frexp), so no partial product over- or
    underflows - [inf, 1e-300, 1e-300, ...] gives inf, not inf * 0 = nan; [0, 1e300, ...] 0,
    not 0 * inf - and the one rounding to the output's range happens at the end."""
    n = x.size
    mantissas = np.empty(n)
    exponents = np.empty(n, np.int64)
    m, e = 1.0, 0
    for j in range(n):
        mantissas[j], exponents[j] = m, e
        m, e = _frexp_product(m, e, float(x[j]))
    m, e = math.frexp(float(g))
    for j in range(n - 1, -1, -1):
        exponent = min(max(exponents[j] + e, -_EXPONENT_LIMIT), _EXPONENT_LIMIT)
        out[j] = math.ldexp(mantissas[j] * m, exponent)
        m, e = _frexp_product(m, e, float(x[j]))


@register_jitable
def extremum_backward_row(x, result, g, out):
    """dx = g / k on the k elements equal to ``result`` (the max or min), 0 elsewhere; when
    ``result`` is NaN the NaN elements are the selected ones."""
    nan_result = result != result
    count = 0
    for j in range(x.size):
        if x[j] == result or (nan_result and x[j] != x[j]):
            count += 1
    share = g / count
    for j in range(x.size):
        out[j] = share if x[j] == result or (nan_result and x[j] != x[j]) else 0.0


@register_jitable
def _mean(x):
    """The mean of a non-empty row in float64. Where the sum overflows though the elements
    are finite, the first element plus the mean of the differences from it (exact for a
    constant row of 1e308s), or failing that the sum of ``x / n`` ([max, -max, ...])."""
    n = x.size
    mean = _sum(x) / n
    if math.isfinite(mean):
        return mean
    first = float(x[0])
    shifted = 0.0
    for j in range(n):
        shifted += x[j] - first
    if math.isfinite(first) and math.isfinite(shifted):
        return first + shifted / n
    scaled = 0.0
    for j in range(n):
        scaled += float(x[j]) / n
    return scaled if math.isfinite(scaled) else mean


@register_jitable
def var_row(x, correction):
    """sum((x - mean)**2) / max(0, n - correction), two-pass in float64: NaN for no
    elements, inf (or NaN for a constant row) when n <= correction."""
    n = x.size
    mean = _mean(x) if n else math.nan
    return _sum_sq_dev(x, mean) / max(0.0, n - correction)


#: Sums of squares below this (2^-960) keep too few bits: std scales the deviations.
_TINY_SQUARES = 2.0**-960


@register_jitable
def std_row(x, correction):
    """The square root of :func:`var_row`, taken in float64 before the output's rounding
    (a float32 row [1e20, 1, 2, 3] has a variance beyond float32 but a standard deviation
    of 5e19); where the sum of squares overflows float64 too, the deviations are scaled by
    the largest of them first."""
    n = x.size
    if n == 0:
        return math.nan
    mean = _mean(x)
    divisor = max(0.0, n - correction)
    squares = _sum_sq_dev(x, mean)
    if (_TINY_SQUARES < squares < math.inf) or not math.isfinite(mean):
        return math.sqrt(squares / divisor)
    # Squares beyond float64's range, or so small that they lose bits: halves of the
    # deviations (x - mean itself may overflow: [max, -max, ...]) scaled by the largest.
    scale = 0.0
    for j in range(n):
        scale = max(scale, abs(x[j] / 2.0 - mean / 2.0))
    if scale == 0 or not math.isfinite(scale):  # constant, or an infinite element
        return math.sqrt(squares / divisor)
    scaled = 0.0
    for j in range(n):
        d = (x[j] / 2.0 - mean / 2.0) / scale
        scaled += d * d
    return 2.0 * (scale * math.sqrt(scaled / divisor))  # (2 scale alone may overflow)


@register_jitable
def var_backward_row(x, k, out):
    """out = k * (x - mean x): the gradient of var (k = 2 g / (n - correction)) or std.
    Where x - mean overflows though both are finite ([max, -max, -max, -max]) it is formed
    from halves: 2 (k (x/2 - mean/2))."""
    mean = _mean(x) if x.size else 0.0
    for j in range(x.size):
        d = x[j] - mean
        if math.isfinite(d) or not math.isfinite(x[j]) or not math.isfinite(mean):
            out[j] = k * d
        else:
            out[j] = 2.0 * (k * (x[j] / 2.0 - mean / 2.0))


# -- the loop generator ---------------------------------------------------------------------
def _take(a, r):
    """Row ``r`` of a 2-D array, element ``r`` of a 1-D one, a number itself."""


@overload(_take, inline="always")
def _take_typed(a, r):
    if isinstance(a, types.Array):
        return lambda a, r: a[r]
    return lambda a, r: a


def _map_loops(f: Callable, arity: int) -> tuple[Callable, Callable]:
    if arity == 1:

        def serial(a, out):
            for r in range(out.shape[0]):
                f(a[r], out[r])

        def parallel(a, out):
            for r in numba.prange(out.shape[0]):
                f(a[r], out[r])

    elif arity == 2:

        def serial(a, b, out):
            for r in range(out.shape[0]):
                f(a[r], _take(b, r), out[r])

        def parallel(a, b, out):
            for r in numba.prange(out.shape[0]):
                f(a[r], _take(b, r), out[r])

    else:

        def serial(a, b, c, out):
            for r in range(out.shape[0]):
                f(a[r], _take(b, r), _take(c, r), out[r])

        def parallel(a, b, c, out):
            for r in numba.prange(out.shape[0]):
                f(a[r], _take(b, r), _take(c, r), out[r])

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


def _reduce_loops(f: Callable, arity: int) -> tuple[Callable, Callable]:
    if arity == 1:

        def serial(a, out):
            for r in range(out.shape[0]):
                out[r] = f(a[r])

        def parallel(a, out):
            for r in numba.prange(out.shape[0]):
                out[r] = f(a[r])

    else:

        def serial(a, b, out):
            for r in range(out.shape[0]):
                out[r] = f(a[r], _take(b, r))

        def parallel(a, b, out):
            for r in numba.prange(out.shape[0]):
                out[r] = f(a[r], _take(b, r))

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


#: Rows per chunk of a block function's ``prange`` loop.
_BLOCK_ROWS = 256


def _block_loops(f: Callable, arity: int) -> tuple[Callable, Callable]:
    if arity == 1:

        def serial(a, out):
            f(a, out)

        def parallel(a, out):
            rows = out.shape[0]
            for c in numba.prange((rows + _BLOCK_ROWS - 1) // _BLOCK_ROWS):
                lo, hi = c * _BLOCK_ROWS, min(rows, (c + 1) * _BLOCK_ROWS)
                f(a[lo:hi], out[lo:hi])

    else:

        def serial(a, b, out):
            f(a, b, out)

        def parallel(a, b, out):
            rows = out.shape[0]
            for c in numba.prange((rows + _BLOCK_ROWS - 1) // _BLOCK_ROWS):
                lo, hi = c * _BLOCK_ROWS, min(rows, (c + 1) * _BLOCK_ROWS)
                f(a[lo:hi], b[lo:hi], out[lo:hi])

    return njit(**_JIT)(serial), njit(parallel=True, **_JIT)(parallel)


#: Elements from which a row kernel runs its ``prange`` loop (:mod:`pylucid.kernels.parallel`).
PARALLEL_THRESHOLD_ROWS = parallel_threshold("row")


class RowKernel:
    """Serial and ``prange`` loops over the slices along the first axis of an array.

    Call it with the C-contiguous first operand - ``(rows, n)`` for a row function,
    ``(outer, n, inner)`` for a column function -, the others (arrays of the same shape,
    ``(rows,)`` arrays of one value per row, or NumPy scalars) and ``out``: an array of the
    first operand's shape for a map, ``(rows,)`` for a reduction. It maps arrays to arrays
    and knows nothing of tensors.
    """

    def __init__(self, row_fn: Callable, arity: int, make: Callable = _map_loops) -> None:
        self.name = row_fn.__name__
        self._serial, self._parallel = make(row_fn, arity)

    def __call__(self, *operands: np.ndarray | np.generic, out: np.ndarray) -> np.ndarray:
        first = operands[0]
        big = first.size >= PARALLEL_THRESHOLD_ROWS and first.shape[0] > 1
        (self._parallel if big else self._serial)(*operands, out)
        return out

    def __repr__(self) -> str:
        return f"RowKernel({self.name})"


def row_map(row_fn: Callable, arity: int = 1) -> RowKernel:
    """Loops of ``row_fn(x[r], *others[r], out[r])`` over ``r``; see :class:`RowKernel`.

    Parameters
    ----------
    row_fn : callable
        A module-level ``register_jitable`` function of a slice (a row, or an (n, inner)
        slab for the column functions), ``arity - 1`` other operands and the output slice.
    arity : int
        Number of operands before ``out``: 1, 2 or 3.
    """
    if arity not in (1, 2, 3):
        raise ValueError(f"row maps take 1, 2 or 3 operands, not {arity}")
    return RowKernel(row_fn, arity)


def row_reduce(row_fn: Callable, arity: int = 1) -> RowKernel:
    """Loops of ``out[r] = row_fn(x_row, *others)`` over rows; see :class:`RowKernel`.

    Parameters
    ----------
    row_fn : callable
        A module-level ``register_jitable`` function of a row and ``arity - 1`` others.
    arity : int
        Number of operands before ``out``: 1 or 2.
    """
    if arity not in (1, 2):
        raise ValueError(f"row reductions take 1 or 2 operands, not {arity}")
    return RowKernel(row_fn, arity, _reduce_loops)


def block_map(block_fn: Callable, arity: int = 1) -> RowKernel:
    """Loops of ``block_fn(x, *others, out)`` on the whole ``(rows, n)`` operands (serial)
    or on chunks of their rows (``prange``); see :class:`RowKernel`.

    Parameters
    ----------
    block_fn : callable
        A module-level ``register_jitable`` function of 2-D blocks of rows (``others``: of
        the same shape) and the output block: for row maps whose rows are too short to
        vectorise one at a time.
    arity : int
        Number of operands before ``out``: 1 or 2.
    """
    if arity not in (1, 2):
        raise ValueError(f"block maps take 1 or 2 operands, not {arity}")
    return RowKernel(block_fn, arity, _block_loops)
