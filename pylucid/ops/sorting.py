"""Sorting and order statistics: argsort, sort, topk, median, nanmedian, kthvalue and mode,
with PyTorch's arguments, order and named tuples.

Public: argsort, sort, topk, median, nanmedian, kthvalue, mode (functions and Tensor
methods); all but argsort return ``(values, indices)``, the named tuples of
:mod:`pylucid.return_types`.

``argsort`` is one op without gradient (:class:`ArgsortBackward`, int64 indices). The order
is always stable - equal elements keep their order, in both directions, which is what
``stable=True`` asks of PyTorch and one of the orders its default allows - and NaN sorts
above every number (last ascending, first descending), as in PyTorch. ``sort`` and ``topk``
gather the values at those indices with :func:`pylucid.gather`, so their gradients (of any
order) are gather's: each input element gets the gradient of the position it moved to.
The order statistics pick a position of that stable order per slice and gather the value
there, so their gradient goes to the one element chosen: ``median`` the lower of the two
middle values (PyTorch's, not their mean), NaN where the slice holds one (the first NaN);
``nanmedian`` the lower middle of the numbers, ignoring NaN; ``kthvalue`` the k-th smallest;
``mode`` the smallest of the most frequent values, at its last position. Among equal values
the index is the one the stable order gives, which is also what PyTorch's CPU kernels give in
the cases the tests compare (PyTorch documents the index among ties as unspecified).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pylucid import return_types
from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, int64
from pylucid.ops.base import Op
from pylucid.ops.gathering import checked_dim, gather
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "ArgsortBackward",
    "argsort",
    "kthvalue",
    "median",
    "mode",
    "nanmedian",
    "sort",
    "topk",
]


class ArgsortBackward(Op):
    """The op ``argsort``: the int64 positions along ``axis`` that order ``x`` (stable; NaN
    above every number), ascending or ``descending``. Not differentiable (its node is never
    recorded); AMP: KEEP_INPUT."""

    schema_v1 = OpSchema(name="argsort", amp_policy=AmpPolicy.KEEP_INPUT, differentiable=False)
    input_names = ("x",)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, axis: int, descending: bool) -> Shape:
        return shapes[0]

    @classmethod
    def result_dtype(cls, compute_dtype: DType) -> DType:
        return int64

    @staticmethod
    def dispatch(
        be: Backend, x: Any, shape: Shape, dtype: DType, axis: int, descending: bool
    ) -> Any:
        return be.argsort(x, axis, descending, dtype)


def _indices(op: str, x: Tensor, dim: int, descending: bool) -> tuple[Tensor, Tensor, int]:
    """``x`` (at least 1-d), its ordering indices along ``dim``, and ``dim`` normalised."""
    require_tensor(op, "x", x)
    axis = checked_dim(op, x, dim)
    flat = x.reshape((1,)) if x.ndim == 0 else x
    return flat, ArgsortBackward.apply(flat, axis=axis, descending=bool(descending)), axis


@tensor_method
def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    """The int64 indices that sort ``x`` along ``dim`` (always stable; see the module)."""
    _, indices, _ = _indices("argsort", x, dim, descending)
    return indices.reshape(x.shape) if x.ndim == 0 else indices


@tensor_method
def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Any:
    """``x`` sorted along ``dim`` and the indices of the sorted values (always stable; see
    the module); the values' gradient flows back to the positions they came from."""
    flat, indices, axis = _indices("sort", x, dim, descending)
    values = gather(flat, axis, indices)
    if x.ndim == 0:
        return return_types.sort(values.reshape(()), indices.reshape(()))
    return return_types.sort(values, indices)


@tensor_method
def topk(
    x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True  # noqa: A002
) -> Any:
    """The ``k`` largest (or, with ``largest=False``, smallest) elements of ``x`` along
    ``dim`` and their indices, in sorted order (``sorted=False`` returns them so too);
    among equal elements the first ones. NaN counts as the largest."""
    flat, indices, axis = _indices("topk", x, dim, descending=largest)
    size = flat.shape[axis]
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= size:
        raise ValueError(
            f"topk: k must be an int in [0, {size}] for dim {axis} of a tensor of shape "
            f"{x.shape}, got {k!r}"
        )
    chosen = indices[(slice(None),) * axis + (slice(0, k),)]
    values = gather(flat, axis, chosen)
    if x.ndim == 0:
        return return_types.topk(values.reshape(()), chosen.reshape(()))
    return return_types.topk(values, chosen)


