"""Train an MLP and a CNN on sklearn's digits with pylucid - the script a PyTorch user
writes, with ``torch`` replaced by ``pylucid`` - and plot the loss curves, next to
PyTorch's when torch is installed (the same script, run with ``lib = torch``).

    pip install -e ".[examples]"          # scikit-learn and matplotlib
    python examples/digits.py             # writes digits-loss.png

Both libraries start from the same weights (pylucid's initial ones, loaded into PyTorch's
model with ``load_state_dict``) and see the same minibatches, so the CNN's curves lie on
top of each other; in the MLP, dropout's masks come from each library's own generator,
the one difference.
"""

from __future__ import annotations

import argparse
import importlib.util

import matplotlib
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import pylucid

matplotlib.use("Agg")  # (a file, no window)
import matplotlib.pyplot as plt  # noqa: E402


def build(lib, kind):
    nn = lib.nn
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(64, 128), nn.LayerNorm(128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10)
        )
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 2 * 2, 10),
    )  # fmt: skip


def train(lib, model, x_train, y_train, order, epochs):
    F = lib.nn.functional  # noqa: N806  (PyTorch's idiom)
    dataset = lib.utils.data.TensorDataset(x_train, y_train)
    loader = lib.utils.data.DataLoader(dataset, batch_sampler=order)
    optimizer = lib.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    scheduler = lib.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
    losses = []
    model.train()
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            lib.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
    return losses


def accuracy(lib, model, x, y):
    model.eval()
    with lib.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


class Minibatches:
    """The same shuffled minibatches for both libraries (a ``batch_sampler``)."""

    def __init__(self, size, batch_size=32, seed=0):
        self.size, self.batch_size = size, batch_size
        self.rng = np.random.default_rng(seed)

    def __iter__(self):
        order = self.rng.permutation(self.size).tolist()
        return (order[i : i + self.batch_size] for i in range(0, self.size, self.batch_size))

    def __len__(self):
        return -(-self.size // self.batch_size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--output", default="digits-loss.png")
    args = parser.parse_args()
    images, labels = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        (images / 16.0).astype(np.float32), labels, test_size=0.25, random_state=0
    )
    libraries = {"pylucid": pylucid}
    if importlib.util.find_spec("torch") is not None:
        import torch

        libraries["torch"] = torch
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for axis, kind in zip(axes, ("mlp", "cnn")):
        reference = None
        for name, lib in libraries.items():
            lib.manual_seed(0)
            model = build(lib, kind)
            if reference is None:  # the first library's initial weights, for every library
                reference = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
            model.load_state_dict({k: lib.from_numpy(v.copy()) for k, v in reference.items()})
            losses = train(lib, model, lib.from_numpy(x_train), lib.from_numpy(y_train),
                           Minibatches(len(x_train)), args.epochs)  # fmt: skip
            score = accuracy(lib, model, lib.from_numpy(x_test), lib.from_numpy(y_test))
            print(f"{kind} {name:8s} final loss {losses[-1]:.4f}  test accuracy {score:.4f}")
            axis.plot(losses, label=f"{name} (test accuracy {score:.3f})", alpha=0.8)
        axis.set(title=f"digits, {kind.upper()}", xlabel="step", yscale="log")
        axis.legend()
    axes[0].set_ylabel("cross entropy")
    figure.tight_layout()
    figure.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
