"""pylucid.utils.data (datasets, samplers, collation, DataLoader) and pylucid.Generator, on
each backend, with PyTorch's loader as the oracle for lengths and collated structure."""

from __future__ import annotations

import collections
import itertools
import tracemalloc
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import pylucid as pl
import pylucid.utils.data as data
from pylucid.factories import randint, randperm
from pylucid.generator import (
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    set_rng_state,
)
from pylucid.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    GatheredSamples,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
    default_collate,
    default_convert,
    random_split,
)
from tests.conftest import TORCH_REASON

Point = collections.namedtuple("Point", ["x", "y"])


def _dataset(device: str, n: int = 10) -> TensorDataset:
    """Features ``[[0, 1], [2, 3], ...]`` (float32) and labels ``0..n-1`` (int64)."""
    features = pl.tensor(np.arange(2 * n, dtype=np.float32).reshape(n, 2), device=device)
    return TensorDataset(features, pl.arange(n, device=device))


def _labels(loader: DataLoader) -> list[list[int]]:
    """The label batches of one epoch."""
    return [labels.tolist() for _, labels in loader]


class Stream(IterableDataset):
    """The integers ``0..n-1`` as an iterable dataset, with a length."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


# -- Generator ------------------------------------------------------------------------------
def test_generator_seeding_and_state_round_trip() -> None:
    g = Generator()
    assert g.device == "cpu"
    assert g.initial_seed() == 67280421310721  # PyTorch's seed for a new generator
    assert g.manual_seed(5) is g and g.initial_seed() == 5
    first = pl.rand(4, generator=g).numpy()
    np.testing.assert_array_equal(first, pl.rand(4, generator=Generator().manual_seed(5)).numpy())
    state = g.get_state()
    ahead = pl.randn(3, generator=g).numpy()
    assert g.set_state(state) is g
    np.testing.assert_array_equal(pl.randn(3, generator=g).numpy(), ahead)
    assert g.initial_seed() == 5  # set_state keeps the seed
    twin = Generator().set_state(g.get_state())
    state["state"]["state"] = 0  # get_state returned a copy: the generator is unchanged
    np.testing.assert_array_equal(
        pl.randn(3, generator=g).numpy(), pl.randn(3, generator=twin).numpy()
    )
    new_seed = g.seed()
    assert g.initial_seed() == new_seed and 0 <= new_seed < 2**64
    assert Generator().manual_seed(-1).initial_seed() == 2**64 - 1  # wraps, as in PyTorch
    assert "initial_seed=5" in repr(Generator().manual_seed(5))


@pytest.mark.parametrize("seed", [1.5, "3", True, None])
def test_generator_rejects_seeds_that_are_not_integers(seed: Any) -> None:
    with pytest.raises(TypeError, match="manual_seed: the seed must be an integer"):
        Generator().manual_seed(seed)
    with pytest.raises(TypeError, match="seed must be an integer"):
        pl.manual_seed(seed)


def test_generator_rejects_bad_ranges_states_and_devices() -> None:
    with pytest.raises(ValueError, match="out of range"):
        Generator().manual_seed(2**64)
    with pytest.raises(ValueError, match="out of range"):
        Generator().manual_seed(-(2**63) - 1)
    with pytest.raises(TypeError, match="set_state: expected the dict"):
        Generator().set_state([1, 2, 3])
    with pytest.raises(TypeError, match="bit generator 'MT19937'"):
        Generator().set_state(np.random.MT19937(0).state)
    with pytest.raises(TypeError, match="not a valid PCG64 state"):
        Generator().set_state({"bit_generator": "PCG64"})
    with pytest.raises(TypeError, match="device must be a string"):
        Generator(device=0)
    with pytest.raises(ValueError, match="unknown device"):
        Generator(device="tpu")
    with pytest.raises(TypeError, match="generator must be a pylucid.Generator"):
        pl.rand(2, generator=np.random.default_rng(0))


def test_manual_seed_seeds_the_default_generator_with_numpys_draws() -> None:
    assert pl.manual_seed(11) is default_generator and initial_seed() == 11
    drawn = pl.rand(3, 4).numpy()
    np.testing.assert_array_equal(drawn, np.random.default_rng(11).random((3, 4), np.float32))
    pl.manual_seed(11)
    np.testing.assert_array_equal(
        pl.randn(5, dtype=pl.float64).numpy(), np.random.default_rng(11).standard_normal(5)
    )
    state = get_rng_state()
    again = pl.rand(6).numpy()
    set_rng_state(state)
    np.testing.assert_array_equal(pl.rand(6).numpy(), again)
    pl.manual_seed(11)
    pl.rand(2, generator=Generator().manual_seed(0))  # an own generator leaves the default
    np.testing.assert_array_equal(pl.rand(3, 4).numpy(), drawn)


def test_randint_and_randperm(device: str) -> None:
    g = Generator().manual_seed(3)
    x = randint(-2, 5, (200,), generator=g, device=device)
    assert x.shape == (200,) and x.dtype is pl.int64 and x.device == device
    assert set(x.tolist()) == set(range(-2, 5))  # 200 draws cover the 7 values
    assert randint(4, (2, 3), device=device).shape == (2, 3)  # randint(high, size)
    y = randint(4, size=[50], dtype=pl.float32, device=device)  # randint(high, size=)
    assert y.dtype is pl.float32 and set(y.tolist()) <= {0.0, 1.0, 2.0, 3.0}
    np.testing.assert_array_equal(
        randint(0, 100, (5,), generator=Generator().manual_seed(9)).numpy(),
        randint(0, 100, (5,), generator=Generator().manual_seed(9)).numpy(),
    )
    p = randperm(20, generator=g, device=device)
    assert p.dtype is pl.int64 and p.device == device and sorted(p.tolist()) == list(range(20))
    assert randperm(0).shape == (0,) and randperm(6, dtype=pl.int32).dtype is pl.int32
    with pytest.raises(ValueError, match="expected low < high, got low=3 and high=3"):
        randint(3, 3, (2,))
    with pytest.raises(TypeError, match="missing the size"):
        randint(0, 10)
    with pytest.raises(TypeError, match="high must be an integer"):
        randint(0, 2.5, (2,))
    with pytest.raises(ValueError, match="do not fit int32"):
        randint(0, 2**40, (2,), dtype=pl.int32)
    with pytest.raises(ValueError, match="n must be non-negative, got -1"):
        randperm(-1)
    with pytest.raises(TypeError, match="integer or floating dtype, got bool"):
        randperm(3, dtype=pl.bool)


# -- datasets -------------------------------------------------------------------------------
def test_tensor_dataset_items_batches_and_size_mismatch(device: str) -> None:
    ds = _dataset(device)
    assert len(ds) == 10
    features, label = ds[3]
    assert features.tolist() == [6.0, 7.0] and label.item() == 3 and label.device == device
    gathered = ds.__getitems__([4, 0, 4])
    assert isinstance(gathered, GatheredSamples) and len(gathered) == 3
    assert gathered.columns[0].shape == (3, 2) and gathered.columns[1].tolist() == [4, 0, 4]
    assert [label.item() for _, label in gathered] == [4, 0, 4]  # a sequence of samples
    assert [label.item() for _, label in gathered[1:]] == [0, 4]
    with pytest.raises(ValueError, match=r"first dimensions are \[3, 4\]"):
        TensorDataset(pl.zeros(3, 2, device=device), pl.zeros(4, device=device))
    with pytest.raises(TypeError, match=r"tensors\[1\] is a ndarray"):
        TensorDataset(pl.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="at least one tensor"):
        TensorDataset()
    with pytest.raises(ValueError, match="0-d"):
        TensorDataset(pl.tensor(1.0))


def test_concat_subset_and_chain_datasets() -> None:
    joined = ConcatDataset([list(range(3)), list(range(10, 15))])
    assert len(joined) == 8 and joined.cumulative_sizes == [3, 8]
    assert [joined[i] for i in range(8)] == [0, 1, 2, 10, 11, 12, 13, 14]
    assert joined[-1] == 14 and joined[-8] == 0
    with pytest.raises(IndexError, match="index 8 is out of range for a dataset of length 8"):
        joined[8]
    with pytest.raises(ValueError, match="empty iterable"):
        ConcatDataset([])
    with pytest.raises(TypeError, match="ChainDataset"):
        ConcatDataset([Stream(2)])
    summed = _dataset("cpu", 4) + _dataset("cpu", 2)
    assert isinstance(summed, ConcatDataset) and len(summed) == 6 and summed[5][1].item() == 1

    subset = Subset(_dataset("cpu"), [7, 2, 5])
    assert len(subset) == 3 and subset[0][1].item() == 7
    assert isinstance(subset.__getitems__([2, 0]), GatheredSamples)  # through the dataset's
    assert subset.__getitems__([2, 0]).columns[1].tolist() == [5, 7]
    assert Subset(list("abcd"), [3, 1]).__getitems__([0, 1]) == ["d", "b"]

    chained = Stream(3) + Stream(2)
    assert list(chained) == [0, 1, 2, 0, 1] and len(chained) == 5
    with pytest.raises(TypeError, match="only supports IterableDataset"):
        list(data.ChainDataset([Stream(1), [1, 2]]))
    with pytest.raises(NotImplementedError, match="must implement __getitem__"):
        Dataset()[0]


def test_random_split_sizes_disjointness_fractions_and_reproducibility() -> None:
    parts = random_split(range(10), [3, 7], generator=Generator().manual_seed(0))
    assert [len(p) for p in parts] == [3, 7]
    values = [list(p) for p in parts]
    assert sorted(values[0] + values[1]) == list(range(10))  # disjoint and complete
    again = random_split(range(10), [3, 7], generator=Generator().manual_seed(0))
    assert [list(p) for p in again] == values
    assert [len(p) for p in random_split(range(10), [0.5, 0.3, 0.2])] == [5, 3, 2]
    # floor(11 * f) = [2, 2, 5] and the remainder 2 goes to the first two splits (as PyTorch)
    assert [len(p) for p in random_split(range(11), [0.25, 0.25, 0.5])] == [3, 3, 5]
    pl.manual_seed(4)
    first = [list(p) for p in random_split(range(6), [3, 3])]
    pl.manual_seed(4)
    assert [list(p) for p in random_split(range(6), [3, 3])] == first
    with pytest.warns(UserWarning, match="split at index 1 is empty"):
        random_split(range(2), [0.9, 0.1])
    with pytest.raises(ValueError, match=r"sum to 9, but the dataset has length 10"):
        random_split(range(10), [4, 5])
    with pytest.raises(ValueError, match=r"fraction at index 0 \(1.5\) is not between 0 and 1"):
        random_split(range(10), [1.5, -0.5])
    with pytest.raises(ValueError, match="neither non-negative integers"):
        random_split(range(10), [-1, 11])
    with pytest.raises(TypeError, match="lengths are integers or fractions"):
        random_split(range(10), ["5", 5])


# -- samplers -------------------------------------------------------------------------------
def test_sequential_random_and_subset_samplers() -> None:
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3] and len(SequentialSampler([1])) == 1
    sampler = RandomSampler(range(20), generator=Generator().manual_seed(1))
    epochs = [list(sampler), list(sampler)]
    assert sorted(epochs[0]) == list(range(20)) and epochs[0] != epochs[1]
    assert list(RandomSampler(range(20), generator=Generator().manual_seed(1))) == epochs[0]
    longer = list(RandomSampler(range(4), num_samples=10, generator=Generator().manual_seed(2)))
    assert len(longer) == 10 and sorted(longer[:8]) == [0, 0, 1, 1, 2, 2, 3, 3]
    drawn = RandomSampler(range(3), replacement=True, num_samples=50)
    assert len(drawn) == 50 and set(drawn) == {0, 1, 2}
    pl.manual_seed(8)
    seeded = list(RandomSampler(range(20)))
    pl.manual_seed(8)
    assert list(RandomSampler(range(20))) == seeded
    subset = SubsetRandomSampler([10, 20, 30], generator=Generator().manual_seed(0))
    assert sorted(subset) == [10, 20, 30] and len(subset) == 3
    with pytest.raises(TypeError, match="replacement should be a boolean value"):
        RandomSampler(range(3), replacement=1)
    with pytest.raises(ValueError, match="num_samples should be a positive integer value"):
        RandomSampler(range(3), num_samples=0)
    with pytest.raises(ValueError, match="num_samples=0"):
        RandomSampler([])  # PyTorch refuses an empty data source as well
    with pytest.raises(TypeError, match="generator must be a pylucid.Generator"):
        SubsetRandomSampler([1], generator=0)


def test_custom_sampler_subclass_drives_the_loader() -> None:
    class Reversed(data.Sampler[int]):
        def __init__(self, source: Any) -> None:
            super().__init__(source)  # PyTorch's older samplers pass the data source up
            self.source = source

        def __iter__(self) -> Iterator[int]:
            return iter(range(len(self.source) - 1, -1, -1))

        def __len__(self) -> int:
            return len(self.source)

    ds = _dataset("cpu", 5)
    loader = DataLoader(ds, batch_size=2, sampler=Reversed(ds))
    assert len(loader) == 3 and _labels(loader) == [[4, 3], [2, 1], [0]]
    with pytest.raises(NotImplementedError, match="must implement __iter__"):
        iter(data.Sampler())


def test_weighted_and_batch_samplers() -> None:
    g = Generator().manual_seed(0)
    weighted = WeightedRandomSampler([1.0, 0.0, 3.0], 400, generator=g)
    drawn = list(weighted)
    assert len(weighted) == 400 and len(drawn) == 400 and 1 not in drawn
    assert 200 < drawn.count(2) < 400  # about 3/4 of the draws
    once = list(WeightedRandomSampler(pl.tensor([1.0, 2.0, 3.0]), 3, replacement=False))
    assert sorted(once) == [0, 1, 2]
    with pytest.raises(ValueError, match="without replacement from 2 non-zero weights"):
        WeightedRandomSampler([1.0, 0.0, 3.0], 3, replacement=False)
    with pytest.raises(ValueError, match="weights must be finite and non-negative"):
        WeightedRandomSampler([1.0, -1.0], 2)
    with pytest.raises(ValueError, match="1d sequence"):
        WeightedRandomSampler([[1.0]], 1)

    assert list(BatchSampler(range(7), 3, drop_last=False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, False)) == 3 and len(BatchSampler(range(7), 3, True)) == 2
    assert list(BatchSampler(range(6), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        BatchSampler(range(3), 0, False)
    with pytest.raises(ValueError, match="drop_last should be a boolean value"):
        BatchSampler(range(3), 2, drop_last=None)


def _peak_bytes(work: Any) -> tuple[Any, int]:
    """``work()``'s result and the peak of the memory traced while it ran (NumPy reports its
    arrays' buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_infinite_samplers_draw_lazily_in_constant_memory() -> None:
    def seeded() -> Generator:
        return Generator().manual_seed(4)

    huge = 10**12  # 8 TB of int64 if drawn at once
    samplers = [
        RandomSampler(range(10), replacement=True, num_samples=huge, generator=seeded()),
        RandomSampler(range(10), num_samples=huge, generator=seeded()),  # permutation chain
        WeightedRandomSampler([1.0, 0.0, 3.0], huge, generator=seeded()),
    ]
    assert [len(s) for s in samplers] == [huge] * 3
    assert len(BatchSampler(samplers[0], 64, drop_last=False)) == huge // 64
    for sampler in samplers:
        heads, peak = _peak_bytes(lambda s=sampler: list(itertools.islice(s, 1000)))
        assert len(heads) == 1000 and peak < 1 << 20, (type(sampler).__name__, peak)


