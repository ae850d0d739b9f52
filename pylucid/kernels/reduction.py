"""Row kernels of the reductions and the softmax family.

A reduction or a softmax over some axes is run on a C-contiguous ``(rows, n)`` array whose
rows are the slices being reduced (the backend moves the reduced axes last). Each op is a
jitable function of one row - a 1-D view ``x`` of length ``n``, the per-row values of other
operands (a number each), and for maps the output row - and :func:`row_map` /
:func:`row_reduce` generate its serial loop over rows and its ``prange`` loop, used from
the row kernels' parallel threshold on (:mod:`pylucid.kernels.parallel`). The softmax
family also has column functions, for an axis that is not last (see below).

The reductions' row sums (:func:`_sum`, :func:`_dot`, :func:`_sum_sq_dev`) keep eight
independent float64 partial sums, without any fast-math licence: the lanes break the
latency chain of one running sum (a few times faster; LLVM still emits scalar adds) and
the error is that of eight sums of n/8 terms, in float64 even for float32 rows. The
last-axis softmax rows are vectorised throughout instead (see the softmax family below):
their maximum by :func:`row_max`, float32 exponentials in float32 arithmetic, sums that
LLVM may reassociate. The column functions and logsumexp take ``exp`` and ``log`` of
:mod:`pylucid.kernels.simd_math` in float64 (``x - max`` of a float32 row formed in float64,
float32 results rounded once).

Special values: a row holding NaN gives NaN in every output (softmax, log_softmax,
logsumexp, var); logsumexp of a row of -inf (or of no elements) is -inf and of a row with
+inf is +inf, softmax of such rows is NaN, as in PyTorch. Nothing raises or warns
(``error_model="numpy"``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload, register_jitable

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
# Rows of a last-axis softmax are read once from memory: each pass after the first runs on a
# row already in the cache (a row of 128 float32 is 512 bytes). The exponentials are
# :func:`_exp_shifted` - for float32 rows ``simd_math.expf_scaled`` on the exact float64
# difference ``x - max``: 16 float32 lanes, within 1 ULP of ``e^(x - max) 2**64`` (the
# factor keeps every value normal and cancels in the quotient) - and the sums
# :func:`_fast_sum` and :func:`_fast_dot`: float64 sums that LLVM may reassociate, and so
# vectorise (float64 rounds far below float32 in any order; inf and nan are kept). Every
# float32 result is formed in float64 and rounded once.

#: Rows shorter than this take the block kernels of :func:`log_softmax_rows` (a row's own
#: loops are too short to vectorise).
SHORT_ROWS = 16
#: Elements of the scratch of the short-row block kernels (so many rows at a time).
_SHORT_CHUNK = 4096
_FAST = {**_JIT, "fastmath": {"reassoc"}}


def _exp_shifted(v, m):
    """``e^(v - m)`` of one value of a row, ``m`` of the row's dtype: float32 gets
    ``e^(v - m) 2**64`` (:func:`~pylucid.kernels.simd_math.expf_shifted`, float32
    arithmetic, the difference exact), float64 ``e^(v - m)``."""


@overload(_exp_shifted, jit_options={"error_model": "numpy"})
def _exp_shifted_typed(v, m):
    if v == types.float32:
        return lambda v, m: simd_math.expf_shifted(v, m)
    return lambda v, m: simd_math.exp(v - m)


@register_jitable(inline="always")
def _exp_row(x, m, out):
    """``out[j] = _exp_shifted(x[j], m)`` over a row, rounded to ``out``'s dtype."""
    for j in range(x.size):
        out[j] = _exp_shifted(x[j], m)


def _inverse(total, like):
    """``1 / total`` (a float64) in ``like``'s dtype: the scaling that :func:`softmax_row`
    applies in the row's arithmetic (float32: two roundings, within 1 ULP more)."""


@overload(_inverse, inline="always")
def _inverse_typed(total, like):
    if like.dtype == types.float32:
        return lambda total, like: np.float32(1.0 / total)
    return lambda total, like: 1.0 / total


def _split_shift(m, log_sum):
    """``(hi, lo)`` in ``m``'s dtype for ``x - (m + log_sum)`` as ``(x - hi) - lo``: float32
    takes ``hi + lo = m + log_sum`` to 2**-48 (formed in float64), so that ``x - hi``, exact
    for the large terms (Sterbenz), and the correction round about once (within 1 ULP; a
    float64 pass cost 0.16 ms of 0.49 for 1e6 values); float64 keeps ``(x - m) - log_sum``."""


@overload(_split_shift, inline="always")
def _split_shift_typed(m, log_sum):
    if m == types.float32:

        def split(m, log_sum):
            total = np.float64(m) + log_sum
            hi = np.float32(total)
            return hi, np.float32(total - hi)

        return split
    return lambda m, log_sum: (m, log_sum)


