"""The main job, ``python -m pylucid demo``, on every available backend:

1. a logistic regression whose loss is a cross-entropy in bits (``log2``);
2. an MLP and a CNN written with ``pylucid.nn`` - as a PyTorch user writes them - trained
   with AdamW, a cosine learning-rate schedule and gradient clipping on a built-in image
   task (bars, diagonals and boxes in noise), minibatches from ``pylucid.utils.data``;
   the CNN's checkpoint (model, optimizer and scheduler) saved with ``pylucid.save`` and
   reloaded into a fresh model, which scores the same; the MLP once more in float16 under
   autocast with a GradScaler;
3. a gradcheck of every op against float64 finite differences, at the first input shapes
   of its record: every op on the gpu, and on the cpu every op but the elementwise and
   binary ones, whose loops are generated from one template, of which a sample
   (:func:`gradcheck_cases`; the test suite checks every op at every shape on both).

The first run compiles the kernels it uses with Numba (into Numba's cache: later runs load
them), which takes most of its time. The console says so while it happens and is never
silent for long (:class:`Console`), and a progress bar estimates the time left from its
recent steps (:class:`StepTimes`), not from a first step that spent seconds compiling.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import numpy as np
from numba.core import event
from tqdm import tqdm

import pylucid as pl
from pylucid.opinfo import OPS, OpInfo, binary, elementwise

IMAGE = 12
CLASSES = ("horizontal bar", "vertical bar", "diagonal", "box")
#: The training's minibatch size, also the evaluation's (see :func:`accuracy`).
BATCH = 32
#: Where the demo writes, relative to the working directory.
OUT_DIR = Path("demo-output")
#: What the console says while Numba compiles.
COMPILING = "compiling kernels, first run only"
#: The ops whose CPU kernels are all generated from one loop template around each op's
#: scalar math (:mod:`pylucid.kernels.loops`): the elementwise and binary families.
LOOP_FAMILIES = frozenset(info.name for info in elementwise.RECORDS + binary.RECORDS)
#: The ops of :data:`LOOP_FAMILIES` that the cpu gradchecks where the gpu checks them all: a
#: unary op, a binary op (a gradient for each operand) and a selection.
CPU_SAMPLE = ("exp", "pow", "where")

#: ``python -m pylucid demo --help``: what the demo does, how long it takes, where it writes.
DESCRIPTION = f"""\
The main job, on every available backend (cpu: Numba; gpu: MLX where installed):
fit a logistic regression whose loss is a cross-entropy in bits; train an MLP and
a CNN (pylucid.nn, AdamW, a cosine schedule, gradient clipping) on a built-in
image task, save the CNN's checkpoint and reload it into a fresh model, and train
the MLP again in float16 under autocast; then gradcheck every op against float64
finite differences, at one input shape each (the test suite checks every shape):
every op on the gpu, and on the cpu every op but the elementwise and binary ones,
whose loops are generated from one template, of which {", ".join(CPU_SAMPLE)} (without
MLX, every op on the cpu). Exits 1 if a gradcheck fails."""
EPILOG = f"""\
time:
  First run: about 25 s on an idle 2-core machine, most of it Numba compiling
  some 90 kernels, while it says "{COMPILING}" (without MLX,
  where the cpu gradchecks every op: some 175 kernels, about 35 s). Numba caches
  them (in NUMBA_CACHE_DIR, else in __pycache__ beside pylucid's sources), and
  later runs take about 5 s. A busy machine takes longer.

writes, into {OUT_DIR}/ in the working directory:
  cnn-cpu.safetensors, cnn-gpu.safetensors   the CNN's checkpoint on each backend
                                             (model, optimizer and scheduler)
  cnn-graph.svg                              the graph of the CNN's loss, drawn by
                                             Graphviz; without Graphviz, its
                                             source cnn-graph.dot
"""


class CompileWatch(event.Listener):
    """Numba's compilations as they happen, from its ``numba:compile`` events (a kernel
    loaded from the cache is no compilation). A compile inside another (of a kernel's
    callee) is part of the outer one.

    Use it as a context manager, which registers it with Numba and unregisters it.

    Parameters
    ----------
    clock : callable
        Seconds, monotonic.

    Attributes
    ----------
    count : int
        The compilations finished so far.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.count = 0
        self._finished_s = 0.0
        self._depth = 0
        self._started = 0.0

    def on_start(self, ev: event.Event) -> None:
        """A compilation starts (Numba calls this)."""
        if self._depth == 0:
            self._started = self._clock()
        self._depth += 1

    def on_end(self, ev: event.Event) -> None:
        """A compilation ends, done or failed (Numba calls this)."""
        self._depth -= 1
        if self._depth == 0:
            self.count += 1
            self._finished_s += self._clock() - self._started

    @property
    def compiling(self) -> bool:
        """Whether a compilation is under way."""
        return self._depth > 0

    def seconds(self) -> float:
        """The time spent compiling so far, the compilation under way included."""
        running = self._clock() - self._started if self._depth else 0.0
        return self._finished_s + running

    def __enter__(self) -> CompileWatch:
        event.register("numba:compile", self)
        return self

    def __exit__(self, *exc: object) -> None:
        event.unregister("numba:compile", self)


