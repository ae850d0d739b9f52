"""Model benchmark (``python -m pylucid bench --models``): whole training steps of the
models people train, pylucid against PyTorch, side by side.

The models (:data:`MODELS`) are written once against a ``lib`` parameter - ``pylucid`` or
``torch``, the same code path, as :mod:`pylucid.bench.training` does:

``gpt_small``, ``gpt_medium``
    A GPT: ``nn.Embedding`` of tokens plus one of positions, pre-norm blocks of
    ``LayerNorm``, causal self-attention (``F.scaled_dot_product_attention(is_causal=True)``)
    and a GELU MLP, a final ``LayerNorm`` and a linear head; ``F.cross_entropy`` over every
    position, ``AdamW``, ``clip_grad_norm_`` to 1. Sizes in :data:`MODELS`.
``cnn``
    Three times ``Conv2d`` 3x3 (16, 32, 64 channels, no bias), ``BatchNorm2d``, ``ReLU``,
    ``MaxPool2d(2)``, then ``Linear`` to 10 classes, on 32x32x3 images, batch 64; SGD with
    momentum 0.9.
``char_lm``
    A character-level language model, makemore-sized: ``Embedding(65, 64)``, ``LSTM(64,
    256)``, ``Linear(256, 65)`` on 32 sequences of 64 characters; ``AdamW``,
    ``clip_grad_norm_``.

One call of a program is one training step and reads the loss back as a Python float (as
a loop that logs its loss does; it also waits for a lazy library's work). Every
implementation (:data:`IMPLS`) starts from the same weights (PyTorch's initialisation,
seeded, loaded with ``load_state_dict``; pylucid's without PyTorch) and trains on the same
synthetic batch, so the first steps' losses agree within float32's rounding:

``torch``
    PyTorch eager.
``torch.compile``
    PyTorch with the model through ``torch.compile`` (the loss, backward, clipping and
    optimizer eager: the documented recipe); its compile is paid in the warm-up calls,
    outside the timed batches, and reported. Where it cannot compile here (no C++
    compiler, ...) it is reported as failed.
``jax.jit``
    The same models in ``jax.numpy`` (the weights from the same state), the whole step -
    loss, gradients, clipping, the optimizer - one ``jax.jit`` function. Skipped with the
    reason where JAX is not installed.
``pylucid.mlx``
    pylucid's own program on its ``gpu`` device, the MLX backend (on a machine without
    Metal or CUDA, MLX's CPU stream).
``pylucid``
    pylucid eager, on the CPU (Numba kernels, NumPy's BLAS).
``pl.compile``
    The whole pylucid step through ``pl.compile`` (``fallback="raise"``): a capture that
    raises, or a step that runs eagerly, is reported as such, never as a time.

Modes (:data:`MODES`): 1 thread, 2 threads, and 2 threads beside a competing CPU-bound
process (:func:`pylucid.bench.programs.competitor`, running for the whole mode). Each mode
runs in a fresh interpreter (:func:`worker_main`) whose environment sizes every thread pool
before any library starts one: ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
``OPENBLAS_NUM_THREADS``, ``NUMBA_NUM_THREADS`` and XLA's flags; in it ``pl.set_num_threads``,
``torch.set_num_threads`` and threadpoolctl's limits (where installed) are set too, and
what each library reports is recorded. A process per mode because thread pools, once
started, keep their threads, and because OpenBLAS reads ``OPENBLAS_CORETYPE`` once, when it
loads: ``native_openblas`` unsets it and ``OPENBLAS_L2_SIZE`` in those processes alone
(a machine that sets them to keep NumPy's OpenBLAS off its AVX-512 kernels times other
products than a user's machine). In a mode, the models run one after another, each one's
implementations timed interleaved batch by batch (:func:`pylucid.bench.timing.measure`),
medians reported.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import importlib
import importlib.util
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numba
import numpy as np

import pylucid as pl
from pylucid.bench.compiled import COMPILED_WARMUP
from pylucid.bench.load import load_average, others_share, snapshot
from pylucid.bench.programs import competitor
from pylucid.bench.report import format_time
from pylucid.bench.runner import busy_check, environment
from pylucid.bench.timing import TimerConfig, measure

__all__ = [
    "IMPLS",
    "MEDIUM_AFTER_S",
    "MODELS",
    "MODES",
    "MODEL_TIMER",
    "OPENBLAS_VARIABLES",
    "QUICK_MODELS",
    "QUICK_MODES",
    "QUICK_PROMISE",
    "QUICK_TIMER",
    "SCHEMA",
    "CNNConfig",
    "CharLMConfig",
    "GPTConfig",
    "Mode",
    "ModelSpec",
    "ModelsConfig",
    "Program",
    "batch_data",
    "build_module",
    "build_program",
    "child_environment",
    "initial_state",
    "run",
    "thread_limits",
    "time_models",
    "worker_main",
]

SCHEMA = "pylucid-bench-models/1"


@dataclass(frozen=True)
class GPTConfig:
    """A GPT's sizes: ``vocab`` tokens, ``block`` positions, ``width`` features in
    ``heads`` heads, ``layers`` blocks, ``batch`` sequences a step."""

    vocab: int
    block: int
    width: int
    heads: int
    layers: int
    batch: int


@dataclass(frozen=True)
class CNNConfig:
    """The CNN's sizes: ``batch`` images of ``size`` x ``size`` x 3, the ``channels`` of
    its three convolutions, ``classes`` outputs."""

    batch: int
    size: int
    channels: tuple[int, int, int]
    classes: int = 10


@dataclass(frozen=True)
class CharLMConfig:
    """The character-level LM's sizes: ``vocab`` characters, ``embed`` features, an LSTM of
    ``hidden`` units, ``batch`` sequences of ``length`` characters."""

    vocab: int
    embed: int
    hidden: int
    length: int
    batch: int


Config = GPTConfig | CNNConfig | CharLMConfig


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark model.

    Attributes
    ----------
    name : str
        Its key in :data:`MODELS`.
    description : str
        What a step does, for the report.
    config : GPTConfig, CNNConfig or CharLMConfig
        Its sizes.
    tiny : GPTConfig, CNNConfig or CharLMConfig
        The same model a few elements wide (the tests).
    after : str or None
        A smaller model of the same code run first: an implementation that failed on it,
        or whose step took more than :data:`MEDIUM_AFTER_S` there (but PyTorch eager and
        pylucid eager), is not run on this one.
    """

    name: str
    description: str
    config: Config
    tiny: Config
    after: str | None = None


