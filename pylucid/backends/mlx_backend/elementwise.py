"""MLX primitives of the elementwise math ops and activations.

Most primitives follow one pattern - ``name(a, shape, dtype)`` and
``name_backward(v, g, shape, dtype)``, where ``v`` is what the op saved - so they are
generated from :data:`UNARY_FUNCTIONS`, a table of MLX expressions. The ops with scalar
parameters (the log family's base, ``leaky_relu``, ``elu``, ``softplus``, ``gelu``,
``clamp``) are written out below.

Every expression is built inside ``mx.stream(self._stream(dtype))``, so each MLX call runs on
the stream the dtype needs (float64: the CPU stream) without repeating ``stream=``.

MLX's own float64 ``exp``, ``sin``, ``cos``, ``erf`` and ``sigmoid`` have float32 accuracy
and range (measured with mlx 0.32 on its CPU stream: up to 3e9 ULP from the correctly
rounded value, and ``exp(100.0) = inf``), while its float64 ``expm1``, ``tan`` and
``power`` are within 1 ULP, and its float32 ``erf`` is off by up to 6% near 0. Its float32
``exp`` and ``sigmoid`` are up to 64 ULP off for |x| > 20 (the error of x log2(e)), ``exp``
overflows from x = 88.2 (exact: 2.1e38) and both flush results below the smallest normal to
0, while its float32 ``expm1`` is within 1 ULP up to the overflow. :class:`_Math` therefore
computes those from the accurate ones (exp and sigmoid in both dtypes, sin and cos in
float64, erf in both; within a few ULP, see each method), and uses MLX's kernels otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pylucid.backends.base import Shape
from pylucid.backends.half import HalfConversion, computes_halves_in_float32
from pylucid.dtypes import DType, float64

LN2 = 0.69314718055994530942
SQRT1_2 = 0.70710678118654752440
SQRT2 = 1.41421356237309504880
TWO_OVER_SQRTPI = 1.12837916709551257390
INV_SQRT_2PI = 0.39894228040143267794
SQRT_2_OVER_PI = 0.79788456080286535588
GELU_KAPPA = 0.044715
#: 2 / pi and fdlibm's pi/2 in three parts (33 + 33 bits and the rest), for the float64
#: argument reduction of sin and cos below 2**19, where n * _PIO2_1 and n * _PIO2_2 are exact.
_TWO_OVER_PI = 0.63661977236758134308
_PIO2_1 = 1.57079632673412561417e00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_2T = 2.02226624879595063154e-21
_REDUCTION_LIMIT = 2.0**19
#: ln 2**-1022 and ln 2**-126, the logarithms of the smallest normal float64 and float32.
_LN_TINY_F64 = -708.39641853226410622
_LN_TINY_F32 = -87.336544750553108987

# Cephes ``ndtr.c`` (S. L. Moshier) rational approximations of erf on |x| <= 1 and of
# erfc on 1 < x < 8, highest power first; relative error below 1e-16 in double precision.
_ERF_T = (
    9.60497373987051638749e0,
    9.00260197203842689217e1,
    2.23200534594684319226e3,
    7.00332514112805075473e3,
    5.55923013010394962768e4,
)
_ERF_U = (
    1.0,
    3.35617141647503099647e1,
    5.21357949780152679795e2,
    4.59432382970980127987e3,
    2.26290000613890934246e4,
    4.92673942608635921086e4,
)
_ERFC_P = (
    2.46196981473530512524e-10,
    5.64189564831068821977e-1,
    7.46321056442269912687e0,
    4.86371970985681366614e1,
    1.96520832956077098242e2,
    5.26445194995477358631e2,
    9.34528527171957607540e2,
    1.02755188689515710272e3,
    5.57535335369399327526e2,
)
_ERFC_Q = (
    1.0,
    1.32281951154744992508e1,
    8.67072140885989742329e1,
    3.54937778887819891062e2,
    9.75708501743205489753e2,
    1.82390916687909736289e3,
    2.24633760818710981792e3,
    1.65666309194161350182e3,
    5.57535340817727675546e2,
)
# Cephes ``ndtr.c``'s erfc on x >= 8: erfc x = e^(-x^2) R(x) / S(x) (relative error 3e-17
# up to x = 27, measured with mpmath).
_ERFC_R = (
    5.64189583547755073984e-1,
    1.27536670759978104416e0,
    5.01905042251180477414e0,
    6.16021097993053585195e0,
    7.40974269950448939160e0,
    2.97886665372100240670e0,
)
_ERFC_S = (
    1.0,
    2.26052863220117276590e0,
    9.39603524938001434673e0,
    1.20489539808096656605e1,
    1.70814450747565897222e1,
    9.60896809063285878198e0,
    3.36907645100081516050e0,
)


def _horner(x: Any, coefficients: tuple[float, ...]) -> Any:
    """The polynomial with ``coefficients`` (highest power first, at least two) at ``x``."""
    result = coefficients[0] * x + coefficients[1]
    for c in coefficients[2:]:
        result = result * x + c
    return result


class _Math:
    """``mlx.core`` for one dtype: :meth:`exp`, :meth:`sin`, :meth:`cos`, :meth:`erf`,
    :meth:`sigmoid` and :meth:`sign` are float64-accurate (and NaN-preserving); every other
    attribute is ``mlx.core``'s own function."""

    def __init__(self, mx: Any, dtype: DType) -> None:
        self._mx = mx
        self._f64 = dtype is float64
        self._floating = dtype.is_floating_point
        #: ln of the smallest normal float64 or float32: below it e^x is a subnormal.
        self.ln_tiny = _LN_TINY_F64 if self._f64 else _LN_TINY_F32

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mx, name)

    def _exp_negative(self, x: Any) -> Any:
        """e^x for x <= 0 as 1 / (expm1(-x) + 1): 2 ULP while the result is normal."""
        mx = self._mx
        return mx.reciprocal(mx.expm1(-x) + 1)

    def _exp_subnormal(self, x: Any) -> Any:
        """e^x for x below ln(smallest normal) as the square of e^(x/2), which rounds once
        into the subnormals (1 / (expm1(-x) + 1) flushes once expm1(-x) overflows)."""
        half = self._exp_negative(x * 0.5)
        return half * half

    def exp(self, x: Any) -> Any:
        """e^x from MLX's expm1: expm1(x) + 1 for x > 0, 1 / (expm1(-x) + 1) for x <= 0,
        and :meth:`_exp_subnormal` below the normals; within 2 ULP of e^x (3 subnormal ULP
        below the normals) and finite up to the overflow (x = 88.72 in float32)."""
        mx = self._mx
        low = mx.where(x < self.ln_tiny, self._exp_subnormal(x), self._exp_negative(x))
        return mx.where(x > 0, mx.expm1(x) + 1, low)

    def sigmoid(self, x: Any) -> Any:
        """1 / (1 + e^-x), written 1 / (2 + expm1(-x)): no overflow, 0 and 1 as the limits
        (2 ULP); below ln(smallest normal), where 1 + e^x rounds to 1, it is e^x
        (:meth:`_exp_subnormal`), not the 0 of an overflowing expm1(-x)."""
        mx = self._mx
        normal = mx.reciprocal(2 + mx.expm1(-x))
        return mx.where(x < self.ln_tiny, self._exp_subnormal(x), normal)

    def _quadrant(self, x: Any) -> tuple[Any, Any, Any]:
        """``(q, sin r, cos r)`` with x = n pi/2 + r, |r| <= pi/4 and q = n mod 4 (float64,
        for |x| < :data:`_REDUCTION_LIMIT`): r by Cody-Waite with fdlibm's three-part pi/2
        (n pi/2 to 2**-150 |n|, the first two products exact), then sin r and cos r from
        t = tan(r / 2), |t| <= 0.42, where neither 2 t / (1 + t^2) nor (1 - t^2) / (1 + t^2)
        cancels."""
        mx = self._mx
        n = mx.round(x * _TWO_OVER_PI)
        r = ((x - n * _PIO2_1) - n * _PIO2_2) - n * _PIO2_2T
        t = mx.tan(r * 0.5)
        d = 1 + t * t
        return n - 4 * mx.floor(n * 0.25), 2 * t / d, (1 - t) * (1 + t) / d

    def sin(self, x: Any) -> Any:
        """sin x; float32: MLX's, but sin(-0) = -0 (MLX gives +0); float64: from
        :meth:`_quadrant` below 2**19 (3 ULP), beyond from t = tan(x / 2):
        2 t / (1 + t^2) (2.2 ULP but near the zeros of sin, where its error is absolute,
        2.2e-16 |x|: without the reduction sin(pi) was 2e-16, exact 1.2e-16)."""
        mx = self._mx
        if not self._f64:
            return mx.where(x == 0, x, mx.sin(x))
        q, sin_r, cos_r = self._quadrant(x)
        reduced = mx.where(q == 0, sin_r, mx.where(q == 1, cos_r, mx.where(q == 2, -sin_r, -cos_r)))
        t = mx.tan(x * 0.5)
        direct = 2 * t / (1 + t * t)
        near = mx.where(x == 0, x, reduced)  # x - 0 is +0 for x = -0
        return mx.where(mx.abs(x) < _REDUCTION_LIMIT, near, direct)

    def cos(self, x: Any) -> Any:
        """cos x; float32: MLX's; float64: from :meth:`_quadrant` below 2**19 (3 ULP),
        beyond from t = tan(x / 2): (1 - t)(1 + t) / (1 + t^2) (2.6 ULP but near the zeros of
        cos, where its error is absolute, 2.2e-16 |x|: without the reduction cos(pi / 2)
        was 1.1e-16, exact 6.1e-17)."""
        mx = self._mx
        if not self._f64:
            return mx.cos(x)
        q, sin_r, cos_r = self._quadrant(x)
        reduced = mx.where(q == 0, cos_r, mx.where(q == 1, -sin_r, mx.where(q == 2, -cos_r, sin_r)))
        t = mx.tan(x * 0.5)
        direct = (1 - t) * (1 + t) / (1 + t * t)
        return mx.where(mx.abs(x) < _REDUCTION_LIMIT, reduced, direct)

    def erf(self, x: Any) -> Any:
        """erf x from Cephes' rational approximations, in both dtypes (MLX's own float32 erf
        is off by up to 6% relative near 0): x T(x^2) / U(x^2) for |x| <= 1,
        +-(1 - e^(-x^2) P(|x|) / Q(|x|)) beyond, with |x| capped at 8 (where erfc < 1e-29, so
        erf = +-1 exactly). Measured: 2.4 ULP in float32, 2 ULP in float64."""
        mx = self._mx
        z = x * x
        inner = x * _horner(z, _ERF_T) / _horner(z, _ERF_U)
        t = mx.minimum(mx.abs(x), 8.0)
        outer = 1 - self.exp(-t * t) * _horner(t, _ERFC_P) / _horner(t, _ERFC_Q)
        return mx.where(mx.abs(x) <= 1, inner, mx.where(x < 0, -outer, outer))

    def exp_neg_half_square(self, x: Any) -> Any:
        """e^(-x^2 / 2) without the rounding of x^2 (which costs x^2 / 2 ULP: 50 at x = 10):
        x = h + l with h a multiple of 1/64 of at most 12 bits, whose square is exact, and
        e^(-x^2 / 2) = e^(-h^2 / 2) e^(-l (x + h) / 2). |x| is capped where the result is 0
        (16 in float32, 40 in float64). Within 5 ULP."""
        mx = self._mx
        a = mx.minimum(mx.abs(x), 40.0 if self._f64 else 16.0)
        h = mx.round(a * 64) / 64
        low = a - h
        return self.exp(-0.5 * (h * h)) * self.exp(-0.5 * (low * (a + h)))

    def ndtr(self, x: Any) -> Any:
        """Phi(x) = (1 + erf(x / sqrt 2)) / 2, the standard normal cdf; below -sqrt 2 as
        erfc(t) / 2, t = -x / sqrt 2, from Cephes' P(t) / Q(t) (t < 8) or R(t) / S(t)
        times e^(-t^2) = :meth:`exp_neg_half_square` of x: there 1 + erf cancels (it gave
        0 for float32 x < -5.7, where Phi is still 1e-8). Within 6 ULP."""
        mx = self._mx
        t = mx.clip(-x * SQRT1_2, 1.0, 28.0)  # beyond 28, e^(-t^2) is 0 in both dtypes
        near = _horner(t, _ERFC_P) / _horner(t, _ERFC_Q)
        far = _horner(t, _ERFC_R) / _horner(t, _ERFC_S)
        tail = 0.5 * self.exp_neg_half_square(x) * mx.where(t < 8, near, far)
        return mx.where(x < -SQRT2, tail, 0.5 * (1 + self.erf(x * SQRT1_2)))

    def sign(self, x: Any) -> Any:
        """-1, 0 or 1 (MLX gives sign(nan) = 0; NaN is kept here, as NumPy does)."""
        mx = self._mx
        return mx.where(mx.isnan(x), x, mx.sign(x)) if self._floating else mx.sign(x)


