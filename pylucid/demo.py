"""The main job, ``python -m pylucid demo``, on every available backend:

1. a logistic regression whose loss is a cross-entropy in bits (``log2``);
2. an MLP and a CNN written with ``pylucid.nn`` - as a PyTorch user writes them - trained
   with AdamW, a cosine learning-rate schedule and gradient clipping on a built-in image
   task (bars, diagonals and boxes in noise), minibatches from ``pylucid.utils.data``;
   the CNN's checkpoint (model, optimizer and scheduler) saved with ``pylucid.save`` and
   reloaded into a fresh model, which scores the same; the MLP once more in float16 under
   autocast with a GradScaler;
3. a gradcheck of every op against float64 finite differences.

Every phase longer than a second shows a progress bar (tqdm).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

import pylucid as pl
from pylucid.opinfo import OPS

IMAGE = 12
CLASSES = ("horizontal bar", "vertical bar", "diagonal", "box")
def make_dataset(n: int = 512, features: int = 4, seed: int = 0) -> tuple[np.ndarray, ...]:
    """A synthetic binary classification set: labels drawn from a logistic model."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, features))
    true_w = rng.standard_normal(features) * 2.0
    p = 1.0 / (1.0 + np.exp(-(x @ true_w + 0.5)))
    y = (rng.random(n) < p).astype(np.float64)
    return x, y


def bits_cross_entropy(p: pl.Tensor, y: pl.Tensor) -> pl.Tensor:
    """Mean binary cross-entropy in bits: -(y log2 p + (1 - y) log2 (1 - p))."""
    return -(y * pl.log2(p) + (1.0 - y) * pl.log2(1.0 - p)).mean()


def fit(device: str, steps: int = 60, lr: float = 0.5, report_every: int = 10) -> float:
    """Fit the classifier on ``device`` by gradient descent; print and return the final loss."""
    x_np, y_np = make_dataset()
    x = pl.tensor(x_np, dtype=pl.float32, device=device)
    y = pl.tensor(y_np, dtype=pl.float32, device=device)
    w = pl.zeros(x_np.shape[1], device=device, requires_grad=True)
    b = pl.zeros((), device=device, requires_grad=True)
    for step in range(steps + 1):
        loss = bits_cross_entropy(pl.sigmoid(x @ w + b), y)
        if step % report_every == 0:
            print(f"  step {step:3d}  loss {loss.item():.4f} bits")
        if step == steps:
            return loss.item()
        loss.backward()
        with pl.no_grad():
            w = (w - lr * w.grad).requires_grad_()
            b = (b - lr * b.grad).requires_grad_()
    raise AssertionError("unreachable")


def make_shapes(n: int = 1600, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The image task: ``n`` noisy 1 x 12 x 12 float32 images, each of one of
    :data:`CLASSES` at a random place and brightness, and their labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(CLASSES), n)
    images = rng.normal(0.0, 0.35, (n, 1, IMAGE, IMAGE)).astype(np.float32)
    for image, label in zip(images[:, 0], labels):
        row, column = rng.integers(2, IMAGE - 6, 2)
        length, brightness = rng.integers(4, 7), rng.uniform(0.8, 1.5)
        span = np.arange(length)
        if label == 0:
            image[row, column + span] += brightness
        elif label == 1:
            image[row + span, column] += brightness
        elif label == 2:
            image[row + span, column + span] += brightness
        else:
            image[row, column : column + length] += brightness
            image[row + length - 1, column : column + length] += brightness
            image[row : row + length, column] += brightness
            image[row : row + length, column + length - 1] += brightness
    return images, labels.astype(np.int64)


def make_mlp() -> pl.nn.Module:
    """The MLP of the image task."""
    nn = pl.nn
    return nn.Sequential(
        nn.Flatten(), nn.Linear(IMAGE * IMAGE, 64), nn.LayerNorm(64), nn.ReLU(), nn.Dropout(0.1),
        nn.Linear(64, len(CLASSES)),
    )  # fmt: skip


def make_cnn() -> pl.nn.Module:
    """The CNN of the image task."""
    nn = pl.nn
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * (IMAGE // 4) ** 2, len(CLASSES)),
    )  # fmt: skip


def accuracy(model: pl.nn.Module, x: pl.Tensor, y: pl.Tensor) -> float:
    """The fraction of ``x`` that ``model`` (in eval mode) labels as ``y``."""
    model.eval()
    with pl.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def train(
    model: pl.nn.Module, data: pl.utils.data.Dataset, label: str, epochs: int = 4,
    half: bool = False, graph_path: Path | None = None,
) -> tuple[pl.optim.Optimizer, pl.optim.lr_scheduler.LRScheduler]:  # fmt: skip
    """Train ``model`` on ``data`` with AdamW, a cosine schedule and clipping (under
    float16 autocast with a GradScaler if ``half``); return the optimizer and scheduler."""
    loader = pl.utils.data.DataLoader(data, batch_size=32, shuffle=True)
    optimizer = pl.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = pl.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
    scaler = pl.amp.GradScaler(enabled=half)
    model.train()
    bar = tqdm(total=epochs * len(loader), desc=f"  {label}", unit="step", leave=True)
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            with pl.autocast(dtype=pl.float16, enabled=half):
                loss = pl.nn.functional.cross_entropy(model(x), y)
            if graph_path is not None:
                _picture(loss, graph_path)
                graph_path = None
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            pl.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
            bar.update()
    bar.close()
    return optimizer, scheduler


