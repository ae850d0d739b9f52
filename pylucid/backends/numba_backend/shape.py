"""Numba primitives of the ``shape`` and ``indexing`` op families.

Shape primitives return NumPy views where NumPy can (``transpose``, a basic ``getitem``), so
moving data around costs nothing until a kernel reads it; the elementwise kernels copy
non-contiguous operands to contiguous ones first. The backward of an integer-array index is
a scatter with accumulation: a Numba kernel for the common case of one array on one axis
(the gradient of an embedding lookup, or of a mask on a 1-d tensor), ``np.add.at``
otherwise. The embedding op's gather is NumPy's ``take``; its gradient and its bounds check
are Numba kernels (:mod:`pylucid.kernels.gather`), which compiled steps call too.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pylucid import memory
from pylucid.backends.base import Axes, Shape
from pylucid.backends.half import handles_halves
from pylucid.dtypes import DType
from pylucid.kernels import gather


def _single_array_axis(index: tuple[Any, ...], shape: Shape) -> int | None:
    """The axis of the only array in ``index`` if every other entry is a full slice or an
    Ellipsis (the case :meth:`NumbaShape.embedding_backward` serves), else None."""
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
        axis = None if mesh is None else _single_array_axis(index, shape)
        if axis is not None:  # (one array along one axis: the embedding's scatter-add)
            rows = next(e for e in index if isinstance(e, np.ndarray))
            return self.embedding_backward(g, rows, axis, None, shape, dtype)
        out = memory.empty(shape, dtype.numpy)  # (pooled: fresh pages fault on first touch)
        out.fill(0)
        g = np.asarray(g, dtype=dtype.numpy)
        if mesh is None:
            out[index] = g  # a basic index selects each element at most once
            return out
        with np.errstate(all="ignore"):  # inf + -inf is nan, as the kernel gives, silently
            np.add.at(out, index, g)
        return out

    def check_indices(self, index: np.ndarray, low: int, high: int) -> int:
        """The position of the first value of ``index`` outside ``[low, high)``, or -1."""
        return int(gather.check_indices(np.ascontiguousarray(index).reshape(-1), low, high))

    @handles_halves
    def embedding(self, x: np.ndarray, index: np.ndarray, axis: int, shape: Shape,
                  dtype: DType) -> np.ndarray:  # fmt: skip
        """``np.take(x, index, axis)``: a copy, so half arrays are taken as they are (and
        given a float32 ``dtype``, widened)."""
        return np.take(x, index, axis=axis).astype(dtype.numpy, copy=False)

    def embedding_backward(self, g: np.ndarray, index: np.ndarray, axis: int,
                           padding_idx: int | None, shape: Shape,
                           dtype: DType) -> np.ndarray:  # fmt: skip
        """Zeros of ``shape`` with ``g``'s slices added along ``axis`` at ``index``
        (:func:`~pylucid.kernels.gather.scatter_rows`)."""
        pre, rows = math.prod(shape[:axis]), shape[axis]
        post = math.prod(shape[axis + 1 :])
        flat = np.ascontiguousarray(index).reshape(-1)
        out = np.empty(shape, dtype.numpy)
        gather.scatter_rows(
            np.ascontiguousarray(g, dtype.numpy).reshape(pre, flat.size, post),
            flat,
            -1 if padding_idx is None else padding_idx,
            out.reshape(pre, rows, post),
        )
        return out
