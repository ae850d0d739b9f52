"""The parallel policy (pylucid.kernels.parallel): the threading layer, the thread count and
the work from which a kernel splits. Nothing here times anything: the measurements that chose
the policy are in the module's docstring and docs/performance.md."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import numpy as np
import pytest

import pylucid as pl
from pylucid.kernels import loops, parallel, reduction, scalar


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with ``env`` added (and NUMBA_THREADING_LAYER
    removed unless given), so that the layer is chosen as at a user's first import."""
    environment = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=300
    )


FIRST_PARALLEL_OP = (
    "import numba, pylucid as pl\n"
    "pl.exp(pl.rand(10**6))  # above the threshold: starts the pool\n"
    "print(numba.threading_layer(), pl.get_num_threads())\n"
)


def _tbb_installed() -> bool:
    try:
        importlib.metadata.distribution("tbb")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(
    not _tbb_installed(),
    reason="the tbb package is not installed (a dependency on x86-64 Linux and Windows)",
)
def test_parallel_kernels_run_on_tbb_where_it_is_installed() -> None:
    done = _python(FIRST_PARALLEL_OP)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "tbb"


def test_a_threading_layer_chosen_by_the_user_stands() -> None:
    done = _python(FIRST_PARALLEL_OP, NUMBA_THREADING_LAYER="workqueue")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "workqueue"


def test_pylucid_num_threads_sets_the_count_at_import() -> None:
    done = _python(FIRST_PARALLEL_OP, PYLUCID_NUM_THREADS="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "1"


def test_a_bad_pylucid_num_threads_names_the_variable() -> None:
    done = _python("import pylucid", PYLUCID_NUM_THREADS="two")
    assert done.returncode != 0
    assert "PYLUCID_NUM_THREADS='two': expected a whole number of threads" in done.stderr
    done = _python("import pylucid", PYLUCID_NUM_THREADS="999")
    assert "PYLUCID_NUM_THREADS='999': set_num_threads: 999 threads requested" in done.stderr


def test_set_num_threads_round_trips_and_refuses_what_the_pool_cannot_do() -> None:
    before = pl.get_num_threads()
    x = pl.tensor(np.linspace(-3, 3, loops.PARALLEL_THRESHOLD_HEAVY + 5))
    split = pl.exp(x).numpy()
    try:
        pl.set_num_threads(1)
        assert pl.get_num_threads() == 1
        np.testing.assert_array_equal(pl.exp(x).numpy(), split)
    finally:
        pl.set_num_threads(before)
    assert pl.get_num_threads() == before
    with pytest.raises(ValueError, match=r"set_num_threads: 0 threads requested; the pool has"):
        pl.set_num_threads(0)
    with pytest.raises(ValueError, match="NUMBA_NUM_THREADS"):
        pl.set_num_threads(10**4)
    with pytest.raises(TypeError, match="set_num_threads: expected an int, got float"):
        pl.set_num_threads(2.0)


def test_thresholds_are_the_minimum_work_over_each_cost() -> None:
    for cost, threshold in (
        ("memory", loops.PARALLEL_THRESHOLD),
        ("transcendental", loops.PARALLEL_THRESHOLD_HEAVY),
        ("row", reduction.PARALLEL_THRESHOLD_ROWS),
    ):
        work = threshold * parallel.COST_NS[cost]
        assert parallel.MIN_PARALLEL_WORK_NS <= work < parallel.MIN_PARALLEL_WORK_NS + 5
    # A cheap loop splits later than a transcendental one.
    assert loops.PARALLEL_THRESHOLD > loops.PARALLEL_THRESHOLD_HEAVY


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_loops_give_the_serial_results_on_any_thread_count(threads: int) -> None:
    if threads > pl.get_num_threads():
        pytest.skip(f"this machine's pool has {pl.get_num_threads()} thread(s)")
    before = pl.get_num_threads()
    rng = np.random.default_rng(5)
    x = rng.uniform(-5, 5, loops.PARALLEL_THRESHOLD + 3).astype(np.float32)
    kernel = loops.elementwise(scalar.mul, arity=2)
    serial, split = np.empty_like(x), np.empty_like(x)
    try:
        pl.set_num_threads(threads)
        kernel._serial(x, x, serial)
        kernel._parallel(x, x, split)
    finally:
        pl.set_num_threads(before)
    np.testing.assert_array_equal(serial, split)
