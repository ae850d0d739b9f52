"""Float sums of the ``numba`` backend from the compiled loops of :mod:`pylucid.kernels.pairwise`.

:func:`compiled_sum` is what the ``sum`` primitive tries first: ``np.add.reduce``'s bits for
short trailing rows and for leading axes, without NumPy's per-row loop call. :func:`bound_sum`
binds the same loops to a dispatch plan (``NumbaCore._bind``), so that a repeated
``x.sum(axis=1)`` goes from the storage to the loop's entry point without the primitive's
half-dtype wrapper, its key and its cache lookup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from pylucid.backends.base import Axes, Shape
from pylucid.dtypes import DType
from pylucid.kernels import pairwise
from pylucid.kernels.jit import entry_point

__all__ = ["SUM_PLAN_CACHE_SIZE", "bound_sum", "compiled_sum"]

_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)

#: Rows up to this length are summed by :func:`pairwise.sum_rows` (a row's loop call in
#: NumPy costs more than its additions); longer ones by NumPy, whose block loop is SIMD:
#: (1797, 10) float64 rows 11 us against 33, (1000, 128) 42 against 35 (Sapphire Rapids).
_COMPILED_ROW_SUM = 64


#: (shape, axes, keepdims, dtype) -> the runner :func:`compiled_sum` sums it with
#: (:func:`_sum_runner`), or None where NumPy does; emptied at :data:`SUM_PLAN_CACHE_SIZE`
#: entries.
_SUM_PLANS: dict[tuple, Callable[[np.ndarray], np.ndarray | None] | None] = {}
SUM_PLAN_CACHE_SIZE = 4096


def _sum_runner(
    shape: Shape, axes: Axes, keepdims: bool, dtype: np.dtype
) -> Callable[[np.ndarray], np.ndarray | None] | None:
    """The loop of :mod:`pylucid.kernels.pairwise` that sums an array of ``shape`` and the
    float ``dtype`` over ``axes`` in NumPy's order, called at its entry point; the runner
    returns None for an array of another dtype or not ``flags.carray``. None where the loops
    do not take the signature (see :func:`compiled_sum`)."""
    ndim, count = len(shape), len(axes)
    reduced = math.prod([shape[i] for i in axes])
    kept = math.prod(shape) // reduced if reduced else 0
    result = tuple(1 if i in axes else n for i, n in enumerate(shape) if keepdims or i not in axes)
    if not count or not reduced or not kept:
        return None
    zero, vector = dtype.type(0), np.empty(1, dtype)
    reshaped = len(result) != 1
    if axes == tuple(range(ndim - count, ndim)) or kept == 1:  # rows (one, for kept == 1)
        if reduced > _COMPILED_ROW_SUM:
            return None
        rows = entry_point(pairwise.sum_rows, (vector, reduced, zero, vector))

        def run_rows(a: np.ndarray) -> np.ndarray | None:
            if a.dtype is not dtype or not a.flags.carray:
                return None
            out = np.empty(kept, dtype)
            rows(a.reshape(-1), reduced, zero, out)
            return out.reshape(result) if reshaped else out

        return run_rows
    if axes == tuple(range(count)):  # leading axes: the rows are added one by one
        columns = entry_point(pairwise.sum_columns, (vector.reshape(1, 1), zero, vector))

        def run_columns(a: np.ndarray) -> np.ndarray | None:
            if a.dtype is not dtype or not a.flags.carray:
                return None
            out = np.empty(kept, dtype)
            columns(a.reshape(reduced, kept), zero, out)
            return out.reshape(result) if reshaped else out

        return run_columns
    return None


def compiled_sum(a: np.ndarray, axes: Axes, keepdims: bool, dtype: np.dtype) -> np.ndarray | None:
    """``np.add.reduce(a, axes, dtype, keepdims=keepdims)`` from the compiled loops of
    :mod:`pylucid.kernels.pairwise`, bit for bit, or None where they do not take it: other
    dtypes than float32/float64 (or than ``a``'s), layouts other than C-contiguous and
    writeable, no elements, axes that are neither the leading nor the trailing ones, and
    trailing rows longer than :data:`_COMPILED_ROW_SUM`."""
    if a.dtype is not dtype or (dtype is not _FLOAT32 and dtype is not _FLOAT64):
        return None
    key = (a.shape, axes, keepdims, dtype)
    runner = _SUM_PLANS.get(key, False)
    if runner is False:
        if len(_SUM_PLANS) >= SUM_PLAN_CACHE_SIZE:
            _SUM_PLANS.clear()
        runner = _SUM_PLANS[key] = _sum_runner(a.shape, axes, keepdims, dtype)
    return None if runner is None else runner(a)


def bound_sum(
    input_shapes: Sequence[Shape],
    input_dtypes: Sequence[DType],
    shape: Shape,
    dtype: DType,
    *,
    axes: Axes,
    keepdims: bool,
) -> Callable[[np.ndarray], np.ndarray | None] | None:
    """The runner of ``sum(x, axes, keepdims, dtype)`` for ``x`` of ``input_shapes[0]`` and
    ``input_dtypes[0]``: :func:`compiled_sum`'s loop for that signature (:func:`_sum_runner`),
    made now, or None where :func:`compiled_sum` would not take it (then the general path
    runs). Its output is :func:`compiled_sum`'s to the bit (the same loop on the same
    elements)."""
    (input_shape,), (input_dtype,) = input_shapes, input_dtypes
    numpy_dtype = dtype.numpy
    if input_dtype is not dtype or (numpy_dtype is not _FLOAT32 and numpy_dtype is not _FLOAT64):
        return None
    return _sum_runner(input_shape, axes, keepdims, numpy_dtype)