class StepTimes:
    """The rate a progress bar shows: the median of the last ``window`` steps' durations, once
    ``settle`` steps are done. One slow step - the first, while kernels compile - is then
    never extrapolated over the rest of the bar, and a phase whose every step compiles (the
    gradchecks of a first run) is estimated from steps that compiled.

    Parameters
    ----------
    clock : callable
        Seconds, monotonic; read at construction (the first step's start) and at each step.
    window, settle : int
        How many recent steps the median takes; how many steps give the first estimate.
    """

    def __init__(
        self, clock: Callable[[], float], window: int = 16, settle: int = 3
    ) -> None:  # fmt: skip
        self._clock = clock
        self._last = clock()
        self._durations: deque[float] = deque(maxlen=window)
        self._settle = settle
        self._steps = 0

    def step(self) -> None:
        """A step is done."""
        now = self._clock()
        self._durations.append(now - self._last)
        self._last = now
        self._steps += 1

    def rate(self) -> float:
        """Steps per second; 0 (shown as ``?``) until ``settle`` steps are done."""
        if self._steps < self._settle:
            return 0.0
        return 1.0 / max(statistics.median(self._durations), 1e-9)


def _kernels(count: int) -> str:
    return f"{count} kernel" if count == 1 else f"{count} kernels"


class Bar(tqdm):
    """A tqdm bar whose rate and time left come from :class:`StepTimes`, which says
    ":data:`COMPILING`" while Numba compiles, and whose last line gives the time spent
    compiling (the rate there is tqdm's average over the whole bar).

    Parameters
    ----------
    total : int
        Steps.
    desc, unit : str
        As tqdm's.
    watch : CompileWatch
        Numba's compilations.
    clock : callable
        Seconds, monotonic.
    file : text stream
        Where the bar is drawn.
    """

    def __init__(
        self, total: int, desc: str, unit: str, watch: CompileWatch,
        clock: Callable[[], float], file: TextIO,
    ) -> None:  # fmt: skip
        self._watch = watch
        self._clock = clock
        self._compiles = (watch.count, watch.seconds())
        self._times = StepTimes(clock)
        self.drawn = clock()
        super().__init__(total=total, desc=desc, unit=unit, file=file, leave=True)

    def step(self, **postfix: str) -> None:
        """A step is done: count it, with ``postfix`` (``loss="0.25"``) shown after it."""
        self._times.step()
        if postfix:
            self.set_postfix(postfix, refresh=False)
        self.update()

    @property
    def format_dict(self) -> dict[str, Any]:
        """tqdm's fields, with the steady rate while the bar runs (tqdm's average once it is
        closed) and the compilation under way before the postfix."""
        fields = super().format_dict
        if not self.disable:
            fields["rate"] = self._times.rate()
        if self._watch.compiling:
            note = f"{COMPILING} ({self._watch.count - self._compiles[0]} done)"
            fields["postfix"] = f"{note}, {fields['postfix']}" if fields["postfix"] else note
        return fields

    def display(self, msg: str | None = None, pos: int | None = None) -> bool | None:
        """tqdm's, noting when the bar was last drawn (:class:`Console` redraws it)."""
        self.drawn = self._clock()
        return super().display(msg, pos)

    def close(self) -> None:
        """Close the bar; its last line says how long kernels compiled, if they did."""
        if not self.disable:
            count = self._watch.count - self._compiles[0]
            if count:
                seconds = self._watch.seconds() - self._compiles[1]
                note = f"{seconds:.1f} s of it compiling {_kernels(count)} (first run only)"
                self.set_postfix_str(f"{self.postfix}, {note}" if self.postfix else note, False)
        super().close()


