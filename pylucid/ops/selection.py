"""Selecting and rearranging elements, composed from registered ops.

Public: masked_fill, tril, triu, flip, roll (functions and Tensor methods, PyTorch's names
and arguments).

Each is a short composition of differentiable ops: ``where`` with a constant mask
(masked_fill, tril, triu), basic indexing with a negative step (flip) and ``concatenate``
of two slices (roll). So each has the gradient of its parts (the kept elements get ``g``,
replaced ones 0; flip and roll move ``g`` back), works on both backends and with
``create_graph``, and needs no kernel of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pylucid.dtypes import bool_
from pylucid.ops.binary import where
from pylucid.ops.shape import concatenate
from pylucid.ops.wrapping import Number, require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = ["flip", "masked_fill", "roll", "tril", "triu"]


def _axis(op: str, x: Tensor, axis: int) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{op}: dims must be integers, got {axis!r}")
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ValueError(
            f"{op}: dim {axis} is out of range for a tensor of shape {x.shape} "
            f"({x.ndim} dimensions)"
        )
    return int(axis) % max(x.ndim, 1)


def _dims(op: str, x: Tensor, dims: int | Sequence[int]) -> tuple[int, ...]:
    listed = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    axes = tuple(_axis(op, x, d) for d in listed)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: dims {listed} repeat a dimension")
    return axes


@tensor_method
def masked_fill(x: Tensor, mask: Tensor, value: Number | Tensor) -> Tensor:
    """``value`` where the bool ``mask`` (broadcast to ``x``) is True, ``x`` elsewhere; the
    gradient of ``x`` is ``g`` where it is kept and 0 where it is replaced."""
    require_tensor("masked_fill", "x", x)
    require_tensor("masked_fill", "mask", mask)
    if mask.dtype is not bool_:
        raise TypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype.name}")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise ValueError(
            f"masked_fill: value must be a number or a 0-d tensor, got shape {value.shape}"
        )
    out = where(mask, value, x)
    if out.shape != x.shape:
        raise ValueError(
            f"masked_fill: a mask of shape {mask.shape} does not broadcast to x's {x.shape}"
        )
    return out if out.dtype is x.dtype else out.to(x.dtype)


def _triangle(op: str, x: Tensor, diagonal: int, lower: bool) -> Tensor:
    require_tensor(op, "x", x)
    if x.ndim < 2:
        raise ValueError(f"{op}: needs a tensor of at least 2 dimensions, got shape {x.shape}")
    rows, cols = x.shape[-2:]
    make = np.tril if lower else np.triu
    keep = make(np.ones((rows, cols), dtype=bool), k=int(diagonal))
    mask = Tensor._make(x._backend.from_numpy(keep, bool_), x._backend, bool_)
    return where(mask, x, 0)


@tensor_method
def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dimensions: elements on and below the
    ``diagonal``-th diagonal (0: the main one, > 0 above it), zeros elsewhere."""
    return _triangle("tril", x, diagonal, lower=True)


@tensor_method
def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle: elements on and above the ``diagonal``-th diagonal."""
    return _triangle("triu", x, diagonal, lower=False)


@tensor_method
def flip(x: Tensor, dims: int | Sequence[int]) -> Tensor:
    """``x`` with the order of the elements along each of ``dims`` reversed."""
    require_tensor("flip", "x", x)
    axes = _dims("flip", x, dims)
    if x.ndim == 0:
        return x.clone()
    index = tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))
    return x[index]


@tensor_method
def roll(x: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """``x`` with its elements shifted by ``shifts`` along ``dims``, wrapping around (no
    ``dims``: the flattened tensor, shape restored)."""
    require_tensor("roll", "x", x)
    if dims is None:
        if not isinstance(shifts, (int, np.integer)):
            raise TypeError(f"roll: without dims, shifts must be one integer, got {shifts!r}")
        return roll(x.reshape(-1), int(shifts), 0).reshape(x.shape)
    shift_list = (shifts,) if isinstance(shifts, (int, np.integer)) else tuple(shifts)
    axes = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
    if len(shift_list) != len(axes):
        raise ValueError(
            f"roll: {len(shift_list)} shifts for {len(axes)} dims; give one shift per dim"
        )
    out = x
    for shift, axis in zip(shift_list, axes):
        axis = _axis("roll", x, axis)
        size = x.shape[axis] if x.ndim else 1
        k = int(shift) % size if size else 0
        if k == 0:
            continue
        lead = (slice(None),) * axis
        out = concatenate(
            [out[(*lead, slice(size - k, None))], out[(*lead, slice(0, size - k))]], axis=axis
        )
    return out if out is not x else x.clone()
