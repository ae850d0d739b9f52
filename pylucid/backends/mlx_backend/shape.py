"""MLX primitives of the ``shape`` and ``indexing`` op families.

MLX's basic indexing (ints, slices, None) and its gathers follow NumPy, but its scatter
(``.at[...].add``) places the indexed dimensions differently from NumPy when integer arrays
are mixed with slices (``x[0, :, [1, 2]]``) and rejects some such indices outright. So an
index with arrays is executed through the op's open mesh (one index array per dimension,
see :class:`pylucid.ops.indexing.IndexPlan`), where MLX and NumPy agree by construction.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pylucid.backends.base import Axes, Shape
from pylucid.dtypes import DType


def _assigned_shapes(
    index: tuple[Any, ...], mesh: tuple[np.ndarray, ...] | None, shape: Shape
) -> tuple[Shape, Shape]:
    """The shape of ``a[index]`` for an ``a`` of ``shape``, and the shape MLX's scatter
    writes: the same for an index with arrays (executed through ``mesh``), without the new
    axes of ``None`` entries for a basic index (MLX's scatter rejects ``None``)."""
    if mesh is not None:
        selected = tuple(np.broadcast_shapes(*(m.shape for m in mesh)))
        return selected, selected
    selected, written, dim = [], [], 0
    for e in index:
        if e is None:
            selected.append(1)
            continue
        if isinstance(e, slice):
            selected.append(len(range(shape[dim])[e]))
            written.append(selected[-1])
        dim += 1
    return tuple(selected), tuple(written)


class MLXShape:
    """Primitives of the ``shape`` family on the mlx backend."""

    def transpose(self, a: Any, axes: Axes) -> Any:
        """``a`` with its dimensions permuted by ``axes``; an empty ``a`` gives a new empty
        array (MLX's reductions over several axes of a permuted empty array read garbage:
        ``mx.sum(mx.transpose(mx.ones((0, 3, 8)), (1, 0, 2)), axis=(0, 1))``, MLX 0.32)."""
        if a.size == 0:
            shape = tuple(a.shape[i] for i in axes)
            return self.mx.zeros(shape, dtype=a.dtype, stream=self._stream(self.dtype(a)))
        return self.mx.transpose(a, list(axes), stream=self._stream(self.dtype(a)))

    def concatenate(self, arrays: list[Any], axis: int, dtype: DType) -> Any:
        """The ``arrays`` (all of ``dtype``) joined along ``axis``."""
        return self.mx.concatenate(arrays, axis=axis, stream=self._stream(dtype))

    def getitem(
        self,
        a: Any,
        index: tuple[Any, ...],
        mesh: tuple[np.ndarray, ...] | None,
        shape: Shape,
        dtype: DType,
    ) -> Any:
        """``a[index]`` with NumPy's semantics."""
        mx = self.mx
        with mx.stream(self._stream(dtype)):
            if mesh is None:
                return a[index]
            return a[tuple(mx.array(m) for m in mesh)]

    def setitem(
        self,
        a: Any,
        index: tuple[Any, ...],
        mesh: tuple[np.ndarray, ...] | None,
        value: Any,
        shape: Shape,
        dtype: DType,
    ) -> Any:
        """A new array equal to ``a`` with ``value`` (broadcast to ``a[index]``'s shape)
        assigned at ``index`` (NumPy semantics; ``a`` is not written)."""
        mx = self.mx
        with mx.stream(self._stream(dtype)):
            out = mx.array(a)  # a new array: assigning into it leaves ``a`` as it was
            selected, written = _assigned_shapes(index, mesh, shape)
            if math.prod(selected) == 0:
                return out  # nothing to write (and MLX's scatter rejects empty updates)
            value = mx.reshape(mx.broadcast_to(self.cast(value, dtype), selected), written)
            if mesh is not None:
                out[tuple(mx.array(m) for m in mesh)] = value
            else:
                out[tuple(e for e in index if e is not None)] = value
            return out

    def getitem_backward(
        self,
        g: Any,
        index: tuple[Any, ...],
        mesh: tuple[np.ndarray, ...] | None,
        shape: Shape,
        dtype: DType,
    ) -> Any:
        """Zeros of ``shape`` with ``g`` added at ``index`` (repeats accumulate)."""
        mx = self.mx
        with mx.stream(self._stream(dtype)):
            zeros = mx.zeros(shape, dtype=self._mx_dtype(dtype))
            g = self.cast(g, dtype)
            if g.size == 0:
                return zeros  # nothing to add (and MLX's scatter rejects empty updates)
            if mesh is not None:
                return zeros.at[tuple(mx.array(m) for m in mesh)].add(g)
            # A basic index: drop its new axes (MLX's scatter rejects None) from g too.
            kept = tuple(e for e in index if e is not None)
            sizes = [len(range(n)[e]) for e, n in zip(kept, shape) if isinstance(e, slice)]
            return zeros.at[kept].add(mx.reshape(g, sizes))

    def check_indices(self, index: Any, low: int, high: int) -> int:
        """The position of the first value of ``index`` outside ``[low, high)``, or -1
        (read on the host, as the targets' check is: the answer decides an error)."""
        return self._host().check_indices(self.to_numpy(index), low, high)

    def embedding(self, x: Any, index: Any, axis: int, shape: Shape, dtype: DType) -> Any:
        """``mx.take`` of the slices of ``x`` at ``index`` (negative values from the end)."""
        mx = self.mx
        with mx.stream(self._stream(dtype)):
            size = x.shape[axis]
            index = mx.where(mx.less(index, 0), mx.add(index, size), index)
            return self.cast(mx.take(x, index, axis=axis), dtype)

    def embedding_backward(self, g: Any, index: Any, axis: int, padding_idx: int | None,
                           shape: Shape, dtype: DType) -> Any:  # fmt: skip
        """Zeros of ``shape`` with ``g``'s slices added along ``axis`` at ``index``
        (``.at[].add``: repeats accumulate), the slices whose position is ``padding_idx``
        left out (masked on the device)."""
        mx = self.mx
        with mx.stream(self._stream(dtype)):
            pre, rows = math.prod(shape[:axis]), shape[axis]
            post = math.prod(shape[axis + 1 :])
            flat = mx.reshape(index, (-1,))
            flat = mx.where(mx.less(flat, 0), mx.add(flat, rows), flat)
            if pre * flat.size * post == 0:
                return mx.zeros(shape, dtype=self._mx_dtype(dtype))
            slices = mx.reshape(self.cast(g, dtype), (pre, flat.size, post))
            if padding_idx is not None:
                keep = mx.reshape(mx.not_equal(flat, padding_idx), (1, flat.size, 1))
                slices = mx.where(keep, slices, mx.zeros_like(slices))
            zeros = mx.zeros((rows, pre, post), dtype=self._mx_dtype(dtype))
            added = zeros.at[flat].add(mx.transpose(slices, (1, 0, 2)))
            return mx.reshape(mx.transpose(added, (1, 0, 2)), shape)