def image_task(device: str, out_dir: Path) -> None:
    """Train the MLP and the CNN on ``device``; check the CNN's checkpoint round trip."""
    images, labels = make_shapes()
    split = 1200
    x = pl.tensor(images, device=device)
    y = pl.tensor(labels, device=device)
    data = pl.utils.data.TensorDataset(x[:split], y[:split])
    x_test, y_test = x[split:], y[split:]
    for name, make in (("MLP", make_mlp), ("CNN", make_cnn)):
        pl.manual_seed(0)
        model = make().to(device)
        graph = out_dir / "cnn-graph.svg" if name == "CNN" and device == "cpu" else None
        optimizer, scheduler = train(model, data, f"{name} on {device}", graph_path=graph)
        score = accuracy(model, x_test, y_test)
        print(f"  {name}: test accuracy {score:.3f}")
    path = out_dir / f"cnn-{device}.safetensors"
    pl.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict()}, path)  # fmt: skip
    checkpoint = pl.load(path)
    fresh = make_cnn().to(device)
    fresh.load_state_dict(checkpoint["model"])
    reloaded = accuracy(fresh, x_test, y_test)
    same = "the same" if reloaded == score else "DIFFERENT"
    print(f"  checkpoint {path} ({path.stat().st_size} bytes) reloaded: accuracy "
          f"{reloaded:.3f}, {same}")  # fmt: skip
    if reloaded != score:
        raise RuntimeError(f"the reloaded CNN scores {reloaded}, the trained one {score}")
    pl.manual_seed(0)
    half_model = make_mlp().to(device)
    train(half_model, data, f"MLP float16 autocast on {device}", half=True)
    print(f"  MLP under float16 autocast: test accuracy {accuracy(half_model, x_test, y_test):.3f}")


def _picture(loss: pl.Tensor, path: Path) -> None:
    """Write the graph of ``loss`` as SVG, or as DOT text when Graphviz is missing."""
    try:
        pl.graph.render(loss, path)
        print(f"  graph of the loss: {path}")
    except RuntimeError as exc:
        dot_path = path.with_suffix(".dot")
        dot_path.write_text(pl.graph.to_dot(loss))
        print(f"  graph of the loss: {dot_path} ({exc})")


def gradcheck_all(device: str) -> tuple[int, list[str]]:
    """Gradcheck every op of the op database on ``device`` in float64."""
    rng = np.random.default_rng(0)
    failures = []
    checked = 0
    for info in tqdm(OPS, desc=f"  gradcheck on {device}", unit="op"):
        if "needs_mlx" in info.tags and "mlx" not in pl.backends.available():
            continue
        for shapes in info.shapes:
            inputs = [
                pl.tensor(a, dtype=pl.float64, device=device, requires_grad=True)
                for a in info.sample(rng, shapes)
            ]
            try:
                pl.graph.gradcheck(info.call, inputs, **info.gradcheck_kwargs)
            except AssertionError as exc:
                failures.append(f"{info.name} {shapes}: {exc}")
            checked += 1
    return checked, failures


def main() -> int:
    """Run the demo; return a process exit status (1 if a gradcheck failed)."""
    devices = [
        d for d, name in (("cpu", "numba"), ("gpu", "mlx")) if name in pl.backends.available()
    ]
    print("pylucid demo: logistic regression, cross-entropy in bits")
    for name, details in pl.backends.info().items():
        where = details.get("runs_on", details.get("reason"))
        print(f"  backend {name}: {where}")
    for device in devices:
        print(f"\nfit on {device!r} ({pl.backends.resolve(device).name})")
        start = time.perf_counter()
        fit(device)
        print(f"  {time.perf_counter() - start:.2f} s")
    out_dir = Path("demo-output")
    out_dir.mkdir(exist_ok=True)
    print(f"\nimage task: {', '.join(CLASSES)} in noise (1200 to train, 400 to test)")
    for device in devices:
        image_task(device, out_dir)
    print("\ngradcheck (float64 finite differences) of every op:")
    failed = False
    for device in devices:
        checked, failures = gradcheck_all(device)
        status = "ok" if not failures else f"{len(failures)} FAILED"
        print(f"  {device}: {checked} checks over {len(OPS)} ops: {status}")
        for failure in failures:
            print(f"    {failure}")
        failed |= bool(failures)
    return 1 if failed else 0
