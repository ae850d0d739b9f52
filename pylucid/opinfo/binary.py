"""Op records of the binary family: pow, atan2, logaddexp, remainder, floor_divide, hypot,
maximum, minimum, where and the comparisons.

Samplers keep the gradients smooth where the records are gradchecked: pow's base is
positive (the exponent's gradient is ``ln a``), atan2 stays off the ``a = 0`` branch cut and
the origin, maximum/minimum and the order comparisons draw continuous values, so ties (the
kinks) have probability 0. ``eq`` and ``ne`` draw small integers, so ties are common: their
outputs are constant under a 1e-6 step either way, and finite differences are 0 as backward
says. Ties, nan and edge values are tested in ``tests/test_binary.py``.
"""

from __future__ import annotations

import numpy as np

import pylucid as pl
from pylucid.opinfo.records import OpInfo, Sampler, away_from_zero, torch_module, torch_op, uniform

#: Broadcasting combinations: equal shapes, trailing, both sides stretched, 0-d either side.
_SHAPES = (
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((3, 4), ()),
    ((), (2, 3)),
    ((4, 1), (1, 3)),
)
#: where: condition, a, b; each stretched by another, and 0-d ones.
_WHERE_SHAPES = (
    ((3, 4), (3, 4), (3, 4)),
    ((3, 1), (4,), (3, 4)),
    ((2, 1, 4), (3, 1), ()),
    ((), (2, 3), (3,)),
)


def _small_integers(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Integers in [-2, 2] as floats: exact in every dtype, and equal often."""
    return rng.integers(-2, 3, size=shape).astype(np.float64)


def _comparison(name: str, reference: np.ufunc, sampler: Sampler) -> OpInfo:
    return OpInfo(
        name,
        getattr(pl, name),
        reference,
        (sampler, sampler),
        _SHAPES,
        tags=frozenset({"bool_output"}),
        torch=torch_op(name),
    )


RECORDS: tuple[OpInfo, ...] = (
    OpInfo(
        "pow",
        pl.pow,
        np.power,
        (uniform(0.5, 3.0), uniform(-2.0, 2.0)),
        _SHAPES,
        tags=frozenset({"bounded_domain"}),
        torch=torch_op("pow"),
    ),
    OpInfo(
        "atan2",
        pl.atan2,
        np.arctan2,
        (away_from_zero(0.1, 5.0), uniform(-5.0, 5.0)),
        _SHAPES,
        # bounded: the branch cut (a = 0, b < 0) is a jump of 2 pi.
        tags=frozenset({"bounded_domain"}),
        torch=torch_op("atan2"),
    ),
    OpInfo(
        "logaddexp",
        pl.logaddexp,
        np.logaddexp,
        (uniform(-5, 5), uniform(-5, 5)),
        _SHAPES,
        torch=torch_op("logaddexp"),
    ),
    OpInfo(
        "remainder",
        pl.remainder,
        np.remainder,  # (NumPy's is Python's: the divisor's sign, as PyTorch's)
        (uniform(-5, 5), away_from_zero(0.5, 3)),
        _SHAPES,
        # the remainder jumps where a / b crosses an integer: a smaller step stays clear of it
        gradcheck_kwargs={"eps": 1e-7},
        torch=torch_op("remainder"),
    ),
    OpInfo(
        "floor_divide",
        pl.floor_divide,
        np.floor_divide,
        (uniform(-5, 5), away_from_zero(0.5, 3)),
        _SHAPES,
        rtol=0,
        atol=0,
        torch=torch_op("floor_divide"),
    ),
    OpInfo(
        "hypot",
        pl.hypot,
        np.hypot,
        (away_from_zero(0.5, 5), uniform(-5, 5)),
        _SHAPES,
        torch=torch_op("hypot"),
    ),
    OpInfo(
        "maximum",
        pl.maximum,
        np.maximum,
        (uniform(-5, 5), uniform(-5, 5)),
        _SHAPES,
        torch=torch_op("maximum"),
    ),
    OpInfo(
        "minimum",
        pl.minimum,
        np.minimum,
        (uniform(-5, 5), uniform(-5, 5)),
        _SHAPES,
        torch=torch_op("minimum"),
    ),
    OpInfo(
        "where",
        lambda c, a, b: pl.where(c > 0, a, b),
        lambda c, a, b: np.where(c > 0, a, b),
        (uniform(-1, 1), uniform(-5, 5), uniform(-5, 5)),
        _WHERE_SHAPES,
        torch=lambda c, a, b: torch_module().where(c > 0, a, b),
    ),
    _comparison("eq", np.equal, _small_integers),
    _comparison("ne", np.not_equal, _small_integers),
    _comparison("lt", np.less, uniform(-5, 5)),
    _comparison("le", np.less_equal, uniform(-5, 5)),
    _comparison("gt", np.greater, uniform(-5, 5)),
    _comparison("ge", np.greater_equal, uniform(-5, 5)),
)