class Console:
    """The demo's output: lines on ``out``, at most one :class:`Bar` at a time on ``err``,
    and a heartbeat (:meth:`running`) that never leaves the screen still for more than
    ``quiet`` seconds (plus a third of it): it redraws the bar, whose clock runs on, or, between
    bars, shows a status line that says what is happening - kernels compiling, or work -
    and how long it has lasted; the next line replaces it.

    Parameters
    ----------
    watch : CompileWatch
        Numba's compilations.
    quiet : float
        Seconds without output after which the heartbeat shows something.
    clock : callable
        Seconds, monotonic.
    out, err : text stream or None
        Lines; bars and the status line (None: ``sys.stdout``, ``sys.stderr``).
    """

    def __init__(
        self, watch: CompileWatch, quiet: float = 0.75,
        clock: Callable[[], float] = time.monotonic, out: TextIO | None = None,
        err: TextIO | None = None,
    ) -> None:  # fmt: skip
        self.watch = watch
        self._quiet = quiet
        self._clock = clock
        self._out = out or sys.stdout
        self._err = err or sys.stderr
        self._lock = threading.RLock()
        self._bar: Bar | None = None
        self._status = ""  # the status line shown, if any
        self._last = clock()
        self._compiled_at_last = watch.count

    def line(self, text: str = "") -> None:
        """Write a line (over the status line, above the bar)."""
        with self._lock:
            self._clear_status()
            tqdm.write(text, file=self._out)
            self._mark()

    @contextmanager
    def bar(self, total: int, desc: str, unit: str) -> Iterator[Bar]:
        """A progress bar of ``total`` steps for the duration of the block."""
        with self._lock:
            self._clear_status()
            bar = Bar(total, desc, unit, self.watch, self._clock, self._err)
            self._bar = bar
        try:
            yield bar
        finally:
            with self._lock:
                self._bar = None
                bar.close()
                self._mark()

    def beat(self) -> None:
        """One heartbeat: redraw the bar, or show the status line, if the screen has been
        still for ``quiet`` seconds."""
        with self._lock:
            now = self._clock()
            if self._bar is not None:
                if now - self._bar.drawn >= self._quiet:
                    self._bar.refresh()
            elif now - self._last >= self._quiet:
                compiled = self.watch.count - self._compiled_at_last
                if self.watch.compiling or compiled:
                    what = f"{COMPILING} ({compiled} done)"
                else:
                    what = "working"
                self._show_status(f"  ... {what} [{now - self._last:.0f} s]")

    @contextmanager
    def running(self) -> Iterator[Console]:
        """Beat every ``quiet / 3`` seconds, from a thread, for the duration of the block."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self._quiet / 3):
                self.beat()

        thread = threading.Thread(target=beat, name="pylucid-demo-heartbeat", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            with self._lock:
                self._clear_status()

    def _mark(self) -> None:
        self._last = self._clock()
        self._compiled_at_last = self.watch.count

    def _show_status(self, text: str) -> None:
        if text != self._status:
            self._err.write("\r" + text.ljust(len(self._status)))
            self._err.flush()
            self._status = text

    def _clear_status(self) -> None:
        if self._status:
            self._err.write("\r" + " " * len(self._status) + "\r")
            self._err.flush()
            self._status = ""


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


def fit(
    console: Console, device: str, steps: int = 60, lr: float = 0.5, report_every: int = 10
) -> float:
    """Fit the classifier on ``device`` by gradient descent; print and return the final loss."""
    x_np, y_np = make_dataset()
    x = pl.tensor(x_np, dtype=pl.float32, device=device)
    y = pl.tensor(y_np, dtype=pl.float32, device=device)
    w = pl.zeros(x_np.shape[1], device=device, requires_grad=True)
    b = pl.zeros((), device=device, requires_grad=True)
    for step in range(steps + 1):
        loss = bits_cross_entropy(pl.sigmoid(x @ w + b), y)
        if step % report_every == 0:
            console.line(f"  step {step:3d}  loss {loss.item():.4f} bits")
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
    """The fraction of ``x`` that ``model`` (in eval mode) labels as ``y``, in minibatches of
    the training's size: on the CPU they run the kernels that the training compiled, where
    all of ``x`` at once would compile the parallel variants of several."""
    model.eval()
    correct = 0
    with pl.no_grad():
        for start in range(0, x.shape[0], BATCH):
            rows = slice(start, start + BATCH)
            correct += (model(x[rows]).argmax(1) == y[rows]).sum().item()
    return correct / x.shape[0]


def train(
    console: Console, model: pl.nn.Module, data: pl.utils.data.Dataset, label: str,
    epochs: int = 4, half: bool = False, graph_path: Path | None = None,
) -> tuple[pl.optim.Optimizer, pl.optim.lr_scheduler.LRScheduler]:  # fmt: skip
    """Train ``model`` on ``data`` with AdamW, a cosine schedule and clipping (under
    float16 autocast with a GradScaler if ``half``); return the optimizer and scheduler."""
    loader = pl.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
    optimizer = pl.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = pl.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
    scaler = pl.amp.GradScaler(enabled=half)
    model.train()
    with console.bar(epochs * len(loader), f"  {label}", "step") as bar:
        for _ in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                with pl.autocast(dtype=pl.float16, enabled=half):
                    loss = pl.nn.functional.cross_entropy(model(x), y)
                if graph_path is not None:
                    _picture(console, loss, graph_path)
                    graph_path = None
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                pl.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                scheduler.step()
                bar.step(loss=f"{loss.item():.4f}")
    return optimizer, scheduler


def image_task(console: Console, device: str, out_dir: Path) -> None:
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
        label = f"{name} on {device}"
        optimizer, scheduler = train(console, model, data, label, graph_path=graph)
        score = accuracy(model, x_test, y_test)
        console.line(f"  {name}: test accuracy {score:.3f}")
    path = out_dir / f"cnn-{device}.safetensors"
    pl.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict()}, path)  # fmt: skip
    checkpoint = pl.load(path)
    fresh = make_cnn().to(device)
    fresh.load_state_dict(checkpoint["model"])
    reloaded = accuracy(fresh, x_test, y_test)
    same = "the same" if reloaded == score else "DIFFERENT"
    console.line(f"  checkpoint {path} ({path.stat().st_size} bytes) reloaded: accuracy "
                 f"{reloaded:.3f}, {same}")  # fmt: skip
    if reloaded != score:
        raise RuntimeError(f"the reloaded CNN scores {reloaded}, the trained one {score}")
    pl.manual_seed(0)
    half_model = make_mlp().to(device)
    train(console, half_model, data, f"MLP float16 autocast on {device}", half=True)
    half_score = accuracy(half_model, x_test, y_test)
    console.line(f"  MLP under float16 autocast: test accuracy {half_score:.3f}")


def _picture(console: Console, loss: pl.Tensor, path: Path) -> None:
    """Write the graph of ``loss`` as SVG, or as DOT text when Graphviz is missing."""
    try:
        pl.graph.render(loss, path)
        console.line(f"  graph of the loss: {path}")
    except RuntimeError as exc:
        dot_path = path.with_suffix(".dot")
        dot_path.write_text(pl.graph.to_dot(loss))
        console.line(f"  graph of the loss: {dot_path} ({exc})")


def _runs(info: OpInfo, backends: Collection[str]) -> bool:
    """Whether ``info``'s op runs with ``backends`` available."""
    return "needs_mlx" not in info.tags or "mlx" in backends