def _order_statistic(
    op: str,
    result: type,
    x: Tensor,
    dim: int,
    keepdim: bool,
    position: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Any:
    """``(values, indices)`` along ``dim``: ``position(values, order)`` gets each slice's
    values and stable ascending order (NumPy arrays, the slices along the last axis) and
    returns the position in that order to take, per slice (keepdims shape)."""
    flat, order, axis = _indices(op, x, dim, descending=False)
    if flat.shape[axis] == 0:
        raise IndexError(f"{op}: dim {axis} of a tensor of shape {x.shape} has no elements")
    values = np.moveaxis(flat.numpy(), axis, -1)
    ranks = np.moveaxis(order.numpy(), axis, -1)
    taken = np.take_along_axis(ranks, position(values, ranks), axis=-1)
    indices = Tensor._make(
        order._backend.from_numpy(np.ascontiguousarray(np.moveaxis(taken, -1, axis)), int64),
        order._backend,
        int64,
    )
    chosen = gather(flat, axis, indices)
    if x.ndim == 0:
        return result(chosen.reshape(()), indices.reshape(()))
    if not keepdim:
        chosen, indices = chosen.squeeze(axis), indices.squeeze(axis)
    return result(chosen, indices)


def _nan_counts(values: np.ndarray) -> np.ndarray:
    return np.isnan(values).sum(axis=-1, keepdims=True) if values.dtype.kind == "f" else 0


def _median_position(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The lower middle, or the first NaN (NaN sorts last) where a slice holds one."""
    n, nans = values.shape[-1], _nan_counts(values)
    return np.where(nans > 0, n - nans, (n - 1) // 2) + np.zeros((*values.shape[:-1], 1), int)


def _nanmedian_position(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The lower middle of the numbers; 0 (a NaN) for a slice of NaN alone."""
    numbers = values.shape[-1] - _nan_counts(values)
    return np.maximum(numbers - 1, 0) // 2 + np.zeros((*values.shape[:-1], 1), int)


def _mode_position(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The last position of the longest run of equal values in sorted order (the smallest
    such value wins ties; NaNs count as equal to each other)."""
    ordered = np.take_along_axis(values, order, axis=-1)
    same = ordered[..., 1:] == ordered[..., :-1]
    if ordered.dtype.kind == "f":
        same |= np.isnan(ordered[..., 1:]) & np.isnan(ordered[..., :-1])
    n = ordered.shape[-1]
    starts = np.concatenate([np.ones((*same.shape[:-1], 1), bool), ~same], axis=-1)
    run_start = np.maximum.accumulate(np.where(starts, np.arange(n), 0), axis=-1)
    length = np.arange(n) - run_start + 1
    ends = np.concatenate([~same, np.ones((*same.shape[:-1], 1), bool)], axis=-1)
    length = np.where(ends, length, 0)  # (a run's length counted at its last position)
    return np.argmax(length, axis=-1)[..., None]


def _whole(op: str, along: Any, x: Tensor) -> Tensor:
    """The statistic of all elements of ``x`` (a 0-d tensor): NaN for no elements, as
    PyTorch (with an empty gradient)."""
    require_tensor(op, "x", x)
    if x.numel() == 0:
        return x.reshape(-1).sum() * math.nan
    return along(x.reshape(-1), 0).values


@tensor_method
def median(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """PyTorch's ``median``: of all elements (a 0-d tensor) when ``dim`` is None, else the
    named tuple ``(values, indices)`` along ``dim``. The lower of the two middle values for
    an even count; NaN where the slice holds NaN. See the module for the gradient."""
    if dim is None:
        return _whole("median", median, x)
    return _order_statistic("median", return_types.median, x, dim, keepdim, _median_position)


@tensor_method
def nanmedian(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Any:
    """:func:`median` ignoring NaN (NaN only for a slice of NaN alone)."""
    if dim is None:
        return _whole("nanmedian", nanmedian, x)
    return _order_statistic(
        "nanmedian", return_types.nanmedian, x, dim, keepdim, _nanmedian_position
    )


@tensor_method
def kthvalue(x: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> Any:
    """The named tuple ``(values, indices)`` of the ``k``-th smallest element (1-based)
    along ``dim``; NaN counts as the largest."""
    size = x.shape[checked_dim("kthvalue", x, dim)] if x.ndim else 1
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= size:
        raise IndexError(
            f"kthvalue: k must be an int in [1, {size}] for dim {dim} of a tensor of shape "
            f"{x.shape}, got {k!r}"
        )

    def kth(values: np.ndarray, order: np.ndarray) -> np.ndarray:
        return np.full((*values.shape[:-1], 1), int(k) - 1)

    return _order_statistic("kthvalue", return_types.kthvalue, x, dim, keepdim, kth)


@tensor_method
def mode(x: Tensor, dim: int = -1, keepdim: bool = False) -> Any:
    """The named tuple ``(values, indices)`` of the most frequent value along ``dim`` (the
    smallest of equally frequent ones) and its last position."""
    return _order_statistic("mode", return_types.mode, x, dim, keepdim, _mode_position)
