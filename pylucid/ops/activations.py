"""Activations and special functions of one tensor.

Public: relu, leaky_relu, elu, sigmoid, softplus, silu, gelu, erf, abs, sign, clamp.
Tensor methods where PyTorch has them: relu, sigmoid, erf, abs (and ``abs(t)``), sign,
clamp; leaky_relu, elu, softplus, silu and gelu are functions, as in
``torch.nn.functional``.

Numerics: sigmoid, silu and softplus never overflow (``sigmoid(-1e4) = 0``,
``sigmoid(1e4) = 1``, ``softplus(1e4) = 1e4``), with no exception or warning; NaN propagates
through every forward. Integer input gives float32 (``real_valued``) except for relu, abs,
sign and clamp, which keep integer dtypes; bool input is refused by those four.

AMP policies: FORCE_FP32 for softplus (on PyTorch's autocast float32 list); KEEP_INPUT for
the others, which PyTorch's autocast runs in the input's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pylucid.backends.base import Backend, Shape
from pylucid.dtypes import DType, bool_, result_type
from pylucid.ops.base import UnaryOp
from pylucid.ops.binary import where
from pylucid.ops.comparison import ge, gt, le, lt
from pylucid.ops.elementwise_math import exp, tanh
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.unary import PointwiseOp
from pylucid.ops.wrapping import dunder, is_number, require_tensor, tensor_method, unary_wrapper
from pylucid.tensor import Tensor

__all__ = [
    "AbsBackward",
    "ClampBackward",
    "EluBackward",
    "ErfBackward",
    "GeluBackward",
    "LeakyReluBackward",
    "ReluBackward",
    "SigmoidBackward",
    "SignBackward",
    "SiluBackward",
    "SoftplusBackward",
    "abs",
    "clamp",
    "elu",
    "erf",
    "gelu",
    "leaky_relu",
    "relu",
    "sigmoid",
    "sign",
    "silu",
    "softplus",
]

_FP32 = AmpPolicy.FORCE_FP32
_KEEP = AmpPolicy.KEEP_INPUT
GELU_APPROXIMATIONS = ("none", "tanh")
#: The constants of the fused kernels' gradients (2/sqrt(pi), 1/sqrt(2), 1/sqrt(2 pi),
#: sqrt(2/pi) to 21 significant digits, and the tanh approximation's cubic coefficient).
TWO_OVER_SQRTPI = 1.12837916709551257390
SQRT1_2 = 0.70710678118654752440
INV_SQRT_2PI = 0.39894228040143267794
SQRT_2_OVER_PI = 0.79788456080286535588
GELU_KAPPA = 0.044715


def _number(op: str, name: str, value: Any) -> float:
    """``value`` as a float, or a TypeError naming the op and the parameter."""
    if not is_number(value):
        raise TypeError(f"{op}: {name} must be a Python number, got {type(value).__name__}")
    return float(value)


class ReluBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \max(x, 0)`; saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = g\, [y > 0]

    so the gradient at :math:`x = 0` is 0, as PyTorch's ``threshold_backward``.
    """

    schema_v1 = OpSchema(name="relu", amp_policy=_KEEP, saved=("result",))

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return where(y <= 0, 0.0, g)


