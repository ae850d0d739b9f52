"""Program scenarios: what whole programs cost, not single ops, in pylucid, PyTorch and MLX.

A scenario is a unit of work a user writes - a chain of tiny ops, a training step - written
once over the few functions it needs (:class:`LibraryOps`), so every library runs the same
program on the same seeded data and initial weights:

``chain_forward``
    ``x = [0.5]`` (float32, one element), then 50 times ``y = log2(y * 3 + 2)``: 150 ops,
    reported per op (the per-op overhead of the library, nothing else).
``chain_forward_backward``
    The same from ``x`` with ``requires_grad``, then ``y.sum().backward()``; per op (150).
``mlp_step``
    An MLP 64-128-10 on a batch of 32 (float32, tanh hidden layer); loss: the mean over the
    batch of ``-(onehot * log_softmax(logits, axis=1)).sum(axis=1)``; backward; SGD update by
    hand under ``no_grad`` (``p -= lr * p.grad``, then ``p.grad = None``). Per step.
``softmax_regression``
    A 64 x 10 weight and a bias on a digits-shaped data set (1797 x 64 float64, 10 classes),
    full batch: logits, the same cross entropy, backward, SGD update. Per step.
the layer scenarios of :mod:`pylucid.bench.layers`
    One layer's forward and backward (conv2d, max_pool2d, layer_norm, cross_entropy). Per
    call.
the training scenarios of :mod:`pylucid.bench.training`
    One step of a PyTorch-style training script (``nn`` modules, DataLoader, AdamW, a
    cosine schedule, ``clip_grad_norm_``): an MLP and a CNN. Per step.
the compiled scenarios of :mod:`pylucid.bench.compiled`
    The chain and an MLP step through ``pl.compile`` (and ``mx.compile``), against
    PyTorch eager.

pylucid and PyTorch run the program eagerly through their autograd (PyTorch on
``threads`` threads); MLX, which is lazy, runs ``mx.value_and_grad`` of the same loss and
``mx.eval`` of the loss and the updated parameters each step (each chain: of its result).

Three modes (:data:`MODES`):

``same_process``
    Every library in this process, the implementations of a scenario timed interleaved batch
    by batch (:func:`pylucid.bench.timing.measure`): :func:`time_scenarios`.
``isolated``
    Each (scenario, library) in a fresh interpreter that imports only that library (and the
    pylucid package, whose code holds the worker, but whose Numba pool starts only if
    pylucid runs): no other library's threads exist there. :func:`time_isolated`.
``contention``
    A competing CPU-bound process (:func:`competitor`) runs while :data:`CONTENTION_OPS` -
    three pylucid ops of the sizes where a parallel split used to hurt - are timed with the
    default thread count and with one thread, interleaved (:func:`thread_ratios`), in this
    process and in ``fresh_processes`` fresh ones; the worst process's medians and the worst
    ratio default / 1 thread are reported (target: at most :data:`RATIO_TARGET`). Between
    them run processes that imported and used PyTorch and MLX first, whose medians are
    compared with the plain processes' (target: within :data:`LOADED_TOLERANCE`).
    :func:`run_contention`.

:func:`run_programs` runs the modes asked for and returns the ``programs`` section of the
benchmark document (schema in :mod:`pylucid.bench`).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numba
import numpy as np

import pylucid as pl
from pylucid.bench.cases import load_libraries
from pylucid.bench.compiled import COMPILED_SCENARIOS, COMPILED_WARMUP, build_compiled_program
from pylucid.bench.layers import LAYER_SCENARIOS, build_layer_program
from pylucid.bench.load import load_average, others_share, snapshot
from pylucid.bench.report import format_time
from pylucid.bench.timing import Measurement, TimerConfig, measure
from pylucid.bench.training import TRAINING_SCENARIOS, build_training_program

__all__ = [
    "CHAIN_LINKS",
    "CHAIN_OPS",
    "COMPETITOR_CODE",
    "CONTENTION_OPS",
    "LIBRARIES",
    "LOADED_TOLERANCE",
    "MODES",
    "RATIO_TARGET",
    "SCENARIOS",
    "WORKER_TIMEOUT_S",
    "LibraryOps",
    "Problem",
    "Scenario",
    "build_program",
    "competitor",
    "contention_ops",
    "digits_like_problem",
    "load_program_libraries",
    "mlp_problem",
    "run_contention",
    "run_programs",
    "thread_ratios",
    "time_isolated",
    "time_scenarios",
    "worker_main",
]

LIBRARIES = ("pylucid", "torch", "mlx")
MODES = ("same_process", "isolated", "contention")
#: A chain is this many links of ``y = log2(y * 3 + 2)``: three ops each.
CHAIN_LINKS = 50
CHAIN_OPS = 3 * CHAIN_LINKS
#: The contention check's target: default threads at most this many times one thread.
RATIO_TARGET = 1.5
#: The most a process with PyTorch and MLX loaded may differ from one without them.
LOADED_TOLERANCE = 0.10
#: The competitor: a CPU-bound Python loop that also ends if its parent is gone (a parent
#: killed with SIGKILL runs no ``finally``), checking every few milliseconds.
COMPETITOR_CODE = (
    "import os\n"
    "parent = os.getppid()\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(100_000):\n"
    "        pass\n"
)
#: The ops of the contention check, by name: what each computes.
CONTENTION_OPS = {
    "exp_1797x10_float64": "exp(x), x (1797, 10) float64",
    "log2_3e5_float32": "log2(y), y 3e5 float32",
    "mul_sum_3e5_float32": "(y * y).sum(), y 3e5 float32",
}
#: Seconds a worker process may take before it is stopped.
WORKER_TIMEOUT_S = 600.0
_WORKER = "from pylucid.bench.programs import worker_main; worker_main()"

@dataclass(frozen=True)
class Scenario:
    """A program scenario.

    Attributes
    ----------
    name : str
        Its key in :data:`SCENARIOS` and in the results.
    unit : str
        What a reported time is per: ``"op"``, ``"step"`` or ``"call"`` (of a layer).
    ops_per_call : int
        Units in one call of the program (a call's time is divided by it).
    description : str
        What one call does, for the report.
    """

    name: str
    unit: str
    ops_per_call: int
    description: str


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("chain_forward", "op", CHAIN_OPS, "50 x y = log2(y * 3 + 2), 1 element float32"),
        Scenario(
            "chain_forward_backward",
            "op",
            CHAIN_OPS,
            "the same chain, then y.sum().backward()",
        ),
        Scenario("mlp_step", "step", 1, "MLP 64-128-10, batch 32 float32: loss, backward, SGD"),
        Scenario(
            "softmax_regression",
            "step",
            1,
            "64 x 10 + bias on 1797 x 64 float64, full batch: loss, backward, SGD",
        ),
        *(Scenario(name, "call", 1, text) for name, text in LAYER_SCENARIOS.items()),
        *(Scenario(name, "step", 1, text) for name, text in TRAINING_SCENARIOS.items()),
        Scenario("compiled_chain", "op", CHAIN_OPS, COMPILED_SCENARIOS["compiled_chain"]),
        Scenario("compiled_mlp_step", "step", 1, COMPILED_SCENARIOS["compiled_mlp_step"]),
        *(Scenario(name, "op" if "chain" in name else "step",
                   CHAIN_OPS if "chain" in name else 1, COMPILED_SCENARIOS[name])
          for name in ("compiled_chain_fused", "compiled_mlp_step_fused")),  # fmt: skip
    )
}


@dataclass(frozen=True)
class LibraryOps:
    """The functions the programs call, in one library.

    Attributes
    ----------
    array : callable
        A NumPy array to the library's tensor, keeping its dtype.
    log2, tanh : callable
        Elementwise.
    log_softmax : callable
        ``log_softmax`` over axis 1.
    """

    array: Callable[[np.ndarray], Any]
    log2: Callable[[Any], Any]
    tanh: Callable[[Any], Any]
    log_softmax: Callable[[Any], Any]


def _library_ops(library: str, module: Any) -> LibraryOps:
    if library == "pylucid":
        return LibraryOps(pl.from_numpy, pl.log2, pl.tanh, lambda z: pl.log_softmax(z, axis=1))
    if library == "torch":
        return LibraryOps(
            module.from_numpy,
            module.log2,
            module.tanh,
            lambda z: module.log_softmax(z, dim=1),
        )
    if library == "mlx":
        return LibraryOps(
            lambda a: module.array(a, dtype=getattr(module, a.dtype.name)),
            module.log2,
            module.tanh,
            lambda z: z - module.logsumexp(z, axis=1, keepdims=True),
        )
    raise ValueError(f"unknown library {library!r}; choose from {LIBRARIES}")


@dataclass(frozen=True)
class Problem:
    """A classification problem: data, one-hot labels, initial parameters, step size.

    Attributes
    ----------
    x : ndarray
        The inputs, one row per example.
    onehot : ndarray
        The labels, one-hot, of ``x``'s dtype.
    params : tuple of ndarray
        The initial parameters, in the order ``logits`` takes them.
    lr : float
        The SGD step size.
    logits : callable
        ``logits(ops, params, x)``: the model, in any library.
    """

    x: np.ndarray
    onehot: np.ndarray
    params: tuple[np.ndarray, ...]
    lr: float
    logits: Callable[[LibraryOps, Sequence[Any], Any], Any]


def _mlp_logits(ops: LibraryOps, params: Sequence[Any], x: Any) -> Any:
    w1, b1, w2, b2 = params
    return ops.tanh(x @ w1 + b1) @ w2 + b2


def _linear_logits(ops: LibraryOps, params: Sequence[Any], x: Any) -> Any:
    w, b = params
    return x @ w + b


def _cross_entropy(ops: LibraryOps, logits: Any, onehot: Any) -> Any:
    return (-(onehot * ops.log_softmax(logits)).sum(axis=1)).mean()


def _onehot(labels: np.ndarray, classes: int, dtype: type) -> np.ndarray:
    return np.eye(classes, dtype=dtype)[labels]


def mlp_problem(seed: int = 0) -> Problem:
    """The ``mlp_step`` problem: 32 examples of 64 float32 features, 10 classes, weights
    scaled by 1 / sqrt(fan-in), zero biases (new arrays on every call)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    onehot = _onehot(rng.integers(0, 10, 32), 10, np.float32)
    w1 = (rng.standard_normal((64, 128)) / np.sqrt(64)).astype(np.float32)
    w2 = (rng.standard_normal((128, 10)) / np.sqrt(128)).astype(np.float32)
    params = (w1, np.zeros(128, np.float32), w2, np.zeros(10, np.float32))
    return Problem(x, onehot, params, lr=0.1, logits=_mlp_logits)


def digits_like_problem(seed: int = 0) -> Problem:
    """The ``softmax_regression`` problem: sklearn digits' shape - 1797 examples of 64
    features in [0, 1] (sixteenths), 10 classes - in float64 (new arrays on every call)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 17, (1797, 64)) / 16.0
    onehot = _onehot(rng.integers(0, 10, 1797), 10, np.float64)
    params = (rng.standard_normal((64, 10)) * 0.01, np.zeros(10))
    return Problem(x, onehot, params, lr=0.1, logits=_linear_logits)


def _chain(ops: LibraryOps, y: Any) -> Any:
    for _ in range(CHAIN_LINKS):
        y = ops.log2(y * 3 + 2)
    return y


def _eager_chain(ops: LibraryOps, backward: bool) -> Callable[[], Any]:
    x = ops.array(np.array([0.5], dtype=np.float32))
    if not backward:
        return lambda: _chain(ops, x)
    x.requires_grad_()

    def chain_backward() -> Any:
        x.grad = None
        _chain(ops, x).sum().backward()
        return x.grad

    return chain_backward


def _mlx_chain(mx: Any, ops: LibraryOps, backward: bool) -> Callable[[], Any]:
    x = ops.array(np.array([0.5], dtype=np.float32))
    if not backward:

        def chain() -> Any:
            y = _chain(ops, x)
            mx.eval(y)
            return y

        return chain
    value_and_grad = mx.value_and_grad(lambda x: _chain(ops, x).sum())

    def chain_backward() -> Any:
        value, grad = value_and_grad(x)
        mx.eval(value, grad)
        return grad

    return chain_backward


def _eager_step(module: Any, ops: LibraryOps, problem: Problem) -> Callable[[], Any]:
    params = [ops.array(p).requires_grad_() for p in problem.params]
    x, onehot = ops.array(problem.x), ops.array(problem.onehot)

    def step() -> Any:
        loss = _cross_entropy(ops, problem.logits(ops, params, x), onehot)
        loss.backward()
        with module.no_grad():
            for p in params:
                p -= problem.lr * p.grad
                p.grad = None
        return loss

    return step


def _mlx_step(mx: Any, ops: LibraryOps, problem: Problem) -> Callable[[], Any]:
    params = [ops.array(p) for p in problem.params]
    x, onehot = ops.array(problem.x), ops.array(problem.onehot)
    value_and_grad = mx.value_and_grad(
        lambda ps: _cross_entropy(ops, problem.logits(ops, ps, x), onehot)
    )

    def step() -> Any:
        loss, grads = value_and_grad(params)
        params[:] = [p - problem.lr * g for p, g in zip(params, grads)]
        mx.eval(loss, params)
        return loss

    return step


def build_program(scenario: str, library: str, module: Any = pl) -> Callable[[], Any]:
    """A new program of ``scenario`` in ``library``: a callable doing one call of it.

    Parameters
    ----------
    scenario : str
        A key of :data:`SCENARIOS`.
    library : str
        One of :data:`LIBRARIES`.
    module : module
        The library: ``pylucid``, ``torch`` or ``mlx.core``.

    Returns
    -------
    callable
        Each call runs the program once (a chain, or a training step that updates the
        program's own parameters) and returns what it computed - the chain's result, the
        gradient of ``x``, or the loss before the update - as the library's array.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {tuple(SCENARIOS)}")
    if scenario in LAYER_SCENARIOS:
        return build_layer_program(scenario, library, module)
    if scenario in TRAINING_SCENARIOS:
        return build_training_program(scenario, library, module)
    if scenario in COMPILED_SCENARIOS:
        return build_compiled_program(scenario, library, module)
    ops = _library_ops(library, module)
    if scenario.startswith("chain_"):
        backward = scenario == "chain_forward_backward"
        if library == "mlx":
            return _mlx_chain(module, ops, backward)
        return _eager_chain(ops, backward)
    problem = mlp_problem() if scenario == "mlp_step" else digits_like_problem()
    if library == "mlx":
        return _mlx_step(module, ops, problem)
    return _eager_step(module, ops, problem)


def load_program_libraries(libraries: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Import the ``libraries`` (of :data:`LIBRARIES`) that can be.

    Returns
    -------
    modules : dict of str to module
        The imported ones, by library name.
    skipped : dict of str to str
        Why each other one was not imported.
    """
    unknown = set(libraries) - set(LIBRARIES)
    if unknown:
        raise ValueError(f"unknown libraries {sorted(unknown)}; choose from {LIBRARIES}")
    libs = load_libraries(libraries)
    found = {"pylucid": pl, "torch": libs.torch, "mlx": libs.mx}
    modules = {name: found[name] for name in libraries if found[name] is not None}
    skipped = {name: why for name, why in libs.skipped.items() if name in libraries}
    return modules, skipped


def _row(
    scenario: Scenario, library: str, m: Measurement, others: float | None
) -> dict[str, Any]:
    per = scenario.ops_per_call
    return {
        "scenario": scenario.name,
        "library": library,
        "unit": scenario.unit,
        "ops_per_call": per,
        "median_s": m.median_s / per,
        "min_s": m.min_s / per,
        "number": m.number,
        "repeats": len(m.samples_s),
        "samples_s": [t / per for t in m.samples_s],
        "time_over_torch": None,  # set once every library of the scenario is timed
        "others_cpu": others,
    }


def _set_torch_ratios(rows: list[dict[str, Any]]) -> None:
    torch = {row["scenario"]: row["median_s"] for row in rows if row["library"] == "torch"}
    for row in rows:
        if row["scenario"] in torch:
            row["time_over_torch"] = row["median_s"] / torch[row["scenario"]]


@contextlib.contextmanager
def _threads(threads: int, torch: Any) -> Iterator[None]:
    """pylucid's (Numba's) and PyTorch's thread counts set to ``threads``, then restored."""
    previous = pl.get_num_threads(), torch.get_num_threads() if torch is not None else None
    pl.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if torch is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        pl.set_num_threads(previous[0])
        if torch is not None:
            torch.set_num_threads(previous[1])


def time_scenarios(
    scenarios: Sequence[str],
    modules: Mapping[str, Any],
    threads: int,
    timer: TimerConfig,
    note: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Time every scenario in this process, its libraries interleaved batch by batch.

    Parameters
    ----------
    scenarios : sequence of str
        Keys of :data:`SCENARIOS`.
    modules : mapping of str to module
        The libraries to time, by name (see :func:`load_program_libraries`).
    threads : int
        pylucid's (Numba's) and PyTorch's threads while timing (restored afterwards).
    timer : TimerConfig
        Batch duration and repeats.
    note : callable, optional
        Called with one line of progress per scenario.

    Returns
    -------
    rows : list of dict
        One per (scenario, library) timed: the ``programs.same_process`` rows of
        :mod:`pylucid.bench`.
    errors : list of dict
        ``{mode, scenario, library, error}`` for each program that failed to build or run.
    """
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    with _threads(threads, modules.get("torch")):
        for name in scenarios:
            scenario = SCENARIOS[name]
            before = snapshot()
            programs = {}
            for library, module in modules.items():
                try:
                    programs[library] = build_program(name, library, module)
                except Exception as exc:  # a broken program is reported, not fatal
                    errors.append(_error("same_process", name, library, exc))
            measured, failed = measure(programs, _timer_for(name, timer))
            others = others_share(before, snapshot())
            errors += [
                {"mode": "same_process", "scenario": name, "library": lib, "error": e}
                for lib, e in failed.items()
            ]
            timed = [_row(scenario, library, m, others) for library, m in measured.items()]
            rows += timed
            if note is not None:
                note(f"{name} (same process): {_summary(timed)}")
    _set_torch_ratios(rows)
    return rows, errors


def _timer_for(scenario: str, timer: TimerConfig) -> TimerConfig:
    """``timer``, with the warm-up a compiled scenario needs before it is in its steady state:
    a warm-up capture (the optimizer's state is made), the capture and its compile."""
    if scenario in COMPILED_SCENARIOS:
        return replace(timer, warmup=max(timer.warmup, COMPILED_WARMUP))
    return timer


def _error(mode: str, scenario: str, library: str, exc: BaseException) -> dict[str, Any]:
    return {
        "mode": mode,
        "scenario": scenario,
        "library": library,
        "error": f"{type(exc).__name__}: {exc}",
    }


def _summary(rows: list[dict[str, Any]]) -> str:
    return "  ".join(
        f"{row['library']} {format_time(row['median_s'])}/{row['unit']}" for row in rows
    )


def _process_facts() -> dict[str, Any]:
    """This process: its id, its OS threads (Linux), which peer libraries it imported."""
    threads = None
    with contextlib.suppress(OSError):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Threads:"):
                    threads = int(line.split()[1])
    return {
        "pid": os.getpid(),
        "os_threads": threads,
        "imported": [name for name in ("torch", "mlx") if name in sys.modules],
    }


def _run_worker(request: dict[str, Any], timeout_s: float = WORKER_TIMEOUT_S) -> dict[str, Any]:
    """Run ``request`` in a fresh interpreter (:func:`worker_main`); return its JSON answer."""
    done = subprocess.run(
        [sys.executable, "-c", _WORKER, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the worker exited with {done.returncode}:\n{done.stderr.strip()[-2000:]}"
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _time_alone(scenario: str, library: str, threads: int, timer: TimerConfig) -> dict[str, Any]:
    """The worker's side of :func:`time_isolated`: import ``library`` alone, time it."""
    modules, skipped = load_program_libraries([library])
    if library in skipped:
        return {"error": skipped[library]}
    rows, errors = time_scenarios([scenario], modules, threads, timer)
    if errors:
        return {"error": errors[0]["error"]}
    return {"row": rows[0]}


def time_isolated(
    scenarios: Sequence[str],
    libraries: Sequence[str],
    threads: int,
    timer: TimerConfig,
    note: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Time each (scenario, library) in its own fresh interpreter.

    Parameters
    ----------
    scenarios : sequence of str
        Keys of :data:`SCENARIOS`.
    libraries : sequence of str
        Libraries that can be imported (the others are the caller's ``skipped``).
    threads : int
        pylucid's (Numba's) and PyTorch's threads in the workers.
    timer : TimerConfig
        Batch duration and repeats.
    note : callable, optional
        Called with one line of progress per scenario.

    Returns
    -------
    rows : list of dict
        The rows of :func:`time_scenarios`, each with ``process``: ``{pid, os_threads,
        imported}`` of its worker (``imported``: the peer libraries, torch and mlx, it
        imported).
    errors : list of dict
        ``{mode, scenario, library, error}`` for each worker that failed.
    """
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for name in scenarios:
        timed = []
        for library in libraries:
            request = {
                "job": "scenario",
                "scenario": name,
                "library": library,
                "threads": threads,
                "timer": asdict(timer),
            }
            try:
                answer = _run_worker(request)
            except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
                errors.append(_error("isolated", name, library, exc))
                continue
            if "error" in answer:
                errors.append({"mode": "isolated", "scenario": name, "library": library, **answer})
                continue
            timed.append({**answer["row"], "process": answer["process"]})
        rows += timed
        if note is not None:
            note(f"{name} (isolated): {_summary(timed)}")
    _set_torch_ratios(rows)
    return rows, errors


@contextlib.contextmanager
def competitor() -> Iterator[subprocess.Popen[bytes]]:
    """Run a CPU-bound Python process (:data:`COMPETITOR_CODE`) for the ``with`` block.

    The process is killed and reaped when the block ends, by an exception too; should this
    process die without running that, the competitor sees its parent gone and stops.

    Yields
    ------
    subprocess.Popen
        The competitor (its ``pid``; ``returncode`` is set once the block is left).
    """
    process = subprocess.Popen(
        [sys.executable, "-c", COMPETITOR_CODE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def contention_ops(seed: int = 0) -> dict[str, Callable[[], Any]]:
    """The calls of :data:`CONTENTION_OPS`, on new seeded tensors."""
    rng = np.random.default_rng(seed)
    x = pl.from_numpy(rng.standard_normal((1797, 10)))
    y = pl.from_numpy(rng.uniform(0.5, 2.0, 300_000).astype(np.float32))
    return {
        "exp_1797x10_float64": lambda: pl.exp(x),
        "log2_3e5_float32": lambda: pl.log2(y),
        "mul_sum_3e5_float32": lambda: (y * y).sum(),
    }


def _use_peers(peers: Sequence[str]) -> list[str]:
    """Import and use (so that their thread pools start) the ``peers`` that can be."""
    modules, _ = load_program_libraries([name for name in peers if name in ("torch", "mlx")])
    if "torch" in modules:
        torch = modules["torch"]
        a = torch.ones(512, 512)
        torch.exp(torch.ones(1_000_000)).sum().item()
        (a @ a).sum().item()
    if "mlx" in modules:
        mx = modules["mlx"]
        a = mx.ones((512, 512))
        mx.eval(mx.exp(mx.ones(1_000_000)).sum(), (a @ a).sum())
    return list(modules)


def thread_ratios(timer: TimerConfig, peers: Sequence[str] = ()) -> dict[str, Any]:
    """Time :data:`CONTENTION_OPS` in this process with its thread count and with one thread.

    The six calls (three ops, two thread counts) are timed interleaved batch by batch; each
    call sets the thread count it needs only when the previous call used the other one
    (once per batch), so that the switch costs nothing measurable. The thread count is
    restored at the end.

    Parameters
    ----------
    timer : TimerConfig
        Batch duration and repeats.
    peers : sequence of str
        ``"torch"``, ``"mlx"``: import and use these libraries first (those that can be).

    Returns
    -------
    dict
        ``threads_default`` (this process's count), ``peers`` (the libraries loaded),
        ``ops``: ``{op: {default_s, one_thread_s, ratio}}`` (medians; ratio default /
        1 thread), ``errors``: ``{call: error}``, ``process``: ``{pid, os_threads,
        imported}``.
    """
    loaded = _use_peers(peers)
    default = pl.get_num_threads()
    current = [default]

    def pinned(threads: int, fn: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            if current[0] != threads:
                pl.set_num_threads(threads)
                current[0] = threads
            return fn()

        return call

    calls = {}
    for name, fn in contention_ops().items():
        calls[f"{name}@default"] = pinned(default, fn)
        calls[f"{name}@1"] = pinned(1, fn)
    try:
        measured, errors = measure(calls, timer)
    finally:
        pl.set_num_threads(default)
    ops = {}
    for name in CONTENTION_OPS:
        both = measured.get(f"{name}@default"), measured.get(f"{name}@1")
        if None not in both:
            default_s, one_s = both[0].median_s, both[1].median_s
            ops[name] = {"default_s": default_s, "one_thread_s": one_s, "ratio": default_s / one_s}
    return {
        "threads_default": default,
        "peers": loaded,
        "ops": ops,
        "errors": errors,
        "process": _process_facts(),
    }


def run_contention(
    timer: TimerConfig,
    fresh_processes: int = 6,
    peers: Sequence[str] = ("torch", "mlx"),
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The contention check: :func:`thread_ratios` under a :func:`competitor`.

    Parameters
    ----------
    timer : TimerConfig
        Batch duration and repeats of every measurement.
    fresh_processes : int
        Plain fresh processes (pylucid only) to measure in, besides this process.
    peers : sequence of str
        Libraries (``"torch"``, ``"mlx"``, those that can be imported) the "loaded"
        processes import and use; after every other plain process (the first included)
        one such process runs. Empty: no loaded comparison.
    note : callable, optional
        Called with one line of progress per process.

    Returns
    -------
    dict
        The ``programs.contention`` section of :mod:`pylucid.bench`.
    """
    if fresh_processes < 1:
        raise ValueError(f"fresh_processes must be at least 1, not {fresh_processes}")
    section: dict[str, Any] = {
        "ops": dict(CONTENTION_OPS),
        "load_average_before": load_average(),
        "fresh_processes": fresh_processes,
        "ratio_target": RATIO_TARGET,
        "errors": [],
    }
    request = {"job": "threads", "timer": asdict(timer), "peers": []}
    plain: list[dict[str, Any]] = []
    loaded: list[dict[str, Any]] = []

    def run_in_fresh(kind: str, peer_list: Sequence[str], into: list[dict[str, Any]]) -> None:
        try:
            answer = _run_worker({**request, "peers": list(peer_list)})
        except (RuntimeError, subprocess.SubprocessError, ValueError) as exc:
            section["errors"].append({"process": kind, "error": f"{type(exc).__name__}: {exc}"})
            return
        into.append(answer)
        if note is not None:
            note(f"contention, {kind} process {len(into)}: {_ratios_line(answer)}")

    with competitor() as process:
        section["competitor"] = {"pid": process.pid, "code": COMPETITOR_CODE}
        section["in_process"] = thread_ratios(timer)
        if note is not None:
            note(f"contention, this process: {_ratios_line(section['in_process'])}")
        for index in range(fresh_processes):
            run_in_fresh("plain", (), plain)
            if peers and index % 2 == 0:
                run_in_fresh("loaded", peers, loaded)
    section["competitor"]["returncode"] = process.returncode
    section["processes"] = plain
    section["worst"] = _worst(plain)
    section["ratio_met"] = bool(section["worst"]) and all(
        row["ratio"] <= RATIO_TARGET for row in section["worst"].values()
    )
    section["libraries_loaded"] = _loaded_comparison(plain, loaded, peers)
    return section


def _ratios_line(answer: dict[str, Any]) -> str:
    parts = [f"{name} {row['ratio']:.2f}x" for name, row in answer["ops"].items()]
    return "default / 1 thread: " + ", ".join(parts)


def _worst(processes: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per op, over the processes: the worst (highest) medians and ratio."""
    worst = {}
    for name in CONTENTION_OPS:
        rows = [p["ops"][name] for p in processes if name in p["ops"]]
        if rows:
            worst[name] = {key: max(r[key] for r in rows) for key in rows[0]}
    return worst


def _loaded_comparison(
    plain: list[dict[str, Any]], loaded: list[dict[str, Any]], peers: Sequence[str]
) -> dict[str, Any]:
    """Per op, the median over the loaded processes' medians (default threads) against the
    median over the plain ones'."""
    comparison: dict[str, Any] = {
        "peers": [name for name in peers if any(name in answer["peers"] for answer in loaded)],
        "tolerance": LOADED_TOLERANCE,
        "processes": loaded,
    }
    if not peers:
        why = "no peer library to load: torch and mlx not requested, or not importable"
        return {**comparison, "skipped": why, "ops": {}, "met": None}
    if not comparison["peers"]:
        why = "no loaded process ran" if not loaded else "neither torch nor MLX could be imported"
        return {**comparison, "skipped": why, "ops": {}, "met": None}
    ops = {}
    for name in CONTENTION_OPS:
        without = [p["ops"][name]["default_s"] for p in plain if name in p["ops"]]
        with_peers = [p["ops"][name]["default_s"] for p in loaded if name in p["ops"]]
        if without and with_peers:
            without_s, with_s = statistics.median(without), statistics.median(with_peers)
            ops[name] = {"without_s": without_s, "with_s": with_s, "ratio": with_s / without_s}
    met = bool(ops) and all(abs(row["ratio"] - 1) <= LOADED_TOLERANCE for row in ops.values())
    return {**comparison, "skipped": None, "ops": ops, "met": met}


def run_programs(
    scenarios: Sequence[str],
    libraries: Sequence[str],
    modes: Sequence[str],
    threads: int,
    timer: TimerConfig,
    fresh_processes: int = 6,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the program scenarios in the ``modes`` asked for (see the module docstring).

    Parameters
    ----------
    scenarios : sequence of str
        Keys of :data:`SCENARIOS`.
    libraries : sequence of str
        Of :data:`LIBRARIES`; those that cannot be imported are skipped, the reason recorded.
    modes : sequence of str
        Of :data:`MODES`, run in that order (contention last: its competitor then cannot
        disturb the other modes).
    threads : int
        pylucid's (Numba's) and PyTorch's threads in the ``same_process`` and ``isolated``
        modes (the contention check uses each process's default and 1).
    timer : TimerConfig
        Batch duration and repeats of every measurement.
    fresh_processes : int
        Plain fresh processes of the contention check.
    note : callable, optional
        Called with one line of progress at a time.

    Returns
    -------
    dict
        The ``programs`` section of the document of :mod:`pylucid.bench`.
    """
    unknown = {"scenarios": set(scenarios) - set(SCENARIOS), "modes": set(modes) - set(MODES)}
    for what, names in unknown.items():
        if names:
            allowed = tuple(SCENARIOS) if what == "scenarios" else MODES
            raise ValueError(f"unknown {what} {sorted(names)}; choose from {allowed}")
    modules, skipped = load_program_libraries(libraries)
    section: dict[str, Any] = {
        "scenarios": {name: asdict(SCENARIOS[name]) for name in scenarios},
        "libraries": list(libraries),
        "modes": [mode for mode in MODES if mode in modes],
        "threads": threads,
        "skipped": skipped,
        "errors": [],
        "same_process": None,
        "isolated": None,
        "contention": None,
        "others_cpu": None,
    }
    if "same_process" in modes:
        before = snapshot()
        section["same_process"], errors = time_scenarios(scenarios, modules, threads, timer, note)
        section["others_cpu"] = others_share(before, snapshot())
        section["errors"] += errors
    if "isolated" in modes:
        section["isolated"], errors = time_isolated(scenarios, list(modules), threads, timer, note)
        section["errors"] += errors
    if "contention" in modes:
        peers = [name for name in ("torch", "mlx") if name in modules]
        section["contention"] = run_contention(timer, fresh_processes, peers, note)
    return section


def worker_main() -> None:
    """Entry point of a worker process: run the JSON request in ``sys.argv[1]``, print the
    JSON answer as the last line of stdout.

    A request is ``{"job": "scenario", scenario, library, threads, timer}`` (answer:
    ``{row}`` or ``{error}``, as :func:`time_isolated` reads it) or ``{"job": "threads",
    timer, peers}`` (answer: that of :func:`thread_ratios`); ``timer`` holds the fields of
    :class:`~pylucid.bench.timing.TimerConfig`. Every answer has ``process``.
    """
    request = json.loads(sys.argv[1])
    timer = TimerConfig(**request["timer"])
    if request["job"] == "scenario":
        answer = _time_alone(request["scenario"], request["library"], request["threads"], timer)
        answer["process"] = _process_facts()
    else:
        answer = thread_ratios(timer, request["peers"])
    print(json.dumps(answer))
