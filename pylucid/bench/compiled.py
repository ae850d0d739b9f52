"""Compiled-step scenarios: ``pl.compile`` against PyTorch eager and ``mx.compile``.

``compiled_chain``
    The 150-op chain of ``chain_forward_backward`` (``x = [0.5]`` float32 requiring grad,
    50 times ``y = log2(y * 3 + 2)``, ``y.sum().backward()``), per op.
``compiled_mlp_step``
    ``Linear(64, 128)``, ``Tanh``, ``Linear(128, 10)`` on a batch of 32 float32,
    ``cross_entropy``, ``backward``, ``SGD(lr=0.1, momentum=0.9)``, ``zero_grad``: per step.

``compiled_chain_fused``, ``compiled_mlp_step_fused``
    The same, pylucid compiling with ``mode="fused"`` (generated Numba code per graph)
    instead of the default tape.

pylucid runs the step through :func:`pylucid.compile`; PyTorch runs it eagerly (the
issue's yardstick: torch.compile needs a C++ toolchain at run time and is not what a
PyTorch script gets by default); MLX runs ``mx.compile`` of the same computation.

:func:`compile_times` measures the first calls of the pylucid programs in fresh processes:
with an empty cache of generated code, then again with the cache the first one filled.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pylucid as pl

__all__ = [
    "COMPILED_SCENARIOS",
    "COMPILED_WARMUP",
    "build_compiled_program",
    "compile_times",
    "first_calls",
    "times_markdown",
]

#: name -> description, in the order they are reported.
COMPILED_SCENARIOS: dict[str, str] = {
    "compiled_chain": "chain_forward_backward, compiled (pylucid, MLX) vs eager (torch)",
    "compiled_mlp_step": (
        "MLP 64-128-10, batch 32 float32, tanh, cross_entropy, SGD momentum 0.9: "
        "compiled (pylucid, MLX) vs eager (torch)"
    ),
    "compiled_chain_fused": "compiled_chain, pylucid with mode='fused'",
    "compiled_mlp_step_fused": "compiled_mlp_step, pylucid with mode='fused'",
}
_LINKS = 50
#: Calls before a compiled program replays: the capture of a first optimizer step (a
#: warm-up), the capture that is kept (and its compile), and one more.
COMPILED_WARMUP = 3


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    w1 = (rng.standard_normal((128, 64)) / 8.0).astype(np.float32)
    w2 = (rng.standard_normal((10, 128)) / np.sqrt(128)).astype(np.float32)
    return x, y, [w1, np.zeros(128, np.float32), w2, np.zeros(10, np.float32)]


def _chain(lib: Any) -> Callable[[], Any]:
    x = lib.tensor([0.5], requires_grad=True)

    def step() -> Any:
        x.grad = None
        y = x
        for _ in range(_LINKS):
            y = lib.log2(y * 3 + 2)
        y.sum().backward()
        return x.grad

    return step


def _mlp(lib: Any) -> Callable[..., Any]:
    x, y, weights = _data()
    model = lib.nn.Sequential(lib.nn.Linear(64, 128), lib.nn.Tanh(), lib.nn.Linear(128, 10))
    with lib.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(lib.from_numpy(w.copy()))
    optimizer = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    inputs, targets = lib.from_numpy(x), lib.from_numpy(y)

    def step(inputs: Any, targets: Any) -> Any:
        optimizer.zero_grad()
        loss = lib.nn.functional.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    return step, inputs, targets


def _mlx_chain(mx: Any) -> Callable[[], Any]:
    x = mx.array([0.5], dtype=mx.float32)

    def loss(x: Any) -> Any:
        y = x
        for _ in range(_LINKS):
            y = mx.log2(y * 3 + 2)
        return y.sum()

    value_and_grad = mx.compile(mx.value_and_grad(loss))

    def step() -> Any:
        value, grad = value_and_grad(x)
        mx.eval(value, grad)
        return grad

    return step


def _mlx_mlp(mx: Any) -> Callable[[], Any]:
    x, y, weights = _data()
    params = [mx.array(w) for w in weights]
    buffers = [mx.zeros_like(p) for p in params]
    inputs, targets = mx.array(x), mx.array(y)

    def loss_of(params: list, inputs: Any, targets: Any) -> Any:
        w1, b1, w2, b2 = params
        logits = mx.tanh(inputs @ w1.T + b1) @ w2.T + b2
        picked = mx.take_along_axis(logits, targets[:, None], axis=1)[:, 0]
        return (mx.logsumexp(logits, axis=1) - picked).mean()

    value_and_grad = mx.value_and_grad(loss_of)

    def update(params: list, buffers: list, inputs: Any, targets: Any) -> tuple:
        loss, grads = value_and_grad(params, inputs, targets)
        buffers = [0.9 * b + g for b, g in zip(buffers, grads)]
        params = [p - 0.1 * b for p, b in zip(params, buffers)]
        return loss, params, buffers

    compiled = mx.compile(update)

    def step() -> Any:
        nonlocal params, buffers
        loss, params, buffers = compiled(params, buffers, inputs, targets)
        mx.eval(loss, params, buffers)
        return loss

    return step


def build_compiled_program(name: str, library: str, module: Any) -> Callable[[], Any]:
    """A callable doing one call of scenario ``name`` in ``library`` (``"pylucid"``
    compiled, ``"torch"`` eager, ``"mlx"`` compiled), ``module`` being the library."""
    if name not in COMPILED_SCENARIOS:
        raise ValueError(f"unknown compiled scenario {name!r}; choose from "
                         f"{tuple(COMPILED_SCENARIOS)}")  # fmt: skip
    mode = "fused" if name.endswith("_fused") else "tape"
    chain = name.startswith("compiled_chain")
    if library == "mlx":
        return _mlx_chain(module) if chain else _mlx_mlp(module)
    lib = pl if library == "pylucid" else module
    if chain:
        step = _chain(lib)
        return pl.compile(step, mode=mode) if library == "pylucid" else step
    step, inputs, targets = _mlp(lib)
    if library == "pylucid":
        step = pl.compile(step, mode=mode)
    return functools.partial(step, inputs, targets)


def first_calls(name: str) -> dict[str, float]:
    """Seconds of the first calls of scenario ``name``'s pylucid program in this process,
    until the first replay - each call's wall time and the capture time of the last trace
    (eager run, plan, code generation and Numba's compile or cache load) - after one eager
    call of the same program (``eager_first_s``: pylucid's own kernels loading from Numba's
    cache, which any first call pays)."""
    started = time.perf_counter()  # an eager call first: pylucid's kernels load from its cache
    if name.startswith("compiled_chain"):
        _chain(pl)()
    else:
        eager, inputs, targets = _mlp(pl)
        eager(inputs, targets)
    eager_s = time.perf_counter() - started
    program = build_compiled_program(name, "pylucid", pl)
    walls = []
    for _ in range(4):
        started = time.perf_counter()
        program()
        walls.append(time.perf_counter() - started)
    stats = getattr(program, "func", program).stats  # (the MLP's is a partial)
    return {"eager_first_s": eager_s, "calls_s": walls, "capture_s": stats.last_capture_seconds,
            "traces": stats.traces, "replays": stats.replays}  # fmt: skip


def compile_times(names: tuple[str, ...] = tuple(COMPILED_SCENARIOS)) -> dict[str, Any]:
    """The first calls of each pylucid compiled program in two fresh processes sharing a new
    cache directory of its own: ``cold`` (nothing cached: Numba compiles the generated code,
    or a tape's loop kernels) and ``warm`` (the first process's cache)."""
    results: dict[str, Any] = {}
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, PYLUCID_COMPILE_CACHE=cache)
            results[name] = {}
            for kind in ("cold", "warm"):
                code = (
                    "import json; from pylucid.bench.compiled import first_calls; "
                    f"print(json.dumps(first_calls({name!r})))"
                )
                done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                      text=True, timeout=600, check=True)  # fmt: skip
                results[name][kind] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


def times_markdown(results: dict[str, Any]) -> str:
    """:func:`compile_times`'s results as a Markdown table."""
    lines = [
        "| compiled scenario | cache | first eager call (s) | capture (s) | compiled calls (s) |",
        "|---|---|---|---|---|",
    ]
    for name, kinds in results.items():
        for kind, facts in kinds.items():
            calls = ", ".join(f"{c:.3f}" for c in facts["calls_s"])
            lines.append(f"| {name} | {kind} | {facts['eager_first_s']:.2f} | "
                         f"{facts['capture_s']:.2f} | {calls} |")  # fmt: skip
    return "\n".join(lines) + "\n"
