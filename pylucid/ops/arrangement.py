"""Repeating, windowing and taking apart, composed from indexing and shape ops (PyTorch's
names and arguments).

Public: repeat, repeat_interleave, unfold, unbind, select, narrow, unflatten, view_as,
expand_as, meshgrid, diag, diagonal, nonzero, argwhere, unique (functions and Tensor
methods where PyTorch has them).

Each differentiable one is an advanced or basic index of ``x`` (repeat, repeat_interleave,
unfold, diag, diagonal) or a reshape/expand/slice, so its gradient is the index's: every
output element sends ``g`` back to the element it copies, repeated positions adding up; they
run on both backends and with ``create_graph``. ``nonzero``, ``argwhere`` and ``unique``
read values in NumPy and return integers or values outside the graph (PyTorch's ``unique``
has no gradient either).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pylucid.dtypes import int64
from pylucid.ops.gathering import checked_dim
from pylucid.ops.shape import _sizes
from pylucid.ops.wrapping import require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "argwhere",
    "diag",
    "diagonal",
    "expand_as",
    "meshgrid",
    "narrow",
    "nonzero",
    "repeat",
    "repeat_interleave",
    "select",
    "unbind",
    "unflatten",
    "unfold",
    "unique",
    "view_as",
]


def _along(axis: int, index: Any) -> tuple[Any, ...]:
    """The index that applies ``index`` to dimension ``axis``."""
    return (slice(None),) * axis + (index,)


def _integers(values: np.ndarray, like: Tensor) -> Tensor:
    return Tensor._make(like._backend.from_numpy(values.astype(np.int64), int64), like._backend,
                        int64)  # fmt: skip


@tensor_method
def repeat(x: Tensor, *sizes: Any) -> Tensor:
    """``x`` tiled ``sizes[i]`` times along each dimension (new leading dimensions where
    ``sizes`` is longer), as ``Tensor.repeat`` (NumPy's ``tile``)."""
    require_tensor("repeat", "x", x)
    counts = _sizes("repeat", sizes, "repeat counts")
    if len(counts) < x.ndim:
        raise ValueError(
            f"repeat: give at least one count per dimension of x (shape {x.shape}), got "
            f"{counts}"
        )
    if any(c < 0 for c in counts):
        raise ValueError(f"repeat: counts must be non-negative, got {counts}")
    shape = (1,) * (len(counts) - x.ndim) + x.shape
    positions = [np.arange(n * c) % n if n else np.arange(0) for n, c in zip(shape, counts)]
    return x.reshape(shape)[np.ix_(*positions)]


@tensor_method
def repeat_interleave(
    x: Tensor, repeats: int | Tensor, dim: int | None = None, *, output_size: int | None = None
) -> Tensor:
    """Each element (or slice along ``dim``) of ``x`` repeated ``repeats`` times in place
    (a number, or one count per element), as ``torch.repeat_interleave``; the flattened
    ``x`` when ``dim`` is None."""
    require_tensor("repeat_interleave", "x", x)
    source = x.reshape(-1) if dim is None else x
    axis = 0 if dim is None else checked_dim("repeat_interleave", x, dim)
    size = source.shape[axis] if source.ndim else 1
    counts = repeats.numpy() if isinstance(repeats, Tensor) else np.asarray(repeats)
    if counts.dtype.kind not in "iu" or counts.ndim > 1 or (counts < 0).any():
        raise ValueError(
            f"repeat_interleave: repeats must be a non-negative int or 1-d integer tensor, "
            f"got {repeats!r}"
        )
    if counts.ndim == 1 and counts.size not in (1, size):
        raise ValueError(
            f"repeat_interleave: repeats has {counts.size} counts for {size} elements along "
            f"dim {axis}"
        )
    positions = np.repeat(np.arange(size), np.broadcast_to(counts.reshape(-1), (size,)))
    if output_size is not None and output_size != positions.size:
        raise ValueError(
            f"repeat_interleave: output_size={output_size} but the repeats give "
            f"{positions.size}"
        )
    if source.ndim == 0:
        return source.reshape(1)[positions]
    return source[_along(axis, positions)]


@tensor_method
def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Windows of ``size`` elements every ``step`` along ``dimension``: that dimension
    becomes the window count and a last dimension of ``size`` is added, as
    ``Tensor.unfold``."""
    require_tensor("unfold", "x", x)
    axis = checked_dim("unfold", x, dimension)
    length = x.shape[axis] if x.ndim else 1
    if size < 0 or size > length or step < 1:
        raise ValueError(
            f"unfold: need 0 <= size <= {length} (dimension {axis} of shape {x.shape}) and "
            f"step >= 1, got size={size}, step={step}"
        )
    starts = np.arange(0, length - size + 1, step)
    windows = starts[:, None] + np.arange(size)[None, :]
    if x.ndim == 0:
        return x.reshape(1)[windows[:, 0]] if size else x.reshape(1)[windows]
    picked = x[_along(axis, windows)]  # (... windows, size ...)
    order = [*range(axis + 1), *range(axis + 2, picked.ndim), axis + 1]
    return picked.permute(*order)


@tensor_method
def unbind(x: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices of ``x`` along ``dim``, without that dimension."""
    require_tensor("unbind", "x", x)
    axis = checked_dim("unbind", x, dim)
    if x.ndim == 0:
        raise ValueError("unbind: a 0-d tensor has no dimension to take apart")
    return tuple(x[_along(axis, i)] for i in range(x.shape[axis]))


@tensor_method
def select(x: Tensor, dim: int, index: int) -> Tensor:
    """The slice of ``x`` at ``index`` along ``dim``, without that dimension."""
    require_tensor("select", "x", x)
    axis = checked_dim("select", x, dim)
    size = x.shape[axis] if x.ndim else 1
    if not -size <= index < size:
        raise IndexError(f"select: index {index} is out of range for dim {axis} of size {size}")
    return x[_along(axis, int(index))]


@tensor_method
def narrow(x: Tensor, dim: int, start: int | Tensor, length: int) -> Tensor:
    """The ``length`` elements from ``start`` along ``dim`` (a view)."""
    require_tensor("narrow", "x", x)
    axis = checked_dim("narrow", x, dim)
    size = x.shape[axis]
    first = int(start) + (size if int(start) < 0 else 0)
    if not (0 <= first and length >= 0 and first + length <= size):
        raise IndexError(
            f"narrow: start {start} and length {length} do not fit dim {axis} of size {size}"
        )
    return x[_along(axis, slice(first, first + length))]


@tensor_method
def unflatten(x: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    """``x`` with dimension ``dim`` split into ``sizes`` (one may be -1)."""
    require_tensor("unflatten", "x", x)
    axis = checked_dim("unflatten", x, dim)
    return x.reshape((*x.shape[:axis], *sizes, *x.shape[axis + 1 :]))


@tensor_method
def view_as(x: Tensor, other: Tensor) -> Tensor:
    """``x.view(other.shape)``."""
    return x.view(require_tensor("view_as", "other", other).shape)


@tensor_method
def expand_as(x: Tensor, other: Tensor) -> Tensor:
    """``x.expand(other.shape)``."""
    return x.expand(require_tensor("expand_as", "other", other).shape)


def meshgrid(*tensors: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-d tensors, as ``torch.meshgrid``: ``indexing="ij"`` (the
    default; PyTorch warns when it is not given, pylucid does not) or ``"xy"`` (the first
    two dimensions swapped, NumPy's default)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        require_tensor("meshgrid", "tensors", t)
        if t.ndim > 1:
            raise ValueError(f"meshgrid: expects 0-d or 1-d tensors, got shape {t.shape}")
    columns = [t.reshape(-1) for t in tensors]
    if indexing == "xy" and len(columns) >= 2:
        columns[0], columns[1] = columns[1], columns[0]
    shape = tuple(c.shape[0] for c in columns)
    grids = []
    for i, c in enumerate(columns):
        view = (1,) * i + (shape[i],) + (1,) * (len(shape) - i - 1)
        grids.append(c.reshape(view).expand(shape))
    if indexing == "xy" and len(grids) >= 2:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


@tensor_method
def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the matrices ``x`` spans in ``dim1``, ``dim2`` (offset above it when
    positive), as the last dimension."""
    require_tensor("diagonal", "x", x)
    a, b = checked_dim("diagonal", x, dim1), checked_dim("diagonal", x, dim2)
    if x.ndim < 2 or a == b:
        raise ValueError(
            f"diagonal: needs two distinct dims of a tensor of 2 or more dims, got {x.shape}"
        )
    rows = np.arange(max(0, -offset), x.shape[a])
    rows = rows[: max(0, min(x.shape[a] - max(0, -offset), x.shape[b] - max(0, offset)))]
    moved = x.permute(*[d for d in range(x.ndim) if d not in (a, b)], a, b)
    return moved[..., rows, rows + offset]


@tensor_method
def diag(x: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-d ``x`` as the ``diagonal`` of a square matrix of zeros; a 2-d ``x``'s diagonal."""
    require_tensor("diag", "x", x)
    if x.ndim == 2:
        return x.diagonal(diagonal)
    if x.ndim != 1:
        raise ValueError(f"diag: expects a 1-d or 2-d tensor, got shape {x.shape}")
    n = x.shape[0] + abs(diagonal)
    rows = np.arange(x.shape[0]) + max(0, -diagonal)
    from pylucid.factories import zeros
    from pylucid.ops.indexing import setitem

    square = zeros(n, n, dtype=x.dtype, device=x._backend.name)
    return setitem(square, (rows, rows + diagonal), x)


@tensor_method
def nonzero(x: Tensor, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """The int64 positions of the non-zero elements, one row each (shape (n, ndim)); with
    ``as_tuple``, one 1-d tensor per dimension. Not differentiable."""
    require_tensor("nonzero", "x", x)
    found = np.nonzero(np.atleast_1d(x.numpy()))
    if as_tuple:
        return tuple(_integers(f, x) for f in found)
    return _integers(np.stack(found, axis=1) if x.ndim else np.zeros((len(found[0]), 0)), x)


@tensor_method
def argwhere(x: Tensor) -> Tensor:
    """:func:`nonzero` (the positions as rows)."""
    return nonzero(x)


@tensor_method
def unique(
    x: Tensor,
    sorted: bool = True,  # noqa: A002  (torch.unique's names)
    return_inverse: bool = False,
    return_counts: bool = False,
    dim: int | None = None,
) -> Tensor | tuple[Tensor, ...]:
    """The distinct values of ``x`` (sorted), with the inverse indices and the counts if
    asked, as ``torch.unique``; ``dim`` takes distinct slices. Not differentiable."""
    require_tensor("unique", "x", x)
    axis = None if dim is None else checked_dim("unique", x, dim)
    values, inverse, counts = np.unique(
        x.numpy(), return_inverse=True, return_counts=True, axis=axis
    )
    if dim is None:
        inverse = inverse.reshape(x.shape)
    kept = Tensor._make(x._backend.from_numpy(np.ascontiguousarray(values), x.dtype),
                        x._backend, x.dtype)  # fmt: skip
    extra = ([_integers(inverse, x)] if return_inverse else []) + (
        [_integers(counts, x)] if return_counts else []
    )
    return (kept, *extra) if extra else kept