Forward = Callable[[_Math, Any], Any]
Backward = Callable[[_Math, Any, Any], Any]

#: Primitive name -> (forward ``(m, x) -> y``, fused gradient ``(m, v, g) -> dL/dx`` or None
#: where the op has another backward), with ``m`` the :class:`_Math` of the dtype and ``v``
#: what the op saved (x, or the result y).
UNARY_FUNCTIONS: dict[str, tuple[Forward, Backward | None]] = {
    "exp": (lambda m, x: m.exp(x), lambda m, y, g: g * y),
    "exp2": (lambda m, x: m.power(2.0, x), lambda m, y, g: g * (y * LN2)),
    "expm1": (lambda m, x: m.expm1(x), lambda m, y, g: g * (y + 1)),
    "log": (lambda m, x: m.log(x), None),
    "log10": (lambda m, x: m.log10(x), None),
    "log1p": (lambda m, x: m.log1p(x), lambda m, x, g: g / (1 + x)),
    "sqrt": (lambda m, x: m.sqrt(x), lambda m, y, g: g / (2 * y)),
    "rsqrt": (lambda m, x: m.rsqrt(x), lambda m, y, g: -0.5 * g * y * y * y),
    "square": (lambda m, x: m.square(x), lambda m, x, g: 2 * g * x),
    "reciprocal": (lambda m, x: m.reciprocal(x), lambda m, y, g: -g * y * y),
    "sin": (lambda m, x: m.sin(x), lambda m, x, g: g * m.cos(x)),
    "cos": (lambda m, x: m.cos(x), lambda m, x, g: -g * m.sin(x)),
    "tan": (lambda m, x: m.tan(x), lambda m, y, g: g * (1 + y * y)),
    "asin": (lambda m, x: m.arcsin(x), lambda m, x, g: g / m.sqrt(1 - x * x)),
    "acos": (lambda m, x: m.arccos(x), lambda m, x, g: -g / m.sqrt(1 - x * x)),
    "atan": (lambda m, x: m.arctan(x), lambda m, x, g: _atan_grad(m, x, g)),
    "asinh": (lambda m, x: m.arcsinh(x), lambda m, x, g: _asinh_grad(m, x, g)),
    "acosh": (lambda m, x: m.arccosh(x), lambda m, x, g: _acosh_grad(m, x, g)),
    "atanh": (lambda m, x: m.arctanh(x), lambda m, x, g: (g / (1 - x)) / (1 + x)),
    "sinh": (lambda m, x: m.sinh(x), lambda m, x, g: g * m.cosh(x)),
    "cosh": (lambda m, x: m.cosh(x), lambda m, x, g: g * m.sinh(x)),
    "tanh": (lambda m, x: m.tanh(x), lambda m, y, g: g * ((1 - y) * (1 + y))),
    "relu": (lambda m, x: m.maximum(x, 0), lambda m, y, g: m.where(y <= 0, 0, g)),
    "sigmoid": (lambda m, x: m.sigmoid(x), lambda m, y, g: g * (y * (1 - y))),
    "silu": (lambda m, x: _silu(m, x), lambda m, x, g: _silu_grad(m, x, g)),
    "erf": (lambda m, x: m.erf(x), lambda m, x, g: g * TWO_OVER_SQRTPI * m.exp(-x * x)),
    "abs": (lambda m, x: m.abs(x), lambda m, x, g: g * m.sign(x)),
    "sign": (lambda m, x: m.sign(x), None),
    "floor": (lambda m, x: m.floor(x), None),
    "ceil": (lambda m, x: m.ceil(x), None),
    "trunc": (lambda m, x: m.trunc(x), None),
    "round": (lambda m, x: m.round(x), None),  # ties to even, as torch.round
}


