"""Numba primitives of the ``shape`` and ``indexing`` op families.

Shape primitives return NumPy views where NumPy can (``transpose``, a basic ``getitem``), so
moving data around costs nothing until a kernel reads it; the elementwise kernels copy
non-contiguous operands to contiguous ones first. The backward of an integer-array index is
a scatter with accumulation: a Numba kernel for the common case of one array on one axis
(the gradient of an embedding lookup, or of a mask on a 1-d tensor), ``np.add.at``
otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pylucid.backends.base import Axes, Shape
from pylucid.dtypes import DType
from pylucid.kernels.scatter import scatter_add_rows


def _single_array_axis(index: tuple[Any, ...], shape: Shape) -> int | None:
    """The axis of the only array in ``index`` if every other entry is a full slice or an
    Ellipsis (the case :func:`scatter_add_rows` serves), else None."""
    axis, dim = None, 0
    for e in index:
        if isinstance(e, np.ndarray):
            if axis is not None:
                return None
            axis = dim
            dim += 1
        elif e is Ellipsis:
            dim += len(shape) - (len(index) - 1)
        elif isinstance(e, slice) and e == slice(0, shape[dim], 1):
            dim += 1
        else:
            return None
    return axis


class NumbaShape:
    """Primitives of the ``shape`` family on the numba backend."""

    def transpose(self, a: np.ndarray, axes: Axes) -> np.ndarray:
        """``a`` with its dimensions permuted by ``axes`` (a view)."""
        if axes == (1, 0) and a.ndim == 2:  # (a matrix: ``.T`` is a fifth of np.transpose)
            return a.T
        return np.transpose(a, axes)

    def concatenate(self, arrays: list[np.ndarray], axis: int, dtype: DType) -> np.ndarray:
        """The ``arrays`` (all of ``dtype``) joined along ``axis``."""
        return np.concatenate(arrays, axis=axis, dtype=dtype.numpy)

    def getitem(
        self,
        a: np.ndarray,
        index: tuple[Any, ...],
        mesh: tuple[np.ndarray, ...] | None,
        shape: Shape,
        dtype: DType,
    ) -> np.ndarray:
        """``a[index]`` (NumPy semantics; a view for a basic index)."""
        if mesh is None:  # a view even of one element: a[0] alone would copy it to a scalar
            return a[(*index, Ellipsis)]
        return a[index]

    def setitem(
        self,
        a: np.ndarray,
        index: tuple[Any, ...],
        mesh: tuple[np.ndarray, ...] | None,
        value: np.ndarray,
        shape: Shape,
        dtype: DType,
    ) -> np.ndarray:
        """A new array equal to ``a`` with ``value`` (broadcast to ``a[index]``'s shape)
        assigned at ``index`` (NumPy semantics; ``a`` is not written)."""
        out = np.array(a, dtype=dtype.numpy, order="C")
        out[index] = value
        return out

    def getitem_backward(
        self,
        g: np.ndarray,
        index: tuple[Any, ...],
        mesh: tuple[np.ndarray, ...] | None,
        shape: Shape,
        dtype: DType,
    ) -> np.ndarray:
        """Zeros of ``shape`` with ``g`` added at ``index`` (repeats accumulate)."""
        out = np.zeros(shape, dtype=dtype.numpy)
        g = np.asarray(g, dtype=dtype.numpy)
        if mesh is None:
            out[index] = g  # a basic index selects each element at most once
            return out
        axis = _single_array_axis(index, shape)
        if axis is None:
            with np.errstate(all="ignore"):  # inf + -inf is nan, as the kernel gives, silently
                np.add.at(out, index, g)
            return out
        rows = next(e for e in index if isinstance(e, np.ndarray)).reshape(-1)
        pre, post = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1 :]))
        scatter_add_rows(
            out.reshape(pre, shape[axis], post),
            rows,
            np.ascontiguousarray(g).reshape(pre, rows.size, post),
        )
        return out
