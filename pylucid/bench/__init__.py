"""The benchmark suite: pylucid's kernels and ops against NumPy, PyTorch and MLX.

Run it as ``python -m pylucid bench [--quick]`` (see :mod:`pylucid.bench.cli`) or from Python:

>>> from pylucid import bench
>>> doc = bench.run(bench.Config.quick_config(sizes=(1000,), jit=False))  # doctest: +SKIP
>>> print(bench.report.text(doc))  # doctest: +SKIP

In one process it measures the copy bandwidth of 2 threads (:mod:`.bandwidth`), then times
every case (:mod:`.cases`: each unary elementwise op of the op database, forward, backward
and forward+backward through the graph, for each dtype and size; float16 and bfloat16
forward only, against NumPy's ``astype(float32)`` -> op -> ``astype`` chain) for every
implementation side by side (:mod:`.timing`), then the JIT cost in fresh processes
(:mod:`.jit_cost`).

The document :func:`run` returns (and ``bench.json`` holds)::

    schema        "pylucid-bench/1"
    created       ISO 8601 time (UTC)
    config        the Config: ops, dtypes, sizes, kinds, impls, threads, timer {target_s,
                  repeats, warmup, ...}, bandwidth_bytes, jit, jit_warm_runs, quick
    environment   pylucid, git, python, platform, cpu_model, cpu_count, cpu_affinity,
                  numpy, numba, numba_max_threads, numba_threading_layer, torch,
                  torch_threads, torch_parallel_backend, mlx, mlx_device, load_average
                  (start), load_average_end, env {OPENBLAS_CORETYPE, OMP_NUM_THREADS, ...}
    bandwidth     threads, bytes (per copy, read + write), gbps (median), gbps_best (min),
                  median_s, min_s; measured before the cases
    bandwidth_end the same, measured after them (a drift check on a busy machine)
    copy_gbps     max(bandwidth.gbps, bandwidth_end.gbps): the reference of the fractions
                  (other processes only ever lower a measurement)
    results       one row per (kind, op, dtype, size, impl):
                    kind       "forward" | "backward" | "forward_backward"
                    op, dtype ("float32", "float64", "float16", "bfloat16"), size
                    (elements), impl ("pylucid", "pylucid.autocast" (half dtypes
                    only), "pylucid.kernel", "numpy", "torch", "mlx", "pylucid.mlx")
                    bytes      least bytes one call reads + writes
                    median_s, min_s   time per call over `repeats` batches of `number` calls
                    number, repeats, samples_s (the time per call of each batch)
                    gbps       bytes / median_s / 1e9
                    bandwidth_fraction   gbps / copy_gbps
                    vs_numpy, vs_torch   NumPy's (PyTorch's) median / this median: the
                               speed-up over that library (null where it was not timed)
    jit           null, {op, error} if a probe failed, or {op, cold: {...}, warm: {...},
                  warm_runs}; each of cold and warm
                  has import_deps_s, import_pylucid_s, first_forward_s, first_backward_s,
                  first_parallel_forward_s, steady_forward_s, first_op_s, process_s
    skipped       {impl: why} for libraries that could not be imported
    missing       [{kind, op, impl, reason}] for cases an implementation has no version of
    errors        [{kind, op, dtype, size, impl, error}] for implementations that raised
    elapsed_s     wall time of the run
"""

from pylucid.bench import report
from pylucid.bench.bandwidth import copy_bandwidth
from pylucid.bench.cases import ALL_IMPLS, DEFAULT_IMPLS, KINDS, benchmark_ops
from pylucid.bench.jit_cost import jit_cost
from pylucid.bench.runner import QUICK_SIZES, SCHEMA, SIZES, Config, environment, run
from pylucid.bench.timing import Measurement, TimerConfig, measure

__all__ = [
    "ALL_IMPLS",
    "DEFAULT_IMPLS",
    "KINDS",
    "QUICK_SIZES",
    "SCHEMA",
    "SIZES",
    "Config",
    "Measurement",
    "TimerConfig",
    "benchmark_ops",
    "copy_bandwidth",
    "environment",
    "jit_cost",
    "measure",
    "report",
    "run",
]
