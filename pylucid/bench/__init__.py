"""The benchmark suite: pylucid's kernels and ops against NumPy, PyTorch and MLX.

Run it as ``python -m pylucid bench [--quick]`` (see :mod:`pylucid.bench.cli`; ``--quick`` is
:meth:`Config.quick_config`, described at :data:`~pylucid.bench.runner.QUICK_SIZES`) or from
Python:

>>> from pylucid import bench
>>> doc = bench.run(bench.Config.quick_config(sizes=(1000,), jit=False))  # doctest: +SKIP
>>> print(bench.report.text(doc))  # doctest: +SKIP

In one process it measures the copy bandwidth of 2 threads (:mod:`.bandwidth`), then times
every case (:mod:`.cases`: each unary elementwise op of the op database, forward, backward
and forward+backward through the graph, for each dtype and size; float16 and bfloat16
forward only, against NumPy's ``astype(float32)`` -> op -> ``astype`` chain) for every
implementation side by side (:mod:`.timing`), then the JIT cost in fresh processes
(:mod:`.jit_cost`), then the program scenarios (:mod:`.programs`: op chains and training
steps in pylucid, PyTorch and MLX) in the modes asked for: all libraries in this process
(``same_process``, the default), each alone in a fresh process (``isolated``), and the
contention check (``contention``: pylucid ops with a competing CPU-bound process running,
default threads against one thread, in this process and in fresh ones).

Command line: ``python -m pylucid bench --programs [--isolated] [--contention]`` runs only
the programs (``--no-programs`` only the per-op cases); ``--distributed`` only the
all-reduce benchmark of :mod:`.distributed`; ``--models`` only the model benchmark of
:mod:`.models` (whole training steps of a GPT, a CNN and a character-level LSTM against
PyTorch, JAX and MLX, each thread mode in a fresh process; its document, schema
``pylucid-bench-models/1``, is described there and presented by :mod:`.model_report`).

The document :func:`run` returns (and ``bench.json`` holds)::

    schema        "pylucid-bench/2"
    created       ISO 8601 time (UTC)
    config        the Config: ops, dtypes, sizes, kinds, impls, threads, timer {target_s,
                  repeats, warmup, ...}, bandwidth_bytes, jit, jit_warm_runs, quick, cases,
                  scenarios, program_modes, fresh_processes
    environment   pylucid, git, python, platform, cpu_model, cpu_count, cpu_affinity,
                  numpy, numba, numba_max_threads, numba_threading_layer, torch,
                  torch_threads, torch_parallel_backend, mlx, mlx_device, load_average
                  (start), load_average_end (the very end: with the contention check, it
                  counts the competitor), env {OPENBLAS_CORETYPE, OMP_NUM_THREADS, ...}
    busy          load_average_start, load_average_end (before the contention check's
                  competitor started, if it ran), threshold (0.5 x cpu_count), others_cpu
                  {cases, programs}: the share of this process's CPUs other processes used
                  while the cases / the same-process programs were timed (null off Linux),
                  busy_share (0.25), busy (a share above busy_share, or a 1-minute load
                  above the threshold at the start - or at the end, where no share was
                  measured; null with neither), warning (a sentence when busy, else null)
    bandwidth     threads, bytes (per copy, read + write), gbps (median), gbps_best (min),
                  median_s, min_s; measured before the cases (null: cases not run)
    bandwidth_end the same, measured after them (a drift check on a busy machine)
    copy_gbps     max(bandwidth.gbps, bandwidth_end.gbps): the reference of the fractions
                  (other processes only ever lower a measurement)
    results       one row per (kind, op, dtype, size, impl):
                    kind       "forward" | "backward" | "forward_backward"
                    op, dtype ("float32", "float64", "float16", "bfloat16"), size
                    (elements), impl ("pylucid", "pylucid.autocast" (half dtypes
                    only), "pylucid.kernel", "numpy", "numpy.out" (forward of a
                    ufunc into a preallocated array), "torch", "mlx", "pylucid.mlx")
                    bytes      least bytes one call reads + writes
                    median_s, min_s   time per call over `repeats` batches of `number` calls
                    number, repeats, samples_s (the time per call of each batch)
                    gbps       bytes / median_s / 1e9
                    bandwidth_fraction   gbps / copy_gbps
                    vs_numpy, vs_torch   NumPy's (PyTorch's) median / this median: the
                               speed-up over that library (null where it was not timed)
                    others_cpu the share of the CPUs other processes used while the case
                               (all its implementations) was timed (null off Linux)
    jit           null, {op, error} if a probe failed, or {op, cold: {...}, warm: {...},
                  warm_runs}; each of cold and warm
                  has import_deps_s, import_pylucid_s, first_forward_s, first_backward_s,
                  first_parallel_forward_s, steady_forward_s, first_op_s, process_s
    skipped       {impl: why} for libraries that could not be imported
    missing       [{kind, op, impl, reason}] for cases an implementation has no version of
    errors        [{kind, op, dtype, size, impl, error}] for implementations that raised
    programs      null (no scenarios, or no library of pylucid, torch, mlx in impls), or:
      scenarios     {name: {name, unit ("op" | "step" | "call"), ops_per_call, description}}
      libraries     the libraries asked for, of "pylucid", "torch", "mlx" (those in impls)
      modes         the modes run, of "same_process", "isolated", "contention"
      threads       pylucid's (Numba's) and PyTorch's threads in the first two modes
      skipped       {library: why} for libraries that could not be imported
      errors        [{mode, scenario, library, error}] for programs that failed
      same_process  null (not run) or one row per (scenario, library):
                      scenario, library, unit, ops_per_call
                      median_s, min_s   time per unit (op or step): a call's time divided
                                        by ops_per_call, over `repeats` batches of `number`
                                        calls, the libraries interleaved batch by batch
                      number, repeats, samples_s (per unit, of each batch)
                      time_over_torch   this median / PyTorch's (null without PyTorch)
                      others_cpu        as for the cases, while the scenario was timed
      isolated      null or the same rows, each timed in a fresh process of its own, with
                    process {pid, os_threads (null off Linux), imported (of torch, mlx)}
      others_cpu    the share of the CPUs other processes used during same_process (null:
                    not run, or off Linux)
      contention    null or:
        ops             {op: what it computes}: exp_1797x10_float64, log2_3e5_float32,
                        mul_sum_3e5_float32
        load_average_before   the load average before the competitor started
        competitor      {pid, code, returncode (negative: killed by that signal)}
        in_process      this process's thread_ratios: threads_default, peers, ops {op:
                        {default_s, one_thread_s, ratio}} (medians; ratio = default / 1
                        thread), errors {call: error}, process {pid, os_threads, imported}
        fresh_processes N
        processes       [the same from each of the N plain fresh processes]
        worst           {op: {default_s, one_thread_s, ratio}}: the highest over processes
        ratio_target    1.5; ratio_met: every worst ratio at most that
        libraries_loaded  peers (loaded in the comparison processes: torch, mlx),
                        processes [thread_ratios of each], ops {op: {without_s, with_s,
                        ratio}} (medians over the plain / loaded processes' default-thread
                        medians; ratio = with / without), tolerance 0.10, met (every ratio
                        within 1 +- tolerance; null when skipped), skipped (why, or null)
        errors          [{process ("plain" | "loaded"), error}] for failed processes
    distributed   only with ``--distributed`` (which runs nothing else): all_reduce
                  latency and bandwidth of 2 local ranks, pylucid against raw mpi4py (and
                  MLX's ring), described in :mod:`pylucid.bench.distributed`
    elapsed_s     wall time of the run
"""

from pylucid.bench import report
from pylucid.bench.bandwidth import copy_bandwidth
from pylucid.bench.cases import ALL_IMPLS, DEFAULT_IMPLS, KINDS, benchmark_ops
from pylucid.bench.jit_cost import jit_cost
from pylucid.bench.programs import LIBRARIES, MODES, SCENARIOS, run_programs
from pylucid.bench.runner import QUICK_SIZES, SCHEMA, SIZES, Config, busy_check, environment, run
from pylucid.bench.timing import Measurement, TimerConfig, measure

__all__ = [
    "ALL_IMPLS",
    "DEFAULT_IMPLS",
    "KINDS",
    "LIBRARIES",
    "MODES",
    "QUICK_SIZES",
    "SCENARIOS",
    "SCHEMA",
    "SIZES",
    "Config",
    "Measurement",
    "TimerConfig",
    "benchmark_ops",
    "busy_check",
    "copy_bandwidth",
    "environment",
    "jit_cost",
    "measure",
    "report",
    "run",
    "run_programs",
]