def _atan_grad(m: _Math, x: Any, g: Any) -> Any:
    """g / (1 + x^2), as (g / x) / (x + 1 / x) for |x| > 1, where x^2 overflows while the
    gradient is a (subnormal) number (pylucid.kernels.elementwise_math.atan_grad)."""
    return m.where(m.abs(x) <= 1, g / (1 + x * x), (g / x) / (x + 1 / x))


def _asinh_grad(m: _Math, x: Any, g: Any) -> Any:
    """g / sqrt(1 + x^2), as g / (|x| sqrt(1 + (1/x)^2)) for |x| > 1, where x^2 overflows
    (pylucid.kernels.elementwise_math.asinh_grad)."""
    r = 1 / x
    return m.where(m.abs(x) <= 1, g / m.sqrt(1 + x * x), g / (m.abs(x) * m.sqrt(1 + r * r)))


def _acosh_grad(m: _Math, x: Any, g: Any) -> Any:
    """g / (sqrt|x - 1| sqrt|x + 1|), nan for |x| < 1
    (pylucid.kernels.elementwise_math.acosh_grad)."""
    outside = g / (m.sqrt(m.abs(x - 1)) * m.sqrt(m.abs(x + 1)))
    return m.where(m.abs(x) < 1, math.nan, outside)


