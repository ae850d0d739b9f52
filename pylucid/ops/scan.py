"""Scans: cumsum, cumprod, cummax and cummin along a dimension, with PyTorch's arguments
and dtypes.

Public: cumsum, cumprod, cummax, cummin (functions and Tensor methods). Integer and bool
inputs of cumsum and cumprod scan in int64, as PyTorch's (exactly, wrapping on overflow);
``dtype=`` casts the input first. On the CPU float32 accumulates in float64
(:mod:`pylucid.kernels.scan`). AMP: KEEP_INPUT.

``cummax`` / ``cummin`` return the named tuple ``(values, indices)``: position ``i`` holds
the extremum of the first ``i + 1`` elements and where it is, PyTorch's rule: the index moves
on ties (the last of equal extrema), and once a NaN is met the values stay NaN, the index
moving to each later NaN. The values are gathered at the indices, so the gradient of each
goes to the element it came from.
"""

from __future__ import annotations

from collections.abc import Sequence
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

__all__ = ["CumprodBackward", "CumsumBackward", "cummax", "cummin", "cumprod", "cumsum"]


class _ScanOp(Op):
    """A scan of ``x`` along ``axis``: the output has ``x``'s shape."""

    input_names = ("x",)

    @classmethod
    def output_shape(cls, shapes: Sequence[Shape], *, axis: int) -> Shape:
        return shapes[0]

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        (dtype,) = dtypes
        return dtype if dtype.is_floating_point else int64


def _reverse_cumsum(g: Tensor, axis: int) -> Tensor:
    """``sum_{k >= i} g_k`` along ``axis``, in differentiable ops."""
    return cumsum(g.flip(axis), axis).flip(axis)


class CumsumBackward(_ScanOp):
    r"""Autograd node of the cumulative sum :math:`y_i = \sum_{j \le i} x_j` along
    ``axis``; saves nothing.

    .. math:: \frac{\partial L}{\partial x_i} = \sum_{k \ge i} g_k
    """

    schema_v1 = OpSchema(name="cumsum", amp_policy=AmpPolicy.KEEP_INPUT)

    @staticmethod
    def dispatch(be: Backend, x: Any, shape: Shape, dtype: DType, axis: int) -> Any:
        return be.cumsum(x, axis, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be, flip = self.backend, _reversed(self.axis)
        flipped = be.getitem(g, flip, None, self.shape, self.dtype)
        return (
            be.getitem(
                be.cumsum(flipped, self.axis, self.dtype), flip, None, self.shape, self.dtype
            ),
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (_reverse_cumsum(g, self.axis),)


def _reversed(axis: int) -> tuple[slice, ...]:
    """The basic index that reverses ``axis``."""
    return (slice(None),) * axis + (slice(None, None, -1),)


class CumprodBackward(_ScanOp):
    r"""Autograd node of the cumulative product :math:`y_i = \prod_{j \le i} x_j` along
    ``axis``; saves ``x``.

    .. math::
        \frac{\partial L}{\partial x_i} = \sum_{k \ge i} g_k \prod_{j \le k,\, j \ne i} x_j

    computed without a division, as a prefix product times a suffix recurrence
    (:mod:`pylucid.kernels.scan`), so zeros need no special case. Its differentiable
    form (``create_graph``) is :math:`\sum_{k \ge i} g_k y_k / x_i`, for inputs without
    zeros: with a zero it raises rather than give a wrong second derivative.
    """

    schema_v1 = OpSchema(name="cumprod", amp_policy=AmpPolicy.KEEP_INPUT, saved=("x",))

    @staticmethod
    def dispatch(be: Backend, x: Any, shape: Shape, dtype: DType, axis: int) -> Any:
        return be.cumprod(x, axis, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.cumprod_backward(self.saved["x"], g, self.axis, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        x = self.saved_tensor("x")
        if bool((x == 0).any().item()):
            raise NotImplementedError(
                "cumprod: backward with create_graph=True through an input holding zeros is "
                "not supported (its differentiable gradient divides by x); the first "
                "derivative is exact"
            )
        return (_reverse_cumsum(g * cumprod(x, self.axis), self.axis) / x,)


def _scan(op: type[Op], name: str, x: Tensor, dim: int, dtype: DType | None) -> Tensor:
    require_tensor(name, "x", x)
    axis = checked_dim(name, x, dim)
    if dtype is not None:
        x = x.to(dtype)
    if x.ndim == 0:
        return op.apply(x.reshape((1,)), axis=0).reshape(())
    return op.apply(x, axis=axis)


@tensor_method
def cumsum(x: Tensor, dim: int, dtype: DType | None = None) -> Tensor:
    """The cumulative sum of ``x`` along ``dim`` (see the module for dtypes)."""
    return _scan(CumsumBackward, "cumsum", x, dim, dtype)


@tensor_method
def cumprod(x: Tensor, dim: int, dtype: DType | None = None) -> Tensor:
    """The cumulative product of ``x`` along ``dim`` (see the module for dtypes)."""
    return _scan(CumprodBackward, "cumprod", x, dim, dtype)


def _extremum_indices(values: np.ndarray, largest: bool) -> np.ndarray:
    """For slices along the last axis: the index of the running extremum at each position
    (see the module for ties and NaN)."""
    running = (np.maximum if largest else np.minimum).accumulate(values, axis=-1)
    previous = running[..., :-1]
    current = values[..., 1:]
    better = current >= previous if largest else current <= previous
    if values.dtype.kind == "f":
        better = np.isnan(current) | (better & ~np.isnan(previous))
    positions = np.arange(values.shape[-1])
    moves = np.concatenate([np.ones((*values.shape[:-1], 1), bool), better], axis=-1)
    return np.maximum.accumulate(np.where(moves, positions, 0), axis=-1)


def _cumulative_extremum(op: str, result: type, x: Tensor, dim: int, largest: bool) -> Any:
    require_tensor(op, "x", x)
    axis = checked_dim(op, x, dim)
    flat = x.reshape((1,)) if x.ndim == 0 else x
    if flat.shape[axis] == 0:
        empty = Tensor._make(flat._backend.full(flat.shape, 0, int64), flat._backend, int64)
        return result(flat * 1, empty)
    values = np.moveaxis(flat.numpy(), axis, -1)
    where = np.ascontiguousarray(np.moveaxis(_extremum_indices(values, largest), -1, axis))
    indices = Tensor._make(flat._backend.from_numpy(where, int64), flat._backend, int64)
    chosen = gather(flat, axis, indices)
    if x.ndim == 0:
        return result(chosen.reshape(()), indices.reshape(()))
    return result(chosen, indices)


@tensor_method
def cummax(x: Tensor, dim: int) -> Any:
    """The named tuple ``(values, indices)`` of the running maximum along ``dim`` (see the
    module for ties, NaN and the gradient)."""
    return _cumulative_extremum("cummax", return_types.cummax, x, dim, largest=True)


@tensor_method
def cummin(x: Tensor, dim: int) -> Any:
    """The named tuple ``(values, indices)`` of the running minimum along ``dim`` (see the
    module for ties, NaN and the gradient)."""
    return _cumulative_extremum("cummin", return_types.cummin, x, dim, largest=False)
