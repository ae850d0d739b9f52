"""Training scenarios: a whole training step of a PyTorch-style script, in pylucid, PyTorch
and MLX.

The pylucid and PyTorch programs are one piece of code, run with ``lib = pylucid`` or
``lib = torch`` - the model from ``lib.nn``, ``lib.optim.AdamW``, a
``lib.optim.lr_scheduler.CosineAnnealingLR``, ``lib.nn.utils.clip_grad_norm_`` and
``lib.utils.data.DataLoader`` - which is what porting by changing the import means. One
call is one step: the next shuffled minibatch of 32 from the loader (a new epoch when it
runs out), ``zero_grad``, cross entropy of the model's logits, backward, clipping to norm
1, the AdamW step and the scheduler's step. The data is digits-shaped and synthetic
(1797 x 64 float32 features in sixteenths, 10 classes), so the benchmark needs no data
set. Every library starts from the same weights (pylucid's, seeded, loaded with
``load_state_dict``) and takes the same batches (one seeded permutation per epoch, given
to the loaders as their ``batch_sampler``), so their losses agree but for dropout's masks,
which each library draws from its own generator.

``train_mlp``
    ``Linear(64, 128)``, ``LayerNorm(128)``, ``Tanh``, ``Dropout(0.1)``, ``Linear(128, 10)``.
``train_cnn``
    The features as a 1 x 8 x 8 image: ``Conv2d(1, 8, 3, padding=1)``, ``ReLU``,
    ``MaxPool2d(2)``, ``Conv2d(8, 16, 3, padding=1)``, ``ReLU``, ``MaxPool2d(2)``,
    ``Flatten``, ``Linear(64, 10)``.

MLX runs the same models with ``mlx.nn`` (images channels last), ``mlx.optimizers.AdamW``
with ``cosine_decay``, ``clip_grad_norm`` and ``nn.value_and_grad``, evaluating the loss,
parameters and optimizer state each step (convolution weights transposed to its layout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import pylucid as pl

__all__ = [
    "TRAINING_SCENARIOS",
    "build_training_program",
    "cnn",
    "digits_like",
    "mlp",
    "train_step",
]

#: name -> description, in the order they are reported.
TRAINING_SCENARIOS: dict[str, str] = {
    "train_mlp": (
        "MLP 64-128-10 with LayerNorm, tanh, Dropout(0.1), batch 32 float32: loader, "
        "AdamW, cosine LR, clip_grad_norm_ (one step)"
    ),
    "train_cnn": (
        "CNN 2 x (conv 3x3, relu, max pool 2) + linear on 8x8 images, batch 32 float32: "
        "the same step"
    ),
}
BATCH = 32
STEPS_PER_SCHEDULE = 200
LEARNING_RATE = 3e-3


def mlp(nn: Any) -> Any:
    """The ``train_mlp`` model, from ``nn`` (``pylucid.nn`` or ``torch.nn``)."""
    return nn.Sequential(
        nn.Linear(64, 128), nn.LayerNorm(128), nn.Tanh(), nn.Dropout(0.1), nn.Linear(128, 10)
    )


def cnn(nn: Any) -> Any:
    """The ``train_cnn`` model, from ``nn`` (``pylucid.nn`` or ``torch.nn``)."""
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64, 10),
    )  # fmt: skip


def digits_like(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """sklearn digits' shape: 1797 x 64 float32 features in sixteenths, labels 0..9, each
    class a noisy copy of its own prototype (so a model learns something)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, 1797)
    prototypes = rng.integers(0, 17, (10, 64))
    noise = rng.integers(-4, 5, (1797, 64))
    features = np.clip(prototypes[labels] + noise, 0, 16) / 16.0
    return features.astype(np.float32), labels.astype(np.int64)


def train_step(lib: Any, model: Any, optimizer: Any, scheduler: Any, x: Any, y: Any) -> Any:
    """One step of the script, for ``lib`` = pylucid or torch; returns the loss."""
    optimizer.zero_grad()
    loss = lib.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    lib.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return loss


def _forever(loader: Any) -> Iterator[Any]:
    while True:
        yield from loader