def test_infinite_loader_yields_its_first_batch_at_once() -> None:
    """makemore's InfiniteDataLoader: a RandomSampler with replacement and num_samples=1e10."""
    ds = _dataset("cpu", 10)

    def loader() -> DataLoader:
        sampler = RandomSampler(
            ds, replacement=True, num_samples=int(1e10), generator=Generator().manual_seed(0)
        )
        return DataLoader(ds, batch_size=4, sampler=sampler)

    assert len(loader()) == int(1e10) // 4
    _, first = next(iter(loader()))  # loads the gather kernels before memory is traced
    (_, labels), peak = _peak_bytes(lambda: next(iter(loader())))
    assert labels.tolist() == first.tolist() and peak < 1 << 20


def test_lazy_draws_repeat_with_the_seed_however_far_they_go() -> None:
    def draws(make: Any, num_samples: int, count: int) -> list[int]:
        return list(itertools.islice(make(num_samples, Generator().manual_seed(5)), count))

    def with_replacement(num_samples: int, g: Generator) -> RandomSampler:
        return RandomSampler(range(7), replacement=True, num_samples=num_samples, generator=g)

    def permutations(num_samples: int, g: Generator) -> RandomSampler:
        return RandomSampler(range(5), num_samples=num_samples, generator=g)

    def weighted(num_samples: int, g: Generator) -> WeightedRandomSampler:
        return WeightedRandomSampler([0.5, 2.0, 0.0, 1.0], num_samples, generator=g)

    for make in (with_replacement, permutations, weighted):
        far = draws(make, 10**12, 500)
        # a shorter sampler (45: a chunk and a part of one) yields the same first indices
        assert draws(make, 45, 500) == far[:45], make.__name__
        assert draws(make, 10**12, 100) == far[:100]
    chained = draws(permutations, 10**12, 15)
    assert all(sorted(chained[i : i + 5]) == list(range(5)) for i in (0, 5, 10))
    sampler = with_replacement(10**12, Generator().manual_seed(5))
    first, second = (list(itertools.islice(sampler, 100)) for _ in range(2))
    assert first != second  # each iteration (epoch) draws anew from the generator
    assert 2 not in draws(weighted, 10**12, 1000)  # a zero weight is never drawn


