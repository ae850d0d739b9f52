"""The parallel policy: which threading layer, when a kernel runs its ``prange`` loop, and on
how many threads.

A parallel region wakes the other workers and waits, at its end, for the slowest of them.
What that costs depends on the threading layer and on the machine's load. Measured on 2
vCPUs (AMD EPYC, no AVX-512) with back-to-back calls of a ``prange`` loop against its serial
loop (``exp`` float64 and ``mul`` float32, 2e4 to 1e7 elements), idle and beside a competing
CPU-bound process, with and without PyTorch's pool in the process:

- **OpenMP** (GNU libgomp, whose workers spin while they wait): idle, 1.1-1.8x faster from
  2e4 elements; beside a competitor, *every* parallel call took 6.7-7.7 ms, whatever its
  size (exp of 2e4 elements: 7.5 ms instead of 57 us, 0.01x): a spinning worker holds its
  vCPU until the scheduler takes it, and the region waits for a time slice. With PyTorch
  loaded first (its own libgomp) the same runs were 0.6-1.05x. This is the "lottery".
- **OpenMP with OMP_WAIT_POLICY=PASSIVE**: no collapse (0.44-1.08x beside a competitor), but
  a region costs about 25 us, so idle gains start only at 1e6 elements.
- **workqueue**: 100 us per region; and it cannot run parallel kernels from two threads at
  once (pylucid's backward may).
- **TBB** (``tbb`` from PyPI): idle 1.7-1.9x for exp from 1e5 elements, 1.4-4.3x for mul
  from 1e6; beside a competitor 0.71-1.21x, never a collapse; with PyTorch loaded 0.78-0.99x.

So pylucid runs Numba on **TBB** (a dependency on the platforms with wheels; its library is
loaded from the environment, where pip puts it, before Numba looks for it), and falls back
to OpenMP with ``OMP_WAIT_POLICY=PASSIVE`` where TBB cannot be loaded. A threading layer
chosen with ``NUMBA_THREADING_LAYER`` is left as it is.

Even on TBB a split can cost a third of a small op on a busy machine (mul of 1e5 float32
elements: 0.71x beside a competitor, 0.48x idle), so a kernel runs its parallel loop only
where its *estimated serial time* - elements x the kernel's cost per element,
:data:`COST_NS` - reaches :data:`MIN_PARALLEL_WORK_NS`. The element threshold of each kernel
(:func:`parallel_threshold`) is that work over its cost: a memory-bound loop needs more
elements than a transcendental one before it splits.

The number of threads is Numba's (``NUMBA_NUM_THREADS`` caps it when the process starts):
``pylucid.set_num_threads(n)`` or ``PYLUCID_NUM_THREADS`` lower it, as
``torch.set_num_threads`` does for PyTorch. With one thread a parallel loop runs on the
calling thread alone and wakes nobody. As Numba's setting, it holds for the calling thread
(and the threads it starts later).
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import math
import os

import numba

__all__ = [
    "COST_NS",
    "MIN_PARALLEL_WORK_NS",
    "get_num_threads",
    "parallel_threshold",
    "set_num_threads",
]

#: The estimated serial time from which a kernel runs its parallel loop, in nanoseconds:
#: 200 us. On TBB, idle, a split gains from about 100 us of work (exp of 1e5 float64: 266 us
#: serial, 158 us on 2 threads; mul of 1e6 float32: 133 us, 93 us); beside a competing
#: process it costs at most 1.2x from there up (exp 0.97-1.16x, mul 0.83-0.99x).
MIN_PARALLEL_WORK_NS = 200_000

#: Serial cost per element of each kernel class, in nanoseconds (1e6 elements, 1 thread,
#: medians, same machine): ``memory``: one pass of arithmetic (add, mul, relu, abs; mul
#: float64 0.51, float32 0.22); ``transcendental``: log, exp, trigonometry and the
#: activations (exp float64 2.45, log2 float32 1.69; libm's tanh, 17.8, splits late);
#: ``row``: reductions and softmax-like maps over rows (softmax float64 3.9, var 1.3);
#: ``log2_avx512``: the hand-vectorised AVX-512 log2 (float32 at 1e6: 0.3 per thread, in
#: docs/performance.md's Sapphire Rapids run).
COST_NS: dict[str, float] = {
    "memory": 0.5,
    "transcendental": 2.5,
    "row": 4.0,
    "log2_avx512": 0.3,
}


def parallel_threshold(cost: str) -> int:
    """The element count from which a kernel of class ``cost`` (a key of :data:`COST_NS`)
    runs its parallel loop: :data:`MIN_PARALLEL_WORK_NS` of estimated serial work."""
    return math.ceil(MIN_PARALLEL_WORK_NS / COST_NS[cost])


def get_num_threads() -> int:
    """The number of threads a parallel kernel runs on (from the calling thread)."""
    return numba.get_num_threads()


def set_num_threads(threads: int) -> None:
    """Run parallel kernels on ``threads`` threads (from the calling thread).

    Parameters
    ----------
    threads : int
        From 1 (every kernel serial, on the calling thread) to ``NUMBA_NUM_THREADS``, the
        pool's size, fixed when the process starts (default: the number of CPUs).

    Raises
    ------
    ValueError
        For a count outside that range, naming it.
    TypeError
        For a count that is not an integer.
    """
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"set_num_threads: expected an int, got {type(threads).__name__}")
    limit = numba.config.NUMBA_NUM_THREADS
    if not 1 <= threads <= limit:
        raise ValueError(
            f"set_num_threads: {threads} threads requested; the pool has 1..{limit} "
            f"(its size is NUMBA_NUM_THREADS={limit}, fixed at start: set that variable "
            f"before starting Python for more)"
        )
    numba.set_num_threads(threads)


def _load_tbb() -> bool:
    """Load the TBB library that the ``tbb`` package installed (into the environment's
    ``lib``, where Numba's loader does not look), so that Numba's TBB layer finds it."""
    try:
        files = importlib.metadata.files("tbb") or []
    except importlib.metadata.PackageNotFoundError:
        return False
    for file in files:
        if file.name.startswith("libtbb.so.12") or file.name == "tbb12.dll":
            try:
                ctypes.CDLL(str(file.locate()), mode=getattr(ctypes, "RTLD_GLOBAL", 0))
            except OSError:
                continue
            return True
    return False


def _choose_threading_layer() -> None:
    """TBB where it loads, else OpenMP with passive waiting; a user's choice stands."""
    if "NUMBA_THREADING_LAYER" in os.environ:
        return
    if _load_tbb():
        numba.config.THREADING_LAYER = "tbb"
    else:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        numba.config.THREADING_LAYER = "omp"


def _threads_from_environment() -> None:
    """Apply ``PYLUCID_NUM_THREADS`` if set (once, at import)."""
    value = os.environ.get("PYLUCID_NUM_THREADS")
    if value is None:
        return
    try:
        threads = int(value)
    except ValueError:
        raise ValueError(
            f"PYLUCID_NUM_THREADS={value!r}: expected a whole number of threads, e.g. 1"
        ) from None
    try:
        set_num_threads(threads)
    except ValueError as exc:
        raise ValueError(f"PYLUCID_NUM_THREADS={value!r}: {exc}") from None


_choose_threading_layer()
_threads_from_environment()
