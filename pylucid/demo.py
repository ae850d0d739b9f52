"""The main job, ``python -m pylucid demo``: fit a logistic regression whose loss is measured
in bits and a small MLP with a softmax cross-entropy on every available backend, then
gradcheck every op on every available backend."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import pylucid as pl
from pylucid.opinfo import OPS


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


def make_blobs(
    n_per_class: int = 200, classes: int = 3, features: int = 2, seed: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic classification set: Gaussian blobs around random centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(classes, features))
    x = np.concatenate([c + rng.normal(size=(n_per_class, features)) for c in centres])
    y = np.repeat(np.arange(classes), n_per_class)
    return x, y


def _mlp_loss(params: list[pl.Tensor], x: pl.Tensor, rows: pl.Tensor, labels: pl.Tensor):
    w1, b1, w2, b2 = params
    logits = pl.tanh(x @ w1 + b1) @ w2 + b2
    return -pl.log_softmax(logits, axis=1)[rows, labels].mean(), logits


def fit_mlp(
    device: str,
    hidden: int = 32,
    steps: int = 200,
    lr: float = 0.5,
    half: bool = False,
    graph_path: Path | None = None,
) -> float:
    """Train a 2-layer MLP (tanh) with softmax cross-entropy on ``device``; return the loss.

    The parameters are drawn from ``pl.manual_seed(0)``, which gives the same numbers on
    every backend, so every backend should reach the same loss. With ``half``, the forward
    runs under ``pl.autocast(float16)`` (matmuls in float16, log_softmax in float32) and a
    ``GradScaler`` scales the loss. ``graph_path`` receives a picture of the loss's graph.
    """
    x_np, y_np = make_blobs()
    x = pl.tensor(x_np, dtype=pl.float32, device=device)
    labels = pl.tensor(y_np, device=device)
    rows = pl.arange(len(y_np), device=device)
    pl.manual_seed(0)
    classes = int(y_np.max()) + 1
    params = [
        pl.randn(x_np.shape[1], hidden, device=device) * (1.0 / x_np.shape[1]) ** 0.5,
        pl.zeros(hidden, device=device),
        pl.randn(hidden, classes, device=device) * (1.0 / hidden) ** 0.5,
        pl.zeros(classes, device=device),
    ]
    params = [p.requires_grad_() for p in params]
    optimizer = pl.optim.SGD(params, lr=lr)
    scaler = pl.amp.GradScaler(enabled=half)
    skipped = 0
    for step in range(steps + 1):
        with pl.autocast(dtype=pl.float16, enabled=half):
            loss, logits = _mlp_loss(params, x, rows, labels)
        if step == 0 and graph_path is not None:
            _picture(loss, graph_path)
        if step % 50 == 0:
            accuracy = (logits.argmax(axis=1) == labels).to(pl.float32).mean().item()
            print(f"  step {step:3d}  loss {loss.item():.5f} nats  accuracy {accuracy:.3f}")
        if step == steps:
            if half:
                print(f"  loss scale {scaler.get_scale():g}, {skipped} steps skipped")
            return loss.item()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        skipped += not scaler.step(optimizer)
        scaler.update()
    raise AssertionError("unreachable")


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
    for info in OPS:
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
    losses = {}
    for device in devices:
        print(f"\nfit on {device!r} ({pl.backends.resolve(device).name})")
        start = time.perf_counter()
        losses[device] = fit(device)
        print(f"  {time.perf_counter() - start:.2f} s")
    print("\nMLP with softmax cross-entropy on 3 Gaussian blobs")
    out_dir = Path("demo-output")
    out_dir.mkdir(exist_ok=True)
    mlp_losses = {}
    for device in devices:
        print(f"fit on {device!r} ({pl.backends.resolve(device).name})")
        start = time.perf_counter()
        graph_path = out_dir / "mlp-graph.svg" if device == "cpu" else None
        mlp_losses[device] = fit_mlp(device, graph_path=graph_path)
        print(f"  {time.perf_counter() - start:.2f} s")
    if len(mlp_losses) > 1:
        spread = max(mlp_losses.values()) - min(mlp_losses.values())
        print(f"  final losses {mlp_losses}: spread {spread:.2e} across backends")
    for device in devices:
        print(f"the same MLP in float16 (autocast + GradScaler) on {device!r}")
        half_loss = fit_mlp(device, half=True)
        print(f"  float16 final loss {half_loss:.5f} vs float32 {mlp_losses[device]:.5f}")
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
