"""Sorting: argsort, sort and topk, with PyTorch's arguments and order.

Public: argsort, sort, topk (functions and Tensor methods); sort and topk return
``(values, indices)`` (:class:`SortResult`, a named tuple, as PyTorch's return types).

``argsort`` is one op without gradient (:class:`ArgsortBackward`, int64 indices). The order
is always stable - equal elements keep their order, in both directions, which is what
``stable=True`` asks of PyTorch and one of the orders its default allows - and NaN sorts
above every number (last ascending, first descending), as in PyTorch. ``sort`` and ``topk``
gather the values at those indices with :func:`pylucid.gather`, so their gradients (of any
order) are gather's: each input element gets the gradient of the position it moved to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, int64
from pylucid.ops.base import Op
from pylucid.ops.gathering import checked_dim, gather
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = ["ArgsortBackward", "SortResult", "argsort", "sort", "topk"]


class SortResult(NamedTuple):
    """What :func:`sort` and :func:`topk` return: the values and their int64 indices."""

    values: Tensor
    indices: Tensor


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
def sort(
    x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False
) -> SortResult:
    """``x`` sorted along ``dim`` and the indices of the sorted values (always stable; see
    the module); the values' gradient flows back to the positions they came from."""
    flat, indices, axis = _indices("sort", x, dim, descending)
    values = gather(flat, axis, indices)
    if x.ndim == 0:
        return SortResult(values.reshape(()), indices.reshape(()))
    return SortResult(values, indices)


@tensor_method
def topk(
    x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True  # noqa: A002
) -> SortResult:
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
        return SortResult(values.reshape(()), chosen.reshape(()))
    return SortResult(values, chosen)
