"""Run the suite: measure the copy bandwidth, time every case, measure the JIT cost, then
run the program scenarios (:mod:`pylucid.bench.programs`).

The result is one JSON-ready dict (schema in :mod:`pylucid.bench`), which
:mod:`pylucid.bench.report` prints, tabulates and plots.
"""

from __future__ import annotations

import datetime
import gc
import json
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numba
import numpy as np

import pylucid as pl
from pylucid.bench.bandwidth import copy_bandwidth
from pylucid.bench.cases import (
    ALL_DTYPES,
    ALL_IMPLS,
    DEFAULT_IMPLS,
    HALF_DTYPES,
    KINDS,
    benchmark_ops,
    build_case,
    case_bytes,
    load_libraries,
    make_inputs,
)
from pylucid.bench.jit_cost import jit_cost
from pylucid.bench.load import BUSY_SHARE, load_average, others_share, snapshot
from pylucid.bench.programs import LIBRARIES, MODES, SCENARIOS, run_programs
from pylucid.bench.report import format_size, format_time
from pylucid.bench.timing import TimerConfig, measure

__all__ = [
    "BUSY_LOAD_PER_CPU",
    "QUICK_DTYPES",
    "QUICK_IMPLS",
    "QUICK_SCENARIOS",
    "QUICK_SIZES",
    "SCHEMA",
    "SIZES",
    "Config",
    "busy_check",
    "environment",
    "run",
]

#: Version 2 added the program scenarios (``programs``), ``busy``, and runs without the
#: per-op cases (``bandwidth`` null); rows' and ``busy``'s ``others_cpu`` came later
#: without a new version (readers treat a missing one as unmeasured).
SCHEMA = "pylucid-bench/2"
#: Element counts of the full run: two where per-call overhead dominates, then 1e3 to 6.4e7
#: (256 MB of float32: far beyond the caches, where only memory bandwidth counts).
SIZES = (1, 10, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 64_000_000)
#: float16 and bfloat16 are timed forward only (see :mod:`pylucid.bench.cases`).
DTYPES = ALL_DTYPES
#: ``--quick``, a first look: the per-call overhead (10 elements) and a size past the
#: parallel threshold (1e6: 4 or 8 MB) in float32 and float64, against NumPy, PyTorch and
#: MLX (no half dtypes, no NumPy ``out=``, no autocast: the full run has them); the eager
#: chains (per-op overhead), the chain through ``pl.compile`` and an MLP step; a copy
#: bandwidth on 64 MB arrays; no JIT probe. What is left out is also what a first run
#: would have compiled: the half kernels, the probe's own empty cache, and the compiled MLP
#: step's modules, optimizer and tape (2.8 s of CPU on the 2-core development VM).
QUICK_SIZES = (10, 1_000_000)
QUICK_DTYPES = ("float32", "float64")
QUICK_IMPLS = ("pylucid", "pylucid.kernel", "numpy", "torch", "mlx")
QUICK_SCENARIOS = ("chain_forward", "chain_forward_backward", "compiled_chain", "mlp_step")
QUICK_TIMER = TimerConfig(target_s=0.02, repeats=3, warmup=1, slow_call_s=0.05)
#: The machine counts as busy when its 1-minute load average exceeds this many per CPU.
BUSY_LOAD_PER_CPU = 0.5