def _as_dtype(value, like):
    """The float64 ``value`` rounded to ``like``'s dtype."""


@overload(_as_dtype, inline="always")
def _as_dtype_typed(value, like):
    if like.dtype == types.float32:
        return lambda value, like: np.float32(value)
    return lambda value, like: value


def _zero_of(x):
    """0 in ``x``'s dtype."""


@overload(_zero_of, inline="always")
def _zero_of_typed(x):
    zero = np.dtype(str(x.dtype)).type(0.0)
    return lambda x: zero


def _scale_of(x):
    """The factor :func:`_exp_shifted` leaves in its values: 2**64 for float32 rows, else 1."""


@overload(_scale_of, inline="always")
def _scale_of_typed(x):
    if x.dtype == types.float32:
        return lambda x: 18446744073709551616.0
    return lambda x: 1.0


def _float_bits(kind: types.Float) -> int:
    return 32 if kind == types.float32 else 64


@intrinsic
def _order_key(typingctx, v):  # noqa: ARG001  (numba intrinsic protocol)
    """A float's bits as a signed integer of its width whose order is the float's: the
    magnitude bits flipped for negative values (``-0 < +0``; a NaN sorts beyond the
    infinity of its sign). A running maximum of these is an integer reduction, which LLVM
    vectorises; of the floats it is not, without licence to ignore NaN (8x slower)."""
    if not isinstance(v, types.Float):
        return None
    bits = _float_bits(v)

    def codegen(context, builder, sig, args):  # noqa: ARG001
        kind = ir.IntType(bits)
        i = builder.bitcast(args[0], kind)
        flip = builder.lshr(builder.ashr(i, ir.Constant(kind, bits - 1)), ir.Constant(kind, 1))
        return builder.xor(i, flip)

    return (types.int32 if bits == 32 else types.int64)(v), codegen


@intrinsic
def _from_order_key(typingctx, key, like):  # noqa: ARG001
    """The float (of ``like``'s type) whose :func:`_order_key` is ``key``."""
    if not isinstance(like, types.Float):
        return None
    bits = _float_bits(like)

    def codegen(context, builder, sig, args):  # noqa: ARG001
        kind = ir.IntType(bits)
        i = args[0]
        flip = builder.lshr(builder.ashr(i, ir.Constant(kind, bits - 1)), ir.Constant(kind, 1))
        out = ir.FloatType() if bits == 32 else ir.DoubleType()
        return builder.bitcast(builder.xor(i, flip), out)

    return like(key, like), codegen


@register_jitable
def row_max(a):
    """The largest value of a non-empty row, in its dtype, vectorised (:func:`_order_key`):
    a NaN with the sign bit clear is larger than everything (the row's maximum is NaN), one
    with it set smaller; either way a NaN of the row propagates through the callers'
    exponentials and sums."""
    m = _order_key(a[0])
    for j in range(a.size):
        k = _order_key(a[j])
        m = k if k > m else m
    return _from_order_key(m, a[0])


@njit(**_FAST)
def _fast_sum(a):
    """Sum of a row in float64, in an order LLVM chooses (vectorised)."""
    total = 0.0
    for j in range(a.size):
        total += np.float64(a[j])
    return total


@register_jitable(inline="always")
def row_exp_sum(x, m, out):
    """``out[j] = e^(x[j] - m)`` for a row and the float64 ``sum_j e^(x[j] - m)`` (float32
    rows: ``out`` holds ``e^(x - m) 2**64``, taken out of the sum), ``m`` of the row's
    dtype; see :func:`_exp_shifted`."""
    _exp_row(x, m, out)
    return _fast_sum(out) / _scale_of(x)


@njit(**_FAST)
def _shifted_mean(x, m):
    """``mean_j (m - x_j)`` in float64 (``m`` a float64 at least the row's maximum), of
    halves, so that no term overflows (float64 rows of +-max)."""
    total = 0.0
    for j in range(x.size):
        total += 0.5 * m - 0.5 * np.float64(x[j])
    return 2.0 * (total / x.size)


@njit(**_FAST)
def _fast_dot(a, b):
    """Sum of ``a * b`` in float64, in an order LLVM chooses (vectorised)."""
    total = 0.0
    for j in range(a.size):
        total += np.float64(a[j]) * np.float64(b[j])
    return total


@register_jitable(inline="always")
def softmax_row(x, out):
    """out = exp(x - max x) / sum(exp(x - max x)): no overflow for any finite x. Four
    passes over the row, the last three in the cache: the maximum, the exponentials into
    ``out``, their sum, the scaling by its reciprocal (float32: within 2.5 ULP; a row
    holding NaN or +inf, or only -inf, gives NaN, as in PyTorch)."""
    if x.size == 0:
        return
    _exp_row(x, row_max(x), out)
    inverse = _inverse(_fast_sum(out), out)
    for j in range(out.size):
        out[j] = out[j] * inverse