# -- DataLoader -----------------------------------------------------------------------------
def test_loader_batches_shapes_values_and_len(device: str) -> None:
    ds = _dataset(device)
    loader = DataLoader(ds, batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and len(batches) == 3 and len(iter(loader)) == 3
    features, labels = batches[0]
    assert isinstance(batches[0], list)  # tuples collate to lists, as in PyTorch
    assert features.shape == (4, 2) and features.dtype is pl.float32 and features.device == device
    assert labels.dtype is pl.int64 and labels.device == device
    assert features.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]
    assert _labels(loader) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    dropped = DataLoader(ds, batch_size=4, drop_last=True)
    assert len(dropped) == 2 and _labels(dropped) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(DataLoader(ds)) == 10 and _labels(DataLoader(ds))[9] == [9]
    single = list(DataLoader(ds, batch_size=None))
    assert len(single) == 10 and single[2][0].shape == (2,) and single[2][1].item() == 2


def test_loader_reads_a_batch_with_one_getitems_call(device: str) -> None:
    class Counting(TensorDataset):
        items = 0
        batches = 0

        def __getitem__(self, index: Any) -> Any:
            Counting.items += 1
            return super().__getitem__(index)

        def __getitems__(self, indices: Any) -> GatheredSamples:
            Counting.batches += 1
            return super().__getitems__(indices)

    ds = Counting(*_dataset(device).tensors)
    assert _labels(DataLoader(ds, batch_size=4, shuffle=True))  # three batches, any order
    assert (Counting.items, Counting.batches) == (0, 3)
    loader = DataLoader(Subset(ds, [9, 8, 7, 6, 5]), batch_size=2)
    assert _labels(loader) == [[9, 8], [7, 6], [5]] and Counting.items == 0

    seen = []
    columns = DataLoader(ds, batch_size=3, collate_fn=lambda batch: seen.append(batch) or 1)
    assert list(columns) == [1] * 4
    assert [label.item() for _, label in seen[1]] == [3, 4, 5]  # a sequence of samples