@dataclass(frozen=True)
class Config:
    """What to run.

    Attributes
    ----------
    ops : tuple of str
        Op names (see :func:`pylucid.bench.cases.benchmark_ops`; ``"all"`` for every one).
    dtypes, sizes, kinds, impls : tuple
        The grid: every op x dtype x size x kind, each timing every implementation (the
        half dtypes, float16 and bfloat16, have the forward kind only).
    threads : int
        Threads for Numba (pylucid's kernels, the copy bandwidth) and PyTorch.
    timer : TimerConfig
        Batch duration and repeats.
    bandwidth_bytes : int
        Size of the array the copy bandwidth is measured on.
    jit : bool
        Measure the JIT cost (fresh processes: a few seconds), when the cases run.
    jit_warm_runs : int
        Warm-cache probes whose median is reported.
    quick : bool
        Whether this is the ``--quick`` configuration (recorded in the output).
    cases : bool
        Measure the copy bandwidth, time the per-op cases and the JIT cost (False: only the
        program scenarios, ``--programs``).
    scenarios : tuple of str
        Program scenarios (:data:`pylucid.bench.programs.SCENARIOS`; empty: none), run for
        the libraries of :data:`pylucid.bench.programs.LIBRARIES` among ``impls``.
    program_modes : tuple of str
        Of :data:`pylucid.bench.programs.MODES`: ``same_process``, ``isolated``,
        ``contention``.
    fresh_processes : int
        Fresh processes of the contention check.
    """

    ops: tuple[str, ...] = ("log2",)
    dtypes: tuple[str, ...] = DTYPES
    sizes: tuple[int, ...] = SIZES
    kinds: tuple[str, ...] = KINDS
    impls: tuple[str, ...] = DEFAULT_IMPLS
    threads: int = 2
    timer: TimerConfig = field(default_factory=TimerConfig)
    bandwidth_bytes: int = 512 << 20
    jit: bool = True
    jit_warm_runs: int = 3
    quick: bool = False
    cases: bool = True
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    program_modes: tuple[str, ...] = ("same_process",)
    fresh_processes: int = 6

    @classmethod
    def quick_config(cls, **overrides: Any) -> Config:
        """The ``--quick`` configuration (see :data:`QUICK_SIZES`), with ``overrides``
        applied."""
        base = cls(
            dtypes=QUICK_DTYPES,
            sizes=QUICK_SIZES,
            impls=QUICK_IMPLS,
            timer=QUICK_TIMER,
            bandwidth_bytes=64 << 20,
            jit=False,
            jit_warm_runs=1,
            quick=True,
            scenarios=QUICK_SCENARIOS,
        )
        return replace(base, **overrides)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_revision() -> str | None:
    root = Path(pl.__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _numba_threading_layer() -> str | None:
    """Numba's threading layer, None until a parallel kernel has started it."""
    try:
        return numba.threading_layer()
    except ValueError:
        return None


def busy_check(
    start: list[float] | None,
    end: list[float] | None,
    others: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """Whether the machine was busy while the run timed things.

    It was when other processes used more than :data:`~pylucid.bench.load.BUSY_SHARE` of
    the CPUs during a part of the run (``others``, measured on Linux). Where no share was
    measured, the 1-minute load average stands in for them: busy above
    :data:`BUSY_LOAD_PER_CPU` x the CPU count at the start or the end (an average over the
    minute before the start, and one that counts this run's own threads at the end: the
    shares, measured while the timings were taken, say more).

    Parameters
    ----------
    start, end : list of float or None
        The load averages (1, 5, 15 minutes) at the start and the end of the run.
    others : dict of str to float or None, optional
        Part of the run (``"cases"``, ``"programs"``) -> the share of the CPUs other
        processes used while it ran (None: not measured).

    Returns
    -------
    dict
        ``load_average_start``, ``load_average_end``, ``threshold`` (of the load average),
        ``others_cpu`` (``others``), ``busy_share`` (the share's threshold), ``busy``
        (bool, None with neither load averages nor shares) and ``warning`` (a sentence, or
        None when not busy).
    """
    threshold = BUSY_LOAD_PER_CPU * (os.cpu_count() or 1)
    shares = {part: share for part, share in (others or {}).items() if share is not None}
    loads = [load[0] for load in (start, end) if load and not shares]
    busy_parts = {part: share for part, share in shares.items() if share > BUSY_SHARE}
    high_loads = [load for load in loads if load > threshold]
    busy = bool(busy_parts or high_loads) if shares or loads else None
    warning = None
    if busy:
        reasons = []
        if busy_parts:
            during = ", ".join(f"{100 * v:.0f}% during the {k}" for k, v in busy_parts.items())
            reasons.append(f"other processes' share of the CPUs: {during}")
        if high_loads:
            reasons.append(
                f"1-minute load average {max(high_loads):.2f}, above {threshold:.2f} "
                f"({BUSY_LOAD_PER_CPU} x {os.cpu_count()} CPUs)"
            )
        warning = (
            f"the machine was busy ({'; '.join(reasons)}): the timings are pessimistic "
            f"and noisy"
        )
    return {
        "load_average_start": start,
        "load_average_end": end,
        "threshold": threshold,
        "others_cpu": dict(others or {}),
        "busy_share": BUSY_SHARE,
        "busy": busy,
        "warning": warning,
    }


def _torch_parallel_backend(torch: Any) -> str | None:
    if torch is None:
        return None
    for line in torch.__config__.parallel_info().splitlines():
        if line.startswith("ATen parallel backend"):
            return line.split(":", 1)[1].strip()
    return None


def environment(libs: Any = None) -> dict[str, Any]:
    """Versions, CPU, thread counts and the environment variables that change timings."""
    env: dict[str, Any] = {
        "pylucid": pl.__version__,
        "git": _git_revision(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "numba_max_threads": numba.config.NUMBA_NUM_THREADS,
        "load_average": load_average(),
        "env": {
            key: os.environ[key]
            for key in (
                "OPENBLAS_CORETYPE",
                "OMP_NUM_THREADS",
                "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS",
                "NUMBA_THREADING_LAYER",
                "NUMBA_CACHE_DIR",
                "OMP_WAIT_POLICY",
                "KMP_BLOCKTIME",
                "GOMP_SPINCOUNT",
                "PYLUCID_BACKEND",
            )
            if key in os.environ
        },
    }
    if hasattr(os, "sched_getaffinity"):
        env["cpu_affinity"] = len(os.sched_getaffinity(0))
    torch = getattr(libs, "torch", None)
    mx = getattr(libs, "mx", None)
    env["torch"] = torch.__version__ if torch is not None else None
    env["torch_threads"] = torch.get_num_threads() if torch is not None else None
    env["torch_parallel_backend"] = _torch_parallel_backend(torch)
    env["mlx"] = mx.__version__ if mx is not None else None
    env["mlx_device"] = str(mx.default_device()) if mx is not None else None
    return env


class _Progress:
    """``[i/n] kind op dtype size ...`` lines, completed with each implementation's time."""

    def __init__(self, stream: TextIO | None, total: int) -> None:
        self.stream, self.total, self.done = stream, total, 0
        self.started = time.perf_counter()

    def start(self, label: str) -> None:
        self.done += 1
        self.started = time.perf_counter()
        if self.stream is not None:
            self.stream.write(f"[{self.done}/{self.total}] {label} ...")
            self.stream.flush()

    def finish(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(f" {text}  ({time.perf_counter() - self.started:.1f} s)\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        if self.stream is not None:
            self.stream.write(f"{text}\n")
            self.stream.flush()


def _resolve_ops(names: tuple[str, ...]) -> dict[str, Any]:
    available = benchmark_ops()
    if names == ("all",):
        return available
    unknown = [name for name in names if name not in available]
    if unknown:
        raise ValueError(
            f"no benchmark for {', '.join(unknown)}; the unary elementwise ops with a record "
            f"are: {', '.join(available)}"
        )
    return {name: available[name] for name in names}


def _set_threads(threads: int, torch: Any) -> tuple[int, int | None]:
    previous = (numba.get_num_threads(), torch.get_num_threads() if torch is not None else None)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if torch is not None:
        torch.set_num_threads(threads)
    return previous


def run(
    config: Config | None = None, progress: TextIO | None = None, **overrides: Any
) -> dict[str, Any]:
    """Run the benchmark suite and return its results.

    Everything is timed in this process but the JIT probes and the program scenarios'
    ``isolated`` and ``contention`` modes, which start fresh interpreters.

    Parameters
    ----------
    config : Config, optional
        What to run (default: the full configuration); ``overrides`` replace its fields.
    progress : text stream, optional
        Where to write one line per case (the command line passes ``sys.stderr``).

    Returns
    -------
    dict
        The document described in :mod:`pylucid.bench` (JSON-ready).
    """
    config = replace(config or Config(), **overrides)
    for field_name, allowed in (
        ("kinds", KINDS),
        ("dtypes", ALL_DTYPES),
        ("impls", ALL_IMPLS),
        ("scenarios", tuple(SCENARIOS)),
        ("program_modes", MODES),
    ):
        unknown = set(getattr(config, field_name)) - set(allowed)
        if unknown:
            raise ValueError(f"unknown {field_name} {sorted(unknown)}; choose from {allowed}")
    if config.fresh_processes < 1:
        raise ValueError(f"fresh_processes must be at least 1, not {config.fresh_processes}")
    ops = _resolve_ops(config.ops)
    started = time.perf_counter()
    libs = load_libraries(config.impls)
    previous = _set_threads(config.threads, libs.torch)
    # The libraries' own objects (a few hundred thousand with PyTorch and MLX) are left out
    # of the collections between cases, which would otherwise take 0.2 s each.
    gc.collect()
    gc.freeze()
    try:
        doc: dict[str, Any] = {
            "schema": SCHEMA,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "config": json.loads(json.dumps(asdict(config))),  # tuples as lists, as in JSON
            "environment": environment(libs),
            "skipped": dict(libs.skipped),
        }
        doc["config"]["ops"] = list(ops)
        total = len(ops) * len(config.sizes) * sum(len(_kinds(config, d)) for d in config.dtypes)
        bar = _Progress(progress, total if config.cases else 0)
        others: dict[str, float | None] = {}
        if config.cases:
            before = snapshot()
            _bandwidth_and_cases(config, ops, libs, bar, doc)
            others["cases"] = others_share(before, snapshot())
        else:
            doc.update(bandwidth=None, bandwidth_end=None, copy_gbps=None)
            doc["results"], doc["errors"], doc["missing"] = [], [], []
        if config.cases and config.jit:
            bar.note(f"measuring the JIT cost of {next(iter(ops))} in fresh processes ...")
            try:
                doc["jit"] = jit_cost(next(iter(ops)), config.jit_warm_runs)
            except (RuntimeError, subprocess.SubprocessError) as exc:  # keep the timings
                doc["jit"] = {"op": next(iter(ops)), "error": str(exc)}
                bar.note(f"the JIT probe failed: {exc}")
        else:
            doc["jit"] = None
        libraries = [name for name in LIBRARIES if name in config.impls]
        if config.scenarios and config.program_modes and libraries:
            doc["programs"] = run_programs(
                config.scenarios,
                libraries,
                config.program_modes,
                config.threads,
                config.timer,
                config.fresh_processes,
                bar.note,
            )
            others["programs"] = doc["programs"]["others_cpu"]
        else:
            doc["programs"] = None
        doc["environment"]["load_average_end"] = load_average()
        doc["environment"]["numba_threading_layer"] = _numba_threading_layer()
        contention = (doc["programs"] or {}).get("contention")
        # The competitor of the contention check would count: its load before it started.
        end = contention["load_average_before"] if contention else load_average()
        doc["busy"] = busy_check(doc["environment"]["load_average"], end, others)
        if doc["busy"]["warning"]:
            bar.note(f"warning: {doc['busy']['warning']}")
        doc["elapsed_s"] = time.perf_counter() - started
    finally:
        gc.unfreeze()
        numba.set_num_threads(previous[0])
        if libs.torch is not None:
            libs.torch.set_num_threads(previous[1])
    return doc


def _bandwidth_and_cases(
    config: Config, ops: dict[str, Any], libs: Any, bar: _Progress, doc: dict[str, Any]
) -> None:
    """Fill ``doc``'s bandwidth, bandwidth_end, copy_gbps, results, errors and missing."""
    bar.note("measuring the copy bandwidth ...")
    doc["bandwidth"] = copy_bandwidth(config.threads, config.bandwidth_bytes)
    bar.note(
        f"copy bandwidth with {doc['bandwidth']['threads']} threads: "
        f"{doc['bandwidth']['gbps']:.1f} GB/s (read + write)"
    )
    doc["results"], doc["errors"], doc["missing"] = _run_cases(config, ops, libs, bar)
    doc["bandwidth_end"] = copy_bandwidth(config.threads, config.bandwidth_bytes)
    # Other processes only ever lower a measurement: the higher one is the machine's.
    doc["copy_gbps"] = max(doc["bandwidth"]["gbps"], doc["bandwidth_end"]["gbps"])
    for row in doc["results"]:
        row["bandwidth_fraction"] = row["gbps"] / doc["copy_gbps"]


def _kinds(config: Config, dtype: str) -> tuple[str, ...]:
    """The kinds of case run for ``dtype``: the half dtypes have a forward only."""
    if dtype in HALF_DTYPES:
        return tuple(kind for kind in config.kinds if kind == "forward")
    return config.kinds


def _run_cases(
    config: Config, ops: dict[str, Any], libs: Any, bar: _Progress
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    missing: dict[tuple[str, str, str], str] = {}
    for op in ops.values():
        for dtype in config.dtypes:
            for size in config.sizes:
                inputs = make_inputs(op, dtype, size)
                for kind in _kinds(config, dtype):
                    where = {"kind": kind, "op": op.name, "dtype": dtype, "size": size}
                    bar.start(f"{kind} {op.name} {dtype} {format_size(size)}")
                    before = snapshot()
                    try:
                        calls, absent = build_case(kind, op, dtype, inputs, config.impls, libs)
                    except Exception as exc:  # a broken op is reported, not fatal
                        errors.append({**where, "impl": "setup", "error": f"{exc!r}"})
                        bar.finish(f"setup failed: {exc!r}")
                        continue
                    for impl, why in absent.items():
                        missing.setdefault((kind, op.name, impl), why)
                    if not calls:
                        bar.finish("nothing to time")
                        continue
                    measured, failed = measure(calls, config.timer)
                    others = others_share(before, snapshot())
                    del calls
                    gc.collect()
                    errors += [{**where, "impl": impl, "error": e} for impl, e in failed.items()]
                    rows = _rows(where, case_bytes(kind, op, inputs), measured, others)
                    results += rows
                    bar.finish("  ".join(f"{r['impl']} {format_time(r['median_s'])}" for r in rows))
                del inputs
                gc.collect()
    listed = [
        {"kind": kind, "op": name, "impl": impl, "reason": why}
        for (kind, name, impl), why in missing.items()
    ]
    return results, errors, listed


def _rows(
    where: dict[str, Any], nbytes: int, measured: dict[str, Any], others: float | None
) -> list[dict[str, Any]]:
    baselines = {name: measured[name].median_s for name in ("numpy", "torch") if name in measured}
    rows = []
    for impl, m in measured.items():
        gbps = nbytes / m.median_s / 1e9
        rows.append(
            {
                **where,
                "impl": impl,
                "bytes": nbytes,
                "median_s": m.median_s,
                "min_s": m.min_s,
                "number": m.number,
                "repeats": len(m.samples_s),
                "samples_s": m.samples_s,
                "gbps": gbps,
                "bandwidth_fraction": None,  # set once the copy bandwidth is final
                "vs_numpy": baselines["numpy"] / m.median_s if "numpy" in baselines else None,
                "vs_torch": baselines["torch"] / m.median_s if "torch" in baselines else None,
                "others_cpu": others,
            }
        )
    return rows
