"""Gathering elements by integer indices: index_select and gather (also used by
:func:`pylucid.nn.functional.embedding`).

Public: index_select, gather (functions and Tensor methods, PyTorch's arguments).

Both are compositions of advanced indexing (:func:`pylucid.getitem`), whose gradient
scatters ``g`` back and adds up repeated indices. As in PyTorch, and unlike NumPy's
indexing, an index must lie in ``[0, size)``: a negative index is an error, not a count
from the end. The indices are checked before anything is computed.
"""

from __future__ import annotations

import numpy as np

from pylucid.dtypes import int32, int64
from pylucid.ops.wrapping import require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = ["checked_indices", "gather", "index_select"]


def checked_indices(op: str, index: Tensor, size: int, what: str) -> np.ndarray:
    """``index``'s values as int64, after checking its dtype and that each lies in
    ``[0, size)`` (``what`` names the dimension in the message)."""
    require_tensor(op, "index", index)
    if index.dtype not in (int32, int64):
        raise TypeError(f"{op}: index must be an int64 (or int32) tensor, got {index.dtype.name}")
    values = index.numpy().astype(np.int64)
    if values.size:
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= size:
            raise IndexError(
                f"{op}: index {low if low < 0 else high} is out of range for {what} of size "
                f"{size} (valid: 0..{size - 1}; negative indices are not counted from the end)"
            )
    return values


def _dim(op: str, x: Tensor, dim: int) -> int:
    ndim = max(x.ndim, 1)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be an integer, got {dim!r}")
    if not -ndim <= dim < ndim:
        raise IndexError(f"{op}: dim {dim} is out of range for a tensor of shape {x.shape}")
    return int(dim) % ndim


@tensor_method
def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The slices of ``x`` at the positions ``index`` (a 1-d integer tensor) along ``dim``,
    in that order; repeated positions repeat (and their gradients add up)."""
    require_tensor("index_select", "x", x)
    axis = _dim("index_select", x, dim)
    require_tensor("index_select", "index", index)
    if index.ndim > 1:
        raise ValueError(f"index_select: index must be 1-d, got shape {index.shape}")
    size = x.shape[axis] if x.ndim else 1
    positions = checked_indices("index_select", index, size, f"dim {axis}").reshape(-1)
    if x.ndim == 0:
        return x.reshape(1)[positions].reshape(index.shape)
    return x[(slice(None),) * axis + (positions,)]


@tensor_method
def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """``out[i][j][k] = x[i][index[i][j][k]][k]`` for ``dim = 1`` (likewise for any dim):
    ``index`` has ``x``'s number of dimensions and no larger size than ``x`` but along
    ``dim``; the output has ``index``'s shape."""
    require_tensor("gather", "x", x)
    axis = _dim("gather", x, dim)
    require_tensor("gather", "index", index)
    if index.ndim != x.ndim:
        raise ValueError(
            f"gather: index must have as many dimensions as x ({x.ndim}), got shape "
            f"{index.shape} for x of shape {x.shape}"
        )
    for d, (n, m) in enumerate(zip(index.shape, x.shape)):
        if d != axis and n > m:
            raise ValueError(
                f"gather: index of shape {index.shape} is larger than x of shape {x.shape} "
                f"in dimension {d} (only dim {axis} may differ)"
            )
    size = x.shape[axis] if x.ndim else 1
    positions = checked_indices("gather", index, size, f"dim {axis}")
    if x.ndim == 0:
        return x.reshape(1)[positions.reshape(1)].reshape(())
    mesh = list(np.indices(index.shape, sparse=True))
    mesh[axis] = positions
    return x[tuple(mesh)]