def test_shuffle_is_a_reproducible_permutation_per_epoch(device: str) -> None:
    ds = _dataset(device, 30)
    loader = DataLoader(ds, batch_size=7, shuffle=True)
    pl.manual_seed(0)
    first, second = _labels(loader), _labels(loader)
    assert [len(b) for b in first] == [7, 7, 7, 7, 2]
    assert sorted(sum(first, [])) == list(range(30)) and first != second
    pl.manual_seed(0)
    assert _labels(loader) == first and _labels(loader) == second
    seeded = DataLoader(ds, batch_size=7, shuffle=True, generator=Generator().manual_seed(3))
    again = DataLoader(ds, batch_size=7, shuffle=True, generator=Generator().manual_seed(3))
    pl.manual_seed(1)  # the loader's generator, not the default one, draws the order
    order = _labels(seeded)
    assert _labels(again) == order and sorted(sum(order, [])) == list(range(30))
    assert isinstance(seeded.sampler, RandomSampler) and seeded.generator is not None


def test_loader_with_sampler_batch_sampler_and_iterable_dataset() -> None:
    ds = _dataset("cpu")
    assert _labels(DataLoader(ds, batch_size=2, sampler=[9, 0, 5])) == [[9, 0], [5]]
    assert _labels(DataLoader(ds, batch_sampler=[[1, 2, 3], [0]])) == [[1, 2, 3], [0]]
    custom = DataLoader(ds, batch_sampler=BatchSampler(range(10), 6, drop_last=True))
    assert (
        len(custom) == 1 and custom.batch_size is None and _labels(custom) == [[0, 1, 2, 3, 4, 5]]
    )

    stream = DataLoader(Stream(7), batch_size=3)
    assert len(stream) == 3 and [b.tolist() for b in stream] == [[0, 1, 2], [3, 4, 5], [6]]
    dropped = DataLoader(Stream(7), batch_size=3, drop_last=True)
    assert len(dropped) == 2 and [b.tolist() for b in dropped] == [[0, 1, 2], [3, 4, 5]]
    exact = DataLoader(Stream(6), batch_size=3, drop_last=True)
    assert [b.tolist() for b in exact] == [[0, 1, 2], [3, 4, 5]]
    assert list(DataLoader(Stream(3), batch_size=None)) == [0, 1, 2]
    assert data.get_worker_info() is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sampler": [0], "shuffle": True}, "sampler option is mutually exclusive with shuffle"),
        ({"batch_sampler": [[0]], "batch_size": 2}, "batch_sampler option is mutually exclusive"),
        ({"batch_sampler": [[0]], "shuffle": True}, "batch_sampler option is mutually exclusive"),
        ({"batch_sampler": [[0]], "drop_last": True}, "batch_sampler option is mutually exclusive"),
        ({"batch_sampler": [[0]], "sampler": [0]}, "batch_sampler option is mutually exclusive"),
        ({"batch_size": None, "drop_last": True}, "batch_size=None option disables auto-batching"),
        ({"batch_size": 0}, "batch_size should be a positive integer value"),
        ({"num_workers": -1}, "num_workers option should be non-negative"),
        ({"timeout": -1}, "timeout option should be non-negative"),
        ({"timeout": 5}, "need num_workers > 0"),
        ({"prefetch_factor": 2}, "prefetch_factor option could only be specified"),
        ({"persistent_workers": True}, "persistent_workers option needs num_workers > 0"),
        ({"multiprocessing_context": "fork"}, "multiprocessing_context can only be used"),
    ],
)
def test_loader_refuses_conflicting_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataLoader(list(range(4)), **options)