def gradcheck_cases(
    device: str, backends: Collection[str], ops: tuple[OpInfo, ...] = OPS
) -> list[tuple[OpInfo, tuple[tuple[int, ...], ...]]]:
    """What the demo gradchecks on ``device``: each op at the first input shapes of its
    record - arrays of the same shape, the plain case - which compiles each op's float64
    loops once (other shapes, broadcasting and 0-d operands, compile further variants of the
    same loops; ``tests/test_ops_table.py`` checks every shape on both backends).

    On the gpu every op. On the cpu, where each op's float64 kernels are compiled on a first
    run, every op but those of :data:`LOOP_FAMILIES`, of which :data:`CPU_SAMPLE` - where MLX
    is installed to check them all; without MLX, every op.

    Parameters
    ----------
    device : str
        ``"cpu"`` or ``"gpu"``.
    backends : collection of str
        The available backends (``pl.backends.available()``); records tagged ``needs_mlx``
        are left out without ``"mlx"``.
    ops : tuple of OpInfo
        The op records.

    Returns
    -------
    list of (OpInfo, shapes)
        At most one case per op record, in the records' order.
    """
    cases = [info for info in ops if _runs(info, backends)]
    if device == "cpu" and "mlx" in backends:
        cases = [
            info for info in cases if info.name not in LOOP_FAMILIES or info.name in CPU_SAMPLE
        ]
    return [(info, info.shapes[0]) for info in cases]