def _silu(m: _Math, x: Any) -> Any:
    """x sigmoid(x); below ln(smallest normal), (x h) h with h = e^(x/2): x e^x is still a
    number where e^x has underflowed (pylucid.kernels.elementwise_math.silu)."""
    h = m.exp(x * 0.5)
    return m.where(x < m.ln_tiny, (x * h) * h, x * m.sigmoid(x))


def _silu_grad(m: _Math, x: Any, g: Any) -> Any:
    """g s (1 + x (1 - s)), s = sigmoid(x), with 1 - s = sigmoid(-x) (``1 - s`` cancels for
    x >> 0); below ln(smallest normal), g ((1 + x) h) h as in :func:`_silu`."""
    h = m.exp(x * 0.5)
    s = m.sigmoid(x)
    return m.where(x < m.ln_tiny, g * (((1 + x) * h) * h), g * s * (1 + x * m.sigmoid(-x)))


def _gelu(m: _Math, x: Any, approximate: str) -> Any:
    """x Phi(x) (:meth:`_Math.ndtr`), or the tanh approximation."""
    if approximate == "tanh":
        return 0.5 * x * (1 + m.tanh(SQRT_2_OVER_PI * (x + GELU_KAPPA * x * x * x)))
    return x * m.ndtr(x)


def _gelu_grad(m: _Math, x: Any, g: Any, approximate: str) -> Any:
    """g (Phi(x) + x phi(x)), with :meth:`_Math.ndtr` and :meth:`_Math.exp_neg_half_square`
    (Phi from 1 + erf was 0 for float32 x < -5.7, and the gradient off by 3% at x = -6)."""
    if approximate == "tanh":
        x2 = x * x
        t = m.tanh(SQRT_2_OVER_PI * (x + GELU_KAPPA * x2 * x))
        du = SQRT_2_OVER_PI * (1 + 3 * GELU_KAPPA * x2)
        return g * 0.5 * ((1 + t) + x * (1 - t * t) * du)
    return g * (m.ndtr(x) + x * INV_SQRT_2PI * m.exp_neg_half_square(x))