def test_workers_load_a_map_style_dataset_in_process_with_the_same_batches() -> None:
    """num_workers > 0 (makemore's loader asks for 4) gives the batches PyTorch's workers give:
    the sampler's order, loaded here; the worker options are accepted with workers."""
    plain = DataLoader(list(range(10)), batch_size=3, shuffle=True,
                       generator=pl.Generator().manual_seed(5))  # fmt: skip
    workers = DataLoader(list(range(10)), batch_size=3, shuffle=True, num_workers=4,
                         pin_memory=True, persistent_workers=True, prefetch_factor=2,
                         timeout=5, generator=pl.Generator().manual_seed(5))  # fmt: skip
    assert [b.tolist() for b in workers] == [b.tolist() for b in plain]
    with pytest.raises(NotImplementedError, match="IterableDataset: PyTorch gives each worker"):
        DataLoader(Stream(3), num_workers=2)


def test_loader_refuses_iterable_samplers_and_late_changes() -> None:
    with pytest.raises(ValueError, match="IterableDataset: expected unspecified shuffle"):
        DataLoader(Stream(3), shuffle=True)
    with pytest.raises(ValueError, match="IterableDataset: expected unspecified sampler"):
        DataLoader(Stream(3), sampler=[0])
    with pytest.raises(ValueError, match="IterableDataset: expected unspecified batch_sampler"):
        DataLoader(Stream(3), batch_sampler=[[0]])
    with pytest.raises(TypeError, match="generator must be a pylucid.Generator"):
        DataLoader(list(range(4)), shuffle=True, generator=np.random.default_rng(0))
    loader = DataLoader(list(range(4)), batch_size=2, pin_memory=True)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]  # pin_memory has no effect
    with pytest.raises(ValueError, match="batch_size attribute should not be set"):
        loader.batch_size = 3
    loader.collate_fn = default_convert  # other attributes can change, as in PyTorch
    assert list(loader) == [[0, 1], [2, 3]]


