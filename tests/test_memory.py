"""The caching allocator (pylucid.memory): a buffer is reused only once nothing refers to it."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import pylucid as pl
from pylucid import memory

SHAPE = (1024, 512)  # 2 MiB of float32: pooled
SMALL = (64,)


@pytest.fixture(autouse=True)
def fresh_pool():
    """Each test starts and ends with no idle buffer and the default limit."""
    memory.empty_cache()
    yield
    memory.set_limit(memory.DEFAULT_LIMIT)
    memory.empty_cache()


def test_released_buffer_is_reused_and_live_one_is_not():
    a = memory.empty(SHAPE, np.float32)
    b = memory.empty(SHAPE, np.float32)
    assert a.base is not b.base
    a_address = a.ctypes.data  # not a reference: holding a.base would keep it in use
    del a
    c = memory.empty(SHAPE, np.float32)
    assert c.ctypes.data == a_address
    assert c.shape == SHAPE and c.dtype == np.float32 and c.flags.c_contiguous
    assert c.flags.writeable and c.ctypes.data % 16 == 0


@pytest.mark.parametrize(
    ("keep", "read"),
    [
        (lambda a: a[::2], np.asarray),
        (lambda a: a.reshape(-1), np.asarray),
        (memoryview, np.asarray),
        (pl.from_numpy, lambda t: t.numpy()),
        (lambda a: [a.T], lambda held: held[0]),
    ],
    ids=["strided-view", "reshape", "memoryview", "tensor", "list-of-transpose"],
)
def test_buffer_is_not_reused_while_anything_refers_to_it(keep, read):
    a = memory.empty(SHAPE, np.float32)
    a.fill(7.0)
    address = a.ctypes.data
    held = keep(a)
    del a
    b = memory.empty(SHAPE, np.float32)
    assert b.ctypes.data != address
    b.fill(-1.0)
    assert np.all(read(held) == 7.0)


def test_small_arrays_are_not_pooled():
    before = memory.stats()
    a = memory.empty(SMALL, np.float64)
    assert a.base is None and a.shape == SMALL
    assert memory.stats() == before


def test_size_classes_share_buffers_within_one_eighth():
    a = memory.empty((1_000_000,), np.float32)
    address = a.ctypes.data
    del a
    b = memory.empty((1_040_000,), np.float32)  # within the same size class
    assert b.ctypes.data == address
    del b
    c = memory.empty((1_200_000,), np.float32)  # a larger class
    assert c.ctypes.data != address


def test_stats_count_hits_misses_and_bytes():
    before = memory.stats()
    a = memory.empty(SHAPE, np.float32)
    nbytes = a.base.nbytes
    after_miss = memory.stats()
    assert after_miss.misses == before.misses + 1
    assert after_miss.in_use_bytes == before.in_use_bytes + nbytes
    del a
    idle = memory.stats()
    assert idle.idle_bytes == nbytes
    b = memory.empty(SHAPE, np.float32)
    assert memory.stats().hits == before.hits + 1
    del b
    memory.empty_cache()
    assert memory.stats().idle_bytes == 0


def test_limit_caps_idle_bytes_and_zero_turns_reuse_off():
    arrays = [memory.empty(SHAPE, np.float32) for _ in range(4)]
    nbytes = arrays[0].base.nbytes
    del arrays
    assert memory.stats().idle_bytes == 4 * nbytes
    memory.set_limit(2 * nbytes)
    assert memory.limit() == 2 * nbytes
    assert memory.stats().idle_bytes == 2 * nbytes
    memory.set_limit(0)
    a = memory.empty(SHAPE, np.float32)
    del a
    assert memory.stats().idle_bytes <= nbytes  # the last one, dropped at the next miss
    b = memory.empty((SHAPE[0] * 2, SHAPE[1]), np.float32)
    assert memory.stats().idle_bytes == 0
    del b


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="bytes >= 0"):
        memory.set_limit(-1)
    code = "import pylucid"
    env = {"PYLUCID_CACHE_LIMIT": "lots", "PATH": ""}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "PYLUCID_CACHE_LIMIT='lots'" in result.stderr


def test_kernel_outputs_come_from_the_pool_and_stay_correct():
    x = np.random.default_rng(0).uniform(0.5, 4.0, SHAPE).astype(np.float32)
    first = pl.log2(pl.from_numpy(x))
    address = first.numpy().ctypes.data
    expected = np.log2(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(first.numpy(), expected, rtol=2**-23)  # float32 log2: <= 1 ULP
    del first
    second = pl.exp2(pl.from_numpy(x))  # reuses the released buffer, fully overwritten
    assert second.numpy().ctypes.data == address
    np.testing.assert_allclose(second.numpy(), np.exp2(x.astype(np.float64)), rtol=1e-7)


def test_threads_never_share_a_buffer():
    seen: list[np.ndarray] = []
    lock = threading.Lock()

    def work():
        mine = [memory.empty(SHAPE, np.float32) for _ in range(20)]
        with lock:
            seen.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(a.base) for a in seen}) == len(seen)


def test_leaf_gradient_takes_a_pooled_kernel_output_without_copying():
    """The engine's gradient of a leaf is a pooled view no one else refers to: .grad takes
    it as it is (a copy would cost a fresh allocation per backward)."""
    x = pl.tensor(np.full(SHAPE, 2.0, np.float32), requires_grad=True)
    pl.log2(x).backward(pl.ones(SHAPE))
    grad = x.grad.numpy()
    assert memory.is_sole_view(grad)  # not a copy: a copy would own its data
    np.testing.assert_allclose(grad, 1 / (2 * np.log(2)), rtol=1e-7)


def test_a_second_view_makes_a_pooled_array_shared():
    a = memory.empty(SHAPE, np.float32)
    assert memory.is_sole_view(a)
    b = a.reshape(-1)
    assert not memory.is_sole_view(a) and not memory.is_sole_view(b)
    del b
    assert memory.is_sole_view(a)
    assert not memory.is_sole_view(np.ones(SHAPE))  # owns its data: not a pooled view


def test_training_step_takes_its_large_buffers_from_the_pool():
    """A CNN step in steady state (the benchmark's, batch 64) page-faults almost never: its
    convolutions' columns and products, the engine's gradient sums and the broadcasts all
    come from the pool. Before they did, glibc handed some back to the system between steps
    and each step faulted ~1,700 times (~2 ms of system time in a ~35 ms step)."""
    resource = pytest.importorskip("resource", reason="page-fault counts need POSIX resource")
    from pylucid.bench import models

    cfg = models.CNNConfig(batch=64, size=32, channels=(16, 32, 64))
    images, labels = models.batch_data(cfg)
    pl.manual_seed(0)
    model = models.build_module(pl, cfg)
    step = models._train_step(pl, cfg, model, model)
    x, y = pl.tensor(images), pl.tensor(labels)
    for _ in range(3):  # (the pool fills in the first steps)
        step(x, y)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        step(x, y)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 4
    assert faults < 50, f"{faults} page faults a step"
