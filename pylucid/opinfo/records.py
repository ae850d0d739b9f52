"""The record type of the op database and the domain-aware samplers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