# -- collation ------------------------------------------------------------------------------
def test_default_collate_structures_and_dtypes(device: str) -> None:
    with pl.backends.use(device):
        ints, floats, words, scalars = default_collate(
            [(1, 2.0, "a", np.float32(1)), (3, 4.0, "b", np.float32(2))]
        )
        assert ints.dtype is pl.int64 and ints.tolist() == [1, 3] and ints.device == device
        assert floats.dtype is pl.float64 and floats.tolist() == [2.0, 4.0]
        assert words == ("a", "b") and scalars.dtype is pl.float32
        flags = default_collate([True, False])
        assert flags.dtype is pl.bool and flags.tolist() == [True, False]
        arrays = default_collate([np.arange(3, dtype=np.int32), np.ones(3, np.int32)])
        assert arrays.dtype is pl.int32 and arrays.shape == (2, 3) and arrays.device == device
        nested = default_collate(
            [{"a": [1, 2], "p": Point(1.0, 2)}, {"a": [3, 4], "p": Point(3.0, 4)}]
        )
        assert list(nested) == ["a", "p"] and [t.tolist() for t in nested["a"]] == [[1, 3], [2, 4]]
        assert isinstance(nested["p"], Point) and nested["p"].x.dtype is pl.float64
    stacked = default_collate([pl.ones(2, device=device), pl.zeros(2, device=device)])
    assert stacked.shape == (2, 2) and stacked.device == device
    assert stacked.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert default_collate(["x", "y"]) == ["x", "y"]


