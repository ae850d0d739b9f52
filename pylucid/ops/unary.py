"""Elementwise ops of one tensor."""

from __future__ import annotations

from typing import Any

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType
from pylucid.ops.base import UnaryOp
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.wrapping import (
    Number,
    dunder,
    is_number,
    require_tensor,
    tensor_method,
    unary_wrapper,
)
from pylucid.tensor import Tensor

__all__ = ["Log2Backward", "NegBackward", "PowScalarBackward", "log2", "neg", "pow_scalar"]


class Log2Backward(UnaryOp):
    r"""Autograd node for :math:`y = \log_2 x`; saves the input ``x``.

    Forward: CPU a vectorised Numba loop, GPU ``mlx.core.log2``. IEEE special values:
    log2(±0) = -inf, log2(x < 0) = nan, log2(inf) = inf, log2(1) = +0; no exception, no
    warning. Integer input gives a float32 result (``real_valued``).

    Backward, for :math:`x > 0`:

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{x \ln 2}

    with :math:`\ln 2` written as the float64 literal ``0.6931471805599453``, so the result is
    the one scaling by ``1 / log(2.0)`` gives (within 1 ULP in float64). The fused kernel
    reads ``x`` and ``g`` once and writes the gradient once.
    """

    schema_v1 = OpSchema(
        name="log2", amp_policy=AmpPolicy.FORCE_FP32, saved=("x",), real_valued=True
    )

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType) -> Any:
        return be.log2(a, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.log2_backward(self.saved.x, g, self.shape, self.dtype),)


class NegBackward(UnaryOp):
    r"""Autograd node for :math:`y = -x`; saves nothing.

    .. math:: \frac{\partial L}{\partial x} = -g
    """

    schema_v1 = OpSchema(name="neg", amp_policy=AmpPolicy.KEEP_INPUT)

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType) -> Any:
        return be.neg(a, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.neg(g, self.shape, self.dtype),)


class PowScalarBackward(UnaryOp):
    r"""Autograd node for :math:`y = x^p` with a Python-number exponent ``p``; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = g \, p \, x^{p-1}

    and 0 where :math:`p = 0` (so that :math:`0^0` has gradient 0, as in PyTorch). At
    :math:`x = 0` with :math:`p < 1` the gradient is inf or nan, as the math says.
    """

    schema_v1 = OpSchema(name="pow_scalar", amp_policy=AmpPolicy.FORCE_FP32, saved=("x",))

    @classmethod
    def compute_dtype(cls, dtypes: Any, *, exponent: float) -> DType:
        from pylucid.dtypes import result_type

        dtype = result_type(dtypes[0], exponent)
        if not dtype.is_floating_point and exponent < 0:
            raise ValueError(
                f"pow_scalar: an integer tensor ({dtypes[0].name}) cannot be raised to the "
                f"negative integer power {exponent}; convert it to a float dtype first"
            )
        return dtype

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, exponent: float) -> Any:
        return be.pow_scalar(a, exponent, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (
            self.backend.pow_scalar_backward(
                self.saved.x, g, self.exponent, self.shape, self.dtype
            ),
        )


log2 = unary_wrapper(Log2Backward)
neg = dunder("__neg__")(unary_wrapper(NegBackward))


@tensor_method
def pow_scalar(x: Tensor, exponent: Number) -> Tensor:
    """``x ** exponent`` for a Python-number exponent; see :class:`PowScalarBackward`."""
    require_tensor("pow_scalar", "x", x)
    if not is_number(exponent):
        raise TypeError(
            f"pow_scalar: the exponent must be a Python number, got {type(exponent).__name__}"
        )
    return PowScalarBackward.apply(x, exponent=exponent)


@dunder("__pow__")
def _power(x: Tensor, exponent: object) -> Tensor:
    if isinstance(exponent, Tensor):
        raise TypeError("** with a tensor exponent is not supported yet; use a Python number")
    return pow_scalar(x, exponent)
