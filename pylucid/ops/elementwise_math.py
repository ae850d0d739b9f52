"""Elementwise math of one tensor: exponentials, roots and powers, trigonometric and
hyperbolic functions. (The logarithms log, log2, log10 are one family in
:mod:`pylucid.ops.unary`.)

Public: exp, exp2, expm1, log1p, sqrt, rsqrt, square, reciprocal, sin, cos, tan, asin, acos,
atan, asinh, acosh, atanh, sinh, cosh, tanh - each also a Tensor method, as in PyTorch.

Every op is a :class:`~pylucid.ops.unary.PointwiseOp`: its class declares the schema and the
math; the forward is the backend primitive of the op's name and the backward the fused
``<name>_backward`` primitive, given the one value the schema saves. Integer input gives a
float32 result (``real_valued``) except for ``square``, which keeps integer dtypes. Special
values follow IEEE and NumPy with no exception or warning (``sqrt(-1) = nan``,
``rsqrt(0) = inf``, ``reciprocal(0) = inf``, ``exp(1000) = inf``).

AMP policies: FORCE_FP32 for the ops on PyTorch's autocast float32 list (exp, expm1, log1p,
rsqrt, reciprocal, tan, asin, acos, sinh, cosh); KEEP_INPUT for the others, which PyTorch's
autocast runs in the input's dtype.
"""

from __future__ import annotations

import math

from pylucid.ops.binary import where
from pylucid.ops.schema import AmpPolicy, OpSchema
from pylucid.ops.unary import LN2, PointwiseOp
from pylucid.ops.wrapping import unary_wrapper
from pylucid.tensor import Tensor

__all__ = [
    "AcosBackward",
    "AcoshBackward",
    "AsinBackward",
    "AsinhBackward",
    "AtanBackward",
    "AtanhBackward",
    "CosBackward",
    "CoshBackward",
    "Exp2Backward",
    "ExpBackward",
    "Expm1Backward",
    "Log1pBackward",
    "ReciprocalBackward",
    "RsqrtBackward",
    "SinBackward",
    "SinhBackward",
    "SqrtBackward",
    "SquareBackward",
    "TanBackward",
    "TanhBackward",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cos",
    "cosh",
    "exp",
    "exp2",
    "expm1",
    "log1p",
    "reciprocal",
    "rsqrt",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "tan",
    "tanh",
]

_FP32 = AmpPolicy.FORCE_FP32
_KEEP = AmpPolicy.KEEP_INPUT


