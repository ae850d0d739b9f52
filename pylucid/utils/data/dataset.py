"""Datasets, as in ``torch.utils.data``: map-style (:class:`Dataset`) and iterable-style
(:class:`IterableDataset`), tensors as a dataset (:class:`TensorDataset`), joins, subsets
and :func:`random_split`."""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from pylucid.generator import Generator, draw_source
from pylucid.tensor import Tensor

__all__ = [
    "ChainDataset",
    "ConcatDataset",
    "Dataset",
    "GatheredSamples",
    "IterableDataset",
    "Subset",
    "TensorDataset",
    "random_split",
]

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: ``dataset[index]`` is a sample.

    Subclasses implement ``__getitem__`` and usually ``__len__`` (which the default samplers
    of :class:`~pylucid.utils.data.DataLoader` need). They may implement
    ``__getitems__(indices)``, the samples at a list of indices at once: the loader then
    calls it once per batch instead of ``__getitem__`` per sample.
    ``dataset + other`` is a :class:`ConcatDataset`.
    """

    def __getitem__(self, index: Any) -> T_co:
        raise NotImplementedError(
            f"{type(self).__name__}: subclasses of Dataset must implement __getitem__"
        )

    def __add__(self, other: Dataset[T_co]) -> ConcatDataset[T_co]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co], Iterable[T_co]):
    """An iterable-style dataset: iterating over it yields the samples (a stream, where
    random access is impractical). ``dataset + other`` is a :class:`ChainDataset`."""

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(
            f"{type(self).__name__}: subclasses of IterableDataset must implement __iter__"
        )

    def __add__(self, other: Dataset[T_co]) -> ChainDataset:
        return ChainDataset([self, other])


class GatheredSamples(Sequence[tuple[Tensor, ...]]):
    """The samples of a :class:`TensorDataset` at several indices, gathered with one index
    op per tensor: :attr:`columns` holds one tensor per dataset tensor, whose first
    dimension runs over the samples.

    It is the sequence of the samples (tuples of tensors, made on access) that a custom
    ``collate_fn`` expects; :func:`~pylucid.utils.data.default_collate` returns the columns
    as they are, which is what stacking the samples would give.
    """

    __slots__ = ("columns",)

    def __init__(self, columns: tuple[Tensor, ...]) -> None:
        self.columns = columns

    def __len__(self) -> int:
        return self.columns[0].shape[0]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return tuple(column[index] for column in self.columns)

    def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        shapes = ", ".join(str(column.shape) for column in self.columns)
        return f"GatheredSamples({len(self)} samples; columns of shapes {shapes})"


class TensorDataset(Dataset[tuple[Tensor, ...]]):
    """Tensors as a dataset: sample ``i`` is ``tuple(t[i] for t in tensors)``.

    Parameters
    ----------
    *tensors : Tensor
        One or more tensors with the same first dimension (the samples).

    Raises
    ------
    TypeError
        For an argument that is not a pylucid tensor.
    ValueError
        For no tensors, a 0-d tensor, or first dimensions that differ.
    """

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset: expected at least one tensor, got none")
        for position, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"TensorDataset: tensors[{position}] is a {type(t).__name__}, expected a "
                    f"pylucid Tensor (convert arrays with pylucid.tensor or from_numpy)"
                )
            if t.ndim == 0:
                raise ValueError(
                    f"TensorDataset: tensors[{position}] is 0-d; each tensor needs a first "
                    f"dimension that runs over the samples"
                )
        sizes = [t.shape[0] for t in tensors]
        if len(set(sizes)) > 1:
            raise ValueError(
                f"TensorDataset: size mismatch between tensors: their first dimensions are "
                f"{sizes}; all must be equal (one entry per sample)"
            )
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __getitems__(self, indices: Sequence[int]) -> GatheredSamples:
        """The samples at ``indices``, gathered with one index op per tensor."""
        positions = np.asarray(indices, dtype=np.int64)
        return GatheredSamples(tuple(t[positions] for t in self.tensors))

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset[T_co]):
    """Map-style datasets one after the other.

    Parameters
    ----------
    datasets : iterable of Dataset
        At least one; none iterable-style (join those with :class:`ChainDataset`).

    Attributes
    ----------
    cumulative_sizes : list of int
        The running totals of the datasets' lengths.
    """

    @staticmethod
    def cumsum(sequence: Iterable[Any]) -> list[int]:
        """The running totals of the lengths of ``sequence``'s items."""
        return list(itertools.accumulate(len(item) for item in sequence))

    def __init__(self, datasets: Iterable[Dataset[Any]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        for position, dataset in enumerate(self.datasets):
            if isinstance(dataset, IterableDataset):
                raise TypeError(
                    f"ConcatDataset: datasets[{position}] is an IterableDataset, which has no "
                    f"indices; join iterable datasets with ChainDataset"
                )
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> T_co:
        length = len(self)
        if not -length <= idx < length:
            raise IndexError(
                f"ConcatDataset: index {idx} is out of range for a dataset of length {length}"
            )
        idx %= length
        dataset_idx = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[dataset_idx - 1] if dataset_idx else 0
        return self.datasets[dataset_idx][idx - start]


class ChainDataset(IterableDataset[Any]):
    """Iterable-style datasets one after the other (chained lazily, as they are iterated).

    Parameters
    ----------
    datasets : iterable of IterableDataset
    """

    def __init__(self, datasets: Iterable[Dataset[Any]]) -> None:
        self.datasets = datasets

    def _iterable(self) -> Iterator[IterableDataset[Any]]:
        for position, dataset in enumerate(self.datasets):
            if not isinstance(dataset, IterableDataset):
                raise TypeError(
                    f"ChainDataset: datasets[{position}] is a {type(dataset).__name__}; "
                    f"ChainDataset only supports IterableDataset (join map-style datasets "
                    f"with ConcatDataset)"
                )
            yield dataset

    def __iter__(self) -> Iterator[Any]:
        for dataset in self._iterable():
            yield from dataset

    def __len__(self) -> int:
        return sum(len(dataset) for dataset in self._iterable())


class Subset(Dataset[T_co]):
    """The samples of ``dataset`` at ``indices``, in that order.

    Parameters
    ----------
    dataset : Dataset
    indices : sequence of int
    """

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> T_co:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: Sequence[int]) -> Any:
        """The samples at ``indices``: through the dataset's ``__getitems__`` where it has
        one (a whole batch at once), else one ``__getitem__`` per sample."""
        chosen = [self.indices[i] for i in indices]
        getitems = getattr(self.dataset, "__getitems__", None)
        if callable(getitems):
            return getitems(chosen)
        return [self.dataset[i] for i in chosen]

    def __len__(self) -> int:
        return len(self.indices)


def _split_lengths(lengths: Sequence[int | float], total: int) -> list[int]:
    """Integer ``lengths`` as they are, or fractions summing to 1 as counts (each
    ``floor(total * fraction)``, the remainder given out one by one from the first split,
    as PyTorch)."""
    if not lengths:
        raise ValueError("random_split: lengths is empty; give at least one length")
    for position, length in enumerate(lengths):
        if isinstance(length, bool) or not isinstance(length, (int, float, np.integer)):
            raise TypeError(
                f"random_split: lengths[{position}] is a {type(length).__name__}; lengths "
                f"are integers or fractions"
            )
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = []
        for position, fraction in enumerate(lengths):
            if not 0 <= fraction <= 1:
                raise ValueError(
                    f"random_split: the fraction at index {position} ({fraction}) is not "
                    f"between 0 and 1"
                )
            counts.append(math.floor(total * fraction))
        for i in range(total - sum(counts)):
            counts[i % len(counts)] += 1
        for position, count in enumerate(counts):
            if count == 0:
                warnings.warn(
                    f"random_split: the split at index {position} is empty (length 0)",
                    stacklevel=3,
                )
        return counts
    if not all(isinstance(n, (int, np.integer)) and n >= 0 for n in lengths):
        raise ValueError(
            f"random_split: lengths {list(lengths)} are neither non-negative integers nor "
            f"fractions summing to 1"
        )
    return [int(n) for n in lengths]


def random_split(
    dataset: Dataset[T_co],
    lengths: Sequence[int | float],
    generator: Generator | None = None,
) -> list[Subset[T_co]]:
    """Split ``dataset`` at random into disjoint subsets of the given lengths.

    Parameters
    ----------
    dataset : Dataset
        A map-style dataset with ``__len__``.
    lengths : sequence of int or float
        The subsets' lengths, summing to ``len(dataset)``; or fractions summing to 1, made
        into lengths ``floor(len(dataset) * fraction)`` and the remainder spread one by one
        over the subsets from the first (as PyTorch).
    generator : Generator, optional
        Draws the permutation (default: :data:`pylucid.default_generator`).

    Returns
    -------
    list of Subset

    Raises
    ------
    ValueError
        When the lengths do not sum to ``len(dataset)`` (nor the fractions to 1), or for a
        negative length or a fraction outside [0, 1].
    """
    total = len(dataset)
    counts = _split_lengths(lengths, total)
    if sum(counts) != total:
        raise ValueError(
            f"random_split: the lengths {list(lengths)} sum to {sum(counts)}, but the dataset "
            f"has length {total}; give lengths summing to {total} or fractions summing to 1"
        )
    order = draw_source(generator, "random_split").permutation(total).tolist()
    ends = itertools.accumulate(counts)
    return [Subset(dataset, order[end - count : end]) for end, count in zip(ends, counts)]
