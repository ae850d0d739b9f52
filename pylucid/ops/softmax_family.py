"""The softmax family: softmax and log_softmax along one axis, logsumexp over axes.

Public: softmax, log_softmax, logsumexp.

All three are numerically stable: they subtract the maximum of each slice before ``exp``,
so inputs of any finite size (±1e4 and beyond) neither overflow nor warn. On the CPU each
forward and each backward is one fused Numba row kernel (:mod:`pylucid.kernels.reduction`);
on MLX they are ``mlx.core.softmax`` / ``logsumexp`` in float32 and max-shifted compositions
in float64. AMP: all three are FORCE_FP32 (softmax and log_softmax are on PyTorch's CUDA
autocast float32 list, logsumexp on its CPU one). Integer input gives float32
(``real_valued``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.backends.base import Axes, Backend, Shape
from pylucid.dtypes import DType
from pylucid.ops.base import Op, ReduceOp, UnaryOp
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import normalize_axes, reduction_wrapper, require_tensor, tensor_method
from pylucid.tensor import Tensor

__all__ = [
    "LogSoftmaxBackward",
    "LogsumexpBackward",
    "SoftmaxBackward",
    "log_softmax",
    "logsumexp",
    "softmax",
]


class LogsumexpBackward(ReduceOp):
    r"""Autograd node for :math:`y = \log \sum_{i \in \text{axes}} e^{x_i}`; saves ``x`` and
    the result.

    Forward: :math:`y = s + \log \sum_i e^{x_i - s}` with :math:`s = \max_i x_i`, or
    :math:`s = 0` where that max is :math:`\pm\infty`, so a slice of -inf (or of no elements)
    gives -inf rather than NaN, and a slice holding +inf gives +inf, as in PyTorch.

    .. math:: \frac{\partial L}{\partial x_j} = g\, e^{x_j - y}

    (the softmax of the slice; NaN for a slice of -inf, as in PyTorch).
    """

    schema_v1 = OpSchema(
        name="logsumexp",
        amp_policy=AmpPolicy.FORCE_FP32,
        saved=("x", "result"),
        real_valued=True,
    )

    @staticmethod
    def dispatch(
        be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes, keepdims: bool
    ) -> Any:
        return be.logsumexp(a, axes, keepdims, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be, keep = self.backend, self._keepdims_shape()
        result, g = be.reshape(self.saved["result"], keep), be.reshape(g, keep)
        return (be.logsumexp_backward(self.saved["x"], result, g, self.axes, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        keep = self._keepdims_shape()
        result = self.saved_tensor("result").reshape(keep)
        return (g.reshape(keep) * (self.saved_tensor("x") - result).exp(),)


class SoftmaxBackward(UnaryOp):
    r"""Autograd node for :math:`y_j = e^{x_j} / \sum_i e^{x_i}` along one axis; saves the
    result.

    Forward per slice: subtract the max, exponentiate, divide by the sum (a slice of -inf or
    holding +inf or NaN gives NaN, as in PyTorch).

    .. math:: \frac{\partial L}{\partial x_j} = y_j \Big(g_j - \sum_i g_i\, y_i\Big)

    one fused kernel on the CPU, reading ``y`` and ``g`` once for the sum and once for the
    output.
    """

    schema_v1 = OpSchema(
        name="softmax", amp_policy=AmpPolicy.FORCE_FP32, saved=("result",), real_valued=True
    )
    primitive = "softmax"

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes) -> Any:
        return be.softmax(a, axes, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.softmax_backward(self.saved["result"], g, self.axes, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        y = self.saved_tensor("result")
        return (y * (g - (g * y).sum(axis=self.axes, keepdims=True)),)


class LogSoftmaxBackward(UnaryOp):
    r"""Autograd node for :math:`y_j = x_j - \log \sum_i e^{x_i}` along one axis; saves the
    result.

    Forward per slice: :math:`(x_j - m) - \log \sum_i e^{x_i - m}` with :math:`m` the max.

    .. math:: \frac{\partial L}{\partial x_j} = g_j - e^{y_j} \sum_i g_i

    one fused kernel on the CPU.
    """

    schema_v1 = OpSchema(
        name="log_softmax", amp_policy=AmpPolicy.FORCE_FP32, saved=("result",), real_valued=True
    )
    primitive = "log_softmax"

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, axes: Axes) -> Any:
        return be.log_softmax(a, axes, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.log_softmax_backward(self.saved["result"], g, self.axes, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        total = g.sum(axis=self.axes, keepdims=True)
        return (g - self.saved_tensor("result").exp() * total,)


def _softmax_wrapper(op_class: type[Op]) -> Callable[..., Tensor]:
    name = op_class.schema_v1.name

    def wrapper(x: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
        require_tensor(name, "x", x)
        chosen = axis if dim is None else dim
        if chosen is not None and (
            not isinstance(chosen, (int, np.integer)) or isinstance(chosen, bool)
        ):
            raise TypeError(f"{name}: axis must be one int, got {chosen!r}")
        if x.ndim == 0:  # one element along an implicit axis, as in PyTorch
            if chosen not in (None, 0, -1):
                raise ValueError(
                    f"{name}: axis {chosen} is out of range for a 0-d tensor; use 0 or -1"
                )
            return op_class.apply(x, axes=())
        axes = normalize_axes(name, x, -1 if chosen is None else axis, dim)
        return op_class.apply(x, axes=axes)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__doc__ = (
        f"``{name}`` of ``x`` along ``axis`` (one int; the last axis when omitted). "
        f"PyTorch's ``dim=`` is accepted as an alias. See :class:`{op_class.__name__}` for "
        f"the gradient."
    )
    return tensor_method(wrapper)


logsumexp = reduction_wrapper(LogsumexpBackward)
softmax = _softmax_wrapper(SoftmaxBackward)
log_softmax = _softmax_wrapper(LogSoftmaxBackward)
