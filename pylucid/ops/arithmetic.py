"""Binary arithmetic with NumPy broadcasting: add, sub, mul, div.

Public: add, sub, mul, div (and the operators + - * /).

Gradients are returned at the output's shape; :meth:`pylucid.ops.base.Op.backward` sums
them over the broadcast dimensions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, bool_
from pylucid.ops.base import BinaryOp
from pylucid.ops.schema import OpSchema
from pylucid.ops.wrapping import TensorLike, binary, binary_operator, tensor_method
from pylucid.tensor import Tensor

__all__ = ["AddBackward", "DivBackward", "MulBackward", "SubBackward", "add", "div", "mul", "sub"]


class AddBackward(BinaryOp):
    r"""Autograd node for :math:`y = a + b`; saves nothing.

    .. math:: \frac{\partial L}{\partial a} = g, \qquad \frac{\partial L}{\partial b} = g
    """

    schema_v1 = OpSchema(name="add", input_arity=2)
    primitive = "add"

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.add(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        return g, g

    def grad_graph(self, g: Tensor) -> tuple[Tensor, Tensor]:
        return g, g


class SubBackward(BinaryOp):
    r"""Autograd node for :math:`y = a - b`; saves nothing.

    .. math:: \frac{\partial L}{\partial a} = g, \qquad \frac{\partial L}{\partial b} = -g
    """

    schema_v1 = OpSchema(name="sub", input_arity=2)
    primitive = "sub"

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        if bool_ in dtypes:  # True - True is not a bool; NumPy and PyTorch refuse it too
            raise TypeError(
                "sub: the - operator with a bool tensor is not supported; for two masks use "
                "mask ^ other (logical_xor), to subtract numbers convert first: "
                "x.to(pylucid.int64)"
            )
        return super().compute_dtype(dtypes, **params)

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.sub(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        return g, self.run_primitive("neg", (g,), (self.shape,)) if needs_b else None

    def grad_graph(self, g: Tensor) -> tuple[Tensor, Tensor]:
        return g, -g


class MulBackward(BinaryOp):
    r"""Autograd node for :math:`y = a b`; saves ``a`` and ``b``.

    .. math:: \frac{\partial L}{\partial a} = g\, b, \qquad \frac{\partial L}{\partial b} = g\, a
    """

    schema_v1 = OpSchema(name="mul", input_arity=2, saved=("a", "b"))
    primitive = "mul"

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.mul(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        saved, (a_shape, b_shape), shape = self.saved, self.input_shapes, self.shape
        return (
            self.run_primitive("mul", (g, saved["b"]), (shape, b_shape)) if needs_a else None,
            self.run_primitive("mul", (g, saved["a"]), (shape, a_shape)) if needs_b else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        needs_a, needs_b = self.needs_input_grad
        return (
            g * self.saved_tensor("b") if needs_a else None,
            g * self.saved_tensor("a") if needs_b else None,
        )


class DivBackward(BinaryOp):
    r"""Autograd node for :math:`y = a / b` (true division); saves ``a`` and ``b``.

    .. math::
        \frac{\partial L}{\partial a} = \frac{g}{b}, \qquad
        \frac{\partial L}{\partial b} = -\frac{g\, a}{b^2} = -g \frac{a / b}{b}

    The gradient for ``b`` is one fused kernel, never forming :math:`b^2` (it over- or
    underflows where the gradient is finite: float32 a = b = 1e-24 gave -inf for -1e24).
    Integer inputs give float32 (``real_valued``).
    """

    schema_v1 = OpSchema(name="div", input_arity=2, saved=("a", "b"), real_valued=True)
    primitive = "div"

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.div(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        saved, (a_shape, b_shape), shape = self.saved, self.input_shapes, self.shape
        b = saved["b"]
        return (
            self.run_primitive("div", (g, b), (shape, b_shape)) if needs_a else None,
            self.run_primitive("div_backward_b", (saved["a"], b, g), (a_shape, b_shape, shape))
            if needs_b
            else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        needs_a, needs_b = self.needs_input_grad
        b = self.saved_tensor("b")
        return (
            g / b if needs_a else None,
            -g * ((self.saved_tensor("a") / b) / b) if needs_b else None,  # b * b: range
        )


@binary_operator("add", op=AddBackward)
@tensor_method
def add(a: TensorLike, b: TensorLike, *, alpha: float = 1) -> Tensor:
    """``a + alpha * b`` with NumPy broadcasting; see :class:`AddBackward`."""
    return binary(AddBackward, a, b if alpha == 1 else b * alpha)


@binary_operator("sub", op=SubBackward)
@tensor_method
def sub(a: TensorLike, b: TensorLike, *, alpha: float = 1) -> Tensor:
    """``a - alpha * b`` with NumPy broadcasting; see :class:`SubBackward`."""
    return binary(SubBackward, a, b if alpha == 1 else b * alpha)


@binary_operator("mul", op=MulBackward)
@tensor_method
def mul(a: TensorLike, b: TensorLike) -> Tensor:
    """``a * b`` with NumPy broadcasting; see :class:`MulBackward`."""
    return binary(MulBackward, a, b)


@binary_operator("truediv", op=DivBackward)
@tensor_method
def div(a: TensorLike, b: TensorLike) -> Tensor:
    """``a / b`` (true division) with NumPy broadcasting; see :class:`DivBackward`."""
    return binary(DivBackward, a, b)
