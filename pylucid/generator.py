"""Seedable random number generators, as ``torch.Generator``.

A :class:`Generator` wraps a ``numpy.random.Generator`` over a PCG64 bit generator; the
random factories (:func:`pylucid.rand`, :func:`pylucid.randn`, :func:`pylucid.randint`,
:func:`pylucid.randperm`), the samplers of :mod:`pylucid.utils.data` and
:func:`pylucid.utils.data.random_split` take one as ``generator=`` and otherwise draw from
:data:`default_generator`, which :func:`pylucid.manual_seed` seeds. Draws happen on the host
and are then copied to the requested device, so a seed gives the same numbers on every
backend.

>>> g = Generator().manual_seed(0)
>>> state = g.get_state()
>>> first = g.numpy_generator().random()
>>> _ = g.set_state(state)
>>> g.numpy_generator().random() == first
True
"""

from __future__ import annotations

import copy
import os
from typing import Any

import numpy as np

from pylucid import backends
from pylucid.compat import differs

__all__ = [
    "Generator",
    "default_generator",
    "get_rng_state",
    "initial_seed",
    "seed",
    "set_rng_state",
]

#: The seed of a new :class:`Generator`, PyTorch's (``torch.Generator().initial_seed()``).
DEFAULT_SEED = 67280421310721
_SEED_MIN, _SEED_MAX = -(1 << 63), (1 << 64) - 1


def _checked_seed(op: str, seed: Any) -> int:
    """``seed`` as an unsigned 64-bit integer (a negative one wraps around, as in PyTorch),
    or a TypeError / ValueError naming ``op``."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"{op}: the seed must be an integer, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    if not _SEED_MIN <= seed <= _SEED_MAX:
        raise ValueError(
            f"{op}: the seed {seed} is out of range (valid: -2**63..2**64 - 1, as PyTorch)"
        )
    return seed % (1 << 64)


@differs(
    "draws from NumPy's PCG64 (pylucid.Generator): the same seed does not give PyTorch's "
    "numbers; load PyTorch's weights to start from them"
)
class Generator:
    """A random number generator with its own state, as ``torch.Generator``.

    Parameters
    ----------
    device : str
        ``"cpu"``, ``"gpu"`` or a backend name: the device the draws are meant for (recorded
        in :attr:`device`). Every generator draws on the host, so any generator can feed
        tensors on any device.

    Notes
    -----
    A new generator is seeded with PyTorch's default seed, 67280421310721, so two new
    generators draw alike; :data:`default_generator` starts from a nondeterministic seed, as
    PyTorch's does.
    """

    def __init__(self, device: str = "cpu") -> None:
        if not isinstance(device, str):
            raise TypeError(
                f"Generator: device must be a string such as 'cpu' or 'gpu', got "
                f"{type(device).__name__}"
            )
        self._device = backends.resolve(device).device
        self.manual_seed(DEFAULT_SEED)

    @property
    def device(self) -> str:
        """The device the draws are meant for: ``"cpu"`` or ``"gpu"``."""
        return self._device

    def manual_seed(self, seed: int) -> Generator:
        """Reset the state from ``seed`` and return the generator.

        Parameters
        ----------
        seed : int
            In ``-2**63..2**64 - 1``; a negative seed is taken modulo ``2**64``.

        Raises
        ------
        TypeError
            For a seed that is not an integer (a bool, a float, a string).
        ValueError
            For a seed out of range.
        """
        self._seed = _checked_seed("Generator.manual_seed", seed)
        self._numpy = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def seed(self) -> int:
        """Reseed from the operating system's entropy and return the new seed."""
        new_seed = int.from_bytes(os.urandom(8), "little")
        self.manual_seed(new_seed)
        return new_seed

    def initial_seed(self) -> int:
        """The seed the state was last reset from (by :meth:`manual_seed` or :meth:`seed`)."""
        return self._seed

    def get_state(self) -> dict[str, Any]:
        """A copy of the state: NumPy's PCG64 state dict (``bit_generator``, ``state``,
        ``has_uint32``, ``uinteger``), which :meth:`set_state` restores. PyTorch returns a
        uint8 tensor; pylucid has no uint8 dtype."""
        return copy.deepcopy(self._numpy.bit_generator.state)

    def set_state(self, new_state: dict[str, Any]) -> Generator:
        """Restore a state from :meth:`get_state` and return the generator (the
        :meth:`initial_seed` is kept).

        Raises
        ------
        TypeError
            For a state that is not a PCG64 state dict.
        """
        if not isinstance(new_state, dict) or new_state.get("bit_generator") != "PCG64":
            got = new_state.get("bit_generator") if isinstance(new_state, dict) else None
            raise TypeError(
                f"Generator.set_state: expected the dict of Generator.get_state() (a PCG64 "
                f"state), got {type(new_state).__name__}"
                + (f" for bit generator {got!r}" if got is not None else "")
            )
        bit_generator = np.random.PCG64()
        try:
            bit_generator.state = copy.deepcopy(new_state)
        except (KeyError, TypeError, ValueError) as exc:
            raise TypeError(f"Generator.set_state: not a valid PCG64 state: {exc}") from None
        self._numpy = np.random.Generator(bit_generator)
        return self

    def numpy_generator(self) -> np.random.Generator:
        """The ``numpy.random.Generator`` that draws (shared, not a copy: drawing from it
        advances this generator)."""
        return self._numpy

    def __repr__(self) -> str:
        return f"pylucid.Generator(device={self._device!r}, initial_seed={self._seed})"


#: The generator behind the random factories when no ``generator=`` is given.
default_generator = Generator()
default_generator.seed()


def draw_source(generator: Generator | None, op: str) -> np.random.Generator:
    """The NumPy generator of ``generator`` (:data:`default_generator` when None), or a
    TypeError naming ``op``."""
    if generator is None:
        return default_generator._numpy
    if not isinstance(generator, Generator):
        raise TypeError(
            f"{op}: generator must be a pylucid.Generator, got {type(generator).__name__}"
        )
    return generator._numpy


def seed() -> int:
    """Reseed :data:`default_generator` nondeterministically and return the seed."""
    return default_generator.seed()


def initial_seed() -> int:
    """The seed :data:`default_generator` was last reset from."""
    return default_generator.initial_seed()


def get_rng_state() -> dict[str, Any]:
    """The state of :data:`default_generator` (see :meth:`Generator.get_state`)."""
    return default_generator.get_state()


def set_rng_state(new_state: dict[str, Any]) -> None:
    """Restore the state of :data:`default_generator` (see :meth:`Generator.set_state`)."""
    default_generator.set_state(new_state)
