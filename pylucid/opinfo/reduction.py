"""Op records of the reduction and softmax families (``sum`` and ``mean`` are in ``core``).

Samplers keep the values apart (continuous uniform draws), so max, min and argmax have no
ties for finite differences to straddle; prod draws magnitudes in [0.5, 2) so that products
of 24 factors stay near 1. Softmax-family forwards compare at rtol 1e-5: float32 ``x - max``
is rounded by up to half an ULP of values near 10, which ``exp`` turns into ~5e-7 relative
error, and the sums add a few ULP more.
"""

from __future__ import annotations

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, away_from_zero, torch_op, uniform

_SHAPES = (((3, 4),), ((2, 3, 4),))


def _torch_prod(x):
    """``prod`` over axes (0, -1) with PyTorch, whose ``prod`` takes one dim: the two axes
    are moved last and flattened (a 1-d ``x`` repeats the axis and raises, as pylucid)."""
    return x.movedim((0, -1), (-2, -1)).flatten(-2).prod(-1)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _logsumexp(x: np.ndarray, axis: int | tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    out = m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis=axis)


RECORDS: tuple[OpInfo, ...] = (
    OpInfo(
        "prod",
        lambda x: pl.prod(x, axis=(0, -1)),
        lambda x: np.prod(x, axis=(0, -1)),
        (away_from_zero(0.5, 2.0),),
        _SHAPES,
        rtol=1e-5,
        torch=_torch_prod,
    ),
    OpInfo(
        "max",
        lambda x: pl.amax(x, dim=1, keepdim=True),
        lambda x: np.max(x, axis=1, keepdims=True),
        (uniform(-5, 5),),
        _SHAPES,
        rtol=0,
        atol=0,
        torch=torch_op("amax", dim=1, keepdim=True),
    ),
    OpInfo(
        "min",
        lambda x: pl.amin(x, axis=-1),
        lambda x: np.min(x, axis=-1),
        (uniform(-5, 5),),
        _SHAPES,
        rtol=0,
        atol=0,
        torch=torch_op("amin", dim=-1),
    ),
    OpInfo(
        "argmax",
        lambda x: pl.argmax(x, axis=1),
        lambda x: np.argmax(x, axis=1),
        (uniform(-5, 5),),
        _SHAPES,
        rtol=0,
        atol=0,
        torch=torch_op("argmax", dim=1),
    ),
    OpInfo(
        "cumsum",
        lambda x: pl.cumsum(x, 1),
        lambda x: np.cumsum(x, axis=1),
        (uniform(-2, 2),),
        _SHAPES,
        rtol=1e-6,
        atol=1e-6,
        torch=torch_op("cumsum", dim=1),
    ),
    OpInfo(
        "cumprod",
        lambda x: pl.cumprod(x, -1),
        lambda x: np.cumprod(x, axis=-1),
        (uniform(0.5, 1.5),),
        _SHAPES,
        rtol=1e-6,
        atol=1e-6,
        torch=torch_op("cumprod", dim=-1),
    ),
    OpInfo(
        "argsort",
        lambda x: pl.argsort(x, dim=1, descending=True),
        lambda x: np.argsort(-x, axis=1, kind="stable"),  # (no NaN, no ties: distinct draws)
        (uniform(-5, 5),),
        _SHAPES,
        rtol=0,
        atol=0,
        torch=torch_op("argsort", dim=1, descending=True, stable=True),
    ),
    OpInfo(
        "argmin",
        lambda x: pl.argmin(x),
        lambda x: np.argmin(x),
        (uniform(-5, 5),),
        _SHAPES,
        rtol=0,
        atol=0,
        torch=torch_op("argmin"),
    ),
    OpInfo(
        "var",
        lambda x: pl.var(x, axis=-1),
        lambda x: np.var(x, axis=-1, ddof=1),
        (uniform(-5, 5),),
        _SHAPES,
        rtol=1e-5,
        torch=torch_op("var", dim=-1),
    ),
    OpInfo(
        "std",
        lambda x: pl.std(x, axis=(0, 1), keepdims=True, correction=0),
        lambda x: np.std(x, axis=(0, 1), keepdims=True),
        (uniform(-5, 5),),
        _SHAPES,
        rtol=1e-5,
        torch=torch_op("std", dim=(0, 1), keepdim=True, correction=0),
    ),
    OpInfo(
        "logsumexp",
        lambda x: pl.logsumexp(x, axis=(0, -1)),
        lambda x: _logsumexp(x, axis=(0, -1)),
        (uniform(-10, 10),),
        _SHAPES,
        rtol=1e-5,
        torch=torch_op("logsumexp", dim=(0, -1)),
    ),
    OpInfo(
        "softmax",
        lambda x: pl.softmax(x, dim=0),
        lambda x: _softmax(x, axis=0),
        (uniform(-10, 10),),
        _SHAPES,
        rtol=1e-5,
        atol=1e-7,
        torch=torch_op("softmax", dim=0),
    ),
    OpInfo(
        "log_softmax",
        lambda x: pl.log_softmax(x, axis=-1),
        lambda x: _log_softmax(x, axis=-1),
        (uniform(-10, 10),),
        _SHAPES,
        rtol=1e-5,
        atol=1e-5,
        torch=torch_op("log_softmax", dim=-1),
    ),
)
