"""What Numba's compilation costs a user: measured in fresh processes.

A probe process times ``import pylucid`` (and, before it, ``import numpy, numba``, which
pylucid cannot avoid), then the first forward and first backward of an op on a small tensor
(the serial loops), the first forward above the parallel threshold (the ``prange`` loop and
Numba's thread pool), and, for comparison, the best of 100 later small forwards. It runs first with
``NUMBA_CACHE_DIR`` pointing to a new empty directory (every kernel it touches is compiled)
and then again with that directory, now filled, as a user's second session sees it.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

__all__ = ["PROBE", "jit_cost", "run_probe"]

PROBE = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import numba
after_deps = time.perf_counter()
import pylucid as pl
from pylucid.kernels.loops import PARALLEL_THRESHOLD
from pylucid.opinfo import BY_NAME
after_import = time.perf_counter()

info = BY_NAME[sys.argv[1]]
rng = np.random.default_rng(0)


def tensor(n, requires_grad=False):
    x = pl.from_numpy(info.sample(rng, ((n,),))[0].astype(np.float32))
    return x.requires_grad_() if requires_grad else x


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


small = tensor(10, requires_grad=True)
y, first_forward = timed(lambda: info.call(small))
g = pl.from_numpy(np.ones(10, dtype=np.float32))
_, first_backward = timed(lambda: y.backward(g))
large = tensor(PARALLEL_THRESHOLD)
_, first_parallel = timed(lambda: info.call(large))
plain = small.detach()
steady_forward = min(timed(lambda: info.call(plain))[1] for _ in range(100))
json.dump(
    {
        "import_deps_s": after_deps - start,
        "import_pylucid_s": after_import - after_deps,
        "first_forward_s": first_forward,
        "first_backward_s": first_backward,
        "first_parallel_forward_s": first_parallel,
        "steady_forward_s": steady_forward,
        "first_op_s": after_import - start + first_forward,
    },
    sys.stdout,
)
"""


def run_probe(op: str, cache_dir: str | None, timeout_s: float = 600.0) -> dict[str, float]:
    """Run the probe for ``op`` in a fresh interpreter whose Numba cache is ``cache_dir``
    (None: this process's setting, by default the ``__pycache__`` folders beside the code)."""
    env = dict(os.environ)
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = cache_dir
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, op],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the JIT probe for {op} failed:\n{done.stderr.strip()}")
    timings = json.loads(done.stdout)
    timings["process_s"] = time.perf_counter() - start
    return timings


def jit_cost(op: str = "log2", warm_runs: int = 3) -> dict[str, object]:
    """Time the first use of ``op`` with an empty and with a warm Numba cache.

    Returns
    -------
    dict
        ``op``; ``cold``: the probe's timings with an empty cache; ``warm``: the median over
        ``warm_runs`` probes with the cache the cold run filled; ``warm_runs``. Each timing
        dict has ``import_deps_s``, ``import_pylucid_s``, ``first_forward_s``,
        ``first_backward_s``, ``first_parallel_forward_s``, ``steady_forward_s`` and
        ``first_op_s`` (the imports and the first forward), and ``process_s`` (the whole
        probe process, interpreter start-up and exit included, as seen from outside).
    """
    cache_dir = tempfile.mkdtemp(prefix="pylucid-bench-numba-cache-")
    try:
        cold = run_probe(op, cache_dir)
        warm_list = [run_probe(op, cache_dir) for _ in range(warm_runs)]
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    warm = {key: statistics.median(run[key] for run in warm_list) for key in cold}
    return {"op": op, "cold": cold, "warm": warm, "warm_runs": warm_runs}
