"""``DataLoader``: batches from a dataset, with PyTorch's arguments and their checks.

pylucid loads every batch in the calling process. A map-style dataset with ``num_workers >
0`` gives the batches PyTorch's workers would give, in the same order (the sampler runs in
the main process there too), so the option is accepted and loading stays in this process;
an iterable-style dataset with workers is refused, since PyTorch would give each worker a
copy of it to iterate (duplicating its samples unless it shards by ``get_worker_info``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pylucid.compat import differs
from pylucid.generator import Generator
from pylucid.utils.data.collate import default_collate, default_convert
from pylucid.utils.data.dataset import Dataset, IterableDataset
from pylucid.utils.data.sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["DataLoader", "get_worker_info"]

#: Attributes fixed once a DataLoader is made (PyTorch refuses to set them too).
_FIXED = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers")


def get_worker_info() -> None:
    """Information about the current loader worker process: always None in pylucid, whose
    loaders read every dataset in the main process (as PyTorch's with ``num_workers=0``)."""
    return None


def _check_workers(
    num_workers: int,
    timeout: float,
    prefetch_factor: int | None,
    persistent_workers: bool,
    multiprocessing_context: Any,
    iterable: bool,
) -> None:
    """PyTorch's checks of the worker arguments; worker options are accepted with workers
    (and do nothing: see the module), refused without them, as PyTorch refuses them."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, int):
        raise TypeError(f"DataLoader: num_workers must be an integer, got {num_workers!r}")
    if num_workers < 0:
        raise ValueError(
            f"DataLoader: num_workers option should be non-negative, got {num_workers}; use "
            f"num_workers=0 to load in the main process"
        )
    if num_workers > 0 and iterable:
        raise NotImplementedError(
            f"DataLoader: num_workers={num_workers} with an IterableDataset: PyTorch gives "
            f"each worker process a copy of the dataset to iterate (each sample {num_workers} "
            f"times unless the dataset shards itself with get_worker_info()), and pylucid "
            f"loads in the main process only, so it cannot give the same stream. Use "
            f"num_workers=0 (the same samples as one PyTorch worker)"
        )
    if timeout < 0:
        raise ValueError(f"DataLoader: timeout option should be non-negative, got {timeout}")
    if num_workers > 0:
        return
    if timeout > 0:
        raise ValueError(
            f"DataLoader: timeout={timeout} bounds waiting for worker processes, which "
            f"need num_workers > 0; leave timeout=0"
        )
    if prefetch_factor is not None:
        raise ValueError(
            "DataLoader: prefetch_factor option could only be specified in multiprocessing "
            "(num_workers > 0); set prefetch_factor to None"
        )
    if persistent_workers:
        raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
    if multiprocessing_context is not None:
        raise ValueError(
            "DataLoader: multiprocessing_context can only be used with multi-process loading "
            "(num_workers > 0), but got num_workers=0"
        )


class _InfiniteConstantSampler(Sampler[None]):
    """The sampler of an iterable dataset: None forever (the dataset gives the order; the
    loader only counts samples into batches)."""

    def __iter__(self) -> Iterator[None]:
        return itertools.repeat(None)


class _LoaderIterator(Iterator[Any]):
    """One pass over a :class:`DataLoader` (what ``iter(loader)`` returns)."""

    __slots__ = ("_batches", "_loader")

    def __init__(self, loader: DataLoader) -> None:
        self._loader = loader
        self._batches = loader._batches()

    def __next__(self) -> Any:
        return next(self._batches)

    def __len__(self) -> int:
        return len(self._loader)


@differs(
    "loads in the main process: num_workers > 0 gives a map-style dataset's batches in "
    "PyTorch's order without worker processes, and is refused for an IterableDataset"
)
class DataLoader:
    """Batches of samples from a dataset, as ``torch.utils.data.DataLoader``.

    Parameters
    ----------
    dataset : Dataset or IterableDataset
        Map-style (indexed by the sampler) or iterable-style (read in its order).
    batch_size : int or None
        Samples per batch (default 1); None yields the samples one by one, each passed
        through ``collate_fn`` (:func:`default_convert` by default) without batching.
    shuffle : bool, optional
        Visit a map-style dataset in a new random order each epoch, drawn from
        ``generator`` (a :class:`RandomSampler`).
    sampler : Sampler or iterable, optional
        The indices to visit (excludes ``shuffle``).
    batch_sampler : Sampler or iterable of lists, optional
        The batches of indices (excludes ``batch_size``, ``shuffle``, ``sampler`` and
        ``drop_last``).
    num_workers : int
        Accepted for map-style datasets, which load in the main process whatever it is
        (the same batches in the same order as PyTorch's workers give); refused above 0 for
        an iterable-style dataset (NotImplementedError, see the module).
    collate_fn : callable, optional
        Makes a batch from a list of samples (default :func:`default_collate`).
    pin_memory : bool
        Accepted for PyTorch's signature; pylucid has no pinned host memory, so batches come
        as they are.
    drop_last : bool
        Leave out the last batch when it is short.
    timeout, worker_init_fn, multiprocessing_context, prefetch_factor, persistent_workers
        Worker options: accepted with ``num_workers > 0`` and without effect (no worker
        process starts, so ``worker_init_fn`` is never called); refused without workers,
        as PyTorch refuses them.
    generator : Generator, optional
        Draws the shuffled order (default: :data:`pylucid.default_generator`, so
        :func:`pylucid.manual_seed` makes it reproducible).
    pin_memory_device, in_order
        Accepted for PyTorch's signature (no effect in the main process).

    Raises
    ------
    ValueError
        For PyTorch's conflicting options: ``sampler`` with ``shuffle``; ``batch_sampler``
        with ``batch_size``, ``shuffle``, ``sampler`` or ``drop_last``; ``batch_size=None``
        with ``drop_last``; an iterable dataset with ``shuffle``, ``sampler`` or
        ``batch_sampler``; and worker options without workers.
    NotImplementedError
        For ``num_workers > 0`` with an iterable-style dataset.

    Notes
    -----
    When the dataset has ``__getitems__(indices)`` (:class:`TensorDataset` and
    :class:`Subset` do), a batch is read with one call to it instead of one ``__getitem__``
    per sample, as in PyTorch 2.2 and later; a TensorDataset gathers each batch with one
    index op per tensor, and gives ``collate_fn`` a sequence of the samples
    (:class:`GatheredSamples`) that :func:`default_collate` turns into the gathered tensors
    without stacking.
    """

    _initialized = False

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler[Any] | Iterable[Any] | None = None,
        batch_sampler: Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        _check_workers(
            num_workers,
            timeout,
            prefetch_factor,
            persistent_workers,
            multiprocessing_context,
            isinstance(dataset, IterableDataset),
        )
        if generator is not None and not isinstance(generator, Generator):
            raise TypeError(
                f"DataLoader: generator must be a pylucid.Generator or None, got "
                f"{type(generator).__name__}"
            )
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            if shuffle not in (False, None):
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified shuffle option, "
                    f"but got shuffle={shuffle}"
                )
            if sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified sampler option, "
                    f"but got sampler={sampler}"
                )
            if batch_sampler is not None:
                raise ValueError(
                    f"DataLoader with IterableDataset: expected unspecified batch_sampler "
                    f"option, but got batch_sampler={batch_sampler}"
                )
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                    "shuffle, sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError(
                "DataLoader: batch_size=None option disables auto-batching and is mutually "
                "exclusive with drop_last"
            )
        if iterable:
            sampler = _InfiniteConstantSampler()
        elif sampler is None:
            sampler = (
                RandomSampler(dataset, generator=generator)
                if shuffle
                else SequentialSampler(dataset)
            )
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.in_order = in_order
        self._iterable = iterable
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self._initialized = True

    def __setattr__(self, attr: str, value: Any) -> None:
        if self._initialized and attr in _FIXED:
            raise ValueError(
                f"{attr} attribute should not be set after {type(self).__name__} is initialized"
            )
        super().__setattr__(attr, value)

    @property
    def _auto_collation(self) -> bool:
        """Whether samples are grouped into batches (and collated)."""
        return self.batch_sampler is not None

    def _batches(self) -> Iterator[Any]:
        """The batches of one epoch."""
        return self._stream_batches() if self._iterable else self._indexed_batches()

    def _stream_batches(self) -> Iterator[Any]:
        """The batches of an iterable dataset: its samples, counted into batches."""
        samples, collate_fn = iter(self.dataset), self.collate_fn
        if not self._auto_collation:
            for sample in samples:
                yield collate_fn(sample)
            return
        for slots in self.batch_sampler:  # lists of batch_size placeholders
            batch = list(itertools.islice(samples, len(slots)))
            short = len(batch) < len(slots)
            if not batch or (short and self.drop_last):
                return
            yield collate_fn(batch)
            if short:
                return

    def _indexed_batches(self) -> Iterator[Any]:
        """The batches of a map-style dataset, read at the sampler's indices: a batch with
        one ``__getitems__`` call where the dataset has it."""
        dataset, collate_fn = self.dataset, self.collate_fn
        if not self._auto_collation:
            for index in self.sampler:
                yield collate_fn(dataset[index])
            return
        getitems = getattr(dataset, "__getitems__", None)
        for indices in self.batch_sampler:
            yield collate_fn(getitems(indices) if getitems else [dataset[i] for i in indices])

    def __iter__(self) -> Iterator[Any]:
        return _LoaderIterator(self)

    def __len__(self) -> int:
        """The number of batches (of samples when ``batch_size=None``) in an epoch; for an
        iterable dataset, computed from ``len(dataset)``, which must exist."""
        if self._iterable:
            length = len(self.dataset)
            if self.batch_size is None:
                return length
            if self.drop_last:
                return length // self.batch_size
            return -(-length // self.batch_size)
        if self._auto_collation:
            return len(self.batch_sampler)
        return len(self.sampler)