class LeakyReluBackward(UnaryOp):
    r"""Autograd node for :math:`y = x` if :math:`x > 0` else :math:`s x` (``negative_slope``
    :math:`s`); saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = g \text{ if } x > 0 \text{ else } s\, g
    """

    schema_v1 = OpSchema(name="leaky_relu", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, negative_slope: float) -> Any:
        return be.leaky_relu(a, negative_slope, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be, slope = self.backend, self.negative_slope
        return (be.leaky_relu_backward(self.saved["x"], g, slope, self.shape, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (where(self.saved_tensor("x") > 0, g, g * self.negative_slope),)


class EluBackward(UnaryOp):
    r"""Autograd node for :math:`y = x` if :math:`x > 0` else :math:`\alpha (e^x - 1)`;
    saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = g \text{ if } x > 0
        \text{ else } g\, \alpha e^x

    (:math:`\alpha g` at :math:`x = 0`, as PyTorch's ``elu_backward``).
    """

    schema_v1 = OpSchema(name="elu", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, alpha: float) -> Any:
        return be.elu(a, alpha, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.elu_backward(self.saved["x"], g, self.alpha, self.shape, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        x = self.saved_tensor("x")
        return (where(x > 0, g, g * self.alpha * exp(x)),)


class SigmoidBackward(PointwiseOp):
    r"""Autograd node for :math:`y = 1 / (1 + e^{-x})`; saves the result ``y``.

    The forward never overflows: :math:`e^{-x}` becomes inf for :math:`x \ll 0` and the
    result the exact limit 0 (no warning).

    .. math:: \frac{\partial L}{\partial x} = g\, y (1 - y)
    """

    schema_v1 = OpSchema(name="sigmoid", amp_policy=_KEEP, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return g * y * (1.0 - y)


class SoftplusBackward(UnaryOp):
    r"""Autograd node for :math:`y = \frac{1}{\beta} \ln(1 + e^{\beta x})`, and
    :math:`y = x` where :math:`\beta x >` ``threshold`` (PyTorch's linear regime); saves ``x``.

    Computed as :math:`(\max(z, 0) + \operatorname{log1p}(e^{-|z|})) / \beta` with
    :math:`z = \beta x`, which cannot overflow.

    .. math:: \frac{\partial L}{\partial x} = g\, \sigma(\beta x)
        \text{, and } g \text{ where } \beta x > \text{threshold}
    """

    schema_v1 = OpSchema(name="softplus", amp_policy=_FP32, saved=("x",), real_valued=True)

    @staticmethod
    def dispatch(
        be: Backend, a: Any, shape: Shape, dtype: DType, beta: float, threshold: float
    ) -> Any:
        return be.softplus(a, beta, threshold, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be, x = self.backend, self.saved["x"]
        return (be.softplus_backward(x, g, self.beta, self.threshold, self.shape, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        z = self.saved_tensor("x") * self.beta
        return (where(z > self.threshold, g, g * sigmoid(z)),)


class SiluBackward(PointwiseOp):
    r"""Autograd node for :math:`y = x\, \sigma(x)` (SiLU, swish); saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = g\, \sigma(x) \bigl(1 + x (1 - \sigma(x))\bigr)
    """

    schema_v1 = OpSchema(name="silu", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        s = sigmoid(x)
        return g * s * (1.0 + x * (1.0 - s))


class GeluBackward(UnaryOp):
    r"""Autograd node for GELU, :math:`y = x\, \Phi(x)`; saves ``x``.

    ``approximate="none"``: :math:`\Phi(x) = \frac{1}{2}(1 + \operatorname{erf}(x/\sqrt 2))`,

    .. math:: \frac{\partial L}{\partial x} = g \left(\Phi(x) + x\, \phi(x)\right),
        \qquad \phi(x) = \frac{e^{-x^2/2}}{\sqrt{2\pi}}

    ``approximate="tanh"``: :math:`y = \frac{x}{2}(1 + \tanh u)`,
    :math:`u = \sqrt{2/\pi}\,(x + 0.044715\, x^3)`,

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{2} \left(1 + t
        + x (1 - t^2) \sqrt{2/\pi}\, (1 + 3 \cdot 0.044715\, x^2)\right), \qquad t = \tanh u

    both as ``torch.nn.functional.gelu``.
    """

    schema_v1 = OpSchema(name="gelu", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def dispatch(be: Backend, a: Any, shape: Shape, dtype: DType, approximate: str) -> Any:
        return be.gelu(a, approximate, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be, x = self.backend, self.saved["x"]
        return (be.gelu_backward(x, g, self.approximate, self.shape, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        x = self.saved_tensor("x")
        if self.approximate == "tanh":
            x2 = x * x
            t = tanh(SQRT_2_OVER_PI * (x + GELU_KAPPA * x2 * x))
            du = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_KAPPA * x2)
            return (g * 0.5 * ((1.0 + t) + x * (1.0 - t * t) * du),)
        cdf = 0.5 * (1.0 + erf(x * SQRT1_2))
        return (g * (cdf + x * INV_SQRT_2PI * exp(-0.5 * x * x)),)


class ErfBackward(PointwiseOp):
    r"""Autograd node for the error function :math:`y = \operatorname{erf} x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = \frac{2 g}{\sqrt\pi} e^{-x^2}
    """

    schema_v1 = OpSchema(name="erf", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return g * TWO_OVER_SQRTPI * exp(-x * x)


class AbsBackward(PointwiseOp):
    r"""Autograd node for :math:`y = |x|`; saves ``x``. Integer tensors stay integer.

    .. math:: \frac{\partial L}{\partial x} = g \operatorname{sign}(x)

    (0 at :math:`x = 0`, as PyTorch).
    """

    schema_v1 = OpSchema(name="abs", amp_policy=_KEEP, saved=("x",))

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return g * sign(x)


class SignBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \operatorname{sign} x` (-1, 0 or 1; NaN stays NaN, as
    NumPy); saves nothing. Integer tensors stay integer.

    The gradient is zero everywhere, as PyTorch's ``sign`` (whose output requires grad and
    whose backward gives zeros), rather than no gradient at all: a loss through ``sign``
    gives its inputs a zero ``.grad``.

    .. math:: \frac{\partial L}{\partial x} = 0
    """

    schema_v1 = OpSchema(name="sign", amp_policy=_KEEP)

    def grad_formula(self, g: Any) -> tuple[Any]:
        return (self.backend.full(self.shape, 0.0, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        return (g * 0.0,)


class ClampBackward(UnaryOp):
    r"""Autograd node for :math:`y = \min(\max(x, \text{low}), \text{high})` with scalar
    bounds (None: no bound; ``high`` wins where low > high, as PyTorch); saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = g\, [\text{low} \le x \le \text{high}]

    The boundaries count as inside (gradient g at :math:`x` = low or high) and NaN as
    outside, as PyTorch's ``clamp_backward``. The dtype is that of ``x`` and the bounds
    together (an integer tensor with a float bound computes in float32).
    """

    schema_v1 = OpSchema(name="clamp", amp_policy=_KEEP, saved=("x",))

    @classmethod
    def compute_dtype(
        cls, dtypes: Sequence[DType], *, low: float | None, high: float | None
    ) -> DType:
        dtype = result_type(dtypes[0], *(b for b in (low, high) if b is not None))
        if dtype is bool_:
            raise TypeError(
                "clamp: bool tensors are not supported; convert the input to an integer or "
                "floating dtype first, e.g. x.to(pl.float32)"
            )
        return dtype

    @staticmethod
    def dispatch(
        be: Backend, a: Any, shape: Shape, dtype: DType, low: float | None, high: float | None
    ) -> Any:
        return be.clamp(a, low, high, shape, dtype)

    def grad_formula(self, g: Any) -> tuple[Any]:
        be, x = self.backend, self.saved["x"]
        return (be.clamp_backward(x, g, self.low, self.high, self.shape, self.dtype),)

    def grad_graph(self, g: Tensor) -> tuple[Tensor]:
        x = self.saved_tensor("x")  # NaN fails both comparisons: no gradient there
        if self.low is not None:
            g = where(x >= self.low, g, 0.0)
        if self.high is not None:
            g = where(x <= self.high, g, 0.0)
        return (g,)


relu = unary_wrapper(ReluBackward)
sigmoid = unary_wrapper(SigmoidBackward)
erf = unary_wrapper(ErfBackward)
abs = dunder("__abs__")(unary_wrapper(AbsBackward))  # noqa: A001  (pl.abs, as torch.abs)
sign = unary_wrapper(SignBackward)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """``x`` where positive, ``negative_slope * x`` elsewhere, as
    ``torch.nn.functional.leaky_relu``; see :class:`LeakyReluBackward`."""
    require_tensor("leaky_relu", "x", x)
    slope = _number("leaky_relu", "negative_slope", negative_slope)
    return LeakyReluBackward.apply(x, negative_slope=slope)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere, as
    ``torch.nn.functional.elu``; see :class:`EluBackward`."""
    require_tensor("elu", "x", x)
    return EluBackward.apply(x, alpha=_number("elu", "alpha", alpha))


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, and ``x`` where ``beta * x > threshold``, as
    ``torch.nn.functional.softplus``; see :class:`SoftplusBackward`."""
    require_tensor("softplus", "x", x)
    beta_ = _number("softplus", "beta", beta)
    if beta_ == 0 or math.isnan(beta_):
        raise ValueError(f"softplus: beta must be a nonzero number, got {beta!r}")
    threshold_ = _number("softplus", "threshold", threshold)
    return SoftplusBackward.apply(x, beta=beta_, threshold=threshold_)


def silu(x: Tensor) -> Tensor:
    """``x * sigmoid(x)``, as ``torch.nn.functional.silu``; see :class:`SiluBackward`."""
    return SiluBackward.apply(require_tensor("silu", "x", x))


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """GELU ``x * Phi(x)``, exact (``approximate="none"``) or with the tanh approximation
    (``"tanh"``), as ``torch.nn.functional.gelu``; see :class:`GeluBackward`."""
    require_tensor("gelu", "x", x)
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(
            f"gelu: approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}"
        )
    return GeluBackward.apply(x, approximate=approximate)


@tensor_method
def clamp(
    x: Tensor,
    min: float | Tensor | None = None,  # noqa: A002  (torch.clamp's names)
    max: float | Tensor | None = None,  # noqa: A002
) -> Tensor:
    """``x`` limited to ``[min, max]`` (either may be None), as ``torch.clamp``. Number
    bounds: one op, :class:`ClampBackward`. Tensor bounds (broadcast with ``x``):
    :func:`_clamp_by_tensors`, with PyTorch's gradients."""
    require_tensor("clamp", "x", x)
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given, got two None")
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        return _clamp_by_tensors(x, min, max)
    for name, bound in (("min", min), ("max", max)):
        if bound is None:
            continue
        if not is_number(bound):
            raise TypeError(
                f"clamp: {name} must be a number, a tensor or None, got {type(bound).__name__}"
            )
        if bound != bound:
            raise ValueError(f"clamp: {name} is nan; a bound must be a number")
    return ClampBackward.apply(x, low=min, high=max)


def _clamp_by_tensors(x: Tensor, low: Tensor | float | None, high: Tensor | float | None) -> Tensor:
    """``min(max(x, low), high)`` by ``where`` on masks, so that each input gets PyTorch's
    gradient: ``x`` where ``low <= x <= high``; ``low`` where ``x < low < high``; ``high``
    where ``x > high`` or ``high < low`` (then every element is ``high``). A nan anywhere
    gives nan, with no gradient."""
    if low is not None and high is not None:  # (bool * bool is "and", bool + bool "or")
        keep = ge(x, low) * le(x, high)
        to_high = gt(x, high) + lt(high, low)
        to_low = lt(x, low) * lt(low, high)
    elif low is not None:
        keep, to_high, to_low = ge(x, low), None, lt(x, low)
    else:
        keep, to_high, to_low = le(x, high), gt(x, high), None
    floating = any(
        v.dtype.is_floating_point if isinstance(v, Tensor) else isinstance(v, float)
        for v in (x, low, high)
    )
    rest = math.nan if floating else x  # (integers are never nan: rest is never taken)
    if to_low is not None:
        rest = where(to_low, low, rest)
    if to_high is not None:
        rest = where(to_high, high, rest)
    return where(keep, x, rest)
