"""The distributed benchmark (``python -m pylucid bench --distributed``): all-reduce on 2
ranks of this machine, one training step's compute time, and what the two predict for
data-parallel training on N machines.

1. **All-reduce.** Through :mod:`pylucid.distributed.launch`, ``mpiexec -n 2 python -m
   pylucid.bench.distributed --worker mpi`` times pylucid's ``all_reduce`` against mpi4py's
   ``comm.Allreduce(MPI.IN_PLACE, array)`` on the same float32 buffer (the tensor shares
   the array's memory) at 1 element (the latency), 4 MB and 100 MB; ``--worker mlx`` under
   ``mlx.launch --backend ring`` times MLX's ``all_sum`` and pylucid's ``all_reduce`` on
   the MLX group, for the record. A batch (about ``batch_target_s``) starts after a
   barrier and alternates the two call by call; its sample of each is the median time of
   its calls on the slowest rank; medians and minima over the batches. Rank 0 prints the
   samples as one JSON line after :data:`MARKER`. ``algbw`` = bytes / time, ``busbw`` =
   algbw x 2(N-1)/N (NCCL-tests' definitions; equal for N = 2).
2. **Compute.** One training step of a 1.07M-parameter MLP (784-1024-256-10, ReLU, batch
   128, cross entropy, AdamW) in this process: ``T_compute``, and its float32 gradients'
   bytes (4.3 MB, what data-parallel training all-reduces each step).
3. **The model.** ``T_step = T_compute + T_allreduce``, the ring all-reduce taking
   ``T_allreduce = 2(N-1)/N x bytes / bandwidth + 2(N-1) x latency``, for N machines on
   the links of :data:`LINKS`; speed-up ``N x T_compute / T_step`` (each machine its own
   batch), parallel efficiency ``T_compute / T_step``.

The bench document's ``distributed`` section::

    ranks, dtype ("float32"), sizes (elements), repeats, batch_target_s
    engines       {engine: {command (the launcher's command line), library (MPI's or
                  MLX's version), zero_copy (whether pylucid's tensor shared the buffer's
                  memory; null for MLX, whose arrays are immutable), elapsed_s (the job's
                  wall time)}}
    results       one row per (engine, impl, size): engine ("mpi" | "mlx"), impl
                  ("mpi4py" | "mlx": the raw transport, or "pylucid"), size (elements),
                  bytes, number (calls of each impl per batch), repeats, samples_s (each
                  batch's median per-call time, on the slowest rank), median_s, min_s (over
                  the batches), algbw_gbps, busbw_gbps (GB/s, from the median)
    ratios        [{engine, size, bytes, ratio, ratio_min}]: pylucid's bandwidth over the
                  raw transport's (raw median / pylucid median; ratio_min from the minima)
    ratio_target  0.9, for messages of ratio_min_bytes (1 MB) and more; ratio_met: MPI's
                  such ratios all at least the target (null when MPI did not run)
    compute       {model, parameters, gradient_bytes, batch, threads, median_s, min_s,
                  number, samples_s} (null if it failed)
    links         {name: {bandwidth_bytes_per_s, latency_s}}: the model's assumptions
    predictions   [{link, machines, allreduce_s, step_s, speedup, efficiency}] (null
                  without compute)
    skipped       {engine: why}; errors [{engine, error}]
    elapsed_s
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import numpy as np

__all__ = [
    "ENGINES",
    "LINKS",
    "MACHINES",
    "MARKER",
    "SIZES",
    "markdown",
    "measure_compute",
    "parse_worker_output",
    "predict",
    "run",
    "summarize",
    "text",
]

#: float32 elements: 4 B (the latency), 4 MB and 100 MB.
SIZES = (1, 1_000_000, 25_000_000)
#: The transports: MPI (mpi4py, the numba backend's) and MLX's ring (the mlx backend's).
ENGINES = ("mpi", "mlx")
#: The raw transport call each engine's pylucid ``all_reduce`` is compared with.
RAW_IMPL = {"mpi": "mpi4py", "mlx": "mlx"}
RANKS = 2
REPEATS = 9
#: Batches of a message whose one call takes more than a batch (100 MB): few.
SLOW_REPEATS = 3
BATCH_TARGET_S = 0.2
RATIO_TARGET = 0.9
RATIO_MIN_BYTES = 1_000_000
#: Most calls in one batch (the 1-element all-reduce takes microseconds).
_MAX_NUMBER = 20_000
#: Seconds a worker job may run before the launcher ends it.
_WORKER_TIMEOUT_S = 300.0
#: Rank 0's result line starts with this.
MARKER = "pylucid-bench-distributed: "
#: The model's links: line rate (bytes/s) and an assumed latency per hop (TCP through a
#: switch: some 50 us on 10 Gb/s Ethernet, 20 us on 100 Gb/s).
LINKS: dict[str, dict[str, float]] = {
    "10 Gb/s": {"bandwidth_bytes_per_s": 10e9 / 8, "latency_s": 50e-6},
    "100 Gb/s": {"bandwidth_bytes_per_s": 100e9 / 8, "latency_s": 20e-6},
}
MACHINES = (2, 4, 8, 16, 32, 64)
#: The compute model's layer widths and batch.
_WIDTHS = (784, 1024, 256, 10)
_BATCH = 128


# -- the workers (one per rank) ----------------------------------------------------------
def _time_interleaved(
    calls: Mapping[str, Callable[[], object]],
    repeats: int,
    target_s: float,
    barrier: Callable[[], object],
    slowest: Callable[[float], float],
) -> tuple[int, dict[str, list[float]]]:
    """Calls of each impl per batch, and each impl's sample of every batch: the median
    time of its calls in the batch, on the slowest rank.

    A batch of about ``target_s`` starts after a barrier and alternates the impls call by
    call (ABAB..., the order reversed every batch), so that both see the same moments of a
    busy machine; the per-call median ignores the calls another process interrupted. There
    are ``repeats`` batches, :data:`SLOW_REPEATS` when one round (a call of each impl)
    outlasts ``target_s``. Every rank runs the same calls: ``slowest`` (the maximum over
    ranks, a collective) makes the calibration the same everywhere.
    """
    for call in calls.values():  # warm-up: page faults, MPI's buffers, the first dispatch
        call()
    number = 1  # rounds (one call of each impl) per batch
    while True:
        barrier()
        start = time.perf_counter()
        for _ in range(number):
            for call in calls.values():
                call()
        elapsed = slowest(time.perf_counter() - start)
        if elapsed >= target_s / 10 or number >= _MAX_NUMBER:
            break
        number = min(_MAX_NUMBER, number * 10)
    if number == 1 and elapsed >= target_s:
        repeats = min(repeats, SLOW_REPEATS)
    number = min(_MAX_NUMBER, max(1, math.ceil(target_s * number / elapsed)))
    samples: dict[str, list[float]] = {impl: [] for impl in calls}
    order = list(calls)
    clock = time.perf_counter
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            times: dict[str, list[float]] = {impl: [] for impl in order}
            barrier()
            for _ in range(number):
                for impl in order:
                    start = clock()
                    calls[impl]()
                    times[impl].append(clock() - start)
            for impl in calls:
                samples[impl].append(slowest(statistics.median(times[impl])))
            order.reverse()
    finally:
        if enabled:
            gc.enable()
    return number, samples


def _mpi_worker(sizes: Sequence[int], repeats: int, target_s: float) -> dict[str, Any]:
    from mpi4py import MPI

    import pylucid as pl
    import pylucid.distributed as dist

    group = dist.init("mpi")
    comm = MPI.COMM_WORLD
    rows, zero_copy = [], True
    for size in sizes:
        array = np.zeros(size, np.float32)
        tensor = pl.from_numpy(array)
        zero_copy = zero_copy and tensor._storage is array

        def raw(array: np.ndarray = array) -> None:
            comm.Allreduce(MPI.IN_PLACE, array)

        def ours(tensor: pl.Tensor = tensor) -> None:
            dist.all_reduce(tensor)

        number, samples = _time_interleaved(
            {"mpi4py": raw, "pylucid": ours},
            repeats,
            target_s,
            comm.Barrier,
            lambda seconds: comm.allreduce(seconds, op=MPI.MAX),
        )
        rows += [
            {"impl": impl, "size": size, "number": number, "samples_s": times}
            for impl, times in samples.items()
        ]
    library = " ".join(MPI.Get_library_version().splitlines()[0].split())
    return {
        "engine": "mpi",
        "ranks": group.size,
        "library": library,
        "zero_copy": zero_copy,
        "rows": rows,
    }


def _mlx_worker(sizes: Sequence[int], repeats: int, target_s: float) -> dict[str, Any]:
    import mlx.core as mx

    import pylucid as pl
    import pylucid.distributed as dist

    group = dist.init("mlx")
    native = group.group

    def slowest(seconds: float) -> float:
        return mx.distributed.all_max(mx.array(seconds), group=native, stream=mx.cpu).item()

    rows = []
    for size in sizes:
        array = mx.zeros(size, dtype=mx.float32)
        tensor = pl.zeros(size, dtype=pl.float32, device="mlx")
        mx.eval(array)

        def raw(array: Any = array) -> None:
            mx.eval(mx.distributed.all_sum(array, group=native, stream=mx.cpu))

        def ours(tensor: pl.Tensor = tensor) -> None:
            dist.all_reduce(tensor)

        number, samples = _time_interleaved(
            {"mlx": raw, "pylucid": ours}, repeats, target_s, group.barrier, slowest
        )
        rows += [
            {"impl": impl, "size": size, "number": number, "samples_s": times}
            for impl, times in samples.items()
        ]
    return {
        "engine": "mlx",
        "ranks": group.size,
        "library": f"MLX {mx.__version__} ring",
        "zero_copy": None,
        "rows": rows,
    }


def _worker_main(argv: Sequence[str] | None = None) -> int:
    import pylucid.distributed as dist

    parser = argparse.ArgumentParser(
        prog="python -m pylucid.bench.distributed",
        description="One rank of the all-reduce benchmark (started by `python -m pylucid "
        "bench --distributed` through the launcher); rank 0 prints the samples as JSON.",
    )
    parser.add_argument("--worker", choices=ENGINES, required=True, help="the transport")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=list(SIZES),
        metavar="N",
        help="float32 elements per message",
    )
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed batches per impl")
    parser.add_argument(
        "--batch-time",
        type=float,
        default=BATCH_TARGET_S,
        metavar="S",
        help="seconds per timed batch",
    )
    options = parser.parse_args(argv)
    worker = _mpi_worker if options.worker == "mpi" else _mlx_worker
    result = worker(options.sizes, options.repeats, options.batch_time)
    if dist.get_rank() == 0:
        print(MARKER + json.dumps(result), flush=True)
    dist.barrier()
    return 0


# -- the parent: launch, parse, summarize --------------------------------------------------
def parse_worker_output(stdout: str) -> dict[str, Any]:
    """Rank 0's result: the JSON after :data:`MARKER` on the last line of ``stdout`` that
    has it (another rank's unfinished line may precede the marker).

    Raises
    ------
    ValueError
        When no line has it.
    """
    for line in reversed(stdout.splitlines()):
        start = line.find(MARKER)
        if start >= 0:
            return json.loads(line[start + len(MARKER) :])
    raise ValueError(f"no line with {MARKER.strip()!r} in the worker's output")


def summarize(result: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The result rows (with median, minimum and bandwidths) and pylucid-over-raw ratios
    (of the medians, and of the minima) of a worker's ``result``."""
    ranks = result["ranks"]
    bus = 2 * (ranks - 1) / ranks
    rows = []
    for row in result["rows"]:
        nbytes = 4 * row["size"]
        median = statistics.median(row["samples_s"])
        rows.append(
            {
                "engine": result["engine"],
                "impl": row["impl"],
                "size": row["size"],
                "bytes": nbytes,
                "number": row["number"],
                "repeats": len(row["samples_s"]),
                "samples_s": row["samples_s"],
                "median_s": median,
                "min_s": min(row["samples_s"]),
                "algbw_gbps": nbytes / median / 1e9,
                "busbw_gbps": bus * nbytes / median / 1e9,
            }
        )
    medians = {(r["impl"], r["size"]): r["median_s"] for r in rows}
    minima = {(r["impl"], r["size"]): r["min_s"] for r in rows}
    raw = RAW_IMPL[result["engine"]]
    ratios = [
        {
            "engine": result["engine"],
            "size": size,
            "bytes": 4 * size,
            "ratio": medians[(raw, size)] / medians[("pylucid", size)],
            "ratio_min": minima[(raw, size)] / minima[("pylucid", size)],
        }
        for (impl, size) in medians
        if impl == "pylucid" and (raw, size) in medians
    ]
    return rows, ratios


def _worker_argv(engine: str, sizes: Sequence[int], repeats: int, target_s: float) -> list[str]:
    return [
        "--worker",
        engine,
        "--sizes",
        *map(str, sizes),
        "--repeats",
        str(repeats),
        "--batch-time",
        str(target_s),
    ]


def _unavailable(engine: str) -> str | None:
    """Why ``engine`` cannot run here, or None."""
    if engine == "mpi" and importlib.util.find_spec("mpi4py") is None:
        return "mpi4py/mpich not installed (pip install -e '.[distributed]')"
    if engine == "mlx" and importlib.util.find_spec("mlx") is None:
        return "MLX not installed (pip install -e '.[mlx]')"
    return None


def _run_engine(
    engine: str, sizes: Sequence[int], repeats: int, target_s: float, section: dict[str, Any]
) -> None:
    """Launch ``engine``'s worker job and add what it measured (or why not) to ``section``."""
    from pylucid.distributed import launch

    why = _unavailable(engine)
    worker = _worker_argv(engine, sizes, repeats, target_s)
    try:
        argv = launch.command(
            "pylucid.bench.distributed", worker, RANKS, backend=engine, module=True
        )
    except launch.LauncherNotFoundError as exc:
        why = why or str(exc)
    if why is not None:
        section["skipped"][engine] = why
        return
    job = [
        sys.executable,
        "-m",
        "pylucid.distributed.launch",
        "-n",
        str(RANKS),
        "--backend",
        engine,
        "--timeout",
        str(_WORKER_TIMEOUT_S),
        "-m",
        "pylucid.bench.distributed",
        *worker,
    ]
    started = time.perf_counter()
    done = subprocess.run(
        job, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    try:
        result = parse_worker_output(done.stdout)
    except ValueError as exc:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        section["errors"].append(
            {"engine": engine, "error": f"status {done.returncode}: {exc}; {tail}"}
        )
        return
    rows, ratios = summarize(result)
    section["engines"][engine] = {
        "command": " ".join(argv),
        "library": result["library"],
        "zero_copy": result["zero_copy"],
        "elapsed_s": time.perf_counter() - started,
    }
    section["results"] += rows
    section["ratios"] += ratios


def measure_compute(threads: int = 2, repeats: int = 10) -> dict[str, Any]:
    """Time one training step of the compute model (module docstring) in this process.

    Parameters
    ----------
    threads : int
        Numba's threads while it runs.
    repeats : int
        Timed steps (after 3 untimed ones).

    Returns
    -------
    dict
        ``model``, ``parameters``, ``gradient_bytes``, ``batch``, ``threads``,
        ``median_s``, ``min_s``, ``number`` (1: a step per sample), ``samples_s``.
    """
    import numba

    import pylucid as pl

    nn = pl.nn
    pl.manual_seed(0)
    layers: list[Any] = []
    for fan_in, fan_out in zip(_WIDTHS, _WIDTHS[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    model = nn.Sequential(*layers[:-1])
    optimizer = pl.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = pl.from_numpy(rng.standard_normal((_BATCH, _WIDTHS[0]), dtype=np.float32))
    y = pl.from_numpy(rng.integers(0, _WIDTHS[-1], _BATCH))

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    previous = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        for _ in range(3):
            step()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            samples.append(time.perf_counter() - start)
    finally:
        numba.set_num_threads(previous)
    parameters = sum(p.numel() for p in model.parameters())
    widths = "-".join(map(str, _WIDTHS))
    return {
        "model": f"MLP {widths} (ReLU), batch {_BATCH} float32, cross entropy, AdamW",
        "parameters": parameters,
        "gradient_bytes": 4 * parameters,
        "batch": _BATCH,
        "threads": min(threads, numba.config.NUMBA_NUM_THREADS),
        "median_s": statistics.median(samples),
        "min_s": min(samples),
        "number": 1,
        "samples_s": samples,
    }


def predict(
    compute_s: float,
    gradient_bytes: int,
    links: Mapping[str, Mapping[str, float]] = LINKS,
    machines: Sequence[int] = MACHINES,
) -> list[dict[str, Any]]:
    """The step-time model for every link and machine count.

    ``T_step = T_compute + T_allreduce``, ``T_allreduce = 2(N-1)/N x bytes / bandwidth +
    2(N-1) x latency`` (a ring all-reduce, no overlap with the backward pass).

    Returns
    -------
    list of dict
        ``link``, ``machines``, ``allreduce_s``, ``step_s``, ``speedup`` (N x T_compute /
        T_step: throughput over one machine's), ``efficiency`` (T_compute / T_step).
    """
    rows = []
    for name, link in links.items():
        for n in machines:
            allreduce = (
                2 * (n - 1) / n * gradient_bytes / link["bandwidth_bytes_per_s"]
                + 2 * (n - 1) * link["latency_s"]
            )
            step = compute_s + allreduce
            rows.append(
                {
                    "link": name,
                    "machines": n,
                    "allreduce_s": allreduce,
                    "step_s": step,
                    "speedup": n * compute_s / step,
                    "efficiency": compute_s / step,
                }
            )
    return rows


def run(
    engines: Sequence[str] = ENGINES,
    sizes: Sequence[int] = SIZES,
    repeats: int = REPEATS,
    target_s: float = BATCH_TARGET_S,
    threads: int = 2,
    compute: bool = True,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Run the distributed benchmark; return the bench document's ``distributed`` section.

    Parameters
    ----------
    engines : sequence of {"mpi", "mlx"}
        The transports to time (one 2-rank job each; a missing one is skipped, saying why).
    sizes : sequence of int
        float32 elements per message.
    repeats, target_s
        Timed batches per impl, and the seconds one should take.
    threads : int
        Numba's threads for the compute step.
    compute : bool
        Time the compute model's step (and predict the step time on N machines).
    progress : text stream, optional
        Where to say what runs.

    Returns
    -------
    dict
        The section described in the module docstring (JSON-ready).
    """
    unknown = set(engines) - set(ENGINES)
    if unknown:
        raise ValueError(f"unknown engines {sorted(unknown)}; choose from {ENGINES}")
    started = time.perf_counter()
    section: dict[str, Any] = {
        "ranks": RANKS,
        "dtype": "float32",
        "sizes": list(sizes),
        "repeats": repeats,
        "batch_target_s": target_s,
        "engines": {},
        "results": [],
        "ratios": [],
        "ratio_target": RATIO_TARGET,
        "ratio_min_bytes": RATIO_MIN_BYTES,
        "ratio_met": None,
        "compute": None,
        "links": LINKS,
        "predictions": None,
        "skipped": {},
        "errors": [],
    }

    def note(line: str) -> None:
        if progress is not None:
            progress.write(line + "\n")
            progress.flush()

    if compute:
        note("distributed: timing a training step of the 1M-parameter MLP ...")
        try:
            section["compute"] = measure_compute(threads)
        except Exception as exc:  # keep the all-reduce timings
            section["errors"].append({"engine": "compute", "error": repr(exc)})
        else:
            step = section["compute"]
            section["predictions"] = predict(step["median_s"], step["gradient_bytes"])
    for engine in engines:
        note(f"distributed: all_reduce on {RANKS} ranks over {engine} ...")
        _run_engine(engine, sizes, repeats, target_s, section)
        for ratio in (r for r in section["ratios"] if r["engine"] == engine):
            note(
                f"  {_bytes(ratio['bytes'])}: pylucid / raw {ratio['ratio']:.2f} (medians), "
                f"{ratio['ratio_min']:.2f} (minima)"
            )
    held = [
        r["ratio"]
        for r in section["ratios"]
        if r["engine"] == "mpi" and r["bytes"] >= RATIO_MIN_BYTES
    ]
    section["ratio_met"] = all(r >= RATIO_TARGET for r in held) if held else None
    section["elapsed_s"] = time.perf_counter() - started
    return section


# -- presentation -------------------------------------------------------------------------
def _bytes(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


def _gbps(value: float) -> str:
    return f"{value:.3g} GB/s"


def _tables(section: dict[str, Any], stat: str) -> list[tuple[str, list[str], list[list[str]]]]:
    from pylucid.bench.report import format_time

    key = f"{stat}_s"
    tables = []
    for engine, about in section["engines"].items():
        raw = RAW_IMPL[engine]
        rows = {(r["impl"], r["size"]): r for r in section["results"] if r["engine"] == engine}
        body = []
        for size in dict.fromkeys(r["size"] for r in section["results"] if r["engine"] == engine):
            cells = [_bytes(4 * size)]
            times = {}
            for impl in (raw, "pylucid"):
                row = rows.get((impl, size))
                if row is None:
                    cells += ["-", "-", "-"]
                    continue
                times[impl] = row[key]
                algbw = row["bytes"] / row[key] / 1e9
                ranks = section["ranks"]
                cells += [
                    format_time(row[key]),
                    _gbps(algbw),
                    _gbps(2 * (ranks - 1) / ranks * algbw),
                ]
            ratio = times[raw] / times["pylucid"] if len(times) == 2 else None
            body.append(cells + ["-" if ratio is None else f"{ratio:.2f}"])
        header = [
            "message",
            f"{raw} time",
            "algbw",
            "busbw",
            "pylucid time",
            "algbw",
            "busbw",
            "pylucid / raw",
        ]
        title = (
            f"all_reduce, {section['ranks']} ranks on this machine, {section['dtype']}: "
            f"{about['library']}"
        )
        tables.append((title, header, body))
    predictions = section.get("predictions")
    if predictions:
        links = list(dict.fromkeys(p["link"] for p in predictions))
        by = {(p["link"], p["machines"]): p for p in predictions}
        header = ["machines"] + [
            f"{link} {what}"
            for link in links
            for what in ("all-reduce", "step", "speed-up", "efficiency")
        ]
        body = []
        for n in dict.fromkeys(p["machines"] for p in predictions):
            cells = [str(n)]
            for link in links:
                p = by[(link, n)]
                cells += [
                    format_time(p["allreduce_s"]),
                    format_time(p["step_s"]),
                    f"{p['speedup']:.1f}x",
                    f"{p['efficiency']:.0%}",
                ]
            body.append(cells)
        compute = section["compute"]
        title = (
            f"Predicted step time on N machines: T_compute {format_time(compute['median_s'])} "
            f"({compute['model']}), {_bytes(compute['gradient_bytes'])} of gradients"
        )
        tables.append((title, header, body))
    return tables


def _legend(section: dict[str, Any], stat: str) -> list[str]:
    which = "medians" if stat == "median" else "minima"
    lines = [
        f"Times are {which} over {section['repeats']} batches ({SLOW_REPEATS} for calls longer "
        f"than a batch) of each batch's median per-call time on the slowest rank, the raw "
        f"call and pylucid's alternating call by call; algbw = bytes / time, busbw = algbw x "
        f"2(N-1)/N (NCCL-tests' definitions); pylucid / raw = the raw transport's time / "
        f"pylucid's (its bandwidth fraction)."
    ]
    if section["ratio_met"] is not None:
        verdict = "met" if section["ratio_met"] else "NOT met"
        lines.append(
            f"Target pylucid / raw >= {section['ratio_target']} over MPI (medians) for "
            f"messages of {_bytes(section['ratio_min_bytes'])} and more: {verdict}."
        )
    mpi = section["engines"].get("mpi")
    if mpi is not None:
        shared = "shared" if mpi["zero_copy"] else "did NOT share"
        lines.append(f"The tensors {shared} the arrays' memory (no copy).")
    if section.get("predictions"):
        assumed = "; ".join(
            f"{name}: latency {link['latency_s'] * 1e6:g} us per hop"
            for name, link in section["links"].items()
        )
        lines.append(
            "Model: T_step = T_compute + T_allreduce, T_allreduce = 2(N-1)/N x bytes / "
            f"bandwidth + 2(N-1) x latency (ring, line rate, no overlap; {assumed}); speed-up "
            "= N x T_compute / T_step, efficiency = T_compute / T_step."
        )
    lines += [f"{engine} skipped: {why}" for engine, why in section["skipped"].items()]
    lines += [f"{e['engine']} failed: {e['error']}" for e in section["errors"]]
    return lines


def text(section: dict[str, Any], stat: str = "median") -> str:
    """The section as plain-text tables (lines of at most 100 characters)."""
    from pylucid.bench.report import text_table, wrap

    parts = [
        f"\n{wrap(title)}\n{text_table(header, body)}"
        for title, header, body in _tables(section, stat)
    ]
    legend = [wrap(line) for line in _legend(section, stat)]
    return "\n\n" + "\n".join(["Distributed", *parts, "", *legend])


def markdown(section: dict[str, Any], stat: str = "median") -> str:
    """The section as Markdown."""
    from pylucid.bench.report import markdown_table

    parts = ["### Distributed"]
    for title, header, body in _tables(section, stat):
        parts += ["", f"#### {title}", "", markdown_table(header, body)]
    parts += [""] + [f"- {line}" for line in _legend(section, stat)]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.exit(_worker_main())
