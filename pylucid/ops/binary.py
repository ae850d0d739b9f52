"""Binary elementwise math with NumPy broadcasting: pow, atan2, logaddexp, remainder,
floor_divide, hypot, maximum, minimum, and where.

Public: pow (and ``number ** tensor``), atan2, logaddexp, remainder (and ``%``),
floor_divide (and ``//``), hypot, maximum, minimum, where.

Dtypes follow :mod:`pylucid.dtypes` (PyTorch's promotion; a Python number never widens a
tensor). Gradients are returned at the output's shape; :meth:`pylucid.ops.base.Op.backward`
sums them over the broadcast dimensions and casts them to each input's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, bool_, promote_types
from pylucid.ops.base import BinaryOp, Op
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.unary import pow_scalar
from pylucid.ops.wrapping import (
    TensorLike,
    binary,
    binary_operator,
    is_number,
    lift,
    require_tensor,
    tensor_method,
)
from pylucid.tensor import Tensor

__all__ = [
    "Atan2Backward",
    "FloorDivideBackward",
    "HypotBackward",
    "LogaddexpBackward",
    "RemainderBackward",
    "MaximumBackward",
    "MinimumBackward",
    "PowBackward",
    "WhereBackward",
    "atan2",
    "floor_divide",
    "hypot",
    "logaddexp",
    "remainder",
    "maximum",
    "minimum",
    "pow",
    "where",
]


class PowBackward(BinaryOp):
    r"""Autograd node for :math:`y = a^b` with a tensor exponent; saves ``a``, ``b`` and
    ``result``.

    .. math::
        \frac{\partial L}{\partial a} = g\, b\, a^{b-1}, \qquad
        \frac{\partial L}{\partial b} = g\, y \ln a

    as PyTorch's ``pow_backward_self`` / ``pow_backward_exponent``: the gradient of ``a`` is 0
    where :math:`b = 0` (so :math:`0^0` has gradient 0), and the gradient of ``b`` is
    :math:`g \cdot 0` where :math:`a = 0` and :math:`b \ge 0` (the limit of :math:`a^b \ln a`
    as :math:`a \to 0^+`). Elsewhere the math decides: :math:`a < 0` gives a nan gradient for
    ``b``, :math:`a = 0` with :math:`b < 1` an infinite one for ``a``. Each gradient is one
    fused kernel (the mask of the ``b`` gradient is read from ``result``, see
    :func:`pylucid.kernels.binary_math.pow_grad_b`).

    Forward: C99 ``pow`` special values (``pow(x, 0) = 1``, ``pow(1, y) = 1``,
    ``pow(0, -1) = inf``, ``pow(-8, 1/3) = nan``), no warning. Integers stay integers, with
    PyTorch's rule for negative exponents (``1``, ``±1`` for a base of -1, else 0); bool
    tensors are refused. AMP: ``FORCE_FP32``, as ``pow`` is on PyTorch's autocast fp32 list.
    """

    schema_v1 = OpSchema(
        name="pow",
        amp_policy=AmpPolicy.FORCE_FP32,
        input_arity=2,
        saved=("a", "b", "result"),
    )

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        dtype = super().compute_dtype(dtypes, **params)
        if dtype is bool_:
            raise TypeError(
                "pow: a bool tensor cannot be raised to a bool power; convert one of them to "
                "an integer or floating dtype first, e.g. x.to(pylucid.int64)"
            )
        return dtype

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.pow(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        be, saved = self.backend, self.saved
        return (
            be.pow_backward_a(saved["a"], saved["b"], g, self.shape, self.dtype)
            if needs_a
            else None,
            be.pow_backward_b(saved["a"], saved["result"], g, self.shape, self.dtype)
            if needs_b
            else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        # The masks and forms of grad_formula's kernels (pow_grad_a, pow_grad_b): a's
        # gradient is 0 where b == 0, nan where the result is but a is not (a < 0 and b not
        # an integer: b - 1 can round to an integer where b is not one), and (b / a) y where
        # b a^(b-1) leaves the range but that does not; b's is masked where a == 0 and
        # b >= 0. The masked branches are computed at safe values (exponent 1, base 1), so
        # that the zero gradient where() sends them does not become 0 * inf = nan.
        needs_a, needs_b = self.needs_input_grad
        a, b, y = self.saved_tensor("a"), self.saved_tensor("b"), self.saved_tensor("result")
        grad_a = grad_b = None
        if needs_a:
            flat = b == 0
            slope = b * a ** where(flat, 1.0, b - 1)
            in_range = slope.abs() < math.inf
            rescaled = (b / where(in_range, 1.0, a)) * where(in_range, 1.0, y)
            slope = where(in_range | ~(rescaled.abs() < math.inf), slope, rescaled)
            fractional_power_of_a_negative = (y != y) & (a == a)
            grad_a = where(flat, 0.0, where(fractional_power_of_a_negative, math.nan, g * slope))
        if needs_b:
            masked = where(a == 0, b >= 0, False)
            slope = y * where(masked, 1.0, a).log()
            grad_b = g * where(masked, 0.0, slope)
        return grad_a, grad_b


@binary_operator("pow")
@tensor_method
def pow(a: TensorLike, b: TensorLike) -> Tensor:  # noqa: A001  (pylucid.pow, as torch.pow)
    """``a ** b`` with NumPy broadcasting; see :class:`PowBackward`.

    A Python-number exponent runs :func:`pylucid.pow_scalar` (one input, no exponent
    gradient); a Python-number base is lifted to a 0-d tensor of the exponent's dtype
    category (``pow(2.0, x)``).
    """
    if isinstance(a, Tensor) and is_number(b):
        return pow_scalar(a, b)
    return binary(PowBackward, a, b)


class Atan2Backward(BinaryOp):
    r"""Autograd node for :math:`y = \operatorname{atan2}(a, b)`, the angle of the point
    :math:`(b, a)` in :math:`[-\pi, \pi]`; saves ``a`` and ``b``.

    .. math::
        \frac{\partial L}{\partial a} = \frac{g\, b}{a^2 + b^2}, \qquad
        \frac{\partial L}{\partial b} = -\frac{g\, a}{a^2 + b^2}

    nan at the origin, as in PyTorch. Both backends (and the differentiable form) compute it
    as a ratio, with :math:`m` the larger of :math:`a, b` in magnitude and :math:`r` the
    smaller over it: :math:`g b / (a^2 + b^2) = ((b / m)\, g / (1 + r^2)) / m`, so
    :math:`a^2 + b^2`, which over- or underflows where the gradient is finite, is never
    formed. Integer and bool inputs give float32 (``real_valued``). AMP: PyTorch's autocast
    runs ``atan2`` in the widest input type (its "promote" list, not the lower-precision
    one), which is ``KEEP_INPUT`` here: autocast is ignored and the inputs are promoted as
    usual.
    """

    schema_v1 = OpSchema(
        name="atan2",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=2,
        saved=("a", "b"),
        real_valued=True,
    )

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.atan2(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        be, saved = self.backend, self.saved
        return (
            be.atan2_backward_a(saved["a"], saved["b"], g, self.shape, self.dtype)
            if needs_a
            else None,
            be.atan2_backward_b(saved["a"], saved["b"], g, self.shape, self.dtype)
            if needs_b
            else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        # The fused kernels' ratio form: m the larger of a, b in magnitude, r the smaller
        # over it; a^2 + b^2 leaves the range (or its precision) where the gradient does not.
        needs_a, needs_b = self.needs_input_grad
        a, b = self.saved_tensor("a"), self.saved_tensor("b")
        a_larger = abs(a) >= abs(b)
        m = where(a_larger, a, b)
        ra, rb = a / m, b / m
        r = where(a_larger, rb, ra)
        q = g / (1.0 + r * r)
        return ((rb * q) / m if needs_a else None, -(ra * q) / m if needs_b else None)


@tensor_method
def atan2(a: TensorLike, b: TensorLike) -> Tensor:
    """``atan2(a, b)`` with NumPy broadcasting; see :class:`Atan2Backward`."""
    return binary(Atan2Backward, a, b)


class LogaddexpBackward(BinaryOp):
    r"""Autograd node for :math:`y = \log(e^a + e^b)`; saves ``a`` and ``b``.

    Forward: :math:`\max(a, b) + \operatorname{log1p}(e^{-|a - b|})`, which overflows only
    where :math:`y` does; :math:`a = b` (infinities included) gives :math:`a + \ln 2`.

    .. math::
        \frac{\partial L}{\partial a} = \frac{g}{1 + e^{b - a}}, \qquad
        \frac{\partial L}{\partial b} = \frac{g}{1 + e^{a - b}}

    (the softmax of the pair: the limit 1 and 0 where one input is +inf and the other is not;
    nan where both are infinite with one sign). Integer inputs give float32. AMP: KEEP_INPUT.
    """

    schema_v1 = OpSchema(
        name="logaddexp",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=2,
        saved=("a", "b"),
        real_valued=True,
    )

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.logaddexp(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        be, saved = self.backend, self.saved
        a, b = saved["a"], saved["b"]
        return (
            be.logaddexp_backward_a(a, b, g, self.shape, self.dtype) if needs_a else None,
            be.logaddexp_backward_b(a, b, g, self.shape, self.dtype) if needs_b else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor, Tensor]:
        a, b = self.saved_tensor("a"), self.saved_tensor("b")
        return g / (1.0 + (b - a).exp()), g / (1.0 + (a - b).exp())


@tensor_method
def logaddexp(a: TensorLike, b: TensorLike) -> Tensor:
    """``log(e^a + e^b)`` with NumPy broadcasting; see :class:`LogaddexpBackward`."""
    return binary(LogaddexpBackward, a, b)


def _check_integer_divisor(op: str, a: TensorLike, b: TensorLike) -> None:
    """Refuse an integer division by zero, as PyTorch does (floats give inf and nan)."""
    if isinstance(a, float) or isinstance(b, float):  # a float number: a float result
        return
    dtypes = [t.dtype for t in (a, b) if isinstance(t, Tensor)]
    if any(dtype.is_floating_point for dtype in dtypes):
        return
    zero = bool((b == 0).any().item()) if isinstance(b, Tensor) else b == 0
    if zero:
        raise ZeroDivisionError(f"{op}: integer division by zero (the divisor holds 0)")


class RemainderBackward(BinaryOp):
    r"""Autograd node for :math:`y = a - \lfloor a / b \rfloor b`, PyTorch's remainder (the
    sign of the divisor; see :func:`pylucid.kernels.binary_math.remainder`); saves ``a``
    and ``b``.

    .. math::
        \frac{\partial L}{\partial a} = g, \qquad
        \frac{\partial L}{\partial b} = -\left\lfloor \frac{a}{b} \right\rfloor g

    (PyTorch's, away from the jumps). Integer division by zero raises. AMP: KEEP_INPUT.
    """

    schema_v1 = OpSchema(
        name="remainder", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=2, saved=("a", "b")
    )

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.remainder(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        a, b = self.saved["a"], self.saved["b"]
        grad_b = self.backend.remainder_backward_b(a, b, g, self.shape, self.dtype)
        return (g if needs_a else None, grad_b if needs_b else None)

    def grad_graph(self, g: Tensor) -> tuple[Tensor, Tensor]:
        a, b = self.saved_tensor("a"), self.saved_tensor("b")
        return g, -floor_divide(a, b) * g


class FloorDivideBackward(BinaryOp):
    r"""The op :math:`y = \lfloor a / b \rfloor`, rounded towards -inf as Python's and
    PyTorch's ``//`` (exactly: ``1 // 0.1`` is 9). A step function: not differentiable, as
    in PyTorch (its node is never recorded, so no gradient flows through it). Integer
    division by zero raises. AMP: KEEP_INPUT.
    """

    schema_v1 = OpSchema(
        name="floor_divide", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=2, differentiable=False
    )

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.floor_divide(a, b, shape, dtype)


class HypotBackward(BinaryOp):
    r"""Autograd node for :math:`y = \sqrt{a^2 + b^2}` (no overflow of the squares; inf
    where either is infinite); saves ``a``, ``b`` and ``result``.

    .. math::
        \frac{\partial L}{\partial a} = \frac{g\, a}{y}, \qquad
        \frac{\partial L}{\partial b} = \frac{g\, b}{y}

    (nan at :math:`a = b = 0`, as PyTorch's). Integer inputs give float32. AMP: KEEP_INPUT.
    """

    schema_v1 = OpSchema(
        name="hypot",
        amp_policy=AmpPolicy.KEEP_INPUT,
        input_arity=2,
        saved=("a", "b", "result"),
        real_valued=True,
    )

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.hypot(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        be, saved = self.backend, self.saved
        y = saved["result"]
        return (
            be.hypot_backward(saved["a"], y, g, self.shape, self.dtype) if needs_a else None,
            be.hypot_backward(saved["b"], y, g, self.shape, self.dtype) if needs_b else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor, Tensor]:
        a, b, y = self.saved_tensor("a"), self.saved_tensor("b"), self.saved_tensor("result")
        return g * (a / y), g * (b / y)


@binary_operator("mod")
@tensor_method
def remainder(a: TensorLike, b: TensorLike) -> Tensor:
    """``a % b`` with the divisor's sign (PyTorch's remainder); see
    :class:`RemainderBackward`."""
    _check_integer_divisor("remainder", a, b)
    return binary(RemainderBackward, a, b)


@binary_operator("floordiv")
@tensor_method
def floor_divide(a: TensorLike, b: TensorLike) -> Tensor:
    """``a // b`` rounded towards -inf; see :class:`FloorDivideBackward`."""
    _check_integer_divisor("floor_divide", a, b)
    return binary(FloorDivideBackward, a, b)


@tensor_method
def hypot(a: TensorLike, b: TensorLike) -> Tensor:
    """``sqrt(a^2 + b^2)`` with NumPy broadcasting; see :class:`HypotBackward`."""
    return binary(HypotBackward, a, b)


def _tie_split(a: Tensor, b: Tensor, g: Tensor, losing: Tensor) -> Tensor:
    """The gradient of maximum or minimum for one input, with pylucid ops: g/2 where
    ``a == b``, else 0 where that input loses (``losing``), else g (so g at a nan)."""
    return where(a == b, g * 0.5, where(losing, 0.0, g))


class MaximumBackward(BinaryOp):
    r"""Autograd node for :math:`y = \max(a, b)` elementwise; saves ``a`` and ``b``.

    .. math::
        \frac{\partial L}{\partial a} =
        \begin{cases} g & a > b \\ g/2 & a = b \\ 0 & a < b \end{cases}, \qquad
        \frac{\partial L}{\partial b} =
        \begin{cases} g & b > a \\ g/2 & a = b \\ 0 & b < a \end{cases}

    A tie splits the gradient equally, as PyTorch does. A nan in either input gives a nan
    output and (no comparison holding) the full ``g`` to both inputs, as in PyTorch. AMP:
    ``KEEP_INPUT`` (it selects values; it does no arithmetic).
    """

    schema_v1 = OpSchema(
        name="maximum", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=2, saved=("a", "b")
    )

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.maximum(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        be, saved = self.backend, self.saved
        return (
            be.maximum_backward(saved["a"], saved["b"], g, self.shape, self.dtype)
            if needs_a
            else None,
            be.maximum_backward(saved["b"], saved["a"], g, self.shape, self.dtype)
            if needs_b
            else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        needs_a, needs_b = self.needs_input_grad
        a, b = self.saved_tensor("a"), self.saved_tensor("b")
        return (
            _tie_split(a, b, g, a < b) if needs_a else None,
            _tie_split(a, b, g, b < a) if needs_b else None,
        )


@tensor_method
def maximum(a: TensorLike, b: TensorLike) -> Tensor:
    """Elementwise maximum with NumPy broadcasting, nan-propagating; see
    :class:`MaximumBackward`."""
    return binary(MaximumBackward, a, b)


class MinimumBackward(BinaryOp):
    r"""Autograd node for :math:`y = \min(a, b)` elementwise; saves ``a`` and ``b``.

    .. math::
        \frac{\partial L}{\partial a} =
        \begin{cases} g & a < b \\ g/2 & a = b \\ 0 & a > b \end{cases}, \qquad
        \frac{\partial L}{\partial b} =
        \begin{cases} g & b < a \\ g/2 & a = b \\ 0 & b > a \end{cases}

    Ties and nan as in :class:`MaximumBackward`. AMP: ``KEEP_INPUT``.
    """

    schema_v1 = OpSchema(
        name="minimum", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=2, saved=("a", "b")
    )

    @staticmethod
    def dispatch(be: Backend, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.minimum(a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any, Any]:
        needs_a, needs_b = self.needs_input_grad
        be, saved = self.backend, self.saved
        return (
            be.minimum_backward(saved["a"], saved["b"], g, self.shape, self.dtype)
            if needs_a
            else None,
            be.minimum_backward(saved["b"], saved["a"], g, self.shape, self.dtype)
            if needs_b
            else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor | None, Tensor | None]:
        needs_a, needs_b = self.needs_input_grad
        a, b = self.saved_tensor("a"), self.saved_tensor("b")
        return (
            _tie_split(a, b, g, a > b) if needs_a else None,
            _tie_split(a, b, g, b > a) if needs_b else None,
        )


@tensor_method
def minimum(a: TensorLike, b: TensorLike) -> Tensor:
    """Elementwise minimum with NumPy broadcasting, nan-propagating; see
    :class:`MinimumBackward`."""
    return binary(MinimumBackward, a, b)


class WhereBackward(Op):
    r"""Autograd node for :math:`y = a` where ``condition`` else :math:`b`, broadcasting all
    three; saves ``condition``.

    .. math::
        \frac{\partial L}{\partial a} = g \cdot [\mathrm{condition}], \qquad
        \frac{\partial L}{\partial b} = g \cdot [\lnot\, \mathrm{condition}]

    (exactly 0 where masked, even where ``g`` is nan or inf, as PyTorch's
    ``where(condition, grad, 0)``); ``condition`` gets no gradient. It must be a bool tensor
    and stays bool: only ``a`` and ``b`` take the compute dtype, their promotion. AMP:
    ``KEEP_INPUT``.
    """

    schema_v1 = OpSchema(
        name="where", amp_policy=AmpPolicy.KEEP_INPUT, input_arity=3, saved=("condition",)
    )
    input_names = ("condition", "a", "b")
    uncast_inputs = frozenset({"condition"})
    weak_scalars = True

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        condition, a, b = dtypes
        if condition is not bool_:
            raise TypeError(
                f"where: condition must be a bool tensor, got {condition.name}; build it with "
                f"a comparison (x > 0) or convert it with .to(pylucid.bool)"
            )
        return promote_types(a, b)

    @staticmethod
    def dispatch(be: Backend, condition: Any, a: Any, b: Any, shape: Shape, dtype: DType) -> Any:
        return be.where(condition, a, b, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[None, Any, Any]:
        _, needs_a, needs_b = self.needs_input_grad
        be, condition = self.backend, self.saved["condition"]
        return (
            None,
            be.where(condition, g, 0.0, self.shape, self.dtype) if needs_a else None,
            be.where(condition, 0.0, g, self.shape, self.dtype) if needs_b else None,
        )

    def grad_graph(self, g: Tensor) -> tuple[None, Tensor | None, Tensor | None]:
        _, needs_a, needs_b = self.needs_input_grad
        condition = self.saved.tensor("condition")  # bool: not cast to the compute dtype
        return (
            None,
            where(condition, g, 0.0) if needs_a else None,
            where(condition, 0.0, g) if needs_b else None,
        )


def where(condition: Tensor, a: TensorLike, b: TensorLike) -> Tensor:
    """``a`` where ``condition`` else ``b``, broadcasting all three; see :class:`WhereBackward`.

    ``condition`` is a bool tensor. A Python number for ``a`` or ``b`` takes the other's dtype
    category (``where(c, 0.0, x)``); with two numbers, the default dtype of their category
    (``where(c, 1.0, 0.0)`` is float32, ``where(c, 1, 0)`` int64).
    """
    require_tensor("where", "condition", condition)
    tensors = [v for v in (a, b) if isinstance(v, Tensor)]
    like = tensors[0] if tensors else condition
    return WhereBackward.apply(condition, lift("where", "a", a, like), lift("where", "b", b, like))


def _where_method(self: Tensor, condition: Tensor, other: TensorLike) -> Tensor:
    """``x.where(condition, other)``: ``x`` where ``condition`` else ``other`` (PyTorch's
    ``Tensor.where``); see :func:`where`."""
    return where(condition, self, other)


_where_method.__name__ = "where"
tensor_method(_where_method)
