"""Differential fuzzing of ``pl.compile``: random training programs, eager against compiled.

Each program is drawn from its seed (:func:`draw_program`): a model of ``nn`` layers
(Linear, Conv2d, LayerNorm, BatchNorm, Dropout, activations with parameters: LeakyReLU,
ELU, Softplus, Hardtanh, PReLU), a loss (cross-entropy, maybe with smoothing or with
ignored targets whose count changes from batch to batch; MSE, L1, smooth L1), an optimizer
with random options and one or two parameter groups, maybe a scheduler stepped inside or
outside the step, ``zero_grad`` inside (first or last), outside (before or after each
call), every few calls (gradients accumulated in between) or never, with ``set_to_none``
either way and through the optimizer or the model, maybe ``clip_grad_norm_`` before the
update; and a sequence of calls, between which the program mutates what a step reads: the
batch's rows, its dtype, a parameter's ``requires_grad``, train/eval, a learning rate,
another hyperparameter (momentum, betas, nesterov, amsgrad, eps, weight decay, maximize,
...), a module attribute (a slope, a dropout probability, a norm's eps or momentum), a
parameter replaced by a new ``nn.Parameter`` (which the optimizer does not hold) or given
new storage (``p.data =``), values changed in place, a gradient dropped.

The program runs twice from the same seeds: eagerly, and with its step under
``pl.compile`` (``fallback="raise"``). After every call the two worlds are compared:
the returned loss, every parameter (the model's and the optimizer's), the presence and
values of their gradients, the optimizer's state, the model's buffers and the learning
rates. The contract checked:

- a tape replay gives eager's bits (``np.array_equal``, dtypes equal);
- a fused replay is within :data:`FUSED_RTOL` of eager, normwise per tensor (1e-9 in
  float64, 1e-4 in float32): fused code sums in float64 where eager sums in the dtype
  (NumPy's pairwise order), so a step differs by a few ULP of its sums, and training
  compounds that over the calls. Measured over 33 fused programs of 10 to 40 calls (the
  long run's 13 and 20 more): at most 9.9e-14 in float64 and 3.4e-6 in float32, 10000
  and 30 times inside the bounds;
- where eager raises, the compiled step raises the same type of error and leaves the same
  state; where only the compiled step refuses (a :class:`pl.CaptureError`), the call ran
  eagerly to its end (the state is eager's) - a refusal after a replay began would have
  to leave the parameters untouched, which the same comparison checks.

Runs: by default a short, derandomized run (:data:`CI_PROGRAMS` tape programs and
:data:`CI_FUSED` fused ones, a few hundred compiled calls); ``PYLUCID_COMPILE_FUZZ=N`` runs
N programs from ``PYLUCID_COMPILE_FUZZ_SEED`` (default 0), one in
``PYLUCID_COMPILE_FUZZ_FUSED_EVERY`` (default 8) also fused, and prints the counts. Run as
a script (``python -m tests.test_compile_fuzz N [seed]``) for the same with a report.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import pylucid as pl
import pylucid.nn.functional as F  # noqa: N812  (PyTorch's spelling)
from pylucid import nn

#: Programs of the short run (each runs eagerly and in tape mode).
CI_PROGRAMS = 28
#: Of those, how many also run in fused mode (a new graph compiles for seconds).
CI_FUSED = 3
#: Calls per program in the short run: drawn between these bounds.
CALLS = (8, 16)
#: Fused replays against eager, per dtype: ``|fused - eager| <= rtol (|eager| + max |eager|)``
#: per tensor (see the module's docstring for what was measured).
FUSED_RTOL = {"float64": 1e-9, "float32": 1e-4}

_ACTIVATIONS = ("tanh", "relu", "sigmoid", "gelu", "silu", "leaky_relu", "elu", "softplus",
                "hardtanh", "prelu")  # fmt: skip


# -- programs ---------------------------------------------------------------------------------
@dataclass
class Program:
    """One random training program (see the module's docstring); everything a world needs
    to build itself and replay its calls, drawn from ``seed``."""

    seed: int
    dtype: str
    image: bool
    features: int
    classes: int
    layers: list[tuple[str, dict[str, Any]]]
    loss: tuple[str, dict[str, Any]]
    optimizer: tuple[str, dict[str, Any]]
    two_groups: bool
    scheduler: tuple[str, dict[str, Any]] | None
    scheduler_inside: bool
    zero: str
    set_to_none: bool
    zero_via_model: bool
    clip: float | None
    #: per call: the batch's rows, and the mutations made before it
    calls: list[tuple[int, list[tuple]]] = field(default_factory=list)

    def describe(self) -> str:
        layers = ", ".join(name for name, _ in self.layers)
        return (f"seed {self.seed}: {self.dtype} [{layers}] {self.loss[0]} "
                f"{self.optimizer[0]}{self.optimizer[1]} groups={2 if self.two_groups else 1} "
                f"sched={self.scheduler and self.scheduler[0]}"
                f"{'(inside)' if self.scheduler_inside else ''} zero={self.zero}"
                f"(set_to_none={self.set_to_none}, model={self.zero_via_model}) "
                f"clip={self.clip}")  # fmt: skip


def _optimizer_options(rng: np.random.Generator) -> tuple[str, dict[str, Any]]:
    names = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"]
    if hasattr(pl.optim, "Adadelta"):
        names.append("Adadelta")
    name = names[rng.integers(len(names))]
    coin = lambda p=0.5: bool(rng.random() < p)  # noqa: E731
    if name == "SGD":
        momentum = float(rng.choice([0.0, 0.5, 0.9]))
        nesterov = momentum > 0 and coin(0.3)
        return name, dict(lr=float(rng.choice([0.01, 0.05, 0.1])), momentum=momentum,
                          dampening=0.0 if nesterov else float(rng.choice([0.0, 0.1])),
                          weight_decay=float(rng.choice([0.0, 1e-3])), nesterov=nesterov,
                          maximize=coin(0.1))  # fmt: skip
    if name in ("Adam", "AdamW"):
        return name, dict(lr=float(rng.choice([1e-3, 1e-2])),
                          betas=(float(rng.choice([0.8, 0.9])), float(rng.choice([0.99, 0.999]))),
                          eps=float(rng.choice([1e-8, 1e-6])),
                          weight_decay=float(rng.choice([0.0, 1e-2])), amsgrad=coin(0.3),
                          maximize=coin(0.1))  # fmt: skip
    if name == "RMSprop":
        return name, dict(lr=float(rng.choice([1e-3, 1e-2])), alpha=float(rng.choice([0.9, 0.99])),
                          eps=1e-8, weight_decay=float(rng.choice([0.0, 1e-3])),
                          momentum=float(rng.choice([0.0, 0.5])), centered=coin(0.3),
                          maximize=coin(0.1))  # fmt: skip
    if name == "Adagrad":
        return name, dict(lr=float(rng.choice([1e-2, 5e-2])),
                          lr_decay=float(rng.choice([0.0, 1e-2])),
                          weight_decay=float(rng.choice([0.0, 1e-3])),
                          initial_accumulator_value=float(rng.choice([0.0, 0.1])),
                          maximize=coin(0.1))  # fmt: skip
    return name, dict(
        lr=float(rng.choice([0.5, 1.0])),
        rho=float(rng.choice([0.9, 0.95])),
        weight_decay=float(rng.choice([0.0, 1e-3])),
        maximize=coin(0.1),
    )


def _hyperparameter_change(rng: np.random.Generator, optimizer: str) -> tuple[str, Any]:
    """A legal change of a hyperparameter other than the rate (the group's key, value)."""
    choices: dict[str, list[Any]] = {
        "SGD": [("momentum", 0.7), ("momentum", 0.0), ("weight_decay", 2e-3),
                ("weight_decay", 0.0), ("maximize", True), ("maximize", False),
                ("nesterov", "toggle"), ("dampening", 0.2)],
        "Adam": [("betas", (0.85, 0.995)), ("eps", 1e-7), ("weight_decay", 3e-3),
                 ("amsgrad", "toggle"), ("maximize", "toggle")],
        "RMSprop": [("alpha", 0.95), ("eps", 1e-6), ("weight_decay", 2e-3),
                    ("momentum", 0.3), ("centered", "toggle"), ("maximize", "toggle")],
        "Adagrad": [("lr_decay", 2e-2), ("weight_decay", 2e-3), ("eps", 1e-8),
                    ("maximize", "toggle")],
        "Adadelta": [("rho", 0.8), ("eps", 1e-5), ("weight_decay", 2e-3),
                     ("maximize", "toggle")],
    }  # fmt: skip
    options = choices["Adam" if optimizer == "AdamW" else optimizer]
    return options[rng.integers(len(options))]


def draw_program(seed: int, calls: tuple[int, int] = CALLS) -> Program:
    """The program of ``seed`` (deterministic)."""
    rng = np.random.default_rng(seed)
    coin = lambda p=0.5: bool(rng.random() < p)  # noqa: E731
    dtype = "float32" if coin(0.2) else "float64"
    image = coin(0.25)
    classes = int(rng.integers(2, 5))
    layers: list[tuple[str, dict[str, Any]]] = []
    modules_with_attributes: list[tuple[int, str]] = []

    def activation() -> None:
        name = _ACTIVATIONS[rng.integers(len(_ACTIVATIONS))]
        options: dict[str, Any] = {}
        if name == "leaky_relu":
            options = {"negative_slope": float(rng.choice([0.01, 0.1, 0.3]))}
        elif name == "elu":
            options = {"alpha": float(rng.choice([0.5, 1.0, 1.5]))}
        elif name == "softplus":
            options = {"beta": float(rng.choice([0.5, 1.0, 2.0]))}
        elif name == "hardtanh":
            options = {"min_val": -float(rng.choice([0.5, 1.0])), "max_val": 1.0}
        layers.append((name, options))
        if options:
            modules_with_attributes.append((len(layers) - 1, name))

    if image:
        channels, side = int(rng.integers(1, 3)), int(rng.integers(4, 7))
        out_channels, stride, padding = int(rng.integers(2, 4)), int(rng.integers(1, 3)), 1
        layers.append(
            (
                "conv2d",
                dict(
                    in_channels=channels,
                    out_channels=out_channels,
                    kernel_size=3,
                    stride=stride,
                    padding=padding,
                ),
            )
        )
        activation()
        if coin(0.4):
            layers.append(
                (
                    "batchnorm2d",
                    dict(num_features=out_channels, momentum=float(rng.choice([0.1, 0.3]))),
                )
            )
            modules_with_attributes.append((len(layers) - 1, "batchnorm2d"))
        layers.append(("flatten", {}))
        edge = (side + 2 * padding - 3) // stride + 1
        width = out_channels * edge * edge
        features = (channels, side)
    else:
        features = int(rng.integers(3, 7))
        width = features
        for _ in range(int(rng.integers(1, 3))):
            hidden = int(rng.integers(3, 9))
            layers.append(("linear", dict(in_features=width, out_features=hidden,
                                          bias=coin(0.85))))  # fmt: skip
            width = hidden
            activation()
            extra = rng.random()
            if extra < 0.2:
                layers.append(
                    ("layernorm", dict(normalized_shape=width, eps=float(rng.choice([1e-5, 1e-3]))))
                )
                modules_with_attributes.append((len(layers) - 1, "layernorm"))
            elif extra < 0.35:
                layers.append(
                    (
                        "batchnorm1d",
                        dict(num_features=width, momentum=float(rng.choice([0.1, 0.3]))),
                    )
                )
                modules_with_attributes.append((len(layers) - 1, "batchnorm1d"))
            if coin(0.3):
                layers.append(("dropout", dict(p=float(rng.choice([0.1, 0.3, 0.5])))))
                modules_with_attributes.append((len(layers) - 1, "dropout"))
    layers.append(("linear", dict(in_features=width, out_features=classes, bias=True)))
    loss_kind = ["cross_entropy", "mse", "l1", "smooth_l1"][rng.integers(4)]
    loss_options: dict[str, Any] = {"reduction": "sum" if coin(0.25) else "mean"}
    if loss_kind == "cross_entropy" and coin(0.3):
        loss_options["label_smoothing"] = 0.1
    if loss_kind == "cross_entropy" and coin(0.3):
        loss_options["ignore_index"] = -100  # (some targets of each batch ignored)
    if loss_kind == "smooth_l1":
        loss_options["beta"] = float(rng.choice([0.5, 1.0]))
    optimizer = _optimizer_options(rng)
    scheduler = None
    if coin(0.45):
        kind = ["step", "exponential", "cosine", "one_cycle", "lambda"][rng.integers(5)]
        scheduler = (kind, {})
    zero = ["inside_start", "inside_end", "outside_before", "outside_after", "every_3",
            "absent"][rng.integers(6)]  # fmt: skip
    program = Program(
        seed=seed, dtype=dtype, image=image, features=features, classes=classes,
        layers=layers, loss=(loss_kind, loss_options), optimizer=optimizer,
        two_groups=coin(0.25), scheduler=scheduler, scheduler_inside=coin(0.5),
        zero=zero, set_to_none=coin(0.6), zero_via_model=coin(0.2),
        clip=float(rng.choice([0.5, 5.0])) if coin(0.2) else None,
    )  # fmt: skip
    rows = int(rng.integers(3, 7))
    for _ in range(int(rng.integers(*calls))):
        mutations: list[tuple] = []
        if rng.random() < 0.3:
            mutations.append(_mutation(rng, program, modules_with_attributes))
            if mutations[-1][0] == "rows":
                rows = mutations[-1][1]
        program.calls.append((rows, mutations))
    return program


def _mutation(rng: np.random.Generator, program: Program,
              attributes: list[tuple[int, str]]) -> tuple:  # fmt: skip
    kinds = [
        "rows",
        "input_dtype",
        "requires_grad",
        "train",
        "lr",
        "hyper",
        "module_attr",
        "replace_param",
        "param_data",
        "param_inplace",
        "grad_none",
        "zero_outside",
    ]
    kind = kinds[rng.integers(len(kinds))]
    pick = int(rng.integers(1 << 30))
    if kind == "rows":
        return ("rows", int(rng.integers(2, 8)))
    if kind == "input_dtype":
        return ("input_dtype", "float32" if program.dtype == "float64" else "float64")
    if kind == "requires_grad":
        return ("requires_grad", pick, bool(rng.random() < 0.5))
    if kind == "train":
        return ("train", bool(rng.random() < 0.5))
    if kind == "lr":
        return ("lr", pick, float(rng.choice([0.5, 0.9, 1.5])))
    if kind == "hyper":
        return ("hyper", pick, *_hyperparameter_change(rng, program.optimizer[0]))
    if kind == "module_attr" and attributes:
        index, name = attributes[rng.integers(len(attributes))]
        attribute, value = {
            "leaky_relu": ("negative_slope", 0.2), "elu": ("alpha", 0.7),
            "softplus": ("beta", 3.0), "hardtanh": ("min_val", -0.25),
            "dropout": ("p", 0.2), "layernorm": ("eps", 1e-2),
            "batchnorm1d": ("momentum", 0.5), "batchnorm2d": ("eps", 1e-2),
        }[name]  # fmt: skip
        return ("module_attr", index, attribute, value)
    if kind in ("replace_param", "param_data", "param_inplace", "grad_none"):
        return (kind, pick)
    if kind == "zero_outside":
        return ("zero_outside", bool(rng.random() < 0.5))
    return ("rows", int(rng.integers(2, 8)))


# -- a world: the program's objects, run eagerly or compiled ----------------------------------
def _layer(name: str, options: dict[str, Any], dtype: pl.DType) -> nn.Module:
    simple = {"tanh": nn.Tanh, "relu": nn.ReLU, "sigmoid": nn.Sigmoid, "gelu": nn.GELU,
              "silu": nn.SiLU, "flatten": nn.Flatten}  # fmt: skip
    if name in simple:
        return simple[name]()
    made = {
        "leaky_relu": nn.LeakyReLU, "elu": nn.ELU, "softplus": nn.Softplus,
        "hardtanh": nn.Hardtanh, "prelu": nn.PReLU, "conv2d": nn.Conv2d,
        "batchnorm2d": nn.BatchNorm2d, "batchnorm1d": nn.BatchNorm1d, "linear": nn.Linear,
        "layernorm": nn.LayerNorm, "dropout": nn.Dropout,
    }[name](**options)  # fmt: skip
    return made.to(dtype)


class World:
    """The objects of one program and its step, eager or under ``pl.compile(mode=...)``."""

    def __init__(self, program: Program, mode: str | None) -> None:
        self.program = program
        self.dtype = getattr(pl, program.dtype)
        pl.manual_seed(program.seed)
        self.model = nn.Sequential(*[_layer(n, o, self.dtype) for n, o in program.layers])
        params = list(self.model.parameters())
        name, options = program.optimizer
        if program.two_groups and len(params) > 1:
            groups: Any = [
                {"params": params[: len(params) // 2]},
                {"params": params[len(params) // 2 :], "lr": options["lr"] * 0.5},
            ]
        else:
            groups = params
        self.optimizer = getattr(pl.optim, name)(groups, **options)
        self.scheduler = self._scheduler()
        self.data = np.random.default_rng(program.seed + 1)
        self.step = self._step()
        self.compiled = mode is not None
        if mode is not None:
            self.step = pl.compile(self.step, mode=mode, fallback="raise")
        self.calls = 0

    def _scheduler(self) -> Any:
        if self.program.scheduler is None:
            return None
        schedulers = pl.optim.lr_scheduler
        kind = self.program.scheduler[0]
        if kind == "step":
            return schedulers.StepLR(self.optimizer, step_size=3, gamma=0.5)
        if kind == "exponential":
            return schedulers.ExponentialLR(self.optimizer, gamma=0.9)
        if kind == "cosine":
            return schedulers.CosineAnnealingLR(self.optimizer, T_max=7)
        if kind == "one_cycle":
            if "momentum" not in self.optimizer.defaults and "betas" not in self.optimizer.defaults:
                return schedulers.ExponentialLR(self.optimizer, gamma=0.95)
            return schedulers.OneCycleLR(self.optimizer, max_lr=0.05, total_steps=200)
        return schedulers.LambdaLR(self.optimizer, lambda epoch: 1.0 / (1 + epoch))

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        set_to_none = self.program.set_to_none if set_to_none is None else set_to_none
        owner = self.model if self.program.zero_via_model else self.optimizer
        owner.zero_grad(set_to_none=set_to_none)

    def _step(self) -> Callable[[pl.Tensor, pl.Tensor], pl.Tensor]:
        program, model, optimizer = self.program, self.model, self.optimizer
        kind, options = program.loss

        def loss_of(out: pl.Tensor, target: pl.Tensor) -> pl.Tensor:
            if kind == "cross_entropy":
                return F.cross_entropy(out, target, **options)
            if kind == "mse":
                return F.mse_loss(out, target, **options)
            if kind == "l1":
                return F.l1_loss(out, target, **options)
            return F.smooth_l1_loss(out, target, **options)

        def step(x: pl.Tensor, target: pl.Tensor) -> pl.Tensor:
            if program.zero == "inside_start":
                self.zero_grad()
            loss = loss_of(model(x), target)
            loss.backward()
            if program.clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), program.clip)
            optimizer.step()
            if self.scheduler is not None and program.scheduler_inside:
                self.scheduler.step()
            if program.zero == "inside_end":
                self.zero_grad()
            return loss

        return step

    # -- mutations ----------------------------------------------------------------------------
    def _parameter(self, pick: int) -> tuple[nn.Module, str, pl.Tensor]:
        named = [(m, n, p) for m in self.model.modules() for n, p in m._parameters.items()
                 if p is not None]  # fmt: skip
        return named[pick % len(named)]

    def mutate(self, mutation: tuple) -> None:
        kind = mutation[0]
        if kind == "requires_grad":
            self._parameter(mutation[1])[2].requires_grad_(mutation[2])
        elif kind == "train":
            self.model.train(mutation[1])
        elif kind == "lr":
            group = self.optimizer.param_groups[mutation[1] % len(self.optimizer.param_groups)]
            group["lr"] = group["lr"] * mutation[2]
        elif kind == "hyper":
            _, pick, key, value = mutation
            group = self.optimizer.param_groups[pick % len(self.optimizer.param_groups)]
            if key not in group:
                return
            if value == "toggle":
                value = not group[key]
            if key == "nesterov" and value and (group["momentum"] <= 0 or group["dampening"]):
                return
            if (
                key in ("momentum", "dampening")
                and group.get("nesterov")
                and (key == "dampening" or value <= 0)
            ):
                return
            group[key] = value
        elif kind == "module_attr":
            _, index, attribute, value = mutation
            setattr(self.model[index], attribute, value)
        elif kind == "replace_param":
            module, name, p = self._parameter(mutation[1])
            with pl.no_grad():
                setattr(module, name, nn.Parameter(p.detach() * 0.5 + 0.125))
        elif kind == "param_data":
            p = self._parameter(mutation[1])[2]
            p.data = p.detach() * 0.75
        elif kind == "param_inplace":
            with pl.no_grad():
                self._parameter(mutation[1])[2].mul_(0.875)
        elif kind == "grad_none":
            self._parameter(mutation[1])[2].grad = None
        elif kind == "zero_outside":
            self.zero_grad(mutation[1])

    # -- calls ----------------------------------------------------------------------------------
    def batch(self, rows: int, dtype: pl.DType) -> tuple[pl.Tensor, pl.Tensor]:
        program = self.program
        if program.image:
            channels, side = program.features
            x = self.data.standard_normal((rows, channels, side, side))
        else:
            x = self.data.standard_normal((rows, program.features))
        if program.loss[0] == "cross_entropy":
            classes = self.data.integers(0, program.classes, rows)
            if "ignore_index" in program.loss[1]:
                classes[self.data.random(rows) < 0.3] = -100
            target = pl.tensor(classes)
        else:
            target = pl.tensor(self.data.standard_normal((rows, program.classes)), dtype=dtype)
        return pl.tensor(x, dtype=dtype), target

    def call(self, index: int) -> Any:
        """Call ``index`` of the program: its mutations, zeroing outside, the step, a
        scheduler outside; returns the step's loss."""
        rows, mutations = self.program.calls[index]
        dtype = self.dtype
        for mutation in mutations:
            if mutation[0] == "input_dtype":
                dtype = getattr(pl, mutation[1])
            else:
                self.mutate(mutation)
        x, target = self.batch(rows, dtype)
        zero = self.program.zero
        if zero == "outside_before" or (zero == "every_3" and index % 3 == 0):
            self.zero_grad()
        loss = self.step(x, target)
        if zero == "outside_after":
            self.zero_grad()
        if self.scheduler is not None and not self.program.scheduler_inside:
            self.scheduler.step()
        return loss

    def snapshot(self, loss: Any) -> dict[str, Any]:
        """Every number the two worlds must agree on after a call."""
        state: dict[str, Any] = {"loss": _array(loss)}
        for name, p in self.model.named_parameters():
            state[f"model.{name}"] = _array(p)
            state[f"model.{name}.grad"] = _array(p.grad)
        for name, b in self.model.named_buffers():
            state[f"buffer.{name}"] = _array(b)
        for g, group in enumerate(self.optimizer.param_groups):
            state[f"group{g}"] = {k: v for k, v in group.items()
                                  if k not in ("params", "param_names")}  # fmt: skip
            for i, p in enumerate(group["params"]):
                state[f"opt{g}.{i}"] = _array(p)
                state[f"opt{g}.{i}.grad"] = _array(p.grad)
                for key, value in self.optimizer.state.get(p, {}).items():
                    state[f"opt{g}.{i}.{key}"] = _array(value)
        return state


def _array(value: Any) -> Any:
    if isinstance(value, pl.Tensor):
        return value.detach().numpy().copy()
    return value


# -- comparing --------------------------------------------------------------------------------
def differences(eager: dict[str, Any], compiled: dict[str, Any], mode: str,
                dtype: str, deviation: list[float] | None = None) -> list[str]:  # fmt: skip
    """What differs between two snapshots, by name (empty: they agree); ``deviation``
    (one number) keeps the largest normwise deviation of a fused comparison."""
    found = []
    if eager.keys() != compiled.keys():
        return [f"keys: {sorted(eager.keys() ^ compiled.keys())}"]
    rtol = FUSED_RTOL[dtype]
    for key, a in eager.items():
        b = compiled[key]
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                found.append(f"{key}: {type(a).__name__} vs {type(b).__name__}")
            elif a.shape != b.shape or a.dtype != b.dtype:
                found.append(f"{key}: {a.dtype}{a.shape} vs {b.dtype}{b.shape}")
            elif mode == "tape" or a.dtype.kind not in "fc":
                if not np.array_equal(a, b, equal_nan=True):
                    found.append(f"{key}: max |diff| {_max_difference(a, b)}")
            else:
                scale = np.abs(a) + (np.nanmax(np.abs(a), initial=0.0) if a.size else 0.0)
                bad = ~(np.abs(a - b) <= rtol * scale) & ~(np.isnan(a) & np.isnan(b))
                if deviation is not None and a.size and not bad.any():
                    with np.errstate(divide="ignore", invalid="ignore"):
                        ratio = np.nan_to_num(np.abs(a - b) / scale, posinf=0.0)
                    deviation[0] = max(deviation[0], float(ratio.max()))
                if bad.any():
                    found.append(f"{key}: max |diff| {_max_difference(a, b)} beyond {rtol:g}")
        elif a != b and not (a is None and b is None):
            found.append(f"{key}: {a!r} vs {b!r}")
    return found


def _max_difference(a: np.ndarray, b: np.ndarray) -> float:
    if a.dtype.kind == "b":
        return float((a != b).sum())
    return float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))


@dataclass
class Outcome:
    """What one program gave in one mode."""

    calls: int = 0
    replays: int = 0
    captures: int = 0
    refusals: list[str] = field(default_factory=list)
    eager_errors: int = 0
    #: the first divergence: (call, class, detail), or None
    divergence: tuple[int, str, str] | None = None
    #: fused: the largest normwise deviation from eager (|fused - eager| / scale)
    deviation: float = 0.0


def _run_eager(program: Program) -> list[tuple[str, Any]]:
    """Each call's result: ("ok", snapshot) or ("error", (type, snapshot))."""
    world = World(program, None)
    pl.manual_seed(program.seed + 2)
    results = []
    for index in range(len(program.calls)):
        try:
            loss = world.call(index)
        except Exception as error:  # noqa: BLE001  (eager's refusal: the compiled one must match)
            results.append(("error", (type(error), world.snapshot(None))))
            break
        results.append(("ok", world.snapshot(loss)))
    return results


def run_program(program: Program, mode: str,
                eager: list[tuple[str, Any]] | None = None) -> Outcome:  # fmt: skip
    """Run ``program`` compiled in ``mode`` against its eager run, stopping at the first
    divergence."""
    eager = _run_eager(program) if eager is None else eager
    world = World(program, mode)
    pl.manual_seed(program.seed + 2)
    outcome = Outcome()
    for index, (status, expected) in enumerate(eager):
        outcome.calls += 1
        try:
            loss = world.call(index)
        except pl.CaptureError as error:
            if status == "error" or not str(error).startswith("pl.compile: "):
                outcome.divergence = (index, "error type", f"{type(error).__name__}: {error}")
                break
            outcome.refusals.append(str(error).split(":")[1].strip()[:60])
            loss = _loss_of_refused(expected)
        except Exception as error:  # noqa: BLE001
            if status != "error":
                detail = "".join(traceback.format_exception_only(error)).strip()
                outcome.divergence = (index, "compiled raised", detail[-400:])
                break
            error_type, snapshot = expected
            if not isinstance(error, error_type):
                outcome.divergence = (index, "error type", f"{type(error)} vs {error_type}")
                break
            outcome.eager_errors += 1
            found = differences(snapshot, world.snapshot(None), mode, program.dtype)
            if found:
                outcome.divergence = (index, "state after an error", "; ".join(found[:4]))
            break
        else:
            if status == "error":
                outcome.divergence = (index, "eager raised", f"{expected[0].__name__}")
                break
        deviation = [outcome.deviation]
        found = differences(expected, world.snapshot(loss), mode, program.dtype, deviation)
        outcome.deviation = deviation[0]
        if found:
            outcome.divergence = (index, "values", "; ".join(found[:4]))
            break
    stats = world.step.stats
    outcome.replays = stats.replays
    outcome.captures = stats.traces + stats.warmups
    return outcome


def _loss_of_refused(expected: dict[str, Any]) -> Any:
    """A refused call returns nothing: compare its state with the loss eager returned."""
    return pl.tensor(expected["loss"]) if isinstance(expected["loss"], np.ndarray) else None


# -- running ----------------------------------------------------------------------------------
@dataclass
class Report:
    """Counts over many programs."""

    programs: int = 0
    compiled_calls: int = 0
    replays: int = 0
    captures: int = 0
    eager_errors: int = 0
    refusals: Counter = field(default_factory=Counter)
    divergences: list[tuple[int, str, int, str, str]] = field(default_factory=list)
    #: fused programs run, and their largest normwise deviation from eager, per dtype
    fused_programs: int = 0
    fused_deviation: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, program: Program, mode: str, outcome: Outcome) -> None:
        self.compiled_calls += outcome.calls
        self.replays += outcome.replays
        self.captures += outcome.captures
        self.eager_errors += outcome.eager_errors
        self.refusals.update(outcome.refusals)
        if mode == "fused":
            self.fused_programs += 1
            dtype = program.dtype
            self.fused_deviation[dtype] = max(self.fused_deviation.get(dtype, 0.0),
                                              outcome.deviation)  # fmt: skip
        if outcome.divergence is not None:
            call, kind, detail = outcome.divergence
            self.divergences.append((program.seed, mode, call, kind, detail))

    def text(self) -> str:
        classes = Counter(kind for _, _, _, kind, _ in self.divergences)
        lines = [
            f"{self.programs} programs, {self.compiled_calls} compiled calls "
            f"({self.replays} replays, {self.captures} captures), {self.eager_errors} errors "
            f"eager raised too, {sum(self.refusals.values())} refusals, "
            f"{len(self.divergences)} divergences {dict(classes)}, {self.seconds:.0f} s; "
            f"{self.fused_programs} of the programs also fused, largest normwise deviations "
            f"{', '.join(f'{d} {v:.2g}' for d, v in sorted(self.fused_deviation.items()))}",
        ]
        lines += [f"  refusal x{n}: {what}" for what, n in self.refusals.most_common()]
        lines += [f"  seed {s} {m} call {c}: {k}: {d}" for s, m, c, k, d in self.divergences]
        return "\n".join(lines)


def fuzz(seeds: Iterable[int], fused_every: int, calls: tuple[int, int] = CALLS,
         fused_seeds: set[int] | None = None) -> Report:  # fmt: skip
    """Run the programs of ``seeds`` in tape mode, and those in ``fused_seeds`` (default:
    one in ``fused_every``) in fused mode too."""
    report = Report()
    started = time.perf_counter()
    for seed in seeds:
        program = draw_program(seed, calls)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eager = _run_eager(program)
            modes = ["tape"]
            if (seed in fused_seeds) if fused_seeds is not None else seed % fused_every == 0:
                modes.append("fused")
            for mode in modes:
                report.add(program, mode, run_program(program, mode, eager))
        report.programs += 1
    report.seconds = time.perf_counter() - started
    return report


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYLUCID_COMPILE_CACHE", str(tmp_path_factory.getbasetemp() / "compile"))


_LONG = int(os.environ.get("PYLUCID_COMPILE_FUZZ") or 0)


def test_random_programs_compiled_match_eager() -> None:
    """The short run (or the long one, under ``PYLUCID_COMPILE_FUZZ``): no divergence."""
    if _LONG:
        start = int(os.environ.get("PYLUCID_COMPILE_FUZZ_SEED") or 0)
        every = int(os.environ.get("PYLUCID_COMPILE_FUZZ_FUSED_EVERY") or 8)
        report = fuzz(range(start, start + _LONG), every, calls=(10, 40))
        print(report.text())
    else:
        report = fuzz(range(CI_PROGRAMS), 0, fused_seeds=set(range(CI_FUSED)))
    assert not report.divergences, report.text()


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else CI_PROGRAMS
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    every = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    print(fuzz(range(first, first + count), every, calls=(10, 40)).text())