_TINY_GPT = GPTConfig(vocab=65, block=8, width=16, heads=2, layers=1, batch=2)
MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            "gpt_small",
            "GPT, block 128, 256 wide, 8 heads, 4 layers, vocab 65, batch 16: AdamW, "
            "clip_grad_norm_",
            GPTConfig(vocab=65, block=128, width=256, heads=8, layers=4, batch=16),
            _TINY_GPT,
        ),
        ModelSpec(
            "gpt_medium",
            "GPT, block 256, 384 wide, 6 heads, 6 layers, vocab 65, batch 16: the same step",
            GPTConfig(vocab=65, block=256, width=384, heads=6, layers=6, batch=16),
            replace(_TINY_GPT, layers=2),
            after="gpt_small",
        ),
        ModelSpec(
            "cnn",
            "CNN, 3 x (conv 3x3 no bias, BatchNorm, ReLU, max pool 2) with 16, 32, 64 "
            "channels + linear, 32x32x3 images, batch 64: SGD momentum 0.9",
            CNNConfig(batch=64, size=32, channels=(16, 32, 64)),
            CNNConfig(batch=2, size=8, channels=(2, 4, 4)),
        ),
        ModelSpec(
            "char_lm",
            "char LM, Embedding(65, 64), LSTM(64, 256), Linear(256, 65), batch 32 x 64 "
            "characters: AdamW, clip_grad_norm_",
            CharLMConfig(vocab=65, embed=64, hidden=256, length=64, batch=32),
            CharLMConfig(vocab=65, embed=8, hidden=8, length=4, batch=2),
        ),
    )
}

#: The implementations, in the order of the tables (see the module docstring).
IMPLS = ("torch", "torch.compile", "jax.jit", "pylucid.mlx", "pylucid", "pl.compile")
#: The implementations each library needs, by module (``pylucid.mlx``: MLX).
_NEEDS = {"torch": "torch", "torch.compile": "torch", "jax.jit": "jax", "pylucid.mlx": "mlx"}
#: Untimed calls before the timed batches (whose calibration calls the program once more):
#: the first compiles (Numba's kernels from its cache, jax.jit's program, MLX's kernels) and
#: creates the optimizer's state, after which an eager step is in its steady state;
#: torch.compile may compile again in its second call; ``pl.compile`` captures a warm-up
#: step (the optimizer creates its state), then the step it keeps, then replays once.
_WARMUP = {"pl.compile": COMPILED_WARMUP, "torch.compile": 2}
_DEFAULT_WARMUP = 1
#: An implementation whose step took more than this on a model's smaller sibling
#: (``ModelSpec.after``) is not run on the larger one (several times the work), but for
#: the two the ratio compares (:data:`_ALWAYS_TIMED`), however slow a busy machine makes them.
MEDIUM_AFTER_S = 5.0
_ALWAYS_TIMED = ("torch", "pylucid")

#: A timed batch of about half a second (one step of a GPT), five batches per
#: implementation, three where a step takes over 2 s; warm-ups are the programs' own.
MODEL_TIMER = TimerConfig(target_s=0.5, repeats=5, warmup=0, slow_call_s=2.0, min_repeats=3)
QUICK_TIMER = TimerConfig(target_s=0.3, repeats=3, warmup=0, slow_call_s=2.0, min_repeats=3)


@dataclass(frozen=True)
class Mode:
    """A way to run the models: ``threads`` for every library, with or without a
    ``competitor`` (a CPU-bound process running meanwhile); ``title`` for the report."""

    name: str
    title: str
    threads: int
    competitor: bool


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("1_thread", "1 thread", 1, False),
        Mode("2_threads", "2 threads", 2, False),
        Mode("2_threads_busy", "2 threads beside a competing process", 2, True),
    )
}
#: ``--models --quick``: the small GPT and the CNN at 1 thread, without the MLX backend
#: (a GPT step on MLX's CPU stream takes some 15 s on the development VM, whose MLX build
#: multiplies at 4 GFLOP/s).
QUICK_MODELS = ("gpt_small", "cnn")
QUICK_MODES = ("1_thread",)
QUICK_IMPLS = tuple(impl for impl in IMPLS if impl != "pylucid.mlx")
#: How long ``--models --quick`` takes, measured on the 2-core development VM.
QUICK_PROMISE = "under five minutes on 2 shared cores"
#: The variables that keep NumPy's OpenBLAS on a smaller CPU's kernels.
OPENBLAS_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
#: Seconds a mode's process may take before it is stopped.
MODE_TIMEOUT_S = 3600.0
_WORKER = "from pylucid.bench.models import worker_main; worker_main()"