def _bound(value: float | None, dtype: DType) -> float | None:
    """An integer clamp bound beyond the integer type's range saturated to its limit."""
    if value is None or dtype.is_floating_point:
        return value
    info = np.iinfo(dtype.numpy)
    return int(min(max(value, info.min), info.max))


def _forward(name: str, fn: Forward) -> Callable[..., Any]:
    def primitive(self: Any, a: Any, shape: Shape, dtype: DType) -> Any:
        m, (a,) = self._math(dtype, a)
        with self.mx.stream(self._stream(dtype)):
            return fn(m, a)

    primitive.__name__ = primitive.__qualname__ = name
    primitive.__doc__ = f"Elementwise ``{name}``."
    return primitive


def _backward(name: str, fn: Backward) -> Callable[..., Any]:
    def primitive(self: Any, v: Any, g: Any, shape: Shape, dtype: DType) -> Any:
        m, (v, g) = self._math(dtype, v, g)
        with self.mx.stream(self._stream(dtype)):
            return fn(m, v, g)

    primitive.__name__ = primitive.__qualname__ = f"{name}_backward"
    primitive.__doc__ = f"Fused gradient of ``{name}``."
    return primitive


def _with_unary_functions(cls: type) -> type:
    """Add the ``name`` / ``name_backward`` primitives of :data:`UNARY_FUNCTIONS` to ``cls``."""
    for name, (forward, backward) in UNARY_FUNCTIONS.items():
        setattr(cls, name, _forward(name, forward))
        if backward is not None:
            setattr(cls, f"{name}_backward", _backward(name, backward))
    return cls