def gradcheck_device(
    console: Console, device: str, cases: list[tuple[OpInfo, tuple[tuple[int, ...], ...]]]
) -> list[str]:
    """Gradcheck ``cases`` on ``device`` in float64 with a progress bar; return the failures
    (a Jacobian mismatch or an op that raises), one line each."""
    rng = np.random.default_rng(0)
    failures = []
    with console.bar(len(cases), f"  gradcheck on {device}", "op") as bar:
        for info, shapes in cases:
            inputs = [
                pl.tensor(a, dtype=pl.float64, device=device, requires_grad=True)
                for a in info.sample(rng, shapes)
            ]
            try:
                pl.graph.gradcheck(info.call, inputs, **info.gradcheck_kwargs)
            except Exception as exc:  # a mismatch (GradcheckError) or an op that fails
                failures.append(f"{info.name} {shapes}: {type(exc).__name__}: {exc}")
            bar.step()
    return failures


def run(console: Console) -> bool:
    """Run every phase of the demo on ``console``; return whether every gradcheck passed."""
    available = pl.backends.available()
    devices = [d for d, name in (("cpu", "numba"), ("gpu", "mlx")) if name in available]
    console.line("pylucid demo: logistic regression, cross-entropy in bits")
    for name, details in pl.backends.info().items():
        where = details.get("runs_on", details.get("reason"))
        console.line(f"  backend {name}: {where}")
    for device in devices:
        console.line(f"\nfit on {device!r} ({pl.backends.resolve(device).name})")
        start, compiling = time.perf_counter(), console.watch.seconds()
        fit(console, device)
        compiled = console.watch.seconds() - compiling
        note = f" ({compiled:.1f} s of it compiling kernels, first run only)" if compiled else ""
        console.line(f"  {time.perf_counter() - start:.2f} s{note}")
    OUT_DIR.mkdir(exist_ok=True)
    console.line(f"\nimage task: {', '.join(CLASSES)} in noise (1200 to train, 400 to test)")
    for device in devices:
        image_task(console, device, OUT_DIR)
    console.line(
        "\ngradcheck of every op against float64 finite differences, at one input shape each "
        "(the test suite checks every shape):"
    )
    every = sum(_runs(info, available) for info in OPS)
    passed = True
    for device in devices:
        cases = gradcheck_cases(device, available)
        failures = gradcheck_device(console, device, cases)
        status = "ok" if not failures else f"{len(failures)} FAILED"
        sample = (
            f" (of the elementwise and binary ops, whose loops come from one template, only "
            f"{', '.join(CPU_SAMPLE)}: the gpu checks them all)"
            if len(cases) < every
            else ""
        )
        console.line(f"  {device}: {len(cases)} of {every} ops {status}{sample}")
        for failure in failures:
            console.line(f"    {failure}")
        passed &= not failures
    if console.watch.count:
        console.line(
            f"\nfirst run: Numba compiled {_kernels(console.watch.count)} in "
            f"{console.watch.seconds():.1f} s; later runs load them from its cache"
        )
    return passed


def main() -> int:
    """Run the demo; return a process exit status (1 if a gradcheck failed)."""
    with CompileWatch() as watch, Console(watch).running() as console:
        return 0 if run(console) else 1