@dataclass(frozen=True)
class ModelsConfig:
    """What ``--models`` runs.

    Attributes
    ----------
    models : tuple of str
        Keys of :data:`MODELS`, in order.
    modes : tuple of str
        Keys of :data:`MODES`, each run in a fresh process.
    impls : tuple of str
        Of :data:`IMPLS`.
    timer : TimerConfig
        Batch duration and repeats.
    quick : bool
        Whether this is the ``--quick`` configuration.
    native_openblas : bool
        Unset :data:`OPENBLAS_VARIABLES` in the modes' processes.
    tiny : bool
        The models' tiny sizes (:attr:`ModelSpec.tiny`): a check that everything runs.
    """

    models: tuple[str, ...] = tuple(MODELS)
    modes: tuple[str, ...] = tuple(MODES)
    impls: tuple[str, ...] = IMPLS
    timer: TimerConfig = MODEL_TIMER
    quick: bool = False
    native_openblas: bool = False
    tiny: bool = False

    @classmethod
    def quick_config(cls, **overrides: Any) -> ModelsConfig:
        """``--models --quick`` (:data:`QUICK_MODELS`), with ``overrides`` applied."""
        base = cls(
            models=QUICK_MODELS, modes=QUICK_MODES, impls=QUICK_IMPLS, timer=QUICK_TIMER, quick=True
        )
        return replace(base, **overrides)

    def check(self) -> None:
        """Raise ValueError naming what is unknown."""
        for name, allowed in (("models", MODELS), ("modes", MODES), ("impls", IMPLS)):
            unknown = sorted(set(getattr(self, name)) - set(allowed))
            if unknown:
                raise ValueError(f"unknown {name} {unknown}; choose from {tuple(allowed)}")


# ---- the models, written once against ``lib`` ----------------------------------------------


