"""Numba primitives of the reduction and softmax families.

Forward reductions that NumPy already does well (``amax``, ``amin``, ``argmax``, ``argmin``,
``prod`` of integers) call NumPy. The others, and every backward, run the kernels of
:mod:`pylucid.kernels.reduction` on a ``(rows, n)`` layout: the reduced axes are moved last
(a copy only when they are not already last) and each row is one reduced slice; results
come back as views in the input's axis order. Per-row operands (``g``, ``result``) arrive
with the reduced axes kept as size 1, so their flat order is the row order. softmax and
log_softmax along an axis that is not last run down the columns of ``(outer, n, inner)``
slabs instead, so that they never transpose."""

from __future__ import annotations

import functools
import math

import numpy as np

from pylucid import memory
from pylucid.backends.base import Axes, Shape
from pylucid.backends.numba_backend.runners import bindable, bound_rows, rows_runner
from pylucid.backends.ordering import stable_argsort
from pylucid.dtypes import DType
from pylucid.kernels import losses, scan
from pylucid.kernels import reduction as kernels

_SOFTMAX = kernels.row_map(kernels.softmax_row)
_LOG_SOFTMAX = kernels.block_map(kernels.log_softmax_rows)
_LOGSUMEXP = kernels.row_reduce(kernels.logsumexp_row)
_SOFTMAX_GRAD = kernels.row_map(kernels.softmax_backward_row, arity=2)
_LOG_SOFTMAX_GRAD = kernels.block_map(kernels.log_softmax_backward_rows, arity=2)
_SOFTMAX_COLS = kernels.row_map(kernels.softmax_cols)
_LOG_SOFTMAX_COLS = kernels.row_map(kernels.log_softmax_cols)
_SOFTMAX_GRAD_COLS = kernels.row_map(kernels.softmax_backward_cols, arity=2)
_LOG_SOFTMAX_GRAD_COLS = kernels.row_map(kernels.log_softmax_backward_cols, arity=2)
_LOGSUMEXP_GRAD = kernels.row_map(kernels.logsumexp_backward_row, arity=3)
_PROD_GRAD = kernels.row_map(kernels.prod_backward_row, arity=2)
_EXTREMUM_GRAD = kernels.row_map(kernels.extremum_backward_row, arity=3)
_VAR = kernels.row_reduce(kernels.var_row, arity=2)
_STD = kernels.row_reduce(kernels.std_row, arity=2)
_PROD = kernels.row_reduce(kernels.prod_row)
_VAR_GRAD = kernels.row_map(kernels.var_backward_row, arity=2)


#: (row kernel, shape, axes, dtype, arity) -> the :func:`rows_runner` of
#: ``NumbaReduction._along``'s calls (backward ones mostly: a forward's plan binds its own),
#: or None; emptied at :data:`ROW_RUNNER_CACHE_SIZE` entries.
_ROW_RUNNERS: dict[tuple, object] = {}
ROW_RUNNER_CACHE_SIZE = 4096


def _order(ndim: int, axes: Axes) -> list[int]:
    """The axis permutation that moves ``axes`` last, keeping the others in order."""
    return [i for i in range(ndim) if i not in axes] + list(axes)


def _trailing(ndim: int, axes: Axes) -> bool:
    """Whether ``axes`` are the last ones, in order (the reduced slices are the rows already)."""
    return axes == tuple(range(ndim - len(axes), ndim))


def _rows(a: np.ndarray, axes: Axes, dtype: DType) -> np.ndarray:
    """``a`` as a C-contiguous ``(rows, n)`` array of ``dtype``, one reduced slice a row."""
    shape = a.shape
    if _trailing(a.ndim, axes):  # the common case (a last axis): no transpose to make
        lead = a.ndim - len(axes)
        moved = a.astype(dtype.numpy, copy=False)
        rows, n = math.prod(shape[:lead]), math.prod(shape[lead:])
    else:
        moved = a.astype(dtype.numpy, copy=False).transpose(_order(a.ndim, axes))
        n = math.prod([shape[i] for i in axes])
        rows = math.prod([shape[i] for i in range(a.ndim) if i not in axes])
    return np.ascontiguousarray(moved).reshape(rows, n)


