"""Gathering and scattering elements by integer indices: index_select, gather, scatter and
scatter_add.

Public: index_select, gather, scatter, scatter_add (functions and Tensor methods,
PyTorch's arguments).

index_select is the embedding op (:mod:`pylucid.ops.embedding`: its index is an input of
the op, read by the backend's kernels, so a compiled step captures it). The others are
compositions of indexing ops, so their gradients (of any order) are those ops':
gather is advanced indexing (:func:`pylucid.getitem`), whose gradient scatters ``g`` back
and adds up repeated indices; scatter_add adds ``src`` into a copy with the index-add op
(the adjoint of gathering), so ``src`` gets ``g`` gathered back; scatter assigns with
:func:`pylucid.setitem` (where an index repeats a position, the last write in row-major
order of the index is kept: PyTorch leaves that order unspecified). As in PyTorch, and
unlike NumPy's indexing, an index must lie in ``[0, size)``: a negative index is an error,
not a count from the end. The indices are checked before anything is computed.
"""

from __future__ import annotations

import numpy as np

from pylucid.dtypes import int32, int64
from pylucid.ops.embedding import take
from pylucid.ops.indexing import IndexAddBackward, plan_index, setitem
from pylucid.ops.wrapping import require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "checked_dim",
    "checked_indices",
    "gather",
    "index_add",
    "index_select",
    "scatter",
    "scatter_add",
]


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


def checked_dim(op: str, x: Tensor, dim: int) -> int:
    """``dim`` normalised into ``range(max(x.ndim, 1))``, or a TypeError / IndexError
    naming ``op``."""
    ndim = max(x.ndim, 1)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise TypeError(f"{op}: dim must be an integer, got {dim!r}")
    if not -ndim <= dim < ndim:
        raise IndexError(f"{op}: dim {dim} is out of range for a tensor of shape {x.shape}")
    return int(dim) % ndim


@tensor_method
def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The slices of ``x`` at the positions ``index`` (a 1-d integer tensor) along ``dim``,
    in that order; repeated positions repeat (and their gradients add up). The embedding
    op (:func:`~pylucid.ops.embedding.take`)."""
    require_tensor("index_select", "x", x)
    axis = checked_dim("index_select", x, dim)
    require_tensor("index_select", "index", index)
    if index.ndim > 1:
        raise ValueError(f"index_select: index must be 1-d, got shape {index.shape}")
    if x.ndim == 0:
        return take("index_select", x.reshape(1), index, 0, "dim 0")
    return take("index_select", x, index.reshape(-1), axis, f"dim {axis}")


@tensor_method
def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """``out[i][j][k] = x[i][index[i][j][k]][k]`` for ``dim = 1`` (likewise for any dim):
    ``index`` has ``x``'s number of dimensions and no larger size than ``x`` but along
    ``dim``; the output has ``index``'s shape."""
    require_tensor("gather", "x", x)
    axis = checked_dim("gather", x, dim)
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


def _scatter_mesh(
    op: str, x: Tensor, dim: int, index: Tensor, src: Tensor | None
) -> tuple[tuple[np.ndarray, ...], int]:
    """The positions of ``x`` that ``index`` writes along ``dim`` (an open mesh), checked
    as PyTorch does; and the axis."""
    require_tensor(op, "x", x)
    axis = checked_dim(op, x, dim)
    require_tensor(op, "index", index)
    if index.ndim != x.ndim or (src is not None and src.ndim != x.ndim):
        src_shape = "" if src is None else f", src of shape {src.shape}"
        raise ValueError(
            f"{op}: index{'' if src is None else ' and src'} must have as many dimensions as "
            f"x ({x.ndim}), got index of shape {index.shape}{src_shape}"
        )
    for d, n in enumerate(index.shape):
        if (d != axis and n > x.shape[d]) or (src is not None and n > src.shape[d]):
            raise ValueError(
                f"{op}: index of shape {index.shape} is larger than x of shape {x.shape} "
                f"(but along dim {axis})"
                + ("" if src is None else f" or src of shape {src.shape}")
                + f" in dimension {d}"
            )
    size = x.shape[axis] if x.ndim else 1
    positions = checked_indices(op, index, size, f"dim {axis}")
    mesh = list(np.indices(index.shape, sparse=True))
    if x.ndim:
        mesh[axis] = positions
    return tuple(mesh), axis