def _gpt(lib: Any, cfg: GPTConfig) -> Any:
    nn, functional = lib.nn, lib.nn.functional
    head_width = cfg.width // cfg.heads

    class Block(nn.Module):  # type: ignore[name-defined, misc]
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(cfg.width), nn.LayerNorm(cfg.width)
            self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
            self.proj = nn.Linear(cfg.width, cfg.width)
            self.fc = nn.Linear(cfg.width, 4 * cfg.width)
            self.out = nn.Linear(4 * cfg.width, cfg.width)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = (
                a.view(b, t, cfg.heads, head_width).transpose(1, 2)
                for a in self.qkv(self.ln1(x)).split(c, dim=2)
            )
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(functional.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):  # type: ignore[name-defined, misc]
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(cfg.vocab, cfg.width)
            self.pos = nn.Embedding(cfg.block, cfg.width)
            self.blocks = nn.ModuleList([Block() for _ in range(cfg.layers)])
            self.ln = nn.LayerNorm(cfg.width)
            self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.tok(idx) + self.pos(lib.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return GPT()


def _cnn(lib: Any, cfg: CNNConfig) -> Any:
    nn = lib.nn
    layers: list[Any] = []
    previous = 3
    for channels in cfg.channels:
        layers += [
            nn.Conv2d(previous, channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ]
        previous = channels
    side = cfg.size // 2 ** len(cfg.channels)
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(previous * side * side, cfg.classes))


def _char_lm(lib: Any, cfg: CharLMConfig) -> Any:
    nn = lib.nn

    class CharLM(nn.Module):  # type: ignore[name-defined, misc]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.embed)
            self.rnn = nn.LSTM(cfg.embed, cfg.hidden, batch_first=True)
            self.head = nn.Linear(cfg.hidden, cfg.vocab)

        def forward(self, idx: Any) -> Any:
            out, _ = self.rnn(self.embed(idx))
            return self.head(out)

    return CharLM()


def build_module(lib: Any, cfg: Config) -> Any:
    """The model of ``cfg`` from ``lib`` (``pylucid`` or ``torch``), freshly initialised."""
    if isinstance(cfg, GPTConfig):
        return _gpt(lib, cfg)
    if isinstance(cfg, CNNConfig):
        return _cnn(lib, cfg)
    return _char_lm(lib, cfg)


def _optimizer(lib: Any, cfg: Config, params: Any) -> Any:
    if isinstance(cfg, CNNConfig):
        return lib.optim.SGD(params, lr=0.05, momentum=0.9)
    return lib.optim.AdamW(params, lr=3e-4)


def _clip(cfg: Config) -> float | None:
    """The gradients' norm is clipped to this (None: not clipped)."""
    return None if isinstance(cfg, CNNConfig) else 1.0


def batch_data(cfg: Config, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic batch every step of ``cfg``'s model trains on: inputs and int64
    targets (a language model's targets are its inputs shifted by one)."""
    rng = np.random.default_rng(seed)
    if isinstance(cfg, CNNConfig):
        images = rng.standard_normal((cfg.batch, 3, cfg.size, cfg.size)).astype(np.float32)
        return images, rng.integers(0, cfg.classes, cfg.batch)
    length = cfg.block if isinstance(cfg, GPTConfig) else cfg.length
    text = rng.integers(0, cfg.vocab, (cfg.batch, length + 1))
    return np.ascontiguousarray(text[:, :-1]), np.ascontiguousarray(text[:, 1:])


def initial_state(cfg: Config, torch: Any = None) -> tuple[dict[str, np.ndarray], list[str]]:
    """The weights every implementation starts from - PyTorch's initialisation seeded with
    0, or pylucid's without PyTorch - as NumPy arrays by state-dict key, and the keys that
    are parameters (the rest are buffers: BatchNorm's running statistics)."""
    lib = torch if torch is not None else pl
    lib.manual_seed(0)
    model = build_module(lib, cfg)
    state = {key: np.array(value.detach().numpy()) for key, value in model.state_dict().items()}
    return state, [name for name, _ in model.named_parameters()]


def _train_step(lib: Any, cfg: Config, model: Any, forward: Any) -> Callable[[Any, Any], Any]:
    """One step of the training script, for ``lib`` = pylucid or torch: ``forward`` (the
    model, or what compiles it) maps the inputs to logits; returns the loss."""
    optimizer = _optimizer(lib, cfg, model.parameters())
    clip = _clip(cfg)

    def step(x: Any, y: Any) -> Any:
        optimizer.zero_grad()
        logits = forward(x)
        loss = lib.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        if clip is not None:
            lib.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss

    return step


# ---- the programs --------------------------------------------------------------------------


@dataclass
class Program:
    """One implementation of a model's step.

    Attributes
    ----------
    call : callable
        One training step; returns the loss as a float.
    compiled : object or None
        ``pl.compile``'s function (its ``stats`` say whether it replayed).
    notes : list of str
        What the program learned while warming up (torch.compile's graph breaks, ...).
    """

    call: Callable[[], float]
    compiled: Any = None
    notes: list[str] = field(default_factory=list)


def _torch_program(
    torch: Any,
    cfg: Config,
    state: Mapping[str, np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    compiled: bool,
) -> Program:
    model = build_module(torch, cfg)
    model.load_state_dict({key: torch.from_numpy(value.copy()) for key, value in state.items()})
    forward = torch.compile(model) if compiled else model
    step = _train_step(torch, cfg, model, forward)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    return Program(lambda: step(xt, yt).item())


def _pylucid_program(
    cfg: Config,
    state: Mapping[str, np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    device: str,
    compiled: bool,
) -> Program:
    model = build_module(pl, cfg)
    model.load_state_dict({key: pl.from_numpy(value.copy()) for key, value in state.items()})
    model.to(device)
    step = _train_step(pl, cfg, model, model)
    xt, yt = pl.from_numpy(x).to(device), pl.from_numpy(y).to(device)
    if not compiled:
        return Program(lambda: step(xt, yt).item())
    program = pl.compile(step, fallback="raise")
    return Program(lambda: program(xt, yt).item(), compiled=program)


def build_program(
    impl: str,
    cfg: Config,
    state: Mapping[str, np.ndarray],
    parameters: Sequence[str],
    modules: Mapping[str, Any],
) -> Program:
    """A new program of ``impl`` (of :data:`IMPLS`) training ``cfg``'s model from
    ``state`` (whose ``parameters`` are trained; the rest are buffers) on
    :func:`batch_data`; ``modules`` holds the libraries by name (``torch``, ``jax``)."""
    x, y = batch_data(cfg)
    if impl in ("torch", "torch.compile"):
        return _torch_program(modules["torch"], cfg, state, x, y, impl == "torch.compile")
    if impl == "jax.jit":
        return _jax_program(modules["jax"], cfg, state, parameters, x, y)
    if impl in ("pylucid", "pl.compile", "pylucid.mlx"):
        device = "gpu" if impl == "pylucid.mlx" else "cpu"
        return _pylucid_program(cfg, state, x, y, device, impl == "pl.compile")
    raise ValueError(f"unknown implementation {impl!r}; choose from {IMPLS}")


# ---- JAX: the same models in jax.numpy, the whole step one jit ------------------------------


def _jax_forward(jax: Any, cfg: Config) -> Callable[[dict, dict, Any], tuple[Any, dict]]:
    """``forward(params, buffers, x) -> (logits, new buffers)`` of ``cfg``'s model, reading
    the weights by PyTorch's state-dict keys (``buffers``: BatchNorm's running statistics,
    updated as PyTorch's training mode does)."""
    jnp = jax.numpy

    def linear(p: dict, name: str, x: Any) -> Any:
        out = x @ p[f"{name}.weight"].T
        return out + p[f"{name}.bias"] if f"{name}.bias" in p else out

    def layer_norm(p: dict, name: str, x: Any) -> Any:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * p[f"{name}.weight"] + p[f"{name}.bias"]

    if isinstance(cfg, GPTConfig):

        def gpt(p: dict, buffers: dict, idx: Any) -> tuple[Any, dict]:
            b, t = idx.shape
            x = p["tok.weight"][idx] + p["pos.weight"][:t]
            for i in range(cfg.layers):
                pre = f"blocks.{i}"
                qkv = linear(p, f"{pre}.qkv", layer_norm(p, f"{pre}.ln1", x))
                q, k, v = (
                    a.reshape(b, t, cfg.heads, cfg.width // cfg.heads)
                    for a in jnp.split(qkv, 3, axis=-1)
                )
                y = jax.nn.dot_product_attention(q, k, v, is_causal=True)
                x = x + linear(p, f"{pre}.proj", y.reshape(b, t, cfg.width))
                hidden = linear(p, f"{pre}.fc", layer_norm(p, f"{pre}.ln2", x))
                x = x + linear(p, f"{pre}.out", jax.nn.gelu(hidden, approximate=False))
            return linear(p, "head", layer_norm(p, "ln", x)), buffers

        return gpt
    if isinstance(cfg, CNNConfig):

        def cnn(p: dict, buffers: dict, images: Any) -> tuple[Any, dict]:
            x, updated = images, dict(buffers)
            for i in range(len(cfg.channels)):
                conv, norm = 4 * i, 4 * i + 1
                x = jax.lax.conv_general_dilated(
                    x,
                    p[f"{conv}.weight"],
                    (1, 1),
                    ((1, 1), (1, 1)),
                    dimension_numbers=("NCHW", "OIHW", "NCHW"),
                )
                mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
                count = x.size // x.shape[1]
                for key, value in (
                    ("running_mean", mean),
                    ("running_var", var * count / (count - 1)),
                ):
                    updated[f"{norm}.{key}"] = 0.9 * buffers[f"{norm}.{key}"] + 0.1 * value
                updated[f"{norm}.num_batches_tracked"] = buffers[f"{norm}.num_batches_tracked"] + 1
                shape = (1, -1, 1, 1)
                x = (x - mean.reshape(shape)) / jnp.sqrt(var.reshape(shape) + 1e-5)
                x = x * p[f"{norm}.weight"].reshape(shape) + p[f"{norm}.bias"].reshape(shape)
                x = jax.lax.reduce_window(
                    jnp.maximum(x, 0), -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"
                )
            return linear(p, str(4 * len(cfg.channels) + 1), x.reshape(x.shape[0], -1)), updated

        return cnn

    def char_lm(p: dict, buffers: dict, idx: Any) -> tuple[Any, dict]:
        def cell(carry: tuple[Any, Any], xt: Any) -> tuple[tuple[Any, Any], Any]:
            h, c = carry
            gates = (
                xt @ p["rnn.weight_ih_l0"].T
                + p["rnn.bias_ih_l0"]
                + h @ p["rnn.weight_hh_l0"].T
                + p["rnn.bias_hh_l0"]
            )
            i, f, g, o = jnp.split(gates, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        x = p["embed.weight"][idx].swapaxes(0, 1)  # (time, batch, features)
        zeros = jnp.zeros((idx.shape[0], cfg.hidden), x.dtype)
        _, hs = jax.lax.scan(cell, (zeros, zeros), x)
        return linear(p, "head", hs.swapaxes(0, 1)), buffers

    return char_lm


def _jax_program(
    jax: Any,
    cfg: Config,
    state: Mapping[str, np.ndarray],
    parameters: Sequence[str],
    x: np.ndarray,
    y: np.ndarray,
) -> Program:
    """The step as one ``jax.jit`` function: loss and gradients, clipping as
    ``clip_grad_norm_``, then PyTorch's AdamW (its defaults: betas 0.9 and 0.999, eps 1e-8,
    weight decay 0.01) or SGD with momentum, on the same learning rates."""
    jnp = jax.numpy
    forward = _jax_forward(jax, cfg)
    clip = _clip(cfg)
    sgd = isinstance(cfg, CNNConfig)
    params = {key: jnp.asarray(state[key]) for key in parameters}
    buffers = {key: jnp.asarray(value) for key, value in state.items() if key not in params}
    opt_state: dict[str, Any] = {"step": jnp.zeros((), jnp.float32)}
    for moment in ("m", "v"):  # (buffers of their own: the step donates them)
        opt_state[moment] = {key: jnp.zeros_like(value) for key, value in params.items()}

    def loss_of(params: dict, buffers: dict, inputs: Any, targets: Any) -> tuple[Any, dict]:
        logits, updated = forward(params, buffers, inputs)
        logits = logits.reshape(-1, logits.shape[-1])
        logp = jax.nn.log_softmax(logits, axis=-1)
        picked = jnp.take_along_axis(logp, targets.reshape(-1, 1), axis=1)
        return -picked.mean(), updated

    def step(
        params: dict, buffers: dict, opt_state: dict, inputs: Any, targets: Any
    ) -> tuple[dict, dict, dict, Any]:
        (loss, buffers), grads = jax.value_and_grad(loss_of, has_aux=True)(
            params, buffers, inputs, targets
        )
        if clip is not None:
            norm = jnp.sqrt(sum(jnp.sum(g * g) for g in grads.values()))
            scale = jnp.minimum(1.0, clip / (norm + 1e-6))
            grads = {key: g * scale for key, g in grads.items()}
        t = opt_state["step"] + 1
        if sgd:
            m = {key: 0.9 * opt_state["m"][key] + g for key, g in grads.items()}
            params = {key: p - 0.05 * m[key] for key, p in params.items()}
            return params, buffers, {"step": t, "m": m, "v": opt_state["v"]}, loss
        lr, beta1, beta2 = 3e-4, 0.9, 0.999
        m = {k: beta1 * opt_state["m"][k] + (1 - beta1) * g for k, g in grads.items()}
        v = {k: beta2 * opt_state["v"][k] + (1 - beta2) * g * g for k, g in grads.items()}
        size = lr / (1 - beta1**t)
        root = jnp.sqrt(1 - beta2**t)
        params = {
            k: p * (1 - lr * 0.01) - size * m[k] / (jnp.sqrt(v[k]) / root + 1e-8)
            for k, p in params.items()
        }
        return params, buffers, {"step": t, "m": m, "v": v}, loss

    jitted = jax.jit(step, donate_argnums=(0, 1, 2))
    inputs, targets = jnp.asarray(x), jnp.asarray(y)

    def call() -> float:
        nonlocal params, buffers, opt_state
        params, buffers, opt_state, loss = jitted(params, buffers, opt_state, inputs, targets)
        return float(loss)

    return Program(call)


# ---- one mode, in this process --------------------------------------------------------------


def _load_libraries(impls: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Import the libraries ``impls`` need; return them by name and, for each
    implementation that cannot run here, why."""
    modules: dict[str, Any] = {}
    why_not: dict[str, str] = {}
    for impl in impls:
        need = _NEEDS.get(impl)
        if need is None or need in modules:
            continue
        if need == "mlx" and "mlx" not in pl.backends.available():
            why_not[impl] = "pylucid's gpu device (MLX) is unavailable: pip install 'pylucid[mlx]'"
            continue
        try:
            modules[need] = importlib.import_module("mlx.core" if need == "mlx" else need)
        except ImportError as exc:
            why_not.update(
                {
                    other: f"{need} is not installed ({exc}): pip install {need}"
                    for other in impls
                    if _NEEDS.get(other) == need
                }
            )
    return modules, why_not


def _threadpools() -> list[dict[str, Any]] | None:
    """threadpoolctl's view of the native thread pools (BLAS, OpenMP): library, version,
    threads and, for OpenBLAS, the kernels' architecture; None without threadpoolctl."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    keys = ("internal_api", "prefix", "version", "num_threads", "architecture", "threading_layer")
    return [{k: pool.get(k) for k in keys} for pool in threadpoolctl.threadpool_info()]


@contextlib.contextmanager
def thread_limits(threads: int, torch: Any = None) -> Iterator[dict[str, Any]]:
    """Every library's threads set to ``threads`` for the ``with`` block, then restored:
    pylucid's (Numba's), PyTorch's and, through threadpoolctl where installed, the native
    pools' (NumPy's OpenBLAS, OpenMP). Yields what each reports (MLX has no setting: its
    CPU stream's threads are its own)."""
    previous = pl.get_num_threads(), torch.get_num_threads() if torch is not None else None
    pl.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if torch is not None:
        torch.set_num_threads(threads)
    limiter = None
    with contextlib.suppress(ImportError):
        import threadpoolctl

        limiter = threadpoolctl.threadpool_limits(limits=threads)
    try:
        yield {
            "requested": threads,
            "pylucid": pl.get_num_threads(),
            "torch": torch.get_num_threads() if torch is not None else None,
            "threadpools": _threadpools(),
        }
    finally:
        if limiter is not None:
            limiter.restore_original_limits()
        pl.set_num_threads(previous[0])
        if torch is not None:
            torch.set_num_threads(previous[1])


def _products(torch: Any, tiny: bool) -> dict[str, Any]:
    """A GPT's typical product, (2048, 256) @ (256, 768) float32 (the small GPT's attention
    input projection), through NumPy's BLAS - the one pylucid calls - and PyTorch's."""
    m, k, n = (16, 8, 24) if tiny else (2048, 256, 768)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    calls: dict[str, Callable[[], Any]] = {"numpy": lambda: a @ b}
    if torch is not None:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        calls["torch"] = lambda: ta @ tb
    measured, _ = measure(calls, TimerConfig(target_s=0.05, repeats=3))
    return {
        "shape": [m, k, n],
        "flops": 2 * m * k * n,
        **{f"{name}_s": row.median_s for name, row in measured.items()},
    }


def _graph_breaks(modules: Mapping[str, Any]) -> int:
    """torch.compile's graph breaks so far in this process (0 without PyTorch)."""
    if "torch" not in modules:
        return 0
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


def _warm(impl: str, program: Program, modules: Mapping[str, Any]) -> tuple[float, list[float]]:
    """Call ``program`` until its steady state; return the first loss and each call's
    seconds (the first: compiles, captures)."""
    breaks = _graph_breaks(modules) if impl == "torch.compile" else 0
    seconds, first = [], math.nan
    for index in range(_WARMUP.get(impl, _DEFAULT_WARMUP)):
        started = time.perf_counter()
        loss = program.call()
        seconds.append(time.perf_counter() - started)
        first = loss if index == 0 else first
    if impl == "torch.compile" and _graph_breaks(modules) > breaks:
        program.notes.append(f"{_graph_breaks(modules) - breaks} graph break(s)")
    return first, seconds


def _replayed(program: Program, caught: list[warnings.WarningMessage]) -> str | None:
    """Why ``pl.compile``'s program did not replay every timed call (None: it did)."""
    stats = program.compiled.stats
    if stats.eager_calls == 0 and stats.replays > 0:
        return None
    said = [str(w.message) for w in caught if "pl.compile" in str(w.message)]
    return (said[0] if said else "the step ran eagerly") + f" ({stats})"


def _prior(results: Mapping[str, Mapping[str, Any]], spec: ModelSpec, impl: str) -> str | None:
    """Why ``impl`` is not run on ``spec`` after what it did on ``spec.after`` (None: run)."""
    done = results.get(spec.after or "", {}).get(impl)
    if done is None:
        return None
    if done["status"] != "timed":
        return f"{done['status']} on {spec.after}"
    if done["median_s"] > MEDIUM_AFTER_S and impl not in _ALWAYS_TIMED:
        return (
            f"{format_time(done['median_s'])} a step on {spec.after} (over "
            f"{MEDIUM_AFTER_S:g} s: this one has several times the work)"
        )
    return None


def _time_model(
    spec: ModelSpec,
    config: ModelsConfig,
    modules: Mapping[str, Any],
    why_not: Mapping[str, str],
    results: dict[str, dict[str, Any]],
    note: Callable[[str], None],
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Warm up and time every implementation of ``spec`` interleaved; fill ``results[name]``
    with each implementation's outcome; return the rows and the first steps' losses."""
    cfg = spec.tiny if config.tiny else spec.config
    state, parameters = initial_state(cfg, modules.get("torch"))
    outcomes: dict[str, dict[str, Any]] = {}
    programs: dict[str, Program] = {}
    losses: dict[str, float] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for impl in config.impls:
            reason = why_not.get(impl) or _prior(results, spec, impl)
            if reason is not None:
                outcomes[impl] = {"status": "skipped", "reason": reason}
                continue
            try:
                program = build_program(impl, cfg, state, parameters, modules)
                losses[impl], seconds = _warm(impl, program, modules)
            except pl.compiler.capture.CaptureError as exc:
                outcomes[impl] = {"status": "raises", "reason": str(exc)}
            except Exception as exc:  # a broken implementation is reported, not fatal
                outcomes[impl] = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
            else:
                programs[impl] = program
                outcomes[impl] = {"status": "timed", "warmup_s": seconds, "notes": program.notes}
            note(f"  {spec.name} {impl}: {_warm_line(outcomes[impl])}")
        before = snapshot()
        measured, failed = measure({impl: p.call for impl, p in programs.items()}, config.timer)
        others = others_share(before, snapshot())
        for impl, error in failed.items():
            outcomes[impl] = {"status": "failed", "reason": error}
        if "pl.compile" in measured and (why := _replayed(programs["pl.compile"], caught)):
            outcomes["pl.compile"] = {"status": "fallback", "reason": why}
    rows = []
    for impl, m in measured.items():
        outcome = outcomes[impl]
        outcome["median_s"] = m.median_s
        if outcome["status"] != "timed":
            continue
        rows.append(
            {
                "model": spec.name,
                "impl": impl,
                "median_s": m.median_s,
                "min_s": m.min_s,
                "number": m.number,
                "repeats": len(m.samples_s),
                "samples_s": m.samples_s,
                "warmup_s": outcome["warmup_s"],
                "others_cpu": others,
            }
        )
    results[spec.name] = outcomes
    return rows, losses


def _warm_line(outcome: dict[str, Any]) -> str:
    if outcome["status"] != "timed":
        return f"{outcome['status']}: {outcome['reason'].splitlines()[0][:160]}"
    seconds = " + ".join(f"{s:.2f}" for s in outcome["warmup_s"])
    return f"warm-up calls {seconds} s" + "".join(f"; {n}" for n in outcome["notes"])


def time_models(
    config: ModelsConfig, threads: int, note: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Run one mode's work in this process: every model of ``config``, its implementations
    timed interleaved, every library on ``threads`` threads (restored afterwards).

    Returns
    -------
    dict
        ``threads_reported`` (what each library reports: :func:`thread_limits`), ``libraries``
        (versions), ``products`` (:func:`_products`), ``rows`` ({model, impl, median_s,
        min_s, number, repeats, samples_s, warmup_s, others_cpu} per timed
        implementation), ``outcomes`` ({model: {impl: {status ("timed", "raises",
        "fallback", "failed", "skipped"), reason, warmup_s, median_s, notes}}}), ``losses``
        ({model: {impl: the first step's loss}}), ``cpu_s`` (this process's CPU time).
    """
    config.check()
    say = note or (lambda line: None)
    modules, why_not = _load_libraries(config.impls)
    gc.collect()
    gc.freeze()  # the libraries' own objects stay out of the collections between models
    answer: dict[str, Any] = {
        "libraries": {
            name: getattr(module, "__version__", None) for name, module in modules.items()
        },
        "rows": [],
        "outcomes": {},
        "losses": {},
    }
    try:
        with thread_limits(threads, modules.get("torch")) as facts:
            answer["threads_reported"] = facts
            answer["products"] = _products(modules.get("torch"), config.tiny)
            for name in config.models:
                say(f"{name} ({threads} thread{'s' if threads > 1 else ''}) ...")
                rows, losses = _time_model(
                    MODELS[name], config, modules, why_not, answer["outcomes"], say
                )
                answer["rows"] += rows
                answer["losses"][name] = losses
                say(
                    f"{name}: "
                    + "  ".join(f"{r['impl']} {format_time(r['median_s'])}" for r in rows)
                )
                gc.collect()
    finally:
        gc.unfreeze()
    answer["cpu_s"] = time.process_time()
    return answer


# ---- the modes, each in a fresh process -----------------------------------------------------


def child_environment(
    threads: int, native_openblas: bool, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a mode's process: ``base`` (this one's) with every library's
    thread pool sized to ``threads`` before it starts, and without
    :data:`OPENBLAS_VARIABLES` if ``native_openblas``."""
    env = dict(os.environ if base is None else base)
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[key] = str(threads)
    xla = f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}"
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {xla} intra_op_parallelism_threads={threads}"
    if native_openblas:
        for key in OPENBLAS_VARIABLES:
            env.pop(key, None)
    return env


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process_cpu_s(pid: int) -> float | None:
    """CPU seconds of process ``pid`` so far (Linux's /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run_child(
    request: dict[str, Any], env: dict[str, str], progress: TextIO | None
) -> tuple[dict[str, Any] | None, str | None]:
    """Run :func:`worker_main` on ``request`` in a fresh interpreter with ``env``, its output
    copied to ``progress`` line by line; return its answer, or None and why."""
    with tempfile.TemporaryDirectory() as folder:
        answer_path = Path(folder) / "answer.json"
        process = subprocess.Popen(
            [sys.executable, "-c", _WORKER, json.dumps({**request, "answer": str(answer_path)})],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = threading.Timer(MODE_TIMEOUT_S, process.kill)
        deadline.start()
        tail: list[str] = []
        try:
            assert process.stdout is not None
            for line in process.stdout:
                tail = [*tail[-40:], line.rstrip()]
                if progress is not None:
                    progress.write(line)
                    progress.flush()
            process.wait()
        finally:
            deadline.cancel()
            if process.poll() is None:
                process.kill()
                process.wait()
        if process.returncode != 0 or not answer_path.exists():
            return None, f"the mode's process exited with {process.returncode}:\n" + "\n".join(
                tail[-15:]
            )
        return json.loads(answer_path.read_text()), None


def _run_mode(mode: Mode, config: ModelsConfig, progress: TextIO | None) -> dict[str, Any]:
    """One mode in a fresh process (beside a competitor if the mode has one), and how busy
    the machine was meanwhile."""
    env = child_environment(mode.threads, config.native_openblas)
    request = {"config": asdict(config), "threads": mode.threads}
    section: dict[str, Any] = {
        "title": mode.title,
        "threads": mode.threads,
        "competitor": mode.competitor,
        "env": {key: env.get(key) for key in (*OPENBLAS_VARIABLES, "OMP_NUM_THREADS")},
        "load_average_before": load_average(),
    }
    start, children = snapshot(), _children_cpu_s()
    rival_s = None
    with competitor() if mode.competitor else contextlib.nullcontext() as rival:
        answer, error = _run_child(request, env, progress)
        if rival is not None:
            rival_s = _process_cpu_s(rival.pid)
            section["competitor_pid"] = rival.pid
    end = snapshot()
    capacity = (end.wall_s - start.wall_s) * end.cpus
    share = others_share(start, end)
    children = _children_cpu_s() - children
    section.update(
        {
            "load_average_after": load_average(),
            "elapsed_s": end.wall_s - start.wall_s,
            # other processes' share of the CPUs, less this run's own processes and competitor
            "others_cpu": None if share is None else max(0.0, share - children / capacity),
            "competitor_cpu": None if rival_s is None else min(1.0, rival_s / capacity),
            "error": error,
            **(answer or {"rows": [], "outcomes": {}, "losses": {}}),
        }
    )
    return section


def _json(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists)."""
    return json.loads(json.dumps(value))


def run(config: ModelsConfig | None = None, progress: TextIO | None = None) -> dict[str, Any]:
    """Run the model benchmark: each mode of ``config`` in a fresh process.

    Returns
    -------
    dict
        ``schema`` (:data:`SCHEMA`), ``created``, ``config``, ``environment`` (this
        process's: :func:`pylucid.bench.runner.environment`), ``models`` ({name:
        {description, config}}), ``modes`` ({mode: its section: title, threads,
        competitor, env (the OpenBLAS variables and OMP_NUM_THREADS the process had),
        load_average_before/after, elapsed_s, others_cpu (other processes' share of the
        CPUs, this run's processes and its competitor left out), competitor_cpu (the
        competitor's share), error (None, or why the process failed), and
        :func:`time_models`'s answer}), ``busy`` (:func:`pylucid.bench.runner.busy_check`
        on the modes' others_cpu), ``elapsed_s``.
    """
    config = config or ModelsConfig()
    config.check()
    started = time.perf_counter()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "config": _json(asdict(config)),
        "environment": environment(),
        "models": {
            name: {
                "description": MODELS[name].description,
                "config": _json(asdict(MODELS[name].tiny if config.tiny else MODELS[name].config)),
            }
            for name in config.models
        },
        "modes": {},
    }
    for name in config.modes:
        if progress is not None:
            progress.write(f"mode: {MODES[name].title} (a fresh process)\n")
        doc["modes"][name] = _run_mode(MODES[name], config, progress)
    shares = {
        f"{MODES[name].title} mode": doc["modes"][name]["others_cpu"] for name in config.modes
    }
    doc["environment"]["load_average_end"] = load_average()
    doc["busy"] = busy_check(
        doc["environment"]["load_average"], doc["environment"]["load_average_end"], shares
    )
    doc["elapsed_s"] = time.perf_counter() - started
    return doc


def config_from_json(fields: Mapping[str, Any]) -> ModelsConfig:
    """The :class:`ModelsConfig` whose ``asdict`` (through JSON) is ``fields``."""
    lists = {key: tuple(fields[key]) for key in ("models", "modes", "impls")}
    return ModelsConfig(**{**fields, **lists, "timer": TimerConfig(**fields["timer"])})


def worker_main() -> None:
    """Entry point of a mode's process: run the JSON request in ``sys.argv[1]`` -
    ``{config, threads, answer}`` - and write :func:`time_models`'s answer, as JSON, to
    the file ``answer``; progress goes to stdout."""
    request = json.loads(sys.argv[1])
    answer = time_models(
        config_from_json(request["config"]),
        request["threads"],
        lambda line: print(line, flush=True),
    )
    Path(request["answer"]).write_text(json.dumps(answer))