def test_default_collate_errors() -> None:
    with pytest.raises(TypeError, match="batch must contain tensors.*found <class 'NoneType'>"):
        default_collate([None, None])
    with pytest.raises(TypeError, match="found <U1"):
        default_collate([np.array(["a"]), np.array(["b"])])
    with pytest.raises(RuntimeError, match="batch\\[0\\] has 2 elements, batch\\[1\\] 1"):
        default_collate([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"batch\[1\] is an array of shape \(3,\)"):
        default_collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(TypeError, match="dtype uint8.*astype"):
        default_collate([np.zeros(2, np.uint8), np.zeros(2, np.uint8)])
    with pytest.raises(ValueError, match="stacked tensors must have one shape"):
        default_collate([pl.zeros(2), pl.zeros(3)])


def test_default_convert(device: str) -> None:
    with pl.backends.use(device):
        converted = default_convert((np.arange(3), 1, Point(np.int32(3), "s"), {"k": np.ones(1)}))
    assert isinstance(converted, list) and converted[1] == 1
    assert converted[0].tolist() == [0, 1, 2] and converted[0].device == device
    assert isinstance(converted[2], Point) and converted[2].x.dtype is pl.int32
    assert converted[2].x.shape == () and converted[2].y == "s"
    assert converted[3]["k"].dtype is pl.float64
    words = np.array(["a", "b"])
    assert default_convert(words) is words
    t = pl.ones(2, device=device)
    assert default_convert(t) is t


# -- PyTorch as the oracle ------------------------------------------------------------------
def _structure(value: Any) -> Any:
    """A comparable description of a collated value, for pylucid and for torch."""
    if isinstance(value, pl.Tensor):
        return ("tensor", value.dtype.name, tuple(value.shape), value.tolist())
    if type(value).__module__ == "torch" and hasattr(value, "dtype"):
        return (
            "tensor",
            str(value.dtype).removeprefix("torch."),
            tuple(value.shape),
            value.tolist(),
        )
    if isinstance(value, dict):
        return ("dict", {key: _structure(v) for key, v in value.items()})
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_structure(v) for v in value])
    return value