def _leading(src: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The leading ``shape`` block of ``src`` (PyTorch reads only that much of it)."""
    if src.shape == shape:
        return src
    return src[tuple(slice(0, n) for n in shape)]


@tensor_method
def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """A copy of ``x`` with ``src[i][j][k]`` added at ``[i][index[i][j][k]][k]`` for
    ``dim = 1`` (likewise for any dim); repeated positions add up. ``index`` and ``src``
    have ``x``'s number of dimensions, ``index`` no larger than ``src``, nor than ``x`` but
    along ``dim``; ``src`` has ``x``'s dtype."""
    require_tensor("scatter_add", "src", src)
    mesh, _ = _scatter_mesh("scatter_add", x, dim, index, src)
    if src.dtype is not x.dtype:
        raise TypeError(
            f"scatter_add: x is {x.dtype.name} but src is {src.dtype.name}; expected one "
            f"dtype (convert one with .to())"
        )
    if x.ndim == 0:
        return x + _leading(src, index.shape)
    plan = plan_index("scatter_add", mesh, x.shape)
    return x + IndexAddBackward.apply(_leading(src, index.shape), plan=plan)


@tensor_method
def index_add(
    x: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: float = 1
) -> Tensor:
    """A copy of ``x`` with ``alpha * source`` added along ``dim`` at the positions
    ``index`` (a 1-d integer tensor, one per slice of ``source`` along ``dim``); repeated
    positions add up. ``source`` has ``x``'s shape but along ``dim``, where it has
    ``len(index)``, and ``x``'s dtype."""
    require_tensor("index_add", "x", x)
    require_tensor("index_add", "source", source)
    axis = checked_dim("index_add", x, dim)
    require_tensor("index_add", "index", index)
    if index.ndim > 1:
        raise ValueError(f"index_add: index must be 1-d, got shape {index.shape}")
    expected = tuple(index.numel() if d == axis else n for d, n in enumerate(x.shape))
    if x.ndim and source.shape != expected:
        raise ValueError(
            f"index_add: source must have shape {expected} (x's shape {x.shape} with "
            f"len(index) = {index.numel()} along dim {axis}), got {source.shape}"
        )
    if source.dtype is not x.dtype:
        raise TypeError(
            f"index_add: x is {x.dtype.name} but source is {source.dtype.name}; expected one "
            f"dtype (convert one with .to())"
        )
    added = source if alpha == 1 else source * alpha
    if x.ndim == 0:
        return x + added.reshape(())
    positions = checked_indices("index_add", index, x.shape[axis], f"dim {axis}").reshape(-1)
    plan = plan_index("index_add", (slice(None),) * axis + (positions,), x.shape)
    return x + IndexAddBackward.apply(added, plan=plan)


@tensor_method
def scatter(
    x: Tensor, dim: int, index: Tensor, src: Tensor | None = None, value: float | None = None
) -> Tensor:
    """A copy of ``x`` with ``src[i][j][k]`` (or the number ``value``) written at
    ``[i][index[i][j][k]][k]`` for ``dim = 1`` (likewise for any dim); shapes as for
    :func:`scatter_add`. Where ``index`` repeats a position the last write (row-major)
    is kept."""
    if (src is None) == (value is None):
        raise TypeError("scatter: give exactly one of src (a tensor) and value (a number)")
    if src is not None:
        require_tensor("scatter", "src", src)
    mesh, _ = _scatter_mesh("scatter", x, dim, index, src)
    written = value if src is None else _leading(src, index.shape)
    if x.ndim == 0:
        return setitem(x.reshape((1,)), mesh, written).reshape(())
    return setitem(x, mesh, written)