def _per_row(v: np.ndarray, dtype: DType) -> np.ndarray:
    """A reduced-shape operand (``g``, ``result``) as a contiguous ``(rows,)`` array."""
    return np.ascontiguousarray(v, dtype=dtype.numpy).reshape(-1)


def _unrows(out: np.ndarray, shape: Shape, axes: Axes) -> np.ndarray:
    """Undo :func:`_rows`: a ``(rows, n)`` result back in ``shape``'s axis order (a view)."""
    if _trailing(len(shape), axes):
        return out.reshape(shape)
    order = _order(len(shape), axes)
    return out.reshape([shape[i] for i in order]).transpose(np.argsort(order))


class NumbaReduction:
    """Primitives of the reduction and softmax families on the numba backend."""

    # -- reductions -------------------------------------------------------------------------
    def prod(self, a: np.ndarray, axes: Axes, keepdims: bool, dtype: DType) -> np.ndarray:
        if dtype.is_floating_point:  # no partial product leaves the range (frexp kernel)
            rows = _rows(a, axes, dtype)
            out = _PROD(rows, out=memory.empty((rows.shape[0],), dtype.numpy))
            return out.reshape(_reduced_shape(a.shape, axes, keepdims))
        with np.errstate(over="ignore", invalid="ignore"):  # integers wrap, as in PyTorch
            return np.asarray(np.prod(a, axis=axes, keepdims=keepdims, dtype=dtype.numpy))

    def prod_backward(self, x: np.ndarray, g: np.ndarray, axes: Axes, dtype: DType) -> np.ndarray:
        """``g`` times the product of the other elements of each reduced slice."""
        rows = _rows(x, axes, dtype)
        out = _PROD_GRAD(rows, _per_row(g, dtype), out=memory.empty(rows.shape, rows.dtype))
        return _unrows(out, x.shape, axes)

    def amax(self, a: np.ndarray, axes: Axes, keepdims: bool, dtype: DType) -> np.ndarray:
        return np.asarray(np.max(a, axis=axes, keepdims=keepdims))

    def amin(self, a: np.ndarray, axes: Axes, keepdims: bool, dtype: DType) -> np.ndarray:
        return np.asarray(np.min(a, axis=axes, keepdims=keepdims))

    def extremum_backward(
        self, x: np.ndarray, result: np.ndarray, g: np.ndarray, axes: Axes, dtype: DType
    ) -> np.ndarray:
        """``g`` shared equally by the elements equal to ``result`` (NaN ones if it is NaN)."""
        rows = _rows(x, axes, dtype)
        out = _EXTREMUM_GRAD(
            rows,
            _per_row(result, dtype),
            _per_row(g, dtype),
            out=memory.empty(rows.shape, rows.dtype),
        )
        return _unrows(out, x.shape, axes)

    def argmax(self, a: np.ndarray, axis: int | None, keepdims: bool, dtype: DType) -> np.ndarray:
        return np.asarray(np.argmax(a, axis=axis, keepdims=keepdims), dtype=np.int64)

    def argmin(self, a: np.ndarray, axis: int | None, keepdims: bool, dtype: DType) -> np.ndarray:
        return np.asarray(np.argmin(a, axis=axis, keepdims=keepdims), dtype=np.int64)

    def var(
        self, a: np.ndarray, axes: Axes, keepdims: bool, correction: float, dtype: DType
    ) -> np.ndarray:
        rows = _rows(a, axes, dtype)
        out = _VAR(rows, np.float64(correction), out=memory.empty((rows.shape[0],), dtype.numpy))
        return out.reshape(_reduced_shape(a.shape, axes, keepdims))

    def std(
        self, a: np.ndarray, axes: Axes, keepdims: bool, correction: float, dtype: DType
    ) -> np.ndarray:
        rows = _rows(a, axes, dtype)
        out = _STD(rows, np.float64(correction), out=memory.empty((rows.shape[0],), dtype.numpy))
        return out.reshape(_reduced_shape(a.shape, axes, keepdims))

    def var_backward(
        self, x: np.ndarray, g: np.ndarray, axes: Axes, correction: float, dtype: DType
    ) -> np.ndarray:
        """``2 g (x - mean) / (n - correction)``."""
        divisor = max(0.0, math.prod(x.shape[i] for i in axes) - correction)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = _per_row(g, dtype) * (2.0 / divisor if divisor else np.inf)
        return self._centered(x, k, axes, dtype)

    def std_backward(
        self,
        x: np.ndarray,
        result: np.ndarray,
        g: np.ndarray,
        axes: Axes,
        correction: float,
        dtype: DType,
    ) -> np.ndarray:
        """``g (x - mean) / ((n - correction) std)``, 0 where std = 0; divided in two steps,
        as ``(n - correction) std`` overflows where the largest std does."""
        divisor = max(0.0, math.prod(x.shape[i] for i in axes) - correction)
        std = _per_row(result, dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            k = np.where(std == 0, 0, _per_row(g, dtype) / divisor / std).astype(dtype.numpy)
        return self._centered(x, k, axes, dtype)

    def _centered(self, x: np.ndarray, k: np.ndarray, axes: Axes, dtype: DType) -> np.ndarray:
        rows = _rows(x, axes, dtype)
        out = _VAR_GRAD(rows, k, out=memory.empty(rows.shape, rows.dtype))
        return _unrows(out, x.shape, axes)

    # -- softmax family ---------------------------------------------------------------------
    def logsumexp(self, a: np.ndarray, axes: Axes, keepdims: bool, dtype: DType) -> np.ndarray:
        rows = _rows(a, axes, dtype)
        out = _LOGSUMEXP(rows, out=memory.empty((rows.shape[0],), dtype.numpy))
        return out.reshape(_reduced_shape(a.shape, axes, keepdims))

    def logsumexp_backward(
        self, x: np.ndarray, result: np.ndarray, g: np.ndarray, axes: Axes, dtype: DType
    ) -> np.ndarray:
        """``g exp(x - result)``."""
        rows = _rows(x, axes, dtype)
        out = _LOGSUMEXP_GRAD(
            rows,
            _per_row(result, dtype),
            _per_row(g, dtype),
            out=memory.empty(rows.shape, rows.dtype),
        )
        return _unrows(out, x.shape, axes)

    @bindable(functools.partial(bound_rows, _SOFTMAX))
    def softmax(self, a: np.ndarray, axes: Axes, dtype: DType) -> np.ndarray:
        return self._along(_SOFTMAX, _SOFTMAX_COLS, (a,), axes, dtype)

    @bindable(functools.partial(bound_rows, _LOG_SOFTMAX))
    def log_softmax(self, a: np.ndarray, axes: Axes, dtype: DType) -> np.ndarray:
        return self._along(_LOG_SOFTMAX, _LOG_SOFTMAX_COLS, (a,), axes, dtype)

    def softmax_backward(
        self, y: np.ndarray, g: np.ndarray, axes: Axes, dtype: DType
    ) -> np.ndarray:
        """``y (g - sum(g y))``, fused."""
        return self._along(_SOFTMAX_GRAD, _SOFTMAX_GRAD_COLS, (y, g), axes, dtype)

    def log_softmax_backward(
        self, y: np.ndarray, g: np.ndarray, axes: Axes, dtype: DType
    ) -> np.ndarray:
        """``g - exp(y) sum(g)``, fused."""
        return self._along(_LOG_SOFTMAX_GRAD, _LOG_SOFTMAX_GRAD_COLS, (y, g), axes, dtype)

    def _along(
        self,
        rows_kernel: kernels.RowKernel,
        cols_kernel: kernels.RowKernel,
        operands: tuple[np.ndarray, ...],
        axes: Axes,
        dtype: DType,
    ) -> np.ndarray:
        """Run a softmax-family kernel along the one axis in ``axes`` (none for 0-d): on
        rows when the axis is last (or only size-1 axes follow it), else down the columns
        of ``(outer, n, inner)`` slabs, so that no operand is transposed. Along a last axis
        of C-contiguous operands, through the cached :func:`rows_runner` (the same loop)."""
        shape = operands[0].shape
        key = (rows_kernel, shape, axes, dtype, len(operands))
        runner = _ROW_RUNNERS.get(key, False)
        if runner is False:
            if len(_ROW_RUNNERS) >= ROW_RUNNER_CACHE_SIZE:
                _ROW_RUNNERS.clear()
            runner = _ROW_RUNNERS[key] = rows_runner(rows_kernel, shape, dtype, axes, len(operands))
        if runner is not None:
            out = runner(*operands)
            if out is not None:
                return out
        inner = math.prod(shape[axes[0] + 1 :]) if axes else 1
        if inner > 1:
            slabs = (math.prod(shape[: axes[0]]), shape[axes[0]], inner)
            args = [np.ascontiguousarray(v, dtype.numpy).reshape(slabs) for v in operands]
            return cols_kernel(*args, out=memory.empty(slabs, dtype.numpy)).reshape(shape)
        args = [_rows(v, axes, dtype) for v in operands]
        out = rows_kernel(*args, out=memory.empty(args[0].shape, args[0].dtype))
        return _unrows(out, shape, axes)


    def cumsum(self, a: np.ndarray, axis: int, dtype: DType) -> np.ndarray:
        return _scanned(scan.cumsum, np.cumsum, a, axis, dtype)

    def cumprod(self, a: np.ndarray, axis: int, dtype: DType) -> np.ndarray:
        return _scanned(scan.cumprod, np.cumprod, a, axis, dtype)

    def cumprod_backward(self, x: np.ndarray, g: np.ndarray, axis: int, dtype: DType) -> np.ndarray:
        return scan.cumprod_backward(np.asarray(x, dtype.numpy), np.asarray(g, dtype.numpy), axis)

    def argsort(self, a: np.ndarray, axis: int, descending: bool, dtype: DType) -> np.ndarray:
        return stable_argsort(np.asarray(a), axis, descending)

    # -- losses -----------------------------------------------------------------------------
    def check_targets(self, target: np.ndarray, classes: int, ignore_index: int) -> tuple[int, int]:
        return losses.check_targets(np.ascontiguousarray(target, np.int64), classes, ignore_index)

    def cross_entropy(
        self,
        x: np.ndarray,
        target: np.ndarray,
        ignore_index: int,
        label_smoothing: float,
        divisor: float | None,
        dtype: DType,
    ) -> np.ndarray:
        rows = np.ascontiguousarray(x, dtype.numpy)
        targets = np.ascontiguousarray(target, np.int64)
        if divisor is None:
            out = memory.empty((rows.shape[0],), dtype.numpy)
            return losses.cross_entropy_rows(rows, targets, ignore_index, label_smoothing, out)
        per_row = np.empty(rows.shape[0])  # float64: the sum is rounded once, at the end
        losses.cross_entropy_rows(rows, targets, ignore_index, label_smoothing, per_row)
        total = float(np.add.reduce(per_row))
        # (Python floats: np.errstate costs 5 us; a mean over no rows is nan, as PyTorch's)
        return np.array(total / divisor if divisor else math.nan, dtype.numpy)

    def cross_entropy_backward(
        self,
        x: np.ndarray,
        target: np.ndarray,
        g: np.ndarray,
        ignore_index: int,
        label_smoothing: float,
        divisor: float | None,
        dtype: DType,
    ) -> np.ndarray:
        rows = np.ascontiguousarray(x, dtype.numpy)
        if divisor is None:
            per_row = np.ascontiguousarray(g, np.float64)
        else:  # (no rows count: every row is ignored and gets 0 whatever its share)
            per_row = np.full(rows.shape[0], float(g) / divisor if divisor else math.nan)
        targets = np.ascontiguousarray(target, np.int64)
        out = memory.empty(rows.shape, dtype.numpy)
        return losses.cross_entropy_backward_rows(
            rows, targets, per_row, ignore_index, label_smoothing, out
        )

def _scanned(kernel, exact, a: np.ndarray, axis: int, dtype: DType) -> np.ndarray:  # noqa: ANN001
    """A scan along ``axis``: the float64-accumulating kernel for floating dtypes, NumPy's
    exact integer scan (wrapping on overflow, as PyTorch's) for the others."""
    if not dtype.is_floating_point:
        return exact(np.asarray(a, dtype.numpy).reshape(a.shape or (1,)), axis=axis).reshape(
            a.shape
        )
    return kernel(np.asarray(a, dtype.numpy), axis)


def _reduced_shape(shape: Shape, axes: Axes, keepdims: bool) -> Shape:
    if keepdims:
        return tuple(1 if i in axes else n for i, n in enumerate(shape))
    return tuple(n for i, n in enumerate(shape) if i not in axes)
