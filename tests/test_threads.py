"""Threads: backward passes into shared leaves, and modes that stay in their thread.

The class of defect: state shared between threads without a lock (a lost gradient update),
or a mode (grad mode, autocast, backend, anomaly detection) leaking from one thread into
another."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

import pylucid as pl


def _in_threads(count: int, work: Callable[[int], object]) -> list[object]:
    results: list[object] = [None] * count

    def run(index: int) -> None:
        results[index] = work(index)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results


def test_concurrent_backward_into_one_leaf_loses_no_update() -> None:
    """Two threads, 40 passes each, into one 1000 x 1000 leaf (the repro lost 25-50%)."""
    x = pl.ones(8, 1000)
    w = pl.zeros(1000, 1000, requires_grad=True)
    passes = 40

    def work(_: int) -> None:
        for _ in range(passes):
            (x @ w).sum().backward()

    _in_threads(2, work)
    assert np.all(w.grad.numpy() == 8.0 * passes * 2)


def test_training_in_threads_gives_the_sequential_results() -> None:
    """Independent models trained at once (kernels, the allocator's pool, the engine)
    reach bit for bit what each reaches alone."""

    def train(seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        inputs = pl.tensor(rng.standard_normal((256, 512)))
        w = pl.tensor(rng.standard_normal((512, 8)) * 0.01, requires_grad=True)
        for _ in range(10):
            loss = (pl.tanh(inputs @ w) ** 2).mean()
            loss.backward()
            with pl.no_grad():
                w -= 0.5 * w.grad
            w.grad = None
        return w.numpy().copy()

    alone = [train(seed) for seed in range(4)]
    together = _in_threads(4, train)
    for a, b in zip(alone, together):
        np.testing.assert_array_equal(a, b)


def test_modes_stay_in_their_thread() -> None:
    other = "mlx" if "mlx" in pl.backends.available() else "numba"
    with pl.no_grad(), pl.autocast(dtype=pl.bfloat16), pl.graph.detect_anomaly():
        with pl.backends.use(other):
            inside = (pl.is_grad_enabled(), pl.amp.autocast_dtype(), pl.backends.current().name)
            (seen,) = _in_threads(
                1,
                lambda _: (
                    pl.is_grad_enabled(),
                    pl.amp.autocast_dtype(),
                    pl.graph.anomaly.is_anomaly_enabled(),
                    pl.backends.current().name,
                ),
            )
    assert inside == (False, pl.bfloat16, other)
    assert seen == (True, None, False, "numba")