@register_jitable(inline="always")
def _log_softmax_row(x, out):
    """One row of :func:`log_softmax_rows`: ``x - (m + log(sum e^(x - m)))``, the shift
    split by :func:`_split_shift` (the exponentials pass through ``out``)."""
    m = row_max(x)
    _exp_row(x, m, out)  # (out holds the exponentials until the last pass)
    # (one logarithm per row: libm's, within 1 ULP and a third of simd_math.log's time here)
    hi, lo = _split_shift(m, math.log(_fast_sum(out) / _scale_of(x)))
    for j in range(x.size):
        out[j] = (x[j] - hi) - lo


@register_jitable
def _log_softmax_short(x, out, shifted, exps):
    """Rows too short to vectorise, as one block: ``shifted`` and ``exps`` (float64, at
    least ``x.size`` elements) hold ``x - max`` and its exponentials in one loop each over
    the block's contiguous values, which vectorises (a classifier's rows of 10: 142 us for
    1797 float64 rows row by row, 92 us this way). The exponentials are rounded to
    ``out``'s dtype before they are summed."""
    rows, n = x.shape
    for r in range(rows):
        m = float(_max(x[r]))
        for j in range(n):
            shifted[r * n + j] = x[r, j] - m
    for i in range(rows * n):
        exps[i] = simd_math.exp(shifted[i])
    for r in range(rows):
        for j in range(n):
            out[r, j] = exps[r * n + j]
        log_sum = simd_math.log(_sum(out[r]))
        for j in range(n):
            out[r, j] = shifted[r * n + j] - log_sum


@register_jitable
def log_softmax_rows(x, out):
    """out = (x - max x) - log(sum(exp(x - max x))) for every row of the 2-D block ``x``.

    Rows of :data:`SHORT_ROWS` or more: row by row, two passes (the maximum; the sum of the
    exponentials, not stored) and the output, formed in float64 and rounded once (float32:
    within 1 ULP but where the result cancels). Shorter rows: blocks of rows at a time
    (:func:`_log_softmax_short`) through a scratch of :data:`_SHORT_CHUNK` values."""
    rows, n = x.shape
    if n == 0:
        return
    if n >= SHORT_ROWS:
        for r in range(rows):
            _log_softmax_row(x[r], out[r])
        return
    per = max(1, _SHORT_CHUNK // n)
    shifted = np.empty(min(rows, per) * n)
    exps = np.empty(min(rows, per) * n)
    for first in range(0, rows, per):
        last = min(rows, first + per)
        _log_softmax_short(x[first:last], out[first:last], shifted, exps)


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


@register_jitable(inline="always")
def softmax_backward_row(y, g, out):
    """dx = y * (g - sum(g * y)) for y = softmax(x): the sum vectorised in float64, the
    values in the row's arithmetic (a float64 pass cost half the kernel's time); the
    difference ``g - sum`` cancels where they are close, as in any formula of it."""
    d = _as_dtype(_fast_dot(g, y), y)
    for j in range(y.size):
        out[j] = y[j] * (g[j] - d)


@register_jitable
def log_softmax_backward_rows(y, g, out):
    """dx = g - exp(y) * sum(g) for y = log_softmax(x), every row of the 2-D blocks.

    ``exp(y)`` goes into ``out`` in one loop over the whole block (contiguous: it vectorises
    however short the rows; float32 by ``simd_math.expf_shifted``, taken back by 2**-64,
    within 1 ULP but for the subnormals below e^-87), then each row's ``g - exp(y) sum(g)``
    is one FMA in the row's arithmetic (the sum rounded to it: within 1 ULP of the product
    term more). No temporaries."""
    rows, n = y.shape
    if n == 0:
        return
    flat_y, flat_out = y.reshape(-1), out.reshape(-1)
    _exp_row(flat_y, _zero_of(y), flat_out)
    unscale = _as_dtype(1.0 / _scale_of(y), y)
    for i in range(flat_out.size):
        flat_out[i] = flat_out[i] * unscale
    for r in range(rows):
        s = _as_dtype(_fast_sum(g[r]), y)
        gr, er = g[r], out[r]
        for j in range(n):
            er[j] = simd_math._fma(-er[j], s, gr[j])


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
        self._make = (make, row_fn, arity)

    # The loops are made on first use (no dispatchers at import for a kernel that never
    # runs); cached properties, plain attributes after the first lookup.
    @functools.cached_property
    def _loops(self) -> tuple[Callable, Callable]:
        make, row_fn, arity = self._make
        return make(row_fn, arity)

    @functools.cached_property
    def _serial(self) -> Callable:
        return self._loops[0]

    @functools.cached_property
    def _parallel(self) -> Callable:
        return self._loops[1]

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