COLLATE_CASES = [
    [0, 1, 2],
    [1.5, 2.5],
    [True, False],
    ["a", "b"],
    [(1, 2.0), (3, 4.0)],
    [[1, 2], [3, 4]],
    [{"a": 1, "b": [np.float32(1.0)]}, {"a": 2, "b": [np.float32(2.0)]}],
    [Point(1, 2.0), Point(3, 4.0)],
    [np.arange(3), np.arange(3)],
    [np.float64(1.0), np.float64(2.0)],
    [np.array(1.5), np.array(2.5)],
    [(np.ones(2, np.float32), 3), (np.zeros(2, np.float32), 4)],
]


def test_collate_matches_torch() -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    from torch.utils.data import default_collate as torch_collate
    from torch.utils.data import default_convert as torch_convert

    for batch in COLLATE_CASES:
        assert _structure(default_collate(batch)) == _structure(torch_collate(batch)), batch
        sample = batch[0]
        assert _structure(default_convert(sample)) == _structure(torch_convert(sample)), sample
    pl_batch = next(iter(DataLoader(_dataset("cpu"), batch_size=4)))
    torch_data = torch.utils.data.TensorDataset(
        torch.arange(20, dtype=torch.float32).reshape(10, 2), torch.arange(10)
    )
    torch_batch = next(iter(torch.utils.data.DataLoader(torch_data, batch_size=4)))
    assert _structure(pl_batch) == _structure(torch_batch)


def test_loader_lengths_and_split_lengths_match_torch() -> None:
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    tdata = torch.utils.data

    class TorchStream(tdata.IterableDataset):
        def __init__(self, n: int) -> None:
            self.n = n

        def __iter__(self) -> Iterator[int]:
            return iter(range(self.n))

        def __len__(self) -> int:
            return self.n

    for n in (1, 7, 8, 9):
        for batch_size in (None, 1, 3, 8, 10):
            for drop_last in (False, True):
                if batch_size is None and drop_last:
                    continue
                options = {"batch_size": batch_size, "drop_last": drop_last}
                ours = DataLoader(list(range(n)), **options)
                theirs = tdata.DataLoader(list(range(n)), **options)
                assert len(ours) == len(theirs), (n, options)
                assert [_structure(b) for b in ours] == [_structure(b) for b in theirs]
                stream, torch_stream = (
                    DataLoader(Stream(n), **options),
                    tdata.DataLoader(TorchStream(n), **options),
                )
                assert len(stream) == len(torch_stream), (n, options)
                assert [_structure(b) for b in stream] == [_structure(b) for b in torch_stream]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # empty splits warn on both sides
        for n, fractions in [(10, [0.5, 0.5]), (11, [0.1, 0.2, 0.7]), (3, [0.25] * 4)]:
            ours = [len(p) for p in random_split(range(n), fractions)]
            assert ours == [len(p) for p in tdata.random_split(range(n), fractions)]