class EpochBatches:
    """A ``batch_sampler``: each epoch, the next seeded permutation of ``size`` indices in
    batches of :data:`BATCH` (the last one shorter)."""

    def __init__(self, size: int, seed: int = 0) -> None:
        self.size, self._rng = size, np.random.default_rng(seed)

    def __iter__(self) -> Iterator[list[int]]:
        order = self._rng.permutation(self.size).tolist()
        for start in range(0, self.size, BATCH):
            yield order[start : start + BATCH]

    def __len__(self) -> int:
        return -(-self.size // BATCH)


def _initial_state(name: str) -> dict[str, np.ndarray]:
    pl.manual_seed(0)
    model = (mlp if name == "train_mlp" else cnn)(pl.nn)
    return {key: value.numpy().copy() for key, value in model.state_dict().items()}


def _eager(name: str, lib: Any) -> Callable[[], Any]:
    model = (mlp if name == "train_mlp" else cnn)(lib.nn)
    model.load_state_dict({k: lib.from_numpy(v) for k, v in _initial_state(name).items()})
    optimizer = lib.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    scheduler = lib.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=STEPS_PER_SCHEDULE)
    features, labels = digits_like()
    data = lib.utils.data.TensorDataset(lib.from_numpy(features), lib.from_numpy(labels))
    batches = _forever(
        lib.utils.data.DataLoader(data, batch_sampler=EpochBatches(len(features)))
    )

    def step() -> Any:
        x, y = next(batches)
        return train_step(lib, model, optimizer, scheduler, x, y)

    return step


def _mlx_model(name: str, nn: Any) -> Any:
    if name == "train_mlp":
        return nn.Sequential(nn.Linear(64, 128), nn.LayerNorm(128), nn.Tanh(),
                             nn.Dropout(0.1), nn.Linear(128, 10))  # fmt: skip

    class Images(nn.Module):  # (N, 64) -> (N, 8, 8, 1), MLX's channels-last layout
        def __call__(self, x: Any) -> Any:
            return x.reshape(x.shape[0], 8, 8, 1)

    return nn.Sequential(
        Images(),
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        lambda x: x.transpose(0, 3, 1, 2).reshape(x.shape[0], -1),  # flattened as NCHW
        nn.Linear(64, 10),
    )  # fmt: skip


def _mlx(name: str, mx: Any) -> Callable[[], Any]:
    import mlx.nn as nn
    import mlx.optimizers as optim

    mx.random.seed(0)
    model = _mlx_model(name, nn)
    weights = []
    for key, value in _initial_state(name).items():
        if value.ndim == 4:  # (O, C, kh, kw) -> MLX's (O, kh, kw, C)
            value = np.ascontiguousarray(value.transpose(0, 2, 3, 1))
        weights.append((f"layers.{key}", mx.array(value)))
    model.load_weights(weights)
    schedule = optim.cosine_decay(LEARNING_RATE, STEPS_PER_SCHEDULE)
    optimizer = optim.AdamW(learning_rate=schedule, weight_decay=1e-2, bias_correction=True)
    features, labels = digits_like()
    x_all, y_all = mx.array(features), mx.array(labels)
    def loss_of(model: Any, x: Any, y: Any) -> Any:
        return nn.losses.cross_entropy(model(x), y, reduction="mean")

    value_and_grad = nn.value_and_grad(model, loss_of)

    indices = _forever(EpochBatches(len(features)))

    def step() -> Any:
        index = mx.array(next(indices))
        loss, grads = value_and_grad(model, x_all[index], y_all[index])
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        optimizer.update(model, grads)
        mx.eval(loss, model.parameters(), optimizer.state)
        return loss

    return step


def build_training_program(name: str, library: str, module: Any) -> Callable[[], Any]:
    """A callable doing one training step of scenario ``name`` in ``library``
    (``"pylucid"``, ``"torch"`` or ``"mlx"``, whose module is ``module``)."""
    if name not in TRAINING_SCENARIOS:
        raise ValueError(f"unknown training scenario {name!r}; choose from "
                         f"{tuple(TRAINING_SCENARIOS)}")  # fmt: skip
    if library == "mlx":
        return _mlx(name, module)
    return _eager(name, pl if library == "pylucid" else module)
