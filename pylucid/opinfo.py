"""The op database: for every op, how to call it, its NumPy float64 reference, a sampler
that respects its domain, and its tolerances.

Tests, the demo's gradcheck summary and the benchmarks iterate this table; a completeness
test fails when a registered public op has no record here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import pylucid as pl

Sampler = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def uniform(low: float, high: float) -> Sampler:
    """Samples uniform in [low, high)."""
    return lambda rng, shape: rng.uniform(low, high, size=shape)


def away_from_zero(low: float, high: float) -> Sampler:
    """Samples with magnitude in [low, high) and random sign."""
    return lambda rng, shape: rng.uniform(low, high, size=shape) * rng.choice([-1, 1], size=shape)


@dataclass(frozen=True)
class OpInfo:
    """One op's test record.

    Attributes
    ----------
    name : str
        The registry name of the op.
    call : callable
        Calls the op on tensors (and fixed extra arguments).
    reference : callable
        The same math on float64 NumPy arrays.
    samplers : tuple of Sampler
        One per tensor input, producing values inside the op's domain.
    shapes : tuple of tuple of shapes
        Input shape combinations to test (including broadcasting ones).
    rtol, atol : float
        Forward tolerance in float32 against the float64 reference (float64 uses 1e-12).
    gradcheck_kwargs : dict
        Overrides of :func:`pylucid.graph.gradcheck`'s step and tolerances.
    tags : frozenset of str
        ``needs_mlx`` for ops that only make sense with two backends.
    """

    name: str
    call: Callable[..., Any]
    reference: Callable[..., Any]
    samplers: tuple[Sampler, ...]
    shapes: tuple[tuple[tuple[int, ...], ...], ...] = (((3, 4),),)
    rtol: float = 2e-6
    atol: float = 1e-6
    gradcheck_kwargs: dict[str, float] = field(default_factory=dict)
    tags: frozenset[str] = field(default_factory=frozenset)

    def sample(self, rng: np.random.Generator, shapes: tuple[tuple[int, ...], ...]) -> list:
        """Float64 NumPy inputs for one shape combination."""
        return [sampler(rng, shape) for sampler, shape in zip(self.samplers, shapes)]


_BINARY_SHAPES = (((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3, 4), ()))

OPS: tuple[OpInfo, ...] = (
    OpInfo("log2", pl.log2, np.log2, (uniform(0.1, 10.0),)),
    OpInfo("neg", pl.neg, np.negative, (uniform(-5.0, 5.0),)),
    OpInfo("add", pl.add, np.add, (uniform(-5, 5), uniform(-5, 5)), _BINARY_SHAPES),
    OpInfo("sub", pl.sub, np.subtract, (uniform(-5, 5), uniform(-5, 5)), _BINARY_SHAPES),
    OpInfo("mul", pl.mul, np.multiply, (uniform(-5, 5), uniform(-5, 5)), _BINARY_SHAPES),
    OpInfo("div", pl.div, np.divide, (uniform(-5, 5), away_from_zero(0.5, 5)), _BINARY_SHAPES),
    OpInfo(
        "pow_scalar",
        lambda x: x**3.5,
        lambda x: x**3.5,
        (uniform(0.1, 3.0),),
    ),
    OpInfo(
        "sum",
        lambda x: pl.sum(x, axis=1),
        lambda x: np.sum(x, axis=1),
        (uniform(-5, 5),),
        (((3, 4),), ((2, 3, 4),)),
        rtol=1e-5,
    ),
    OpInfo(
        "mean",
        lambda x: pl.mean(x, axis=(0, -1), keepdims=True),
        lambda x: np.mean(x, axis=(0, -1), keepdims=True),
        (uniform(-5, 5),),
        (((3, 4),), ((2, 3, 4),)),
        rtol=1e-5,
    ),
    OpInfo(
        "to_dtype",
        lambda x: x.to(pl.float32 if x.dtype is pl.float64 else pl.float64).to(x.dtype),
        lambda x: x,
        (uniform(-5, 5),),
        # The float32 round trip moves x by up to 2**-24 |x|: a 1e-2 step keeps the
        # difference quotient's error below 5 * 6e-8 / 1e-2 = 3e-5.
        gradcheck_kwargs={"eps": 1e-2, "atol": 1e-4},
    ),
    OpInfo(
        "to_device",
        lambda x: x.to("cpu" if x.device == "gpu" else "gpu").to(x.device),
        lambda x: x,
        (uniform(-5, 5),),
        tags=frozenset({"needs_mlx"}),
    ),
)

BY_NAME = {info.name: info for info in OPS}