# -- exponentials, roots and powers ------------------------------------------------------------
class ExpBackward(PointwiseOp):
    r"""Autograd node for :math:`y = e^x`; saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = g\, y
    """

    schema_v1 = OpSchema(name="exp", amp_policy=_FP32, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return g * y


class Exp2Backward(PointwiseOp):
    r"""Autograd node for :math:`y = 2^x`; saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = g\, y \ln 2
    """

    schema_v1 = OpSchema(name="exp2", amp_policy=_KEEP, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return g * y * LN2


class Expm1Backward(PointwiseOp):
    r"""Autograd node for :math:`y = e^x - 1` (accurate near 0); saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = g\, (y + 1)
    """

    schema_v1 = OpSchema(name="expm1", amp_policy=_FP32, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return g * (y + 1.0)


class Log1pBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \ln(1 + x)` (accurate near 0); saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{1 + x}

    log1p(-1) = -inf with gradient inf; log1p(x < -1) = nan.
    """

    schema_v1 = OpSchema(name="log1p", amp_policy=_FP32, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return g / (1.0 + x)


class SqrtBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \sqrt{x}`; saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{2 y}

    At :math:`x = 0` the gradient is inf (nan where :math:`g = 0`), as in PyTorch.
    """

    schema_v1 = OpSchema(name="sqrt", amp_policy=_KEEP, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return g / (2.0 * y)


class RsqrtBackward(PointwiseOp):
    r"""Autograd node for :math:`y = 1 / \sqrt{x}`; saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = -\frac{g}{2}\, y^3
    """

    schema_v1 = OpSchema(name="rsqrt", amp_policy=_FP32, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return -0.5 * g * y * y * y


class SquareBackward(PointwiseOp):
    r"""Autograd node for :math:`y = x^2`; saves ``x``. Integer tensors stay integer.

    .. math:: \frac{\partial L}{\partial x} = 2 g\, x
    """

    schema_v1 = OpSchema(name="square", amp_policy=_KEEP, saved=("x",))

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return 2.0 * g * x


class ReciprocalBackward(PointwiseOp):
    r"""Autograd node for :math:`y = 1 / x`; saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = -g\, y^2
    """

    schema_v1 = OpSchema(name="reciprocal", amp_policy=_FP32, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return -g * y * y


# -- trigonometric and hyperbolic --------------------------------------------------------------
class SinBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \sin x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = g \cos x
    """

    schema_v1 = OpSchema(name="sin", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return g * cos(x)


class CosBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \cos x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = -g \sin x
    """

    schema_v1 = OpSchema(name="cos", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return -g * sin(x)


class TanBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \tan x`; saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = g\, (1 + y^2)
    """

    schema_v1 = OpSchema(name="tan", amp_policy=_FP32, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return g * (1.0 + y * y)


class AsinBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \arcsin x`; saves ``x``. Outside [-1, 1]: nan.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{\sqrt{1 - x^2}}

    (inf at :math:`|x| = 1`).
    """

    schema_v1 = OpSchema(name="asin", amp_policy=_FP32, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return g / sqrt(1.0 - x * x)


class AcosBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \arccos x`; saves ``x``. Outside [-1, 1]: nan.

    .. math:: \frac{\partial L}{\partial x} = -\frac{g}{\sqrt{1 - x^2}}

    (-inf at :math:`|x| = 1`).
    """

    schema_v1 = OpSchema(name="acos", amp_policy=_FP32, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return -g / sqrt(1.0 - x * x)


class AtanBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \arctan x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{1 + x^2}
              = \frac{g / x}{x + 1 / x} \quad (|x| > 1)

    the second form where :math:`|x| > 1`, where :math:`x^2` would overflow (float64 x = 1e155
    gave 0, exact 1e-310); each branch is computed at safe values where it is not taken, so
    that a higher derivative does not meet 0 times inf.
    """

    schema_v1 = OpSchema(name="atan", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        large = abs(x) > 1.0
        small, big = where(large, 0.0, x), where(large, x, 2.0)
        return where(large, (g / big) / (big + 1.0 / big), g / (1.0 + small * small))


class AsinhBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \operatorname{arsinh} x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{\sqrt{1 + x^2}}
              = \frac{g}{|x| \sqrt{1 + x^{-2}}} \quad (|x| > 1)

    the second form where :math:`|x| > 1`, where :math:`x^2` would overflow; each branch is
    computed at safe values where it is not taken.
    """

    schema_v1 = OpSchema(name="asinh", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        large = abs(x) > 1.0
        small, big = where(large, 0.0, x), where(large, x, 2.0)
        r = 1.0 / big
        return where(large, g / (abs(big) * sqrt(1.0 + r * r)), g / sqrt(1.0 + small * small))


class AcoshBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \operatorname{arcosh} x`; saves ``x``. Below 1: nan.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{\sqrt{|x - 1|}\,\sqrt{|x + 1|}}

    (:math:`\sqrt{x^2 - 1}` in factors: no overflow, no cancellation next to :math:`\pm 1`;
    inf at :math:`\pm 1`, nan between them; for :math:`x < -1`, outside the domain, the
    formula's value, as PyTorch gives).
    """

    schema_v1 = OpSchema(name="acosh", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        outside = g / (sqrt(abs(x - 1.0)) * sqrt(abs(x + 1.0)))
        return where(abs(x) < 1.0, math.nan, outside)


class AtanhBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \operatorname{artanh} x`; saves ``x``. Outside
    [-1, 1]: nan; :math:`\pm\infty` at :math:`\pm 1`.

    .. math:: \frac{\partial L}{\partial x} = \frac{g}{1 - x^2}
              = \frac{g / (1 - x)}{1 + x}

    (two quotients: no cancellation next to :math:`\pm 1`, and no overflow of :math:`x^2`).
    """

    schema_v1 = OpSchema(name="atanh", amp_policy=_KEEP, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return (g / (1.0 - x)) / (1.0 + x)


class SinhBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \sinh x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = g \cosh x
    """

    schema_v1 = OpSchema(name="sinh", amp_policy=_FP32, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return g * cosh(x)


class CoshBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \cosh x`; saves ``x``.

    .. math:: \frac{\partial L}{\partial x} = g \sinh x
    """

    schema_v1 = OpSchema(name="cosh", amp_policy=_FP32, saved=("x",), real_valued=True)

    @staticmethod
    def gradient(x: Tensor, g: Tensor) -> Tensor:
        return g * sinh(x)


class TanhBackward(PointwiseOp):
    r"""Autograd node for :math:`y = \tanh x`; saves the result ``y``.

    .. math:: \frac{\partial L}{\partial x} = g\, (1 - y^2) = g\, (1 - y)(1 + y)

    (the product form: 1 - y^2 loses the bits of y^2 close to 1).
    """

    schema_v1 = OpSchema(name="tanh", amp_policy=_KEEP, saved=("result",), real_valued=True)

    @staticmethod
    def gradient(y: Tensor, g: Tensor) -> Tensor:
        return g * ((1.0 - y) * (1.0 + y))


exp = unary_wrapper(ExpBackward)
exp2 = unary_wrapper(Exp2Backward)
expm1 = unary_wrapper(Expm1Backward)
log1p = unary_wrapper(Log1pBackward)
sqrt = unary_wrapper(SqrtBackward)
rsqrt = unary_wrapper(RsqrtBackward)
square = unary_wrapper(SquareBackward)
reciprocal = unary_wrapper(ReciprocalBackward)
sin = unary_wrapper(SinBackward)
cos = unary_wrapper(CosBackward)
tan = unary_wrapper(TanBackward)
asin = unary_wrapper(AsinBackward)
acos = unary_wrapper(AcosBackward)
atan = unary_wrapper(AtanBackward)
asinh = unary_wrapper(AsinhBackward)
acosh = unary_wrapper(AcoshBackward)
atanh = unary_wrapper(AtanhBackward)
sinh = unary_wrapper(SinhBackward)
cosh = unary_wrapper(CoshBackward)
tanh = unary_wrapper(TanhBackward)
