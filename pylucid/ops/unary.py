"""Elementwise ops of one tensor: the template :class:`PointwiseOp` that most of them follow,
the logarithm family (log, log2, log10), negation and the scalar power.

Public: log, log2, log10, neg (and unary -), pow_scalar (and ``**`` with a number).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, bool_
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

__all__ = [
    "Log10Backward",
    "Log2Backward",
    "LogBackward",
    "NegBackward",
    "PowScalarBackward",
    "log",
    "log10",
    "log2",
    "neg",
    "pow_scalar",
]

#: ln 2 and ln 10 to 21 significant digits (their float64 values are the nearest to the
#: exact logarithms; ln 2 is PyTorch's ``0.6931471805599453``), and the float64 remainders
#: ``ln b - LNb`` that make the log family's gradient correctly rounded.
LN2 = 0.69314718055994530942
LN2_LO = 2.3190468138462996e-17
LN10 = 2.30258509299404568402
LN10_LO = -2.1707562233822494e-16


class PointwiseOp(UnaryOp):
    """Template of an elementwise op of one tensor with a fused backward primitive.

    A member declares its ``schema_v1``, its math (in its docstring) and ``gradient``;
    nothing else:

    - forward: the backend primitive named like the op, ``be.<name>(x, shape, dtype)``;
    - backward: the fused primitive ``be.<name>_backward(v, g, shape, dtype)``, where ``v``
      is the one value the schema saves (``"x"`` or ``"result"``);
    - backward with ``create_graph=True``: the member's staticmethod ``gradient(v, g)``, the
      fused primitive's formula written with pylucid ops on Tensors (so it is differentiable;
      ``v`` from :meth:`~pylucid.ops.base.Op.saved_tensor`).

    Members with parameters or another gradient override :meth:`dispatch` /
    :meth:`grad_formula` / :meth:`grad_graph`. A bool tensor is refused by the ops that are
    not ``real_valued`` (integer tensors keep their dtype there: ``abs``, ``sign``,
    ``square``, ``relu``).
    """

    #: dL/dx from the saved value ``v`` and the output gradient ``g``, with pylucid ops; None
    #: where a member has no differentiable formula (its ``grad_graph`` then raises).
    gradient: ClassVar[Callable[[Tensor, Tensor], Tensor] | None] = None

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        dtype = super().compute_dtype(dtypes, **params)
        if dtype is bool_:
            name = cls.schema_v1.name
            raise TypeError(
                f"{name}: bool tensors are not supported; convert the input to an integer or "
                f"floating dtype first, e.g. x.to(pl.float32)"
            )
        return dtype

    #: The fused backward primitive, ``<name>_backward``.
    _backward_primitive: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dispatch = getattr(cls.dispatch, "__func__", None)
        if "schema_v1" in cls.__dict__:
            cls._backward_primitive = f"{cls.schema_v1.name}_backward"
            if dispatch is PointwiseOp.dispatch.__func__:
                cls.primitive = cls.schema_v1.name  # (what this dispatch calls)

    @classmethod
    def dispatch(cls, be: Backend, a: Any, shape: Shape, dtype: DType) -> Any:
        return getattr(be, cls.schema_v1.name)(a, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        ((saved, _),) = self._saved_inputs  # (x or the result: of the output's shape)
        shapes = (self.shape, self.shape)
        return (self.run_primitive(self._backward_primitive, (self.saved[saved], g), shapes),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        if self.gradient is None:
            return super().grad_graph(g)
        (saved,) = self.schema_v1.saved
        return (self.gradient(self.saved_tensor(saved), g),)


class LogBase(PointwiseOp):
    r"""The logarithms :math:`y = \log_b x` as one family with a base ``b``, as MLX's single
    log primitive; saves the input ``x``.

    Forward: the backend primitive named like the op (``be.log2``, ``be.log``,
    ``be.log10``). IEEE special values: log(±0) = -inf, log(x < 0) = nan, log(inf) = inf,
    log(1) = +0; no exception, no warning. Integer input gives a float32 result
    (``real_valued``). AMP: FORCE_FP32, as in PyTorch's autocast.

    Backward, shared by the family, for :math:`x > 0`:

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{x \ln b}

    one fused primitive ``be.log_base_backward(x, g, ln_base, ln_base_lo, shape, dtype)``
    (run through :meth:`~pylucid.ops.base.Op.run_primitive`, the ln b pair a constant of the
    member),
    :math:`\ln b` given as a float64 literal (``ln_base``, the nearest float64) plus the
    float64 remainder (``ln_base_lo``). On the numba backend the quotient is correctly
    rounded (float64: an FMA-compensated float64 division; float32: a float32 division and
    one Markstein correction, 2.6x faster than dividing in float64); MLX, without FMA,
    divides by ``x * ln_base`` (within 2 ULP). A member declares ``schema_v1``, ``base``,
    ``ln_base`` and ``ln_base_lo``.
    """

    #: The base b; ln b as the nearest float64 and the float64 remainder ln b - ln_base.
    base: ClassVar[float]
    ln_base: ClassVar[float]
    ln_base_lo: ClassVar[float]
    #: ``ln_base`` and ``ln_base_lo`` as the parameters of ``log_base_backward``.
    _ln_params: ClassVar[tuple[tuple[str, float], ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "ln_base" in cls.__dict__:
            cls._ln_params = (("ln_base", cls.ln_base), ("ln_base_lo", cls.ln_base_lo))

    def grad_formula(self, g: Any) -> tuple[Any]:
        shapes = (self.shape, self.shape)
        operands = (self.saved["x"], g)
        return (self.run_primitive("log_base_backward", operands, shapes, self._ln_params),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        # (g / ln b) / x: x ln b overflows for x near float64's largest (log10 of 1e308 gave
        # a gradient of 0, exact 4.3e-309)
        return ((g * (1.0 / self.ln_base)) / self.saved_tensor("x"),)


class Log2Backward(LogBase):
    r"""Autograd node for :math:`y = \log_2 x`; saves the input ``x``.

    Forward: ``be.log2(a, shape, dtype)``: on the CPU float32 runs a 16-lane AVX-512 kernel
    where the CPU has AVX-512F (<= 0.525 ULP, :mod:`pylucid.kernels.log2_avx512`), every
    other case a vectorised Numba loop (correctly rounded but for a few inputs); GPU
    ``mlx.core.log2``. IEEE special values: log2(±0) = -inf, log2(x < 0) = nan,
    log2(inf) = inf, log2(1) = +0; no exception, no warning. Integer input gives a float32
    result (``real_valued``).

    Backward, for :math:`x > 0`:

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{x \ln 2}

    with :math:`\ln 2` written as the float64 literal ``0.6931471805599453`` (the value
    ``log(2.0)`` gives) plus its float64 remainder, so that the numba backend's quotient is
    correctly rounded in float64 (see :class:`LogBase`). The fused kernel reads ``x`` and
    ``g`` once and writes the gradient once.
    """

    schema_v1 = OpSchema(
        name="log2", amp_policy=AmpPolicy.FORCE_FP32, saved=("x",), real_valued=True
    )
    base = 2.0
    ln_base, ln_base_lo = LN2, LN2_LO


class LogBackward(LogBase):
    r"""Autograd node for the natural logarithm :math:`y = \ln x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{x}

    (:class:`LogBase` with :math:`\ln e = 1`: the gradient is exactly ``g / x``).
    """

    schema_v1 = OpSchema(
        name="log", amp_policy=AmpPolicy.FORCE_FP32, saved=("x",), real_valued=True
    )
    base = math.e
    ln_base, ln_base_lo = 1.0, 0.0


class Log10Backward(LogBase):
    r"""Autograd node for :math:`y = \log_{10} x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{x \ln 10}

    (:class:`LogBase` with :math:`\ln 10` = ``2.30258509299404568402`` and its remainder).
    """

    schema_v1 = OpSchema(
        name="log10", amp_policy=AmpPolicy.FORCE_FP32, saved=("x",), real_valued=True
    )
    base = 10.0
    ln_base, ln_base_lo = LN10, LN10_LO


class NegBackward(UnaryOp):
    r"""Autograd node for :math:`y = -x`; saves nothing.

    .. math:: \frac{\partial L}{\partial x} = -g
    """

    schema_v1 = OpSchema(name="neg", amp_policy=AmpPolicy.KEEP_INPUT)
    primitive = "neg"

    @classmethod
    def compute_dtype(cls, dtypes: Sequence[DType], **params: Any) -> DType:
        if dtypes[0] is bool_:  # NumPy and PyTorch refuse: -True is not a bool
            raise TypeError(
                "neg: the - operator on a bool tensor is not supported; to invert a mask use "
                "~mask or logical_not, to negate numbers convert first: x.to(pylucid.int64)"
            )
        return dtypes[0]

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType) -> Any:
        return be.neg(a, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.run_primitive("neg", (g,), (self.shape,)),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (-g,)


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
                self.saved["x"], g, self.exponent, self.shape, self.dtype
            ),
        )

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        if self.exponent == 0:
            return (g * 0.0,)
        return (g * self.exponent * self.saved_tensor("x") ** (self.exponent - 1),)


log2 = unary_wrapper(Log2Backward)
log = unary_wrapper(LogBackward)
log10 = unary_wrapper(Log10Backward)
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
