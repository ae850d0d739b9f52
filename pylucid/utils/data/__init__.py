"""Datasets, samplers and the DataLoader, as ``torch.utils.data``.

>>> import pylucid as pl
>>> from pylucid.utils.data import DataLoader, TensorDataset
>>> data = TensorDataset(pl.arange(10).reshape(5, 2), pl.arange(5))
>>> [y.tolist() for _, y in DataLoader(data, batch_size=2)]
[[0, 1], [2, 3], [4]]

A batch of a :class:`TensorDataset` is gathered with one index op per tensor (its
``__getitems__``), not stacked from samples; shuffled orders come from the loader's
``generator`` or :data:`pylucid.default_generator`. Loading runs in the main process
(``num_workers=0``).
"""

from pylucid.utils.data import distributed
from pylucid.utils.data.collate import default_collate, default_convert
from pylucid.utils.data.dataloader import DataLoader, get_worker_info
from pylucid.utils.data.dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    GatheredSamples,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from pylucid.utils.data.sampler import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = [
    "BatchSampler",
    "ChainDataset",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "GatheredSamples",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "WeightedRandomSampler",
    "default_collate",
    "default_convert",
    "distributed",
    "get_worker_info",
    "random_split",
]
