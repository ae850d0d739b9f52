"""Op records of the elementwise math ops and activations (log2 is in :mod:`.core`).

Samplers stay inside each op's domain and away from its kinks (relu, abs, leaky_relu, elu,
sign: magnitudes from 0.1), where finite differences would straddle two branches. The
references are float64 NumPy written so that they emit no RuntimeWarning on the sampled
range. Forward tolerances are the defaults (float32: rtol 2e-6, atol 1e-6), which hold with
a margin: the worst float32 result error measured over these samplers is a few ULP plus the
rounding of the input to float32 times the op's condition number (at most 5 here: exp(5),
tan(1.3)).
"""

from __future__ import annotations

import math

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, Sampler, away_from_zero, torch_op, uniform

_erf = np.vectorize(math.erf, otypes=[np.float64])
_SHAPES = (((3, 4),), ((),))
_BOUNDED = frozenset({"bounded_domain"})


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # <= 1: no overflow for any x
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: np.ndarray, beta: float, threshold: float) -> np.ndarray:
    z = beta * x
    return np.where(z > threshold, x, (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))) / beta)


def _record(name: str, reference, sampler: Sampler, *, bounded: bool = False, **kwargs) -> OpInfo:
    """The record of the op ``pl.<name>`` called with one tensor, whose PyTorch equivalent is
    ``torch.<name>`` unless ``torch=`` says otherwise; ``bounded`` tags it ``bounded_domain``."""
    kwargs.setdefault("torch", torch_op(name))
    tags = _BOUNDED if bounded else frozenset()
    return OpInfo(name, getattr(pl, name), reference, (sampler,), _SHAPES, tags=tags, **kwargs)


RECORDS: tuple[OpInfo, ...] = (
    # -- exponentials, logarithms, roots and powers
    _record("exp", np.exp, uniform(-5.0, 5.0), bounded=True),
    _record("exp2", np.exp2, uniform(-5.0, 5.0), bounded=True),
    _record("expm1", np.expm1, uniform(-3.0, 3.0), bounded=True),
    _record("log", np.log, uniform(0.1, 10.0), bounded=True),
    _record("log10", np.log10, uniform(0.1, 10.0), bounded=True),
    _record("log1p", np.log1p, uniform(-0.9, 5.0), bounded=True),
    _record("sqrt", np.sqrt, uniform(0.1, 10.0), bounded=True),
    _record("rsqrt", lambda x: 1 / np.sqrt(x), uniform(0.1, 10.0), bounded=True),
    _record("square", np.square, uniform(-5.0, 5.0)),
    _record("reciprocal", np.reciprocal, away_from_zero(0.5, 5.0), bounded=True),
    # -- trigonometric and hyperbolic
    _record("sin", np.sin, uniform(-5.0, 5.0)),
    _record("cos", np.cos, uniform(-5.0, 5.0)),
    _record("tan", np.tan, uniform(-1.3, 1.3), bounded=True),
    _record("asin", np.arcsin, uniform(-0.9, 0.9), bounded=True),
    _record("acos", np.arccos, uniform(-0.9, 0.9), bounded=True),
    _record("atan", np.arctan, uniform(-5.0, 5.0)),
    _record("asinh", np.arcsinh, uniform(-5.0, 5.0)),
    _record("acosh", np.arccosh, uniform(1.1, 5.0), bounded=True),
    _record("atanh", np.arctanh, uniform(-0.9, 0.9), bounded=True),
    _record("sinh", np.sinh, uniform(-3.0, 3.0), bounded=True),
    _record("cosh", np.cosh, uniform(-3.0, 3.0), bounded=True),
    _record("tanh", np.tanh, uniform(-3.0, 3.0)),
    # -- activations and special functions
    _record("relu", lambda x: np.maximum(x, 0), away_from_zero(0.1, 5.0)),
    OpInfo(
        "leaky_relu",
        lambda x: pl.leaky_relu(x, 0.2),
        lambda x: np.where(x > 0, x, 0.2 * x),
        (away_from_zero(0.1, 5.0),),
        _SHAPES,
        torch=torch_op("nn.functional.leaky_relu", 0.2),
    ),
    OpInfo(
        "elu",
        lambda x: pl.elu(x, alpha=1.5),
        lambda x: np.where(x > 0, x, 1.5 * np.expm1(np.minimum(x, 0))),
        (away_from_zero(0.1, 5.0),),
        _SHAPES,
        torch=torch_op("nn.functional.elu", alpha=1.5),
    ),
    _record("sigmoid", _sigmoid, uniform(-8.0, 8.0)),
    # beta and threshold chosen so that samples fall in both regimes (beta x > 5 from 2.5).
    OpInfo(
        "softplus",
        lambda x: pl.softplus(x, beta=2.0, threshold=5.0),
        lambda x: _softplus(x, 2.0, 5.0),
        (uniform(-4.0, 4.0),),
        _SHAPES,
        torch=torch_op("nn.functional.softplus", beta=2.0, threshold=5.0),
    ),
    _record(
        "silu",
        lambda x: x * _sigmoid(x),
        uniform(-5.0, 5.0),
        torch=torch_op("nn.functional.silu"),
    ),
    _record(
        "gelu",
        lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2))),
        uniform(-4.0, 4.0),
        torch=torch_op("nn.functional.gelu"),
    ),
    _record("erf", _erf, uniform(-3.0, 3.0)),
    _record("abs", np.abs, away_from_zero(0.1, 5.0)),
    _record("sign", np.sign, away_from_zero(0.1, 5.0)),
    # -- roundings: half-integers and integers (the steps) have probability 0 under the
    # samplers, so finite differences see the zero gradient
    _record("floor", np.floor, uniform(-5.0, 5.0)),
    _record("ceil", np.ceil, uniform(-5.0, 5.0)),
    _record("trunc", np.trunc, uniform(-5.0, 5.0)),
    _record("round", np.rint, uniform(-5.0, 5.0)),
    OpInfo(
        "clamp",
        lambda x: pl.clamp(x, -1.0, 2.0),
        lambda x: np.clip(x, -1.0, 2.0),
        (uniform(-3.0, 3.0),),
        _SHAPES,
        torch=torch_op("clamp", -1.0, 2.0),
    ),
)