def _is_mx_half(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return str(dtype) in ("mlx.core.float16", "mlx.core.bfloat16")


def _mx_widen(value: Any) -> Any:
    import mlx.core as mx

    return value.astype(mx.float32)


def _mx_narrow(value: Any, dtype: DType) -> Any:
    import mlx.core as mx

    target = mx.float16 if dtype.name == "float16" else mx.bfloat16
    return value.astype(target) if value.dtype == mx.float32 else value


#: The elementwise primitives are formulas of several MLX calls (erf, gelu, softplus, ...):
#: computed in float16 each call would round, so halves run in float32 and round once.
_MX_HALVES = HalfConversion(is_half=_is_mx_half, widen=_mx_widen, narrow=_mx_narrow)


@computes_halves_in_float32(_MX_HALVES)
@_with_unary_functions
class MLXElementwise:
    """Primitives of the elementwise math ops and activations on the mlx backend."""

    def _math(self, dtype: DType, *operands: Any) -> tuple[_Math, list[Any]]:
        """The :class:`_Math` of ``dtype`` and the operands as ``dtype`` arrays."""
        return _Math(self.mx, dtype), self._operands(dtype, *operands)

    def log_base_backward(self, x, g, ln_base: float, ln_base_lo: float, shape, dtype):
        """``g / (x ln b)``, the gradient of the base-b logarithm, as ``(g c) / x`` with
        c = 1 / ln b rounded to the dtype (MLX has no FMA for the numba backend's compensated
        quotient, so this is within 2 ULP rather than correctly rounded). ``x ln b`` is
        never formed: it overflowed for float32 x > 1.5e38 with b = 10 (gradient 0, exact
        2.9e-39)."""
        x, g = self._operands(dtype, x, g)
        with self.mx.stream(self._stream(dtype)):
            return (g * (1.0 / ln_base)) / x

    def dropout(self, x, u, p: float, shape, dtype):
        """``x / (1 - p)`` where the uniform draw ``u >= p``, else 0."""
        m, (x, u) = self._math(dtype, x, u)
        with self.mx.stream(self._stream(dtype)):
            return m.where(u >= p, x / (1.0 - p), 0.0)

    def leaky_relu(self, a, negative_slope: float, shape, dtype):
        """Elementwise ``x if x > 0 else negative_slope * x``."""
        m, (x,) = self._math(dtype, a)
        with self.mx.stream(self._stream(dtype)):
            return m.where(x > 0, x, x * negative_slope)

    def leaky_relu_backward(self, x, g, negative_slope: float, shape, dtype):
        """``g if x > 0 else negative_slope * g``."""
        m, (x, g) = self._math(dtype, x, g)
        with self.mx.stream(self._stream(dtype)):
            return m.where(x > 0, g, g * negative_slope)

    def elu(self, a, alpha: float, shape, dtype):
        """Elementwise ``x if x > 0 else alpha * expm1(x)``."""
        m, (x,) = self._math(dtype, a)
        with self.mx.stream(self._stream(dtype)):
            return m.where(x > 0, x, alpha * m.expm1(x))

    def elu_backward(self, x, g, alpha: float, shape, dtype):
        """``g if x > 0 else g * alpha * exp(x)``."""
        m, (x, g) = self._math(dtype, x, g)
        with self.mx.stream(self._stream(dtype)):
            return m.where(x > 0, g, g * alpha * m.exp(x))

    def softplus(self, a, beta: float, threshold: float, shape, dtype):
        """Elementwise ``(max(z, 0) + log1p(exp(-|z|))) / beta``, z = beta x; ``x`` where
        ``z > threshold``."""
        m, (x,) = self._math(dtype, a)
        with self.mx.stream(self._stream(dtype)):
            z = x * beta
            soft = (m.maximum(z, 0) + m.log1p(m.exp(-m.abs(z)))) / beta
            return m.where(z > threshold, x, soft)

    def softplus_backward(self, x, g, beta: float, threshold: float, shape, dtype):
        """``g * sigmoid(beta x)``, and ``g`` where ``beta x > threshold``."""
        m, (x, g) = self._math(dtype, x, g)
        with self.mx.stream(self._stream(dtype)):
            z = x * beta
            return m.where(z > threshold, g, g * m.sigmoid(z))

    def gelu(self, a, approximate: str, shape, dtype):
        """Elementwise GELU, exact (``"none"``) or its tanh approximation (``"tanh"``)."""
        m, (x,) = self._math(dtype, a)
        with self.mx.stream(self._stream(dtype)):
            return _gelu(m, x, approximate)

    def gelu_backward(self, x, g, approximate: str, shape, dtype):
        """The gradient of :meth:`gelu`."""
        m, (x, g) = self._math(dtype, x, g)
        with self.mx.stream(self._stream(dtype)):
            return _gelu_grad(m, x, g, approximate)

    def clamp(self, a, low: float | None, high: float | None, shape, dtype):
        """Elementwise ``min(max(x, low), high)``; a None bound is no bound; NaN stays NaN."""
        m, (y,) = self._math(dtype, a)
        low, high = _bound(low, dtype), _bound(high, dtype)
        with self.mx.stream(self._stream(dtype)):
            if low is not None:
                y = m.maximum(y, low)
            if high is not None:
                y = m.minimum(y, high)
            return y

    def clamp_backward(self, x, g, low: float | None, high: float | None, shape, dtype):
        """``g where low <= x <= high else 0``."""
        m, (x, g) = self._math(dtype, x, g)
        with self.mx.stream(self._stream(dtype)):
            inside = x == x  # False at NaN, as the comparisons with the bounds are
            if low is not None:
                inside = inside & (x >= low)
            if high is not None:
                inside = inside & (x <= high)
            return m.where(inside, g, 0)
