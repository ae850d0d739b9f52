"""The machine's copy bandwidth: the ceiling of a memory-bound elementwise op.

A unary elementwise op on arrays far larger than the caches reads its input and writes its
output once each, like a copy; so the copy bandwidth with the threads the kernels use is the
throughput it can at best reach. It is measured with a ``prange`` copy of a large float64
array and reported counting read + write bytes (``2 * nbytes`` per copy: the write-allocate
read of the destination that most CPUs also do is not counted, as for the ops).
"""

from __future__ import annotations

import numba
import numpy as np

from pylucid.bench.timing import TimerConfig, measure
from pylucid.kernels.jit import njit

__all__ = ["copy_bandwidth", "parallel_copy"]


@njit(parallel=True, cache=True, nogil=True)
def parallel_copy(src: np.ndarray, dst: np.ndarray) -> None:
    """``dst[:] = src`` for flat arrays, split across Numba's threads."""
    for i in numba.prange(src.size):
        dst[i] = src[i]


def copy_bandwidth(
    threads: int = 2, nbytes: int = 512 << 20, config: TimerConfig | None = None
) -> dict[str, float | int]:
    """Measure the copy bandwidth of ``threads`` Numba threads.

    Parameters
    ----------
    threads : int
        Numba threads to use (capped at ``numba.config.NUMBA_NUM_THREADS``).
    nbytes : int
        Size of the copied array; keep it well above the last-level cache.
    config : TimerConfig, optional
        Timer settings (default: a few repeats of one copy each).

    Returns
    -------
    dict
        ``threads`` (used), ``bytes`` (per copy, read + write), ``gbps`` (from the median
        time), ``gbps_best`` (from the minimum), ``median_s``, ``min_s``.
    """
    used = min(threads, numba.config.NUMBA_NUM_THREADS)
    previous = numba.get_num_threads()
    numba.set_num_threads(used)
    try:
        src = np.ones(nbytes // 8, dtype=np.float64)
        dst = np.empty_like(src)
        timer = config or TimerConfig(target_s=0.05, repeats=9, warmup=2)
        result = measure({"copy": lambda: parallel_copy(src, dst)}, timer)[0]["copy"]
    finally:
        numba.set_num_threads(previous)
    moved = 2 * src.nbytes
    return {
        "threads": used,
        "bytes": moved,
        "gbps": moved / result.median_s / 1e9,
        "gbps_best": moved / result.min_s / 1e9,
        "median_s": result.median_s,
        "min_s": result.min_s,
    }
