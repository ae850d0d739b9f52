"""Samplers, as in ``torch.utils.data``: iterables of dataset indices (or of lists of
indices, for :class:`BatchSampler`) that a :class:`~pylucid.utils.data.DataLoader` reads.

The random samplers draw from their ``generator`` (:data:`pylucid.default_generator` when
None) when an iteration starts, so :func:`pylucid.manual_seed` or a seeded
:class:`pylucid.Generator` makes the order reproducible, and each iteration (epoch) draws
anew.

They draw lazily: indices with replacement come :data:`DRAW_CHUNK` at a time (as PyTorch's
samplers draw), and a permutation is turned into Python ints a block at a time, so an
"infinite" sampler (``RandomSampler(ds, replacement=True, num_samples=10**10)``) yields its
first index at once, in constant memory, and a seed gives the same sequence however far it
is iterated.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence, Sized
from typing import Any, Generic, TypeVar

import numpy as np

from pylucid.generator import Generator, draw_source
from pylucid.tensor import Tensor

__all__ = [
    "BatchSampler",
    "DistributedSampler",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
]

T_co = TypeVar("T_co", covariant=True)

#: How many indices a sampler with replacement draws from its generator at a time.
DRAW_CHUNK = 32
#: How many elements of a drawn permutation are turned into Python ints at a time.
_INT_BLOCK = 4096


def _check_generator(op: str, generator: Any) -> None:
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(
            f"{op}: generator must be a pylucid.Generator or None, got {type(generator).__name__}"
        )


def _positive_int(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{op}: {name} should be a positive integer value, but got {name}={value}")
    return int(value)


def _non_negative_int(op: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{op}: {name} should be a non-negative integer, but got {name}={value!r}")
    return int(value)


def _python_ints(array: np.ndarray) -> Iterator[int]:
    """The elements of a 1-d integer array as Python ints, converted a block at a time (a
    list of them all would take several times the array's memory)."""
    for start in range(0, len(array), _INT_BLOCK):
        yield from array[start : start + _INT_BLOCK].tolist()


def _check_bool(op: str, name: str, value: Any, error: type[Exception]) -> None:
    if not isinstance(value, bool):
        raise error(f"{op}: {name} should be a boolean value, but got {name}={value!r}")


class Sampler(Generic[T_co]):
    """The base class of samplers: subclasses implement ``__iter__`` (the indices) and,
    where the number is known, ``__len__``.

    ``data_source`` is accepted and ignored, as by PyTorch (whose older samplers called
    ``super().__init__(data_source)``).
    """

    def __init__(self, data_source: Sized | None = None) -> None:
        """Accept ``data_source`` for PyTorch's signature (unused)."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(
            f"{type(self).__name__}: subclasses of Sampler must implement __iter__"
        )


class SequentialSampler(Sampler[int]):
    """The indices ``0..len(data_source) - 1`` in order."""

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """The indices of ``data_source`` in random order.

    Parameters
    ----------
    data_source : sized
        The dataset (only its length is read).
    replacement : bool
        Draw ``num_samples`` indices independently (with repeats) instead of permuting.
    num_samples : int, optional
        How many indices per iteration (default ``len(data_source)``); with replacement
        they are drawn :data:`DRAW_CHUNK` at a time, so ``num_samples=10**10`` is an
        "infinite" sampler that costs nothing up front; without replacement, more than the
        length chains fresh permutations (each drawn when reached), then part of one.
    generator : Generator, optional
        Draws the order. Without one, each iteration seeds a private generator from
        :data:`pylucid.default_generator` (as PyTorch does), so that other draws during an
        epoch do not change its order.

    Raises
    ------
    TypeError
        For a ``replacement`` that is not a bool, or a generator that is not a
        :class:`pylucid.Generator`.
    ValueError
        For a ``num_samples`` (or an empty data source) that is not a positive integer.
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: Generator | None = None,
    ) -> None:
        _check_bool("RandomSampler", "replacement", replacement, TypeError)
        _check_generator("RandomSampler", generator)
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        _positive_int("RandomSampler", "num_samples", self.num_samples)

    @property
    def num_samples(self) -> int:
        """The number of indices an iteration yields."""
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, count = len(self.data_source), self.num_samples
        if n == 0:
            raise ValueError(
                f"RandomSampler: the data source is empty; cannot draw {count} indices"
            )
        if self.generator is None:
            seed = int(draw_source(None, "RandomSampler").integers(1 << 63))
            source = np.random.Generator(np.random.PCG64(seed))
        else:
            source = self.generator.numpy_generator()
        if self.replacement:
            for start in range(0, count, DRAW_CHUNK):
                yield from source.integers(0, n, size=min(DRAW_CHUNK, count - start)).tolist()
            return
        for _ in range(count // n):
            yield from _python_ints(source.permutation(n))
        if count % n:
            yield from _python_ints(source.permutation(n)[: count % n])

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given ``indices`` in random order (a fresh permutation each iteration, from
    ``generator`` or :data:`pylucid.default_generator`)."""

    def __init__(self, indices: Sequence[int], generator: Generator | None = None) -> None:
        _check_generator("SubsetRandomSampler", generator)
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        order = draw_source(self.generator, "SubsetRandomSampler").permutation(len(self.indices))
        indices = self.indices
        for position in _python_ints(order):
            yield indices[position]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """``num_samples`` indices in ``0..len(weights) - 1``, index ``i`` drawn with
    probability proportional to ``weights[i]``.

    Parameters
    ----------
    weights : sequence of float or Tensor
        Non-negative, finite, 1-d, not all zero (they need not sum to 1).
    num_samples : int
        How many indices per iteration.
    replacement : bool
        Draw with repeats (default), by inverting the weights' cumulative distribution at
        uniform draws, :data:`DRAW_CHUNK` at a time (the method of
        ``numpy.random.Generator.choice``, without its memory: ``num_samples`` may be
        huge); without, ``num_samples`` must not exceed the number of non-zero weights.
    generator : Generator, optional
        Draws the indices (default: :data:`pylucid.default_generator`).
    """

    def __init__(
        self,
        weights: Sequence[float] | Tensor,
        num_samples: int,
        replacement: bool = True,
        generator: Generator | None = None,
    ) -> None:
        op = "WeightedRandomSampler"
        self.num_samples = _positive_int(op, "num_samples", num_samples)
        _check_bool(op, "replacement", replacement, ValueError)
        _check_generator(op, generator)
        values = weights.numpy() if isinstance(weights, Tensor) else weights
        array = np.asarray(values, dtype=np.float64)
        if array.ndim != 1:
            raise ValueError(f"{op}: weights should be a 1d sequence, got shape {array.shape}")
        if not np.isfinite(array).all() or (array < 0).any() or not array.sum() > 0:
            raise ValueError(
                f"{op}: weights must be finite and non-negative, and not all zero; got "
                f"{array.tolist() if array.size <= 8 else f'{array.size} weights'}"
            )
        nonzero = int(np.count_nonzero(array))
        if not replacement and self.num_samples > nonzero:
            raise ValueError(
                f"{op}: cannot draw num_samples={self.num_samples} indices without replacement "
                f"from {nonzero} non-zero weights"
            )
        self.weights = array
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        source = draw_source(self.generator, "WeightedRandomSampler")
        probabilities = self.weights / self.weights.sum()
        if not self.replacement:  # at most len(weights) indices: drawn at once
            drawn = source.choice(
                len(self.weights), size=self.num_samples, replace=False, p=probabilities
            )
            yield from _python_ints(drawn)
            return
        cdf = np.cumsum(probabilities)
        cdf /= cdf[-1]
        count = self.num_samples
        for start in range(0, count, DRAW_CHUNK):
            uniform = source.random(min(DRAW_CHUNK, count - start))
            yield from cdf.searchsorted(uniform, side="right").tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """The indices of ``sampler`` in lists of ``batch_size``; the last list is shorter, or
    left out when ``drop_last``.

    Parameters
    ----------
    sampler : Sampler or iterable
        The indices (its ``__len__`` gives this sampler's).
    batch_size : int
        Positive.
    drop_last : bool

    Raises
    ------
    ValueError
        For a ``batch_size`` that is not a positive integer, or a ``drop_last`` that is not
        a bool.
    """

    def __init__(self, sampler: Sampler[int] | Iterable[int], batch_size: int, drop_last: bool):
        self.batch_size = _positive_int("BatchSampler", "batch_size", batch_size)
        _check_bool("BatchSampler", "drop_last", drop_last, ValueError)
        self.sampler = sampler
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        indices, size = iter(self.sampler), self.batch_size
        while batch := list(itertools.islice(indices, size)):
            if len(batch) < size:
                if not self.drop_last:
                    yield batch
                return
            yield batch

    def __len__(self) -> int:
        length = len(self.sampler)
        if self.drop_last:
            return length // self.batch_size
        return (length + self.batch_size - 1) // self.batch_size


class DistributedSampler(Sampler[int]):
    r"""This rank's share of the dataset's indices, as ``torch.utils.data.DistributedSampler``:
    each of ``num_replicas`` processes iterates a disjoint slice of one order.

    The order is ``0..n - 1`` (``n = len(dataset)``), or with ``shuffle`` a permutation drawn
    from a :class:`pylucid.Generator` seeded with ``seed + epoch`` (the same on every rank,
    a new one after :meth:`set_epoch`; pylucid's permutation, not PyTorch's). Each rank takes
    :math:`s = \lceil n / R \rceil` indices (:math:`R` = ``num_replicas``): without
    ``drop_last`` the order is padded to :math:`sR` by repeating its first indices (so a rank
    may see an index twice per epoch); with ``drop_last`` it is cut to
    :math:`s R` with :math:`s = \lceil (n - R) / R \rceil` when :math:`R` does not divide
    :math:`n`. Rank :math:`r` takes positions :math:`r, r + R, r + 2R, \dots` of it: the
    split and the padding equal PyTorch's.

    Parameters
    ----------
    dataset : sized
        The dataset (only its length is read).
    num_replicas : int, optional
        The number of processes (default :func:`pylucid.distributed.get_world_size`).
    rank : int, optional
        This process's rank, in ``0..num_replicas - 1`` (default
        :func:`pylucid.distributed.get_rank`).
    shuffle : bool
        Permute the indices (each epoch anew, after :meth:`set_epoch`).
    seed : int
        The permutation's seed, the same on every rank.
    drop_last : bool
        Cut the tail instead of padding, so that every index appears at most once.

    Raises
    ------
    ValueError
        For a ``num_replicas`` that is not a positive integer, a ``rank`` outside
        ``0..num_replicas - 1``, or ``shuffle``/``drop_last`` that are not bools.
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        op = "DistributedSampler"
        if num_replicas is None or rank is None:
            from pylucid import distributed  # (imported here: it needs the whole package)

            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        self.num_replicas = _positive_int(op, "num_replicas", num_replicas)
        rank = _non_negative_int(op, "rank", rank)
        if rank >= self.num_replicas:
            raise ValueError(
                f"{op}: invalid rank {rank}, rank should be in the interval "
                f"[0, {self.num_replicas - 1}]"
            )
        _check_bool(op, "shuffle", shuffle, ValueError)
        _check_bool(op, "drop_last", drop_last, ValueError)
        self.dataset = dataset
        self.rank = rank
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % self.num_replicas != 0:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            source = Generator().manual_seed(self.seed + self.epoch).numpy_generator()
            order = source.permutation(n)
        else:
            order = np.arange(n)
        # np.resize cuts the order to total_size, or pads it by repeating it from the start.
        return _python_ints(np.resize(order, self.total_size)[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch, so that the next iteration's shuffle is seeded with
        ``seed + epoch`` (call it at the start of every epoch, on every rank)."""
        self.epoch = epoch
