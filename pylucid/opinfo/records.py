"""The record type of the op database and the domain-aware samplers.

Each record also says how to compute the op with PyTorch (:attr:`OpInfo.torch`), the oracle
of ``tests/test_differential.py`` and ``tests/test_edge_values.py``. PyTorch is a test
oracle only (the optional extra ``peers``): pylucid never imports it, and the callables
built by :func:`torch_op` import it when they are first called.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

Sampler = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


@dataclass(frozen=True)
class Uniform:
    """A sampler of values uniform in ``[low, high)``, or, with ``random_sign``, of
    magnitudes uniform in ``[low, high)`` with a random sign.

    A plain callable :data:`Sampler`; ``low`` and ``high`` tell tests that compose ops into
    which range an input must be mapped (see the ``bounded_domain`` tag of :class:`OpInfo`).
    """

    low: float
    high: float
    random_sign: bool = False

    def __call__(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        values = rng.uniform(self.low, self.high, size=shape)
        return values * rng.choice([-1, 1], size=shape) if self.random_sign else values


def uniform(low: float, high: float) -> Uniform:
    """Samples uniform in [low, high)."""
    return Uniform(low, high)


def away_from_zero(low: float, high: float) -> Uniform:
    """Samples with magnitude in [low, high) and random sign."""
    return Uniform(low, high, random_sign=True)


@functools.cache
def torch_module() -> ModuleType:
    """The ``torch`` module, imported on first use (only by the oracles of the tests)."""
    return importlib.import_module("torch")


def torch_op(path: str, *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """``torch.<path>(*tensors, *args, **kwargs)``: ``path`` is a dotted name under ``torch``
    (``"exp"``, ``"nn.functional.elu"``); torch is imported when the callable is called."""

    def call(*tensors: Any) -> Any:
        fn: Any = torch_module()
        for part in path.split("."):
            fn = getattr(fn, part)
        return fn(*tensors, *args, **kwargs)

    call.__name__ = call.__qualname__ = f"torch.{path}"
    return call


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
        ``needs_mlx`` for ops that only make sense with two backends; ``bool_output`` for
        the comparisons; ``bounded_domain`` for ops whose inputs must stay in the samplers'
        ranges (beyond them the op leaves its domain, overflows, or is discontinuous or
        ill-conditioned), so that tests composing ops map other values into those ranges.
    torch : callable or None
        The same op with PyTorch: called with ``torch.Tensor`` inputs in place of the
        pylucid ones (same positions, same fixed arguments), it returns what :attr:`call`
        returns; None where PyTorch has no equivalent.
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
    torch: Callable[..., Any] | None = None

    def sample(self, rng: np.random.Generator, shapes: tuple[tuple[int, ...], ...]) -> list:
        """Float64 NumPy inputs for one shape combination."""
        return [sampler(rng, shape) for sampler, shape in zip(self.samplers, shapes)]
