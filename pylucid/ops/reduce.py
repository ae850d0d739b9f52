"""Reductions: sum and mean over all axes, one axis or a tuple of axes."""

from __future__ import annotations

import math
from typing import Any

from pylucid.backends.base import Axes, Backend, Shape
from pylucid.dtypes import DType, int64
from pylucid.ops.base import ReduceOp
from pylucid.ops.schema import OpSchema
from pylucid.ops.wrapping import reduction_wrapper

__all__ = ["MeanBackward", "SumBackward", "mean", "sum"]


class SumBackward(ReduceOp):
    r"""Autograd node for :math:`y = \sum_{i \in \text{axes}} x_i`; saves nothing.

    .. math:: \frac{\partial L}{\partial x_i} = g \quad \text{(g broadcast back over axes)}

    Integer and bool inputs sum in int64, as in PyTorch.
    """

    schema_v1 = OpSchema(name="sum")

    @classmethod
    def compute_dtype(cls, dtypes: Any, **params: Any) -> DType:
        return dtypes[0] if dtypes[0].is_floating_point else int64

    @staticmethod
    def dispatch(
        be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes, keepdims: bool
    ) -> Any:
        return be.sum(a, axes, keepdims, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be = self.backend
        return (be.broadcast_to(be.reshape(g, self._keepdims_shape()), self.input_shapes[0]),)


class MeanBackward(ReduceOp):
    r"""Autograd node for :math:`y = \frac{1}{n}\sum_{i \in \text{axes}} x_i`, where
    :math:`n` is the number of elements reduced; saves nothing.

    .. math:: \frac{\partial L}{\partial x_i} = \frac{g}{n}

    Integer input gives float32 (``real_valued``); the mean of no elements is nan.
    """

    schema_v1 = OpSchema(name="mean", real_valued=True)

    @staticmethod
    def dispatch(
        be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes, keepdims: bool
    ) -> Any:
        count = math.prod(be.shape(a)[i] for i in axes)
        return be.div(be.sum(a, axes, keepdims, dtype), count, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be = self.backend
        count = math.prod(self.input_shapes[0][i] for i in self.axes)
        scaled = be.div(g, count, self.shape, self.dtype)
        return (be.broadcast_to(be.reshape(scaled, self._keepdims_shape()), self.input_shapes[0]),)


sum = reduction_wrapper(SumBackward)  # noqa: A001  (pylucid.sum, like numpy.sum and torch.sum)
mean = reduction_wrapper(MeanBackward)
